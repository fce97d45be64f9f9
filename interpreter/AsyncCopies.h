//===- AsyncCopies.h - the asynchronous-copy protocol of pipelined programs ===//
//
// After tile-fa2-pipeline, Q, K and V tiles reach the compute through shared-memory buffers: one for Q and `stages`
// for K and for V (tile j in buffer j mod stages). `tile.copy_async X[j]` starts filling tile j's buffer,
// `tile.wait_async X {pending = n}` lands every copy group but the n newest (cp.async.wait_group semantics: groups
// complete in issue order) and synchronizes the block, and `tile.load X[j]` reads the buffer. This class replays those
// events for one program instance and names the first hazard: a load of a tile that has not landed (or was
// overwritten), a copy into a buffer whose previous copy is still in flight or whose contents other warps may still be
// reading, a wait that cannot guarantee its copy. No MLIR dependency.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_ASYNCCOPIES_H
#define FLASHTILE_INTERPRETER_ASYNCCOPIES_H

#include <array>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace flashtile::interp {

class AsyncCopies {
public:
  /// `stages`: buffers per K/V operand (the schedule's), 1 or more.
  explicit AsyncCopies(int stages = 1) : stages(stages < 1 ? 1 : stages) {}

  /// The operand behind "q", "k" or "v"; nothing for other names.
  static std::optional<int> bufferOf(const std::string &operand);

  /// `copy_async X[tile] if pred`: a predicated-off copy moves no data but still counts as a copy group.
  std::optional<std::string> copy(int operand, int64_t tile, bool pred);
  /// `wait_async X {pending}`: lands all groups but the `pending` newest; a block-wide barrier.
  std::optional<std::string> wait(int operand, int64_t pending);
  /// `load X[tile]`: the tile's buffer must hold `tile`, landed and not being overwritten.
  std::optional<std::string> load(int operand, int64_t tile);

private:
  static constexpr int kMaxStages = 4;
  /// The buffer of `tile` of `operand` (Q has one).
  int bufferIndex(int operand, int64_t tile) const;

  struct Group {
    int operand, buffer;
    std::optional<int64_t> tile; // nothing: predicated off
  };
  struct Buffer {
    std::optional<int64_t> landed;   // the tile the buffer holds
    std::optional<int64_t> incoming; // the tile being copied into it
    bool readSinceBarrier = false;   // some warp may still be reading `landed`
  };
  std::deque<Group> groups; // in flight, oldest first
  std::array<Buffer, 3 * kMaxStages> buffers;
  int stages;
};

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_ASYNCCOPIES_H
