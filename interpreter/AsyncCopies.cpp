//===- AsyncCopies.cpp - the asynchronous-copy protocol of pipelined programs ===//
#include "interpreter/AsyncCopies.h"

#include <algorithm>

namespace flashtile::interp {

namespace {
std::string tileName(AsyncCopies::Content operand, int64_t tile) {
  if (!operand)
    return "work unit " + std::to_string(tile);
  return tile::stringifyOperand(*operand).str() + " tile " + std::to_string(tile);
}
std::string slotName(AsyncCopies::Slot slot) {
  return "slot " + std::to_string(slot.second) + " of buffer " + std::to_string(slot.first);
}
} // namespace

bool &AsyncCopies::enabled() {
  static bool on = true;
  return on;
}

std::optional<std::string> AsyncCopies::copy(Content operand, int64_t tile, Slot slot, bool pred,
                                             int64_t &token) {
  token = static_cast<int64_t>(copies.size());
  copies.push_back({operand, tile, slot, pred});
  if (!pred) {
    copies.back().landed = true;
    return std::nullopt;
  }
  SlotState &s = slots[slot];
  ++s.fills;
  if (enabled()) {
    if (s.incoming)
      return "pipeline hazard: copy of " + tileName(operand, tile) + " into " + slotName(slot) + " starts while the " +
             "copy of " + tileName(copies[*s.incoming].operand, copies[*s.incoming].tile) +
             " into it is still in flight";
    if (s.readSinceBarrier)
      return "pipeline hazard: copy of " + tileName(operand, tile) + " overwrites " +
             tileName(s.landed->first, s.landed->second) + " in " + slotName(slot) +
             " with no tile.wait barrier since it was read (other threads may still be reading it)";
  }
  s.incoming = token;
  return std::nullopt;
}

std::optional<std::string> AsyncCopies::wait(const std::vector<int64_t> &tokens) {
  for (int64_t token : tokens) {
    if (token < 0 || token >= static_cast<int64_t>(copies.size())) {
      if (enabled())
        return "pipeline hazard: tile.wait on a token that no tile.copy_async produced";
      continue;
    }
    Copy &c = copies[token];
    if (c.landed)
      continue;
    c.landed = true;
    SlotState &s = slots[c.slot];
    s.landed = std::make_pair(c.operand, c.tile);
    s.incoming.reset();
    s.stagedO = false;
  }
  for (auto &entry : slots)
    entry.second.readSinceBarrier = false;
  return std::nullopt;
}

std::optional<std::string> AsyncCopies::stage(Slot slot, int role) {
  SlotState &s = slots[slot];
  std::optional<std::string> hazard;
  std::string what = "pipeline hazard: tile.store stages O in " + slotName(slot) + " ";
  if (enabled() && s.incoming) {
    hazard = what + "while the copy of " + tileName(copies[*s.incoming].operand, copies[*s.incoming].tile) +
             " into it is in flight";
  } else if (enabled()) {
    // The role's tile in the slot is the round it last observed on the full barrier (the slot may hold a later
    // round's tile already, refilled after the role released it).
    Barrier *full = barrierOf(slot.first, true), *empty = barrierOf(slot.first, false);
    if (full && empty) {
      auto seen = full->observed.find({role, slot.second});
      auto last = empty->lastArrived.find({role, slot.second});
      if (seen != full->observed.end() && last != empty->lastArrived.end() && last->second >= seen->second)
        hazard = what + "after this role released its tile (round " + std::to_string(seen->second) +
                 ") on the empty barrier: a producer may already be refilling it";
    }
  }
  s.landed.reset();
  s.stagedO = true;
  ++s.fills;
  return hazard;
}

std::optional<std::string> AsyncCopies::load(Content operand, int64_t tile, Slot slot, int role) {
  SlotState &s = slots[slot];
  s.readSinceBarrier = true;
  if (!enabled())
    return std::nullopt;
  if (s.stagedO && !s.incoming && !s.landed)
    return "pipeline hazard: load of " + tileName(operand, tile) + " from " + slotName(slot) +
           " but tile.store staged O in the slot since its tile landed (the staged tile is dead)";
  if (Barrier *full = barrierOf(slot.first, true)) {
    // The role must have observed the full phase of the round the slot holds.
    auto seen = full->observed.find({role, slot.second});
    auto round = landedRound.find(slot);
    std::string what = "pipeline hazard: load of " + tileName(operand, tile) + " from " + slotName(slot) + " but ";
    if (round == landedRound.end() || seen == full->observed.end() || seen->second != round->second)
      return what + "this role has not waited for the slot's full barrier since the tile landed (tile.barrier_wait "
                    "on the full barrier before reading)";
    if (!s.landed || *s.landed != std::make_pair(operand, tile))
      return what + (s.landed ? "the slot holds " + tileName(s.landed->first, s.landed->second) : "the slot is empty");
    return std::nullopt;
  }
  std::string what = "pipeline hazard: load of " + tileName(operand, tile) + " from " + slotName(slot) + " but ";
  if (s.incoming) {
    const Copy &c = copies[*s.incoming];
    if (c.operand == operand && c.tile == tile)
      return what + "its copy has not landed (no tile.wait on its token since it started)";
    return what + (s.landed ? "the slot holds " + tileName(s.landed->first, s.landed->second) + " and" : "no copy landed and") +
           " the copy of " + tileName(c.operand, c.tile) +
           " into it is in flight (a copy may start only after the slot's previous tile is read)";
  }
  if (!s.landed)
    return what + "no copy landed in the slot";
  if (*s.landed != std::make_pair(operand, tile))
    return what + "the slot holds " + tileName(s.landed->first, s.landed->second);
  return std::nullopt;
}

AsyncCopies::Barrier *AsyncCopies::barrierOf(int64_t buffer, bool full) {
  for (auto &entry : barriers)
    if (entry.second.buffer == buffer && (entry.second.arrivals == 0) == full)
      return &entry.second;
  return nullptr;
}

void AsyncCopies::addBarrier(int64_t barrier, int64_t buffer, int64_t slots, int64_t arrivals) {
  barriers[barrier] = Barrier{buffer, slots, arrivals, {}, {}, {}, {}};
}

namespace {
int64_t slotOf(int64_t position, int64_t slots) { return ((position % slots) + slots) % slots; }
int64_t roundOf(int64_t position, int64_t slots) {
  return position >= 0 ? position / slots : -((-position + slots - 1) / slots);
}
} // namespace

std::optional<std::string> AsyncCopies::copyArriving(Content operand, int64_t tile, Slot slot, bool pred,
                                                     int64_t barrier, int64_t position, int role, int64_t &token) {
  token = static_cast<int64_t>(copies.size());
  copies.push_back({operand, tile, slot, pred, /*landed=*/true});
  Barrier &full = barriers.at(barrier);
  int64_t s = slotOf(position, full.slots), round = roundOf(position, full.slots);
  std::string what = "pipeline hazard: copy of " + tileName(operand, tile) + " (ring position " +
                     std::to_string(position) + ") ";
  if (enabled()) {
    if (position < 0)
      return what + "has a negative ring position";
    if (s != slot.second)
      return what + "goes into " + slotName(slot) + " but arrives on the full barrier of slot " + std::to_string(s);
    if (round != full.completed[s])
      return what + "completes round " + std::to_string(round) + " of slot " + std::to_string(s) + ", whose round " +
             std::to_string(full.completed[s]) + " is next (positions must be filled in order)";
    if (Barrier *empty = barrierOf(full.buffer, false); empty && round > 0) {
      auto seen = empty->observed.find({role, s});
      if (seen == empty->observed.end() || seen->second < round)
        return what + "overwrites " + slotName(slot) + " before its empty barrier: this role has not waited for the " +
               "consumers to release round " + std::to_string(round - 1) + " (tile.barrier_wait on the empty barrier)";
    }
  }
  // A predicated-off copy still completes the phase (TMA: arrive with no transaction bytes), so the ring stays in
  // step; the slot then keeps its old tile and a read of it finds that out.
  ++full.completed[s];
  if (pred) {
    slots[slot].landed = std::make_pair(operand, tile);
    slots[slot].incoming.reset();
    slots[slot].stagedO = false;
    ++slots[slot].fills;
    landedRound[slot] = round;
  }
  return std::nullopt;
}

int64_t AsyncCopies::fills(Slot slot) const {
  auto it = slots.find(slot);
  return it == slots.end() ? 0 : it->second.fills;
}

bool AsyncCopies::barrierReady(int64_t barrier, int64_t position, int role) {
  Barrier &b = barriers.at(barrier);
  int64_t s = slotOf(position, b.slots), round = roundOf(position, b.slots);
  if (b.arrivals == 0) {
    if (b.completed[s] <= round)
      return false;
    b.observed[{role, s}] = round;
    return true;
  }
  // Empty: round r may be overwritten once round r - 1 was released (round 0 at once).
  if (round > 0 && b.completed[s] < round)
    return false;
  int64_t &seen = b.observed[{role, s}];
  seen = std::max(seen, round);
  return true;
}

std::optional<std::string> AsyncCopies::barrierArrive(int64_t barrier, int64_t position, int role) {
  Barrier &b = barriers.at(barrier);
  int64_t s = slotOf(position, b.slots), round = roundOf(position, b.slots);
  if (b.arrivals == 0)
    return enabled() ? std::optional<std::string>("tile.barrier_arrive on a full barrier: copies complete full "
                                                  "phases; consumers release slots on the empty barrier")
                     : std::nullopt;
  auto last = b.lastArrived.find({role, s});
  if (enabled() && last != b.lastArrived.end() && last->second >= round)
    return "pipeline hazard: this role releases round " + std::to_string(round) + " of slot " + std::to_string(s) +
           " twice";
  b.lastArrived[{role, s}] = round;
  ++b.arrived[s][round];
  while (b.arrived[s][b.completed[s]] == b.arrivals)
    ++b.completed[s];
  return std::nullopt;
}

bool AsyncCopies::isSlotOf(int64_t barrier, int64_t position, Slot slot) const {
  const Barrier &b = barriers.at(barrier);
  return b.buffer == slot.first && slotOf(position, b.slots) == slot.second;
}

std::string AsyncCopies::describeWait(int64_t barrier, int64_t position) const {
  const Barrier &b = barriers.at(barrier);
  int64_t s = slotOf(position, b.slots), round = roundOf(position, b.slots);
  return std::string(b.arrivals == 0 ? "the full barrier" : "the empty barrier") + " of slot " + std::to_string(s) +
         " of buffer " + std::to_string(b.buffer) + " (" +
         (b.arrivals == 0 ? "round " + std::to_string(round) + " landing"
                          : "round " + std::to_string(round - 1) + " released by every consumer") +
         ")";
}

} // namespace flashtile::interp
