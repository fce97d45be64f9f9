//===- AsyncPrelude.h - mbarrier, TMA and setmaxnreg wrappers of sm90 and sm100 ===//
//
// The inline-PTX wrappers that the sm90 and sm100 families both print (codegen/ptx/README.md): the async-proxy fence,
// the mbarrier (a phase counter with arrivals and a transaction count), TMA's bulk tensor copies and setmaxnreg.
// Each text is printed inside the family's own namespace, where `smemAddress`, `Mbarrier` and `TensorMap` are the
// family's (PreludeSm90.h, PreludeSm100.h); the sm90 prelude prints them where they always stood (its CUDA
// byte-identical), the sm100 prelude in place of the copies it had (the same PTX with the default .release / .acquire
// .cta semantics written out before).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_PTX_ASYNCPRELUDE_H
#define FLASHTILE_CODEGEN_PTX_ASYNCPRELUDE_H

#include <string_view>

namespace flashtile::codegen::ptx {

/// fence::proxyAsync: generic-proxy shared-memory writes ordered before later async-proxy accesses.
inline constexpr std::string_view kProxyFenceText = R"cuda(// ---- fences ----
namespace fence {
// Orders this thread's generic-proxy shared-memory writes before later async-proxy accesses (a TMA store or a
// wgmma reading what threads wrote), and async writes before later generic reads.
__device__ __forceinline__ void proxyAsync() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
} // namespace fence
)cuda";

/// namespace mbarrier: init, initFence, invalidate, arrive, arriveExpectTx, expectTx, tryWait, wait.
inline constexpr std::string_view kMbarrierText = R"cuda(// ---- mbarrier: a phase counter with an arrival count and a transaction (byte) count ----
// A phase completes when `count` arrivals were made and every expected TMA byte landed; waiters name the phase
// they wait for by its parity (0, 1, 0, ...), so a ring slot's consumer flips its parity each lap.
namespace mbarrier {
// Sets the arrival count of every phase; one thread, before any use.
__device__ __forceinline__ void init(Mbarrier *bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddress(bar)), "r"(count) : "memory");
}
// Makes the initializations visible to the async proxy (TMA's complete_tx) and the cluster; the initializing thread
// calls it once, before the block-wide barrier that publishes the mbarriers to the other threads.
__device__ __forceinline__ void initFence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
// Invalidates a barrier so its shared memory can be reused for something else.
__device__ __forceinline__ void invalidate(Mbarrier *bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(smemAddress(bar)) : "memory");
}
// One arrival (release semantics: this thread's earlier shared-memory accesses happen before the phase completes).
__device__ __forceinline__ void arrive(Mbarrier *bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smemAddress(bar)) : "memory");
}
// One arrival that also raises the phase's expected transaction count by `bytes`: the producer calls it once per
// slot fill, before issuing the TMA loads whose complete_tx will deliver those bytes.
__device__ __forceinline__ void arriveExpectTx(Mbarrier *bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smemAddress(bar)), "r"(bytes)
               : "memory");
}
// Raises the expected transaction count without arriving (a second producer thread adding its loads' bytes).
__device__ __forceinline__ void expectTx(Mbarrier *bar, unsigned bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(smemAddress(bar)), "r"(bytes)
               : "memory");
}
// One probe (the hardware may suspend the thread for a while inside it): true once the phase with this parity has
// completed. Acquire semantics: the slot's bytes are visible to this thread afterwards.
__device__ __forceinline__ bool tryWait(Mbarrier *bar, unsigned parity) {
  unsigned done;
  asm volatile("{\n"
               ".reg .pred p;\n"
               "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
               "selp.u32 %0, 1, 0, p;\n"
               "}\n"
               : "=r"(done)
               : "r"(smemAddress(bar)), "r"(parity)
               : "memory");
  return done != 0;
}
// Blocks until the phase with this parity has completed.
__device__ __forceinline__ void wait(Mbarrier *bar, unsigned parity) {
  while (!tryWait(bar, parity)) {
  }
}
} // namespace mbarrier
)cuda";

