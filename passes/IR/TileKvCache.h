//===- TileKvCache.h - programs that read a KV cache ----------------------===//
//
// `tile.kv_cache` (a unit attribute of tile.func, set by the decode schedule's tile-decode-split-kv): the program's
// K and V may be a KV cache (flash_attn_with_kvcache), contiguous or paged, which the kernel parameters describe
// (KernelAbi.h's kvCache fields). It changes no op: each program instance's "seqlen_k" becomes its sequence's cached
// plus new keys, and the target's K/V tile copies find a key row through the block table of a paged cache. The CUDA
// printer also emits the append kernel (`<entry>_append`) that writes a call's new keys and values into the cache
// before the attention kernel runs. The interpreter has no cache: it runs such programs on plain K/V.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_PASSES_IR_TILEKVCACHE_H
#define FLASHTILE_PASSES_IR_TILEKVCACHE_H

namespace flashtile::tile {
inline constexpr const char *kKvCacheAttr = "tile.kv_cache";
} // namespace flashtile::tile

#endif // FLASHTILE_PASSES_IR_TILEKVCACHE_H
