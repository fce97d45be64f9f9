//===- AsyncCopies.h - the asynchronous-copy protocol of pipelined programs ===//
//
// A pipelined program moves Q, K and V tiles through shared-memory buffers (tile.buffer) of one or more slots
// (tile.slot): `tile.copy_async X[j] into %slot` starts filling the slot and returns a token, `tile.wait %t...`
// lands the copies behind its tokens and synchronizes the block, `tile.load X[j] from %slot` reads the slot. This
// class replays those events for one program instance and names the first hazard: a read of a slot whose copy has
// not been waited on (or that holds another tile), a copy into a slot whose previous copy is still in flight or
// whose contents some thread may still be reading (no barrier since the read), a wait on a token no copy produced.
// A wait lands only the copies it names: a program that relies on a target's copy order (cp.async groups complete
// in order) to land an unnamed copy is wrong on targets whose copies complete independently (TMA). Operands are the
// dialect's enum (tile::Operand), named in messages by its stringify, as the IR spells them.
//
// Producer/consumer barriers (tile.barrier, SM90's mbarriers): a buffer may have a "full" barrier (a copy that
// arrives on it completes its slot's phase) and an "empty" one (consumers release a slot with
// tile.barrier_arrive). Ring position i is slot i mod slots in round i div slots. Each role (tile.role; the whole
// block outside roles) must observe a slot's full phase (tile.barrier_wait %full[i]) before it reads the slot, and a
// producer must observe the previous round's empty phase (tile.barrier_wait %empty[i]) before it overwrites the slot.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_ASYNCCOPIES_H
#define FLASHTILE_INTERPRETER_ASYNCCOPIES_H

#include "passes/IR/TileDialect.h"

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
  /// What a slot holds: a tile of an operand (Q, K, V), or, without one, a work unit (the one-unit cell of a dynamic
  /// tile scheduler, tile.work_queue); numbered by its index.
  using Content = std::optional<tile::Operand>;
  static constexpr Content kWorkUnit = std::nullopt;

  /// `copy_async X[tile] into slot if pred`: returns the copy's token. A predicated-off copy moves no data and its
  /// token completes at once.
  std::optional<std::string> copy(Content operand, int64_t tile, Slot slot, bool pred, int64_t &token);
  /// `wait %tokens`: lands the tokens' copies; then a block-wide barrier.
  std::optional<std::string> wait(const std::vector<int64_t> &tokens);
  /// `load X[tile] from slot`: the slot must hold X's tile `tile`, landed, with no copy into it in flight.
  std::optional<std::string> load(Content operand, int64_t tile, Slot slot, int role = 0);
  /// Declares barrier `barrier` over the slots of buffer `buffer`: a full barrier (arrivals = 0) or an empty one
  /// that completes a phase after `arrivals` consumers released the slot.
  void addBarrier(int64_t barrier, int64_t buffer, int64_t slots, int64_t arrivals);
  /// `copy_async X[tile] into slot arrive %full[position]` by `role`: the copy lands and completes its slot's phase.
  std::optional<std::string> copyArriving(Content operand, int64_t tile, Slot slot, bool pred, int64_t barrier,
                                          int64_t position, int role, int64_t &token);
  /// `barrier_wait %b[position]` by `role`: whether the phase has completed (then the role has observed it). A phase
  /// that has not completed yet is no error: another role may complete it.
  bool barrierReady(int64_t barrier, int64_t position, int role);
  /// `barrier_arrive %empty[position]` by `role`.
  std::optional<std::string> barrierArrive(int64_t barrier, int64_t position, int role);
  /// `tile.store o ... through slot` by `role`: O is written into the slot, whose tile is dead from here on. A hazard
  /// when a copy into the slot is in flight or the role released the slot's tile on its empty barrier (a producer
  /// may be refilling it); afterwards the slot holds no tile (a later load of it is a hazard).
  std::optional<std::string> stage(Slot slot, int role);
  /// Whether ring position `position` of `barrier` is `slot`.
  bool isSlotOf(int64_t barrier, int64_t position, Slot slot) const;
  /// How many copies started filling `slot` so far: a tile read from the slot is still there while this is unchanged
  /// (an asynchronous MMA reads its shared-memory operands when it runs, not when they were loaded).
  int64_t fills(Slot slot) const;
  /// Describes what `barrier_wait %b[position]` waits for (for deadlock reports).
  std::string describeWait(int64_t barrier, int64_t position) const;

  /// Whether this checker is on; off, every event is accepted (tests show that the hazards they plant are caught
  /// by the checker, not by something else).
  static bool &enabled();

private:
  struct Copy {
    Content operand;
    int64_t tile;
    Slot slot;
    bool moves; // false: predicated off
    bool landed = false;
  };
  struct SlotState {
    std::optional<std::pair<Content, int64_t>> landed; // the tile (or work unit) the slot holds
    std::optional<int64_t> incoming;                        // the copy filling it
    bool readSinceBarrier = false;                          // some thread may still be reading `landed`
    int64_t fills = 0;                                      // copies started into the slot (and O stagings)
    bool stagedO = false;                                   // O was staged in it since its last copy
  };
  struct Barrier {
    int64_t buffer, slots, arrivals; // arrivals 0: a full barrier
    std::map<int64_t, int64_t> completed;                         // slot -> completed phases
    std::map<int64_t, std::map<int64_t, int64_t>> arrived;        // slot -> round -> arrivals so far
    std::map<std::pair<int, int64_t>, int64_t> lastArrived;       // (role, slot) -> last round released
    std::map<std::pair<int, int64_t>, int64_t> observed;          // (role, slot) -> round observed
  };
  /// The full / empty barrier of a buffer, or null.
  Barrier *barrierOf(int64_t buffer, bool full);
  std::vector<Copy> copies;
  std::map<Slot, SlotState> slots;
  std::map<int64_t, Barrier> barriers;
  std::map<Slot, int64_t> landedRound; // the round of the tile a slot holds (buffers with a full barrier)
};

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_ASYNCCOPIES_H
