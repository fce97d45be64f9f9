//===- AsyncCopies.cpp - the asynchronous-copy protocol of pipelined programs ===//
#include "interpreter/AsyncCopies.h"

#include <algorithm>

namespace flashtile::interp {

namespace {
constexpr const char *kNames[] = {"q", "k", "v"};

std::string tileName(int buffer, int64_t tile) { return std::string(kNames[buffer]) + " tile " + std::to_string(tile); }
} // namespace

std::optional<int> AsyncCopies::bufferOf(const std::string &operand) {
  for (int i = 0; i < 3; ++i)
    if (operand == kNames[i])
      return i;
  return std::nullopt;
}

int AsyncCopies::bufferIndex(int operand, int64_t tile) const {
  int slots = std::min(stages, kMaxStages);
  int slot = operand == 0 ? 0 : static_cast<int>(((tile % slots) + slots) % slots);
  return operand * kMaxStages + slot;
}

std::optional<std::string> AsyncCopies::copy(int operand, int64_t tile, bool pred) {
  int buffer = bufferIndex(operand, tile);
  Buffer &b = buffers[buffer];
  if (pred) {
    if (b.incoming)
      return "pipeline hazard: copy of " + tileName(operand, tile) + " starts while the copy of tile " +
             std::to_string(*b.incoming) + " into the same buffer is still in flight";
    if (b.readSinceBarrier)
      return "pipeline hazard: copy of " + tileName(operand, tile) + " overwrites the buffer holding tile " +
             std::to_string(*b.landed) +
             " with no tile.wait_async barrier since it was read (other warps may "
             "still be reading it)";
    b.incoming = tile;
  }
  groups.push_back({operand, buffer, pred ? std::optional<int64_t>(tile) : std::nullopt});
  return std::nullopt;
}

std::optional<std::string> AsyncCopies::wait(int operand, int64_t pending) {
  if (pending < 0)
    return "wait_async " + std::string(kNames[operand]) + " has a negative pending count " + std::to_string(pending);
  // The operand's newest group must be among those that land.
  for (int64_t i = static_cast<int64_t>(groups.size()) - 1; i >= 0; --i) {
    if (groups[i].operand != operand)
      continue;
    int64_t newer = static_cast<int64_t>(groups.size()) - 1 - i;
    if (newer < pending)
      return "pipeline hazard: wait_async " + std::string(kNames[operand]) + " {pending = " + std::to_string(pending) +
             "} may return before its copy lands: only " + std::to_string(newer) + " copy groups were started after it";
    break;
  }
  while (static_cast<int64_t>(groups.size()) > pending) {
    Group g = groups.front();
    groups.pop_front();
    if (g.tile) {
      buffers[g.buffer].landed = g.tile;
      buffers[g.buffer].incoming.reset();
    }
  }
  for (Buffer &b : buffers)
    b.readSinceBarrier = false;
  return std::nullopt;
}

std::optional<std::string> AsyncCopies::load(int operand, int64_t tile) {
  Buffer &b = buffers[bufferIndex(operand, tile)];
  std::string what = "pipeline hazard: load of " + tileName(operand, tile) + " but ";
  if (b.incoming && *b.incoming == tile)
    return what + "its copy has not landed (no tile.wait_async " + kNames[operand] + " since it started)";
  if (b.incoming)
    return what + (b.landed ? "the buffer holds tile " + std::to_string(*b.landed) + " and" : "no copy landed and") +
           " the copy of tile " + std::to_string(*b.incoming) +
           " into it is in flight (a copy may start only after the buffer's previous tile is read)";
  if (!b.landed)
    return what + "no copy landed in its buffer";
  if (*b.landed != tile)
    return what + "the buffer holds tile " + std::to_string(*b.landed);
  b.readSinceBarrier = true;
  return std::nullopt;
}

} // namespace flashtile::interp
