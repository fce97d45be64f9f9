//===- AsyncCopies.h - the asynchronous-copy protocol of pipelined programs ===//
//
// A pipelined program moves Q, K and V tiles through shared-memory buffers (tile.buffer) of one or more slots
// (tile.slot): `tile.copy_async X[j] into %slot` starts filling the slot and returns a token, `tile.wait %t...`
// lands the copies behind its tokens and synchronizes the block, `tile.load X[j] from %slot` reads the slot. This
// class replays those events for one program instance and names the first hazard: a read of a slot whose copy has
// not been waited on (or that holds another tile), a copy into a slot whose previous copy is still in flight or
// whose contents some thread may still be reading (no barrier since the read), a wait on a token no copy produced.
// A wait lands only the copies it names: a program that relies on a target's copy order (cp.async groups complete
// in order) to land an unnamed copy is wrong on targets whose copies complete independently (TMA). No MLIR
// dependency.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_ASYNCCOPIES_H
#define FLASHTILE_INTERPRETER_ASYNCCOPIES_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashtile::interp {

class AsyncCopies {
public:
  /// A slot: (buffer, slot index). Buffers are numbered by the caller.
  using Slot = std::pair<int64_t, int64_t>;
  /// What a token stands for: a copy's number (0, 1, ...), or kNoToken for a value no copy produced.
  static constexpr int64_t kNoToken = -1;

  /// `copy_async X[tile] into slot if pred`: returns the copy's token. A predicated-off copy moves no data and its
  /// token completes at once.
  std::optional<std::string> copy(const std::string &operand, int64_t tile, Slot slot, bool pred, int64_t &token);
  /// `wait %tokens`: lands the tokens' copies; then a block-wide barrier.
  std::optional<std::string> wait(const std::vector<int64_t> &tokens);
  /// `load X[tile] from slot`: the slot must hold X's tile `tile`, landed, with no copy into it in flight.
  std::optional<std::string> load(const std::string &operand, int64_t tile, Slot slot);
  /// Whether this checker is on; off, every event is accepted (tests show that the hazards they plant are caught
  /// by the checker, not by something else).
  static bool &enabled();

private:
  struct Copy {
    std::string operand;
    int64_t tile;
    Slot slot;
    bool moves; // false: predicated off
    bool landed = false;
  };
  struct SlotState {
    std::optional<std::pair<std::string, int64_t>> landed; // the tile the slot holds
    std::optional<int64_t> incoming;                        // the copy filling it
    bool readSinceBarrier = false;                          // some thread may still be reading `landed`
  };
  std::vector<Copy> copies;
  std::map<Slot, SlotState> slots;
};

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_ASYNCCOPIES_H
