//===- Interpreter.h - executes tile programs on the CPU ------------------===//
//
// The oracle for every variant and every schedule: runs a `tile.func` (unscheduled, or after any schedule's
// passes) once per (batch, head, Q tile), op by op, in fp32 with the program's bf16/f16/e4m3 roundings where the
// GPU stores narrow values (inputs, P before P·V, O; an e4m3 program's O is bf16). Pipelined programs are also checked against their
// asynchronous-copy protocol: a load from a buffer its copy has not filled is an error, not a wrong number.
// Programs launched once per K/V tile (tile.state_load / tile.state_store, the fa1 schedule) run every instance at
// every step, in step order, with each instance's state kept between steps as the kernel's workspace keeps it; a
// step that reads a state the step before did not store is an error.
// The backward's three programs (passes/IR/ProgramKinds.h, docs/backward.md) run as their kernels do, one after the
// other (runBackward): the preprocess per (batch, head, Q tile), the main program per (batch, query head, K/V tile)
// over its Q tiles, adding into the fp32 dQ accumulator, the postprocess per (batch, head, Q tile).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_INTERPRETER_H
#define FLASHTILE_INTERPRETER_INTERPRETER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <variant>
#include <vector>

namespace flashtile::tile {
class FuncOp;
} // namespace flashtile::tile

namespace flashtile::interp {

/// A variant's input array (tile.input): f32 or i32 elements, as the tile.func declares it.
using InputArray = std::variant<std::vector<float>, std::vector<int32_t>>;

/// The sizes and numbers of one attention-forward call.
struct Problem {
  int batch = 1, seqlenQ = 0, seqlenK = 0, headsQ = 1, headsKv = 1, headDim = 0, headDimV = 0;
  float softmaxScale = 1.0f;
  /// FP8 descales (of e4m3 tensors only: q_descale of an f8E4M3FN program, k_descale and v_descale of one or of a
  /// program whose tile.kv_dtype is f8E4M3FN; flash-attn 3's q_descale, k_descale, v_descale): empty (= 1) or
  /// batch x headsKv values, [b][hKv]. The softmax scale of a (batch, K/V head) is softmaxScale · qDescale ·
  /// kDescale; O is multiplied by vDescale when finalized. Other programs take none.
  std::vector<float> qDescale{}, kDescale{}, vDescale{};
  std::vector<float> params;        ///< the variant's numbers, in the order of the tile.func's `params`
  std::vector<InputArray> inputs{}; ///< the variant's input arrays, in the order of the tile.func's `inputs`
  /// Varlen (flash_attn_varlen_func): empty (dense), or batch + 1 non-decreasing offsets each, starting at 0.
  /// Sequence b is rows [cuSeqlensQ[b], cuSeqlensQ[b + 1]) of the packed Q/O and [cuSeqlensK[b],
  /// cuSeqlensK[b + 1]) of K/V; seqlenQ/seqlenK are then total_q/total_k, and tile.dim seqlen_q/"seqlen_k" give
  /// each sequence's own length.
  std::vector<int32_t> cuSeqlensQ, cuSeqlensK;
  /// Split-KV programs (tile.store_split, the decode schedule): the key range of every Q tile is split into
  /// numSplits ranges of whole K/V tiles, one program instance each, and each row's partial O and LSE are merged
  /// as the combine kernel merges them (numSplits = 1: the instances store O and LSE themselves). Other programs
  /// take 1 only.
  int numSplits = 1;
  /// Persistent programs (tile.work_loop): the thread blocks of the launch, each running work tiles g, g + blocks,
  /// ... in the kernel's order (heaviest Q tiles first); min(tiles, persistentBlocks) run. Few blocks make each run
  /// many tiles, so that ring positions and phases carry across tiles as on the GPU. Other programs ignore it.
  int persistentBlocks = 3;
  /// Dynamic work loops (tile.work_loop dynamic): 0, block g takes counter values g, g + blocks, ... (blocks of equal
  /// speed); else the seed of a random split of the counter values among the blocks, each block's increasing (any
  /// split is an order a GPU may produce: the results must not depend on it).
  unsigned workOrderSeed = 0;
  /// Programs whose Q load rotates (tile.rotary, passes/IR/TileRotary.h): the cos and sin tables, seqlenRo x
  /// rotaryDim / 2 each (rounded to the program's dtype, as the kernels read them), and rotaryDim (even, at most
  /// headDim). seqlenNew: the keys at the end of each sequence that a KV-cache call appended (K/V hold them already
  /// here); positions count from seqlen_k − seqlenNew.
  int rotaryDim = 0, seqlenRo = 0, seqlenNew = 0;
  std::vector<float> rotaryCos, rotarySin;
  /// Programs whose tiles have dynamic rows (unscheduled ones): rows of a Q tile and of a K/V tile; 0 makes the
  /// whole sequence one tile. A scheduled program's tiles are its schedule's (static tile types, block_m/block_n).
  int tileRowsQ = 0, tileRowsK = 0;
  /// Programs compiled with position offsets (tile.position_offsets, passes/IR/TilePositions.h): where this call
  /// sits in the larger problem it is a block of, as the kernels' FlashtilePositions (runtime/PositionsAbi.h) says.
  /// Zero sizes and empty vectors mean the call's own. Other programs ignore it.
  struct Positions {
    int qOffset = 0, kOffset = 0, seqlenQGlobal = 0, seqlenKGlobal = 0; ///< dense
    std::vector<int32_t> qOffsets{}, kOffsets{};                     ///< varlen: batch values each, or empty (0)
    std::vector<int32_t> cuSeqlensQGlobal{}, cuSeqlensKGlobal{};     ///< varlen: batch + 1 each, or empty
    int headOffset = 0, headsQGlobal = 0, headsKvGlobal = 0;
  } positions{};

