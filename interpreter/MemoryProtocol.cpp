//===- MemoryProtocol.cpp - who may touch a buffer when -------------------===//
#include "interpreter/MemoryProtocol.h"
#include "interpreter/AsyncCopies.h"

#include <algorithm>

namespace flashtile::interp {

namespace {
std::string columnsOf(int64_t column, int64_t columns) {
  return "columns [" + std::to_string(column) + ", " + std::to_string(column + columns) + ")";
}
std::string roleName(int role) { return role == 0 ? "the block outside roles" : "role " + std::to_string(role); }
} // namespace

int MemoryProtocol::addTmem(int64_t) {
  regions.push_back(Region{});
  regions.back().tmem = true;
  return static_cast<int>(regions.size()) - 1;
}

int MemoryProtocol::addTmemBuffer(int region, int64_t column, int64_t columns, std::string name) {
  buffers.push_back(Buffer{region, column, columns, std::move(name)});
  return static_cast<int>(buffers.size()) - 1;
}

int MemoryProtocol::addBuffer(bool registers, std::string name) {
  regions.push_back(Region{});
  regions.back().registers = registers;
  buffers.push_back(Buffer{static_cast<int>(regions.size()) - 1, 0, 1, std::move(name)});
  return static_cast<int>(buffers.size()) - 1;
}

int MemoryProtocol::addChannel(std::string name, int64_t fullArrivals, int64_t emptyArrivals) {
  barriers.push_back(Barrier{name, false, fullArrivals, 0, {}, {}, {}});
  barriers.push_back(Barrier{std::move(name), true, emptyArrivals, 0, {}, {}, {}});
  return static_cast<int>(barriers.size()) - 2;
}

MemoryProtocol::Clock &MemoryProtocol::clockOf(int role) {
  Clock &c = clocks[role];
  if (c.size() < 2 * static_cast<size_t>(role) + 2)
    c.resize(2 * role + 2, 0);
  return c;
}

void MemoryProtocol::merge(Clock &into, const Clock &from) {
  if (into.size() < from.size())
    into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i)
    into[i] = std::max(into[i], from[i]);
}

bool MemoryProtocol::knows(int role, const Access &a) {
  const Clock &c = clockOf(role);
  if (!a.isMma)
    return a.role == role || at(c, 2 * a.role) >= a.event;
  const Mma &m = mmas[a.event];
  return m.committedAt > 0 && at(c, 2 * m.issuer + 1) >= m.committedAt;
}

std::string MemoryProtocol::describe(const Access &a) const {
  const Buffer &b = buffers[a.buffer];
  std::string what = a.op + (a.write ? " writing " : " reading ") + b.name;
  if (regions[b.region].tmem)
    what += " (tensor memory " + columnsOf(b.column, b.columns) + ")";
  if (!a.isMma)
    return what + " by " + roleName(a.role);
  const Mma &m = mmas[a.event];
  return what + " issued by " + roleName(m.issuer) +
         (m.committedAt == 0 ? ", which no tile.mma_commit covers yet"
                             : ", whose commit has not reached this role (no wait on its barrier phase)");
}

std::optional<std::string> MemoryProtocol::checkLive(int buffer, int role, const std::string &op) {
  Region &r = regions[buffers[buffer].region];
  const std::string what = "memory hazard: " + op + " uses " + buffers[buffer].name;
  if (r.registers) {
    if (r.owner < 0)
      r.owner = role;
    else if (r.owner != role)
      return what + ", a registers buffer of " + roleName(r.owner) + ", from " + roleName(role);
  }
  if (!r.tmem)
    return std::nullopt;
  if (!r.allocated)
    return what + " before tile.tmem_alloc allocated its tensor memory";
  if (r.freed)
    return what + " after tile.tmem_free freed its tensor memory";
  if (r.allocRole != role && at(clockOf(role), 2 * r.allocRole) < r.allocEvent)
    return what + " before the allocation of its tensor memory reached this role (no wait on a barrier phase the "
                  "allocating role completed after tile.tmem_alloc)";
  return std::nullopt;
}

std::optional<std::string> MemoryProtocol::check(const Access &x) {
  const Buffer &xb = buffers[x.buffer];
  const int role = x.isMma ? mmas[x.event].issuer : x.role;
  for (const Access &a : accesses) {
    const Buffer &ab = buffers[a.buffer];
    if (ab.region != xb.region || ab.column + ab.columns <= xb.column || xb.column + xb.columns <= ab.column)
      continue;
    if (!a.write && !x.write)
      continue;
    // One issuer's MMAs accumulating into one buffer run in issue order.
    if (x.isMma && a.isMma && mmas[a.event].issuer == role && a.write && x.write && a.buffer == x.buffer)
      continue;
    if (!knows(role, a))
      return "memory hazard: " + x.op + (x.write ? " writes " : " reads ") + xb.name + " while " + describe(a) +
             " may still run";
  }
  return std::nullopt;
}

