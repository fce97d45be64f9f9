//===- AsyncCopies.cpp - the asynchronous-copy protocol of pipelined programs ===//
#include "interpreter/AsyncCopies.h"

namespace flashtile::interp {

namespace {
std::string tileName(const std::string &operand, int64_t tile) { return operand + " tile " + std::to_string(tile); }
std::string slotName(AsyncCopies::Slot slot) {
  return "slot " + std::to_string(slot.second) + " of buffer " + std::to_string(slot.first);
}
} // namespace

bool &AsyncCopies::enabled() {
  static bool on = true;
  return on;
}

std::optional<std::string> AsyncCopies::copy(const std::string &operand, int64_t tile, Slot slot, bool pred,
                                             int64_t &token) {
  token = static_cast<int64_t>(copies.size());
  copies.push_back({operand, tile, slot, pred});
  if (!pred) {
    copies.back().landed = true;
    return std::nullopt;
  }
  SlotState &s = slots[slot];
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
  }
  for (auto &entry : slots)
    entry.second.readSinceBarrier = false;
  return std::nullopt;
}

std::optional<std::string> AsyncCopies::load(const std::string &operand, int64_t tile, Slot slot) {
  SlotState &s = slots[slot];
  s.readSinceBarrier = true;
  if (!enabled())
    return std::nullopt;
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

} // namespace flashtile::interp
