//===- Passes.h - tile dialect passes -------------------------------------===//
#ifndef FLASHTILE_PASSES_TRANSFORMS_PASSES_H
#define FLASHTILE_PASSES_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "passes/IR/TileDialect.h"

namespace flashtile::tile {
#define GEN_PASS_DECL
#include "passes/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Transforms/Passes.h.inc"

/// tile-pipeline-q-loop's discardable attribute on a tile.q_loop (an i32, 2): the loop's loads, of its own tile, are
/// copied into one of two shared-memory buffers, tile i + 1's while tile i computes (Passes.td).
inline constexpr llvm::StringLiteral kQBuffersAttr = "tile.q_buffers";
/// `tile.key_warps` (an integer attribute of a backward tile.func, set by a schedule): the warps of the main program
/// split S's and dP's keys (and dQ's columns) this many ways, in warps / N row groups of query rows. Absent: split-Q
/// (every warp its own query rows against every key). The program's semantics do not change; the printer lays out
/// its registers by it (KernelShape::keyWarps), and a family that does not print the split refuses it.
inline constexpr llvm::StringLiteral kKeyWarpsAttr = "tile.key_warps";
/// A schedule's discardable attribute on a backward program (a unit attribute): the printer may keep a Q tile's GEMMs
/// in flight together and wait for each where its result is first read (KernelShape::gemmOverlap); the program's
/// semantics do not change.
inline constexpr llvm::StringLiteral kGemmOverlapAttr = "tile.gemm_overlap";
/// tile-bound-q-loop's attribute on a backward main program (a unit attribute): the variant's `may` rule lets every
/// query row see every key ([0, seqlen_k)), so every instance walks every Q tile, [0, cdiv(seqlen_q, blockM)), in one
/// segment. The printer may then walk them in another order (deterministic mode's rotated walk); the program's
/// semantics do not change.
inline constexpr llvm::StringLiteral kFullWalkAttr = "tile.full_walk";
/// A schedule's attribute on a backward main program with a load role (a unit attribute): in deterministic mode a full
/// walk (tile.full_walk) may be rotated (BackwardPrinter::rotatesWalk); the program's semantics do not change.
inline constexpr llvm::StringLiteral kRotatedWalkAttr = "tile.rotated_walk";
/// A schedule's attribute on a backward main program (a unit attribute): each Q tile's dQ terms leave through shared
/// memory, and a writer role of their own adds them into the fp32 accumulator (KernelShape::dqWriter); the program's
/// semantics do not change.
inline constexpr llvm::StringLiteral kDqWriterAttr = "tile.dq_writer";
/// With tile.dq_writer (an i32, present when above 1): how many warps of the producer warpgroup share each Q tile's dQ
/// adds (KernelShape::dqWriterWarps); the program's semantics do not change.
inline constexpr llvm::StringLiteral kDqWriterWarpsAttr = "tile.dq_writer_warps";
/// With tile.dq_writer (a unit attribute): the fp32 dQ accumulator's rows hold their 16-byte chunks XOR-permuted by the
/// row (chunk c of row i at c ^ (i % 8) within its 128 bytes), written so by the main kernel's one bulk reduce-add a Q
/// tile and read back by the postprocess (KernelShape::dqSwizzle); the program's semantics do not change.
inline constexpr llvm::StringLiteral kDqSwizzleAttr = "tile.dq_swizzle";
/// A schedule's attribute on a forward program (a unit attribute): the GEMMs' wgmma descriptors are made once a GEMM
/// and advanced by one 64-bit add a k16 step (ptxas: one UIADD3.64), instead of encoded from each step's address
/// (whose constant high word ptxas moves in again before every wgmma); the program's semantics do not change
/// (KernelShape::descAdvance).
inline constexpr llvm::StringLiteral kDescAdvanceAttr = "tile.desc_advance";
/// A schedule's attribute on a forward program (an i32, 2 or 4): the softmax's row maxima over a K/V tile are taken
/// in this many independent chains (n8 tiles nt % chains) and combined at the end, so that the exponentials wait for
/// fewer dependent max steps; the program's semantics do not change (KernelShape::maxChains).
inline constexpr llvm::StringLiteral kMaxChainsAttr = "tile.max_chains";
/// A schedule's attribute on a forward program with conditional rescaling (a unit attribute): a warp votes whether its
/// maxes move from each lane's own max over its keys, and takes the rows' quad maxima only where they moved; the
/// decision is the same, so the program's semantics do not change (KernelShape::laneVote).
inline constexpr llvm::StringLiteral kLaneVoteAttr = "tile.lane_vote";
/// A schedule's attribute on a forward program (a unit attribute): each wait for P·V is preceded by a branch the
/// compiler must keep, so that ptxas cannot hoist the wait above the softmax's exponentials; the program's semantics
/// do not change (KernelShape::latePvWait).
inline constexpr llvm::StringLiteral kLatePvWaitAttr = "tile.late_pv_wait";
/// With tile.dq_writer (a unit attribute): each whole Q tile's fp32 dQ accumulator is held in the computing threads'
/// fragment order (16-byte chunk j of thread t at float 4·(j·threads + t)), the order in which the threads store
/// their fragments into sDq (16-byte stores, no conflict) and the dQ writer adds it (one bulk reduce-add a tile); a
/// tile cut by seqlen_q keeps its rows, in sDq as in dq_accum (one bulk reduce-add too). The postprocess reads
/// either. The program's semantics do not change (KernelShape::dqFragments).
inline constexpr llvm::StringLiteral kDqFragmentsAttr = "tile.dq_fragments";
/// A schedule's attribute on a backward main program (a unit attribute): dK and dV leave through shared memory (the
/// tiles' buffers, free once the walk is over) in one bulk copy a row, issued by the warp holding the row; under
/// GQA/MQA the fp32 adds stay. The program's semantics do not change (KernelShape::stagedKv).
inline constexpr llvm::StringLiteral kDkvStagedAttr = "tile.dkv_staged";
/// With tile.dq_writer (a unit attribute): once the walk is over the writer waits only for its last adds' reads of
/// shared memory, not for the adds themselves (the grid's end makes them visible to the next kernel); deterministic
/// mode's turns still wait for every add. The program's semantics do not change (KernelShape::dqReadsOnly).
inline constexpr llvm::StringLiteral kDqReadsOnlyAttr = "tile.dq_reads_only";
/// A schedule's attribute on a backward main program whose computing warps add dQ themselves (a unit attribute): each
/// lane adds four consecutive floats of one row of dq_accum (a fragment pair's halves swapped between its two lanes)
/// instead of two pairs. The program's semantics do not change (KernelShape::dqAddV4).
inline constexpr llvm::StringLiteral kDqAddV4Attr = "tile.dq_add_v4";
/// With tile.load_warp (a unit attribute): the load warp brings V after the walk's first Q tile, on a barrier of its
/// own that the computing warps wait for before their first GEMM reading V. The program's semantics do not change
/// (KernelShape::lateV).
inline constexpr llvm::StringLiteral kLateVAttr = "tile.late_v";
/// Under the column split (a unit attribute): dQ's product in 64-column slices a warpgroup, each added before the next
/// is issued. The program's semantics do not change (KernelShape::dqSliced).
inline constexpr llvm::StringLiteral kDqSlicedAttr = "tile.dq_sliced";
/// A schedule's attribute on a backward main program with roles (a unit attribute): a load warp of the producer
/// warpgroup brings K and V, and each Q tile's Q, dO, LSE and D, into shared memory (TMA into a two-stage ring with
/// full and empty barriers), so the computing warps copy nothing (KernelShape::loadWarp); the program's semantics do
/// not change.
inline constexpr llvm::StringLiteral kLoadWarpAttr = "tile.load_warp";
/// A schedule's attribute on a backward main program whose warpgroups split the keys (a unit attribute): S and dP are
/// computed transposed (Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ: the K/V tile's keys on the MMA's rows, the Q tile's query rows on its
/// columns), so that Pᵀ and dSᵀ are in registers in the layout of the A operand of dV += Pᵀ·dO and dK += dSᵀ·Q, and
/// only dS goes through shared memory (for dQ) (KernelShape::swapScores; FA3's SdP_swapAB); the program's semantics do
/// not change.
inline constexpr llvm::StringLiteral kSwapScoresAttr = "tile.swap_scores";
/// A schedule's attribute on a backward main program whose warpgroups split the keys (a unit attribute): dK and dV are
/// accumulated transposed (dVᵀ += dOᵀ·P, dKᵀ += Qᵀ·dS: the head dim's columns on the MMA's rows, the warpgroup's keys
/// on its columns), so that a warpgroup's keys need not be an m64 of rows: K/V tiles of 96 keys at head dim 192,
/// 48 a warpgroup (KernelShape::swapKv; FA3's dKV_swapAB); the program's semantics do not change.
inline constexpr llvm::StringLiteral kSwapKvAttr = "tile.swap_kv";
/// A schedule's attribute on a backward main program whose load warp brings the Q tiles (a unit attribute, with
/// tile.load_warp and tile.early_dv): dO has one buffer of its own, with its own full and empty barriers, released as
/// soon as dV's GEMM (its last reader) landed, so that the next tile's dO loads under the rest of the iteration
/// (KernelShape::singleDo; FA3's and FA4's Stages_dO = 1 at head dim 192); the program's semantics do not change.
inline constexpr llvm::StringLiteral kSingleDoAttr = "tile.single_do";
/// A schedule's attribute on a backward main program whose load warp brings the Q tiles and whose warpgroups split the
/// Q tile's rows (a unit attribute): each warpgroup's rows of the ring's first Q and dO buffers are broadcast once
/// before the walk (KernelShape::ringRows); the program's semantics do not change.
inline constexpr llvm::StringLiteral kRingRowsAttr = "tile.ring_rows";
/// A schedule's attribute on a backward main program whose load warp brings the Q tiles and whose score tiles are
/// transposed (tile.swap_scores: dS is the one staged tile) (a unit attribute): dS is staged in two buffers, the one of
/// the ring's stage, so that a Q-tile iteration needs no barrier before it stages (the buffer it writes was last read
/// by the GEMMs of two iterations back, which every warpgroup waited for before the last iteration's staging barrier;
/// KernelShape::stagingRing; FA3's and FA4's PdS stages = 2); the program's semantics do not change.
inline constexpr llvm::StringLiteral kStagingRingAttr = "tile.staging_ring";
/// A schedule's attribute on a backward main program whose warpgroups split the keys, with tile.gemm_overlap (a unit
/// attribute): tile-pipeline-q-loop leaves dV's tile.dot_tn (A = P) where the program has it, after tile.probs, and
/// marks it tile.issue_early, so that its GEMM is issued once P is staged and runs under dS's math; the program's
/// semantics do not change.
inline constexpr llvm::StringLiteral kEarlyDvAttr = "tile.early_dv";
/// On a tile.dot_tn (a unit attribute, set by tile-pipeline-q-loop under tile.early_dv): issued where it stands, not
/// after dQ's product.
inline constexpr llvm::StringLiteral kIssueEarlyAttr = "tile.issue_early";
/// A schedule's attribute on a program with roles (an array of two i32): the registers a thread of the producer
/// warpgroup and of a computing warpgroup hold after setmaxnreg (KernelShape::producerRegs, consumerRegs).
inline constexpr llvm::StringLiteral kRoleRegistersAttr = "tile.role_registers";
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_TRANSFORMS_PASSES_H