std::optional<std::string> MemoryProtocol::alloc(int region, int role) {
  Region &r = regions[region];
  if (AsyncCopies::enabled() && r.allocated)
    return std::string("memory hazard: tile.tmem_alloc allocates tensor memory a second time");
  r.allocated = true;
  r.allocRole = role;
  r.allocEvent = ++clockOf(role)[2 * role];
  return std::nullopt;
}

std::optional<std::string> MemoryProtocol::free(int region, int role) {
  Region &r = regions[region];
  if (AsyncCopies::enabled()) {
    if (!r.allocated || r.freed)
      return std::string("memory hazard: tile.tmem_free frees tensor memory that is not allocated");
    if (r.allocRole != role)
      return "memory hazard: tile.tmem_free by " + roleName(role) + ", but " + roleName(r.allocRole) +
             " allocated it (the allocating warp frees)";
    for (const Access &a : accesses)
      if (buffers[a.buffer].region == region && !knows(role, a))
        return "memory hazard: tile.tmem_free frees tensor memory while " + describe(a) + " may still run";
  }
  r.freed = true;
  return std::nullopt;
}

std::optional<std::string> MemoryProtocol::threadAccess(int buffer, bool write, int role, const std::string &op) {
  Access x{buffer, write, false, role, ++clockOf(role)[2 * role], op};
  if (AsyncCopies::enabled()) {
    if (auto hazard = checkLive(buffer, role, op))
      return hazard;
    if (auto hazard = check(x))
      return hazard;
  }
  accesses.push_back(std::move(x));
  return std::nullopt;
}

std::optional<std::string> MemoryProtocol::mma(const std::vector<int> &reads, int write, int role,
                                               const std::string &op) {
  const int64_t id = static_cast<int64_t>(mmas.size());
  mmas.push_back(Mma{role});
  uncommitted[role].push_back(id);
  std::vector<Access> made;
  for (int buffer : reads)
    made.push_back(Access{buffer, false, true, role, id, op});
  made.push_back(Access{write, true, true, role, id, op});
  if (AsyncCopies::enabled())
    for (const Access &x : made) {
      if (auto hazard = checkLive(x.buffer, role, op))
        return hazard;
      if (auto hazard = check(x))
        return hazard;
    }
  for (Access &x : made)
    accesses.push_back(std::move(x));
  return std::nullopt;
}

std::optional<std::string> MemoryProtocol::commit(int role, int barrier, int64_t position) {
  const int64_t c = ++commits[role];
  for (int64_t id : uncommitted[role])
    mmas[id].committedAt = c;
  uncommitted[role].clear();
  if (barrier < 0)
    return std::nullopt;
  Clock deposit = clockOf(role);
  deposit[2 * role + 1] = std::max(deposit[2 * role + 1], c);
  return arriveWith(barrier, position, role, deposit);
}

bool MemoryProtocol::ready(int barrier, int64_t position, int role) {
  Barrier &b = barriers[barrier];
  int64_t phase = b.empty ? position - 1 : position;
  if (phase < 0)
    return true;
  if (b.completed <= phase)
    return false;
  merge(clockOf(role), b.deposits[phase]);
  return true;
}

std::optional<std::string> MemoryProtocol::arrive(int barrier, int64_t position, int role) {
  return arriveWith(barrier, position, role, clockOf(role));
}

std::optional<std::string> MemoryProtocol::arriveWith(int barrier, int64_t position, int role, const Clock &deposit) {
  Barrier &b = barriers[barrier];
  const std::string which = std::string(b.empty ? "the empty" : "the full") + " barrier of channel '" + b.name + "'";
  if (AsyncCopies::enabled()) {
    if (position != b.completed)
      return "memory hazard: arrives on position " + std::to_string(position) + " of " + which + " while phase " +
             std::to_string(b.completed) + " is the current one (an mbarrier counts arrivals for its current phase)";
    if (b.arrivedBy[{role, position}])
      return "memory hazard: " + roleName(role) + " arrives twice on position " + std::to_string(position) + " of " +
             which;
  }
  b.arrivedBy[{role, position}] = true;
  merge(b.deposits[position], deposit);
  ++b.arrived[position];
  while (b.arrived[b.completed] >= b.arrivals)
    ++b.completed;
  return std::nullopt;
}

std::string MemoryProtocol::describeWait(int barrier, int64_t position) const {
  const Barrier &b = barriers[barrier];
  return std::string(b.empty ? "the empty" : "the full") + " barrier of channel '" + b.name + "' (position " +
         std::to_string(position) + ", " + std::to_string(b.completed) + " phases completed)";
}

std::vector<int> MemoryProtocol::aliases(int buffer) const {
  std::vector<int> out;
  const Buffer &x = buffers[buffer];
  for (size_t i = 0; i < buffers.size(); ++i) {
    const Buffer &b = buffers[i];
    if (static_cast<int>(i) != buffer && b.region == x.region && b.column < x.column + x.columns &&
        x.column < b.column + b.columns)
      out.push_back(static_cast<int>(i));
  }
  return out;
}

} // namespace flashtile::interp