  bool isVarlen() const { return !cuSeqlensQ.empty(); }
};

/// What a run did, for checks of a schedule's tile skipping.
struct RunStats {
  int64_t qTiles = 0, blockM = 0; ///< Q tiles per (batch, head) (varlen: of the longest), rows per Q tile
  /// K tiles each program instance loaded, at ((b · headsQ) + h) · qTiles + qTile (split-KV: summed over the
  /// Q tile's splits; GQA packing, tile.pack_query_heads: ((b · headsKv) + hKv) · qTiles + qTile, qTiles counting
  /// tiles of seqlen_q · headsQ / headsKv rows).
  std::vector<int64_t> kTileLoads;
};

/// Runs `func` on packed row-major (BSHD) tensors: Q is batch x seqlenQ x headsQ x headDim, K is
/// batch x seqlenK x headsKv x headDim, V is batch x seqlenK x headsKv x headDimV. Fills O
/// (batch x seqlenQ x headsQ x headDimV, values of the program's output type: its dtype, bf16 for e4m3) and LSE (batch x headsQ x seqlenQ, fp32,
/// natural log). Varlen: Q is seqlenQ (total_q) x headsQ x headDim, K/V likewise with seqlenK, O total_q x headsQ x
/// headDimV and LSE headsQ x total_q. Query head h reads K/V head h / (headsQ / headsKv). Inputs are rounded to the
/// program's dtype first. Errors (bad sizes, an op the interpreter does not know, a pipeline hazard, ...) are emitted
/// as MLIR diagnostics on the offending op, with a note naming the program instance; so is a tile.input read outside
/// its array. `stats`, when given, receives what the run did.
mlir::LogicalResult run(tile::FuncOp func, const Problem &problem, const std::vector<float> &q,
                        const std::vector<float> &k, const std::vector<float> &v, std::vector<float> &o,
                        std::vector<float> &lse, RunStats *stats = nullptr);

/// The tensors of a backward call, laid out as run's: Q, K, V; the forward's O (values of the dtype) and LSE (fp32);
/// dO, laid out as O. Q, K, V, O and dO are rounded to the programs' dtype first.
struct BackwardTensors {
  std::vector<float> q, k, v, o, dO, lse;
};

/// What the backward's programs compute: dQ, dK, dV (values of the dtype, laid out as Q, K, V) and D = rowsum(dO∘O)
/// (fp32, laid out as LSE). A row no instance wrote stays NaN.
struct Gradients {
  std::vector<float> dq, dk, dv, delta;
  /// The gradients of the variant's inputs, in the tile.func's order: fp32, sized as each f32 input (elements no
  /// score or sink reads are 0), empty for an i32 input.
  std::vector<std::vector<float>> dInputs{};
};

/// What a backward run did, for checks of a schedule's tile skipping.
struct BackwardStats {
  int64_t qTileVisits = 0; ///< Q tiles the main program's loops visited, over all its instances
};

/// Runs a backward module (one tile.func of each kind backward_preprocess, backward_main, backward_postprocess) as
/// its three kernels run: D per Q tile; per K/V tile of each query head, dK and dV in fp32 accumulators and dS·K added
/// into a zeroed fp32 dQ accumulator (instances in K/V-tile order: the deterministic order); dQ converted per Q tile.
/// dK and dV of a K/V head are the sums, in fp32 and in head order, of its query heads' parts, then converted (the
/// per-query-head partials a deterministic plan sums). Errors as run's. `stats`, when given, receives what the run did.
mlir::LogicalResult runBackward(mlir::ModuleOp module, const Problem &problem, const BackwardTensors &tensors,
                                Gradients &out, BackwardStats *stats = nullptr);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_INTERPRETER_H
