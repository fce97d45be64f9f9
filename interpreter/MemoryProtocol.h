//===- MemoryProtocol.h - who may touch a buffer when (the memory layer) --===//
//
// The protocol of passes/IR/TileMemoryOps.td, replayed for one program instance: roles access buffers (threads'
// loads and stores) and issue MMAs on them, MMAs complete by a commit on a barrier, and roles learn of each other's
// progress only through barrier phases (channels). Every role carries a vector clock: for each role, how many of its
// thread accesses it knows are done, and how many of its commits it knows have landed. An arrival deposits the
// arriving role's clock in the phase (a commit deposits it with its own commit counted as landed); a wait that passes
// merges the phase's deposit.
//
// The rule: two accesses to overlapping columns of one allocation (tensor memory) or to one buffer (shared memory,
// registers), at least one a write, are ordered only if the later one's role knows the earlier one completed: a
// thread access once it learned that role's event, an MMA once it learned of a commit covering it. MMAs of one
// issuer writing the same buffer (a k-step chain, P·V after P·V into O) are ordered by the tensor core's pipeline;
// nothing else is (an MMA writing S where an earlier MMA still reads P over S is a hazard until its commit landed
// for the issuer). Tensor memory must be allocated, the allocation known to the accessing role, and not freed; the
// freeing role must know every access to it completed. Registers buffers belong to the first role that touches them.
//
// The hazards this names (each with a planted test in tests/unit/compiler/Fa4RolesTest.cpp): a use before the
// allocation, a use after the free, a read of S before its MMA's commit landed, overwriting S while P·V still reads
// P, rescaling O under a P·V in flight. Off with AsyncCopies::enabled() as the ring's checks are.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_MEMORYPROTOCOL_H
#define FLASHTILE_INTERPRETER_MEMORYPROTOCOL_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace flashtile::interp {

class MemoryProtocol {
public:
  /// Tensor memory of `columns` columns (tile.tmem); returns its region number.
  int addTmem(int64_t columns);
  /// A buffer of columns [column, column + columns) of region `region` (tile.tmem_buffer), named for messages.
  int addTmemBuffer(int region, int64_t column, int64_t columns, std::string name);
  /// A shared-memory or registers buffer (tile.smem_buffer): a region of its own.
  int addBuffer(bool registers, std::string name);
  /// A channel's barrier pair (tile.channel): returns the full barrier's number; the empty one is the next.
  int addChannel(std::string name, int64_t fullArrivals, int64_t emptyArrivals);

  std::optional<std::string> alloc(int region, int role);
  std::optional<std::string> free(int region, int role);
  /// A thread access of `role` to `buffer`; `op` names it in messages.
  std::optional<std::string> threadAccess(int buffer, bool write, int role, const std::string &op);
  /// An MMA `op` issued by `role`, reading `reads` and writing `write`.
  std::optional<std::string> mma(const std::vector<int> &reads, int write, int role, const std::string &op);
  /// tile.mma_commit by `role`: every MMA it issued so far is covered by this commit; arrives on `barrier`'s phase
  /// `position` when `barrier` is a channel's (>= 0).
  std::optional<std::string> commit(int role, int barrier, int64_t position);
  /// tile.barrier_wait on a channel barrier: whether the phase completed (then `role` learns what it carries).
  bool ready(int barrier, int64_t position, int role);
  /// tile.barrier_arrive on a channel barrier by `role`.
  std::optional<std::string> arrive(int barrier, int64_t position, int role);
  std::string describeWait(int barrier, int64_t position) const;
  /// The other buffers whose columns overlap `buffer`'s (a write to `buffer` clobbers them).
  std::vector<int> aliases(int buffer) const;
  /// Whether `buffer` is in tensor memory.
  bool inTmem(int buffer) const { return regions[buffers[buffer].region].tmem; }

private:
  using Clock = std::vector<int64_t>; // 2r: role r's thread events; 2r + 1: role r's commits
  struct Region {
    bool tmem = false, registers = false;
    bool allocated = false, freed = false;
    int allocRole = -1, owner = -1;
    int64_t allocEvent = 0;
  };
  struct Buffer {
    int region;
    int64_t column, columns;
    std::string name;
  };
  struct Access {
    int buffer;
    bool write, isMma;
    int role;
    int64_t event; // thread: the role's event; MMA: index into mmas
    std::string op;
  };
  struct Mma {
    int issuer;
    int64_t committedAt = 0; // the issuer's commit covering it (0: none yet)
  };
  struct Barrier {
    std::string name;
    bool empty;
    int64_t arrivals;
    int64_t completed = 0;
    std::map<int64_t, int64_t> arrived;
    std::map<int64_t, Clock> deposits;
    std::map<std::pair<int, int64_t>, bool> arrivedBy;
  };

  Clock &clockOf(int role);
  static void merge(Clock &into, const Clock &from);
  static int64_t at(const Clock &c, size_t i) { return i < c.size() ? c[i] : 0; }
  bool knows(int role, const Access &a);
  std::string describe(const Access &a) const;
  /// Tensor memory checks of an access to `buffer` by `role`.
  std::optional<std::string> checkLive(int buffer, int role, const std::string &op);
  std::optional<std::string> check(const Access &x);
  std::optional<std::string> arriveWith(int barrier, int64_t position, int role, const Clock &deposit);

  std::vector<Region> regions;
  std::vector<Buffer> buffers;
  std::vector<Access> accesses;
  std::vector<Mma> mmas;
  std::vector<Barrier> barriers;
  std::map<int, Clock> clocks;
  std::map<int, std::vector<int64_t>> uncommitted; // role -> its MMAs no commit covers yet
  std::map<int, int64_t> commits;                  // role -> commits so far
};

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_MEMORYPROTOCOL_H