/// namespace tma: prefetchDescriptor, load1d-load5d (complete_tx on an mbarrier), store2d-store5d, storeCommit,
/// storeWaitRead (and what else the text holds).
inline constexpr std::string_view kTmaText = R"cuda(// ---- TMA: bulk tensor copies between global memory (through a TensorMap) and shared memory ----
// Coordinates are element indices, innermost dimension first, and may run past the tensor: loads zero-fill what
// lies outside it and stores skip it. A load's bytes are counted on `bar` (complete_tx); a swizzled box's shared
// memory must be aligned to its swizzle atom (Swizzle<S>::kAtomBytes: 1024 bytes for 128-byte swizzle).
namespace tma {
// Fetches the descriptor into the constant cache ahead of the first copy.
__device__ __forceinline__ void prefetchDescriptor(const TensorMap *map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}
__device__ __forceinline__ void load1d(void *dst, const TensorMap *map, Mbarrier *bar, int c0) {
  asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n"
               ::"r"(smemAddress(dst)), "l"(map), "r"(smemAddress(bar)), "r"(c0)
               : "memory");
}
__device__ __forceinline__ void load2d(void *dst, const TensorMap *map, Mbarrier *bar, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(smemAddress(dst)), "l"(map), "r"(smemAddress(bar)), "r"(c0),
               "r"(c1)
               : "memory");
}
__device__ __forceinline__ void load3d(void *dst, const TensorMap *map, Mbarrier *bar, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(smemAddress(dst)), "l"(map), "r"(smemAddress(bar)),
               "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void load4d(void *dst, const TensorMap *map, Mbarrier *bar, int c0, int c1, int c2,
                                       int c3) {
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(smemAddress(dst)), "l"(map), "r"(smemAddress(bar)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void load5d(void *dst, const TensorMap *map, Mbarrier *bar, int c0, int c1, int c2, int c3,
                                       int c4) {
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];\n" ::"r"(smemAddress(dst)), "l"(map), "r"(smemAddress(bar)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
// Stores read shared memory asynchronously: fence::proxyAsync() after the threads' writes and a block or named
// barrier before the issuing thread's store; storeCommit() closes a group; storeWaitRead<N>() returns once at most N
// groups still read their shared memory (before it is overwritten, and before the block exits), storeWait<N>() once
// at most N groups have writes outstanding.
__device__ __forceinline__ void store2d(const TensorMap *map, const void *src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map),
               "r"(smemAddress(src)), "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void store3d(const TensorMap *map, const void *src, int c0, int c1, int c2) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(map),
               "r"(smemAddress(src)), "r"(c0), "r"(c1), "r"(c2)
               : "memory");
}
__device__ __forceinline__ void store4d(const TensorMap *map, const void *src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(map),
               "r"(smemAddress(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void store5d(const TensorMap *map, const void *src, int c0, int c1, int c2, int c3,
                                        int c4) {
  asm volatile("cp.async.bulk.tensor.5d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5, %6}], [%1];\n" ::"l"(map),
               "r"(smemAddress(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
               : "memory");
}
__device__ __forceinline__ void storeCommit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void storeWaitRead() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
template <int kPending>
__device__ __forceinline__ void storeWait() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(kPending) : "memory");
}
} // namespace tma
)cuda";

/// setmaxnreg (inside the family's namespace warpgroup): decreaseRegisters<kRegs>, increaseRegisters<kRegs>.
inline constexpr std::string_view kSetmaxnregText = R"cuda(// setmaxnreg: the warpgroup gives registers back to the block's pool (a TMA producer) or takes them (consumers
// that hold accumulators). Every warp of the warpgroup executes the same one; kRegs is a multiple of 8 in
// [24, 256], and the kernel's register count at launch must be fixed (__launch_bounds__ with min blocks 1).
template <int kRegs>
__device__ __forceinline__ void decreaseRegisters() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void increaseRegisters() {
  static_assert(kRegs >= 24 && kRegs <= 256 && kRegs % 8 == 0, "setmaxnreg: a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
)cuda";

} // namespace flashtile::codegen::ptx

#endif // FLASHTILE_CODEGEN_PTX_ASYNCPRELUDE_H
