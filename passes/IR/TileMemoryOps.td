//===- TileMemoryOps.td - the memory layer: TMEM, buffers, commits, channels ===//
//
// Where the tiles of a warp-specialized program live and how its roles hand them over, as values and ops:
//   - tensor memory (SM100's TMEM) is declared (`tile.tmem`), allocated and freed by a role (`tile.tmem_alloc`,
//     `tile.tmem_free`), and cut into buffers of named tiles (`tile.tmem_buffer`: S, P over S, O);
//   - shared-memory and register buffers of tiles and row statistics (`tile.smem_buffer`: a rescale factor, m and l);
//   - MMAs on buffers that complete by a commit on a barrier (`tile.mma_qk`, `tile.mma_pv`, `tile.mma_commit`),
//     beside the token-and-wait-group MMAs of tile.qk / tile.pv;
//   - channels between roles (`tile.channel`: a full/empty barrier pair for a buffer: S ready, P ready, alpha
//     ready, O rescaled), waited and arrived on with tile.barrier_wait / tile.barrier_arrive;
//   - reads and writes of buffers by a role's threads (`tile.mem_load`, `tile.mem_store`) and the empty state split
//     in two (`tile.init_stats`, `tile.init_acc`), so m and l live in one role and O in another.
// The interpreter checks the protocol these ops imply (interpreter/MemoryProtocol.h): no use of tensor memory before
// its allocation reached the role or after its free, no read of an MMA's result before its commit landed, no write
// of a buffer an MMA in flight still reads, no thread access to an accumulator an MMA in flight writes.
// Included at the end of TileOps.td (one generated op and type list for the dialect).
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_TILE_MEMORY_OPS
#define FLASHTILE_TILE_MEMORY_OPS

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

def Tile_TmemType : Tile_Type<"Tmem", "tmem"> {
  let summary = "a block's tensor memory (SM100 TMEM): 128 lanes x `columns` 32-bit cells";
  let description = [{
    `!tile.tmem<512>`: declared by `tile.tmem`, allocated by one role with `tile.tmem_alloc` and freed by it with
    `tile.tmem_free`; `tile.tmem_buffer` cuts buffers out of it at column offsets. `columns` is a power of two in
    [32, 512] (tcgen05.alloc's rule).
  }];
  let parameters = (ins "int64_t":$columns);
  let assemblyFormat = "`<` $columns `>`";
  let genVerifyDecl = 1;
}

def Tile_MemBufType : Tile_Type<"MemBuf", "mbuf"> {
  let summary = "a buffer of one named tile or of row statistics, in a memory space";
  let description = [{
    `!tile.mbuf<tensor<128x64xf32>, tensor>` (S in tensor memory), `!tile.mbuf<tensor<128x64xbf16>, tensor>` (P),
    `!tile.mbuf<tensor<128xf32>, shared>` (a row's rescale factor), `!tile.mbuf<!tile.stats<128>, registers>` (m
    and l, private to a role). Made by `tile.tmem_buffer` (space `tensor`) or `tile.smem_buffer` (`shared`,
    `registers`); read and written by `tile.mem_load` / `tile.mem_store` and by the MMAs on buffers.
  }];
  let parameters = (ins "::mlir::Type":$tile, "::flashtile::tile::MemorySpace":$space);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The tile as a ranked tensor, or null for row statistics.
    ::mlir::RankedTensorType getTensor() const { return ::llvm::dyn_cast<::mlir::RankedTensorType>(getTile()); }
    /// Rows of the tile (or of the statistics).
    int64_t getRows() const;
    /// 32-bit tensor-memory columns the tile takes (a 16-bit tile packs two values a column).
    int64_t tmemColumns() const;
  }];
}

def Tile_MemTile : AnyTypeOf<[Tile_TileAny, Tile_StatsType, Tile_AccType]>;

//===----------------------------------------------------------------------===//
// Tensor memory
//===----------------------------------------------------------------------===//

def Tile_TmemOp : Tile_Op<"tmem", [Pure]> {
  let summary = "declares the block's tensor memory; a role allocates it with tile.tmem_alloc";
  let description = [{
    `%tmem = tile.tmem : !tile.tmem<512>`, at the top level of a tile.func. Nothing is allocated here: buffers cut
    from it (`tile.tmem_buffer`) may be used only by a role that knows the allocation happened (it ran
    `tile.tmem_alloc`, or waited on a barrier phase the allocating role completed after it) and before
    `tile.tmem_free`.
  }];
  let results = (outs Tile_TmemType:$tmem);
  let assemblyFormat = "attr-dict `:` qualified(type($tmem))";
  let hasVerifier = 1;
}

def Tile_TmemAllocOp : Tile_Op<"tmem_alloc", [MemoryEffects<[MemAlloc]>]> {
  let summary = "allocates the block's tensor memory (tcgen05.alloc by one warp of the role)";
  let description = [{
    `tile.tmem_alloc %tmem : !tile.tmem<512>`, inside a tile.role, once. The allocating role frees it too
    (`tile.tmem_free`): on SM100 the warp that allocates deallocates.
  }];
  let arguments = (ins Tile_TmemType:$tmem);
  let assemblyFormat = "$tmem attr-dict `:` qualified(type($tmem))";
  let hasVerifier = 1;
}

