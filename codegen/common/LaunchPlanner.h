//===- LaunchPlanner.h - the launch plan of a printed module -------------===//
//
// The CUDA printer knows the structure of the module it printed (a persistent kernel, K/V steps, a split key range
// with its combine kernel, a KV-cache append kernel, TMA descriptors); this turns those facts into the plan the
// runtime executes (flashtile/runtime/LaunchPlan.h), so that nothing of them reaches the runtime as a flag.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_COMMON_LAUNCHPLANNER_H
#define FLASHTILE_CODEGEN_COMMON_LAUNCHPLANNER_H

#include "flashtile/runtime/LaunchPlan.h"

#include <string>

namespace flashtile::codegen {

/// What the printer made of a program.
struct ModuleFacts {
  std::string entry; // the attention kernel
  int blockM = 0, blockN = 0, threads = 0, smemBytes = 0;
  bool tensorMaps = false;     // takes the TMA descriptors of Q, K, V (TileTarget::takesTensorMaps)
  int tensorMapSwizzle = 128;  // their boxes' swizzle span in bytes (TileTarget::tensorMapSwizzleBytes)
  bool persistent = false;     // tile.work_loop: about one block an SM looping over units of work
  bool dynamicWork = false;    // tile.work_loop dynamic: units of one Q tile taken from a zeroed counter
  bool kvSteps = false;        // tile.state_load: one launch per K/V tile, the state in a workspace between them
  bool packQueryHeads = false; // a block's rows are a K/V head's query heads x query rows
  std::string combineEntry;    // split key range: the kernel that merges the splits' partials
  int combineRows = 0, combineThreads = 0;
  std::string appendEntry; // KV cache: the kernel that appends new keys and values first
  int appendThreads = 0;
  int appendChunkElements = 0; // elements of K or V one append thread copies
  bool dependentLaunch = false; // the arch has programmatic dependent launch
  /// e4m3 (Fp8Abi.h): the prepass that writes V's tiles transposed, as the attention kernel's 8-bit P·V reads them,
  /// into a workspace (one block per key tile of blockN keys, K/V head and sequence), launched first.
  std::string transposeVEntry;
  int transposeVThreads = 0;
  /// Blocks are CTA pairs of a cluster (passes/IR/TileCtaPair.h): clusters of two along x over an even number of Q
  /// tiles, each CTA loading half of every K/V tile (the tensor maps' K and V boxes are blockN / 2 rows).
  bool ctaPair = false;
};

/// The plan of a module with these facts.
LaunchPlan planLaunches(const ModuleFacts &facts);

/// What the printer made of a backward module (docs/backward.md): one kernel per program.
struct BackwardFacts {
  std::string preprocessEntry, mainEntry, postprocessEntry;
  int blockM = 0, blockN = 0, threads = 0;
  int mainSmemBytes = 0;
  /// Gradients of the variant's f32 inputs: the reads whose terms the main kernel (tile.input_grad) and the
  /// preprocess (tile.sink_grad) reduce per block, and the kernel that sums the blocks' shares (empty: none).
  int mainInputTerms = 0, preprocessInputTerms = 0;
  std::string inputGradsEntry;
  /// The main kernel's threads: `threads` computing, and the family's roles beside them (0: `threads`).
  int mainThreads = 0;
  /// The main kernel takes the TMA descriptors of Q, K, V and dO (BackwardTarget::loadsInRole), boxes of blockM
  /// (Q, dO) and blockN (K, V) rows swizzled over tensorMapSwizzle bytes (BackwardTarget::tensorMapSwizzleBytes).
  bool tensorMaps = false;
  int tensorMapSwizzle = 0;
};

/// The backward's plan: D = rowsum(dO∘O) per Q tile, then one block per K/V tile of each (batch, query head) adding
/// into the zeroed fp32 dQ accumulator (and, under GQA, into the zeroed dK/dV accumulators), then dQ (and GQA's
/// dK/dV) converted per tile of blockM rows; with input gradients, one block summing the blocks' shares of them.
/// Deterministic calls get zeroed semaphores: one int per (batch, query head, Q tile) ordering the dQ adds, then,
/// under GQA, one per (batch, K/V head, K/V tile) ordering the dK/dV adds.
LaunchPlan planBackwardLaunches(const BackwardFacts &facts);

} // namespace flashtile::codegen

#endif // FLASHTILE_CODEGEN_COMMON_LAUNCHPLANNER_H