def Tile_TmemFreeOp : Tile_Op<"tmem_free", [MemoryEffects<[MemFree]>]> {
  let summary = "frees the block's tensor memory (tcgen05.dealloc)";
  let description = [{
    `tile.tmem_free %tmem : !tile.tmem<512>`, in the role that allocated it, once every role is done with it: the
    freeing role must know that every access to it (threads' loads and stores, MMAs) completed.
  }];
  let arguments = (ins Tile_TmemType:$tmem);
  let assemblyFormat = "$tmem attr-dict `:` qualified(type($tmem))";
  let hasVerifier = 1;
}

def Tile_TmemBufferOp : Tile_Op<"tmem_buffer", [Pure]> {
  let summary = "a buffer of tensor memory: a tile at a column offset (row i in lane i)";
  let description = [{
    ```mlir
    %s0 = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xf32>, tensor>
    %p0 = tile.tmem_buffer %tmem {column = 0} : !tile.tmem<512> -> !tile.mbuf<tensor<128x64xbf16>, tensor>
    ```
    A 32-bit tile of C columns takes C columns, a 16-bit one C / 2 (P written over S: the same column, half the
    columns). Buffers whose columns overlap alias: a write to one clobbers the other, and the interpreter checks the
    protocol on columns, not on buffers.
  }];
  let arguments = (ins Tile_TmemType:$tmem, I64Attr:$column);
  let results = (outs Tile_MemBufType:$buffer);
  let assemblyFormat = "$tmem attr-dict `:` qualified(type($tmem)) `->` qualified(type($buffer))";
  let hasVerifier = 1;
}

def Tile_SmemBufferOp : Tile_Op<"smem_buffer", [MemoryEffects<[MemAlloc]>]> {
  let summary = "a buffer of a tile or of row statistics in shared memory (between roles) or registers (one role's)";
  let description = [{
    `%alpha0 = tile.smem_buffer "alpha0" : !tile.mbuf<tensor<128xf32>, shared>` (a row's rescale factor, from a
    softmax role to the correction role), `%m0 = tile.smem_buffer "stats0" : !tile.mbuf<!tile.stats<128>, registers>`
    (m and l, kept by one role across its loop segments). A registers buffer belongs to the first role that
    touches it: another role's access is an error.
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs Tile_MemBufType:$buffer);
  let assemblyFormat = "$name attr-dict `:` qualified(type($buffer))";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Channels between roles
//===----------------------------------------------------------------------===//

def Tile_ChannelOp : Tile_Op<"channel", [MemoryEffects<[MemAlloc]>]> {
  let summary = "a full/empty barrier pair handing buffers from one role to another";
  let description = [{
    ```mlir
    %pFull, %pEmpty = tile.channel "p_ready0" (%p0 : !tile.mbuf<tensor<128x64xbf16>, tensor>)
        {full_arrivals = 1, empty_arrivals = 1} : !tile.barrier<slots = 1>, !tile.barrier<slots = 1>
    ```
    Phase n of the full barrier completes after `full_arrivals` arrivals at position n (`tile.barrier_arrive
    %full[%n]` by threads, or `tile.mma_commit %full[%n]` once the issuing role's MMAs completed): the guarded
    buffers hold their n-th content. `tile.barrier_wait %full[%n]` waits for it. The empty barrier says the content
    was consumed: `tile.barrier_wait %empty[%n]` waits until position n - 1 was released by `empty_arrivals`
    arrivals (position 0 passes at once). A wait hands over what the arriving roles knew (their accesses, the
    MMAs a commit covered, the allocation of tensor memory): that is all the interpreter lets a role rely on.
    The guarded buffers document the hand-over; a channel may guard none (a signal, e.g. "tensor memory
    allocated").
  }];
  let arguments = (ins StrAttr:$name, Variadic<Tile_MemBufType>:$guarded, I64Attr:$full_arrivals,
                       I64Attr:$empty_arrivals);
  let results = (outs Tile_BarrierType:$full, Tile_BarrierType:$empty);
  let assemblyFormat = [{
    $name (`(` $guarded^ `:` qualified(type($guarded)) `)`)? attr-dict `:` type($full) `,` type($empty)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// MMAs on buffers, completed by a commit
//===----------------------------------------------------------------------===//

def Tile_MmaQkOp : Tile_Op<"mma_qk", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "S = Q·Kᵀ into a tensor-memory buffer, asynchronously; completes by tile.mma_commit";
  let description = [{
    `tile.mma_qk %q, %k into %s0 {q_row_offset = 128} : tensor<256x128xbf16>, tensor<64x128xbf16>,
    !tile.mbuf<tensor<128x64xf32>, tensor>`: the rows [q_row_offset, q_row_offset + rows of S) of Q (one Q tile of
    the block's) times K's tile, fp32, into S (tcgen05.mma SS: Q and K from their shared-memory slots). Nothing
    may read S, and no thread may write the columns it writes, before a commit that covers it completed and the
    reader learned so (a wait on the commit's barrier phase, directly or through other roles).
  }];
  let arguments = (ins Tile_TileLowp:$q, Tile_TileLowp:$k, Tile_MemBufType:$s,
                       DefaultValuedAttr<I64Attr, "0">:$q_row_offset);
  let assemblyFormat = "$q `,` $k `into` $s attr-dict `:` type($q) `,` type($k) `,` qualified(type($s))";
  let hasVerifier = 1;
}

def Tile_MmaPvOp : Tile_Op<"mma_pv", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "O += P·V with P and O in tensor memory, asynchronously; completes by tile.mma_commit";
  let description = [{
    `tile.mma_pv %p0, %v into %o0 : !tile.mbuf<tensor<128x64xbf16>, tensor>, tensor<64x128xbf16>,
    !tile.mbuf<tensor<128x128xf32>, tensor>` (tcgen05.mma TS: P from tensor memory, V from its slot). It reads P
    until a commit covering it completed: writing P's columns before then (the next Q·Kᵀ into S, where P lives) is a
    hazard, as is a thread's access to O (the correction role's rescale) before then.
  }];
  let arguments = (ins Tile_MemBufType:$p, Tile_TileLowp:$v, Tile_MemBufType:$o);
  let assemblyFormat = "$p `,` $v `into` $o attr-dict `:` qualified(type($p)) `,` type($v) `,` qualified(type($o))";
  let hasVerifier = 1;
}

def Tile_MmaCommitOp : Tile_Op<"mma_commit", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "one arrival on a barrier phase once every MMA this role issued so far completed (tcgen05.commit)";
  let description = [{
    `tile.mma_commit %sFull[%n] : !tile.barrier<slots = 1>`: a channel's full barrier (S ready) or a ring's empty
    barrier (the K/V slot the MMAs read is free again). Whoever waits on the phase may read what the covered MMAs
    wrote and overwrite what they read.
  }];
  let arguments = (ins Tile_BarrierType:$barrier, I32:$position);
  let assemblyFormat = "$barrier `[` $position `]` attr-dict `:` type($barrier)";
}

//===----------------------------------------------------------------------===//
// Threads' accesses to buffers, and the empty state in two parts
//===----------------------------------------------------------------------===//

def Tile_MemLoadOp : Tile_Op<"mem_load", [MemoryEffects<[MemRead]>]> {
  let summary = "the calling role's threads read a buffer (tcgen05.ld from tensor memory, ld.shared, registers)";
  let description = [{
    `%s = tile.mem_load %s0 : !tile.mbuf<tensor<128x64xf32>, tensor> -> tensor<128x64xf32>`; an fp32 tile may be
    read as an accumulator of its shape (`-> !tile.acc<128x128, tensor>`, O for tile.rescale and tile.finalize).
  }];
  let arguments = (ins Tile_MemBufType:$buffer);
  let results = (outs Tile_MemTile:$value);
  let assemblyFormat = "$buffer attr-dict `:` qualified(type($buffer)) `->` qualified(type($value))";
  let hasVerifier = 1;
}

def Tile_MemStoreOp : Tile_Op<"mem_store", [MemoryEffects<[MemWrite]>]> {
  let summary = "the calling role's threads write a buffer (tcgen05.st into tensor memory, st.shared, registers)";
  let description = [{
    `tile.mem_store %p into %p0 : tensor<128x64xbf16>, !tile.mbuf<tensor<128x64xbf16>, tensor>`; an accumulator
    may be stored into an fp32 buffer of its shape.
  }];
  let arguments = (ins Tile_MemTile:$value, Tile_MemBufType:$buffer);
  let assemblyFormat = "$value `into` $buffer attr-dict `:` qualified(type($value)) `,` qualified(type($buffer))";
  let hasVerifier = 1;
}

def Tile_InitStatsOp : Tile_Op<"init_stats", [Pure]> {
  let summary = "empty row statistics: m = -inf, l = 0 (the softmax role's half of tile.init_state)";
  let description = [{ `%m0 = tile.init_stats : !tile.stats<128>` }];
  let results = (outs Tile_StatsType:$stats);
  let assemblyFormat = "attr-dict `:` qualified(type($stats))";
}

def Tile_InitAccOp : Tile_Op<"init_acc", [Pure]> {
  let summary = "an empty accumulator: acc = 0 (the half of tile.init_state that the role owning O runs)";
  let description = [{
    `%o0 = tile.init_acc : !tile.acc<128x128, tensor>`, stored into O's tensor-memory buffer by the correction
    role before the first P·V accumulates into it.
  }];
  let results = (outs Tile_AccType:$acc);
  let assemblyFormat = "attr-dict `:` qualified(type($acc))";
}

#endif // FLASHTILE_TILE_MEMORY_OPS
