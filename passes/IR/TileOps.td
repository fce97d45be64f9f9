//===- TileOps.td - tile dialect operations ------------------------------===//
#ifndef FLASHTILE_TILE_OPS
#define FLASHTILE_TILE_OPS

include "passes/IR/TileDialect.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

class Tile_Op<string mnemonic, list<Trait> traits = []> : Op<Tile_Dialect, mnemonic, traits>;

def Tile_TileF32 : RankedTensorOf<[F32]>;
// Tiles of a program's dtype: f16, bf16, or f8E4M3FN (FP8 e4m3, forward programs only: docs/fp8.md).
def Tile_TileLowp : RankedTensorOf<[F16, BF16, F8E4M3FN]>;
def Tile_TileAny : RankedTensorOf<[F16, BF16, F8E4M3FN, F32]>;
/// What a K/V loop carries from one iteration to the next besides the state: tiles and tokens.
def Tile_Carried : AnyTypeOf<[AnyRankedTensor, Tile_TokenType]>;

//===----------------------------------------------------------------------===//
// Program structure
//===----------------------------------------------------------------------===//

def Tile_FuncOp : Tile_Op<"func", [IsolatedFromAbove, Symbol, SingleBlock, NoTerminator]> {
  let summary = "a tile program: what one program instance computes for its tile";
  let description = [{
    `kind` names what the program computes (passes/IR/ProgramKinds.h; "forward" when omitted): the kind's
    verifier runs in `tile-verify-program`. A forward program's body runs once per (batch, head, Q tile). Before
    scheduling the Q tile is the whole sequence; after `tile-apply-schedule` it is `blockM` rows. `params` names the variant's numbers (kernel arguments), `inputs`
    its extra device arrays (`#tile.input<"slopes" : f32>`, read with `tile.input`; omitted when empty).
    `dtype` is the element type of Q, K and V: f16, bf16, or f8E4M3FN (FP8 e4m3; forward programs only). An
    f8E4M3FN program stores O in bf16 (`getOutputType`) and reads the call's descales (docs/fp8.md): its softmax
    scale, wherever the program uses it (`tile.scale`, `fold_scale`, `tile.softmax_scale`), is softmax_scale ·
    q_descale[b][h_kv] · k_descale[b][h_kv], and `tile.finalize` multiplies O by v_descale[b][h_kv].
    ```mlir
    tile.func @attention attributes {dtype = bf16, head_dim = 128 : i64, head_dim_v = 128 : i64,
                                     variant = "causal", params = []} {
      %q = tile.load q : tensor<?x128xbf16>
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttr:$dtype, I64Attr:$head_dim, I64Attr:$head_dim_v,
                       StrAttr:$variant, StrArrayAttr:$params,
                       OptionalAttr<Tile_ScheduleAttr>:$schedule, OptionalAttr<Tile_TargetAttr>:$target,
                       DefaultValuedAttr<TypedArrayAttrBase<Tile_InputAttr, "variant inputs">, "{}">:$inputs,
                       DefaultValuedAttr<StrAttr, "\"forward\"">:$kind);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword custom<TileBody>($body)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBodyBlock() { return getBody().front(); }
    /// Index of a variant parameter in FlashtileFwdParams::variantParams, or -1.
    int64_t paramIndex(::llvm::StringRef name);
    /// Index of a variant input in FlashtileFwdParams::inputs, or -1.
    int64_t inputIndex(::llvm::StringRef name);
    /// The element type O is stored in: bf16 for an f8E4M3FN program (as flash-attn 3's FP8 forward), else the
    /// dtype.
    ::mlir::Type getOutputType();
  }];
}

def Tile_YieldOp : Tile_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["KvRangeOp", "ScoreModOp", "MaskOp", "KvLoopOp", "FinalizeOp", "RoleOp", "KvWalkOp",
                 "StoreSplitOp", "WorkLoopOp", "QLoopOp", "ScoreGradOp", "InputGradOp", "SinkGradOp"]>]> {
  let summary = "ends a tile region, yielding its values";
  let description = [{ `tile.yield %a, %b : i32, i32` }];
  let arguments = (ins Variadic<AnyType>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
}

def Tile_DimOp : Tile_Op<"dim", [Pure]> {
  let summary = "a problem size, read from the kernel arguments";
  let description = [{
    `%sk = tile.dim seqlen_k`: one of `batch`, `heads_q`, `heads_kv`, `seqlen_q`, `seqlen_k`, `key_offset`,
    `split_begin`, `split_end`, `kv_step`, `batch_index`, `head_index`, `kv_tile`. `seqlen_q` and `seqlen_k` are the lengths of this program instance's own sequence: with packed sequences
    (varlen, cu_seqlens) each sequence has its own, so masks and KV-range rules (e.g. causal's bottom-right
    alignment) and the bounds of loads and stores follow that sequence. `batch` is the number of sequences.
    `key_offset` is the row of the sequence's first key among all sequences' keys: b·seqlen_k dense,
    cu_seqlens_k[b] varlen (clamped to [0, total_k] like the sequence's K rows); a per-key input array indexed
    key_offset + kv is (B, Sk) dense and (total_k) varlen. A score_mod or mask that reads such an array is only
    given keys of the sequence: the CUDA printer passes a tile's padding keys (past seqlen_k, masked either way)
    as key seqlen_k - 1.
    `split_begin` and `split_end` are the keys [split_begin, split_end) of this program instance's split of the
    key range (split-KV, inserted by the decode schedule's tile-decode-split-kv): whole K/V tiles, [0, 0) for a
    split past the sequence's end, [0, seqlen_k) when the walk is not split.
    `kv_step` is the K/V tile of this launch in a program launched once per K/V tile (`tile.state_load`); 0 in
    other programs. `batch_index` and `head_index` are the program instance's batch entry and query head;
    `kv_tile` is the K/V tile a backward_main instance owns (0 in other programs).
    `q_offset`, `k_offset`, `seqlen_q_global`, `seqlen_k_global`, `key_offset_global`, `head_offset`,
    `heads_q_global` and `heads_kv_global` place a program compiled with position offsets in the larger problem it
    is a block of (passes/IR/TilePositions.h): tile-offset-positions makes the hooks read them.
  }];
  let arguments = (ins Tile_DimAttr:$dim);
  let results = (outs I32:$result);
  let assemblyFormat = "`` $dim attr-dict";
}

def Tile_ParamOp : Tile_Op<"param", [Pure]> {
  let summary = "a variant's number (softcap, window size, ...), passed as a kernel argument";
  let description = [{ `%cap = tile.param "cap"` reads the parameter declared in the enclosing `tile.func`'s `params`. }];
  let arguments = (ins StrAttr:$name);
  let results = (outs F32:$result);
  let assemblyFormat = "$name attr-dict";
  let hasVerifier = 1;
}

def Tile_InputOp : Tile_Op<"input", [Pure]> {
  let summary = "an element of a variant's extra input array (ALiBi slopes, sinks, document ids, ...)";
  let description = [{
    Reads element `index` of the input declared in the enclosing `tile.func`'s `inputs`, with the element type
    declared there. The array is a kernel argument (a device pointer); the kernel does not know its length, so
    the index the variant computes defines the shape the caller must pass.
    ```mlir
    %slope = tile.input "slopes"[%h] : f32
    ```
  }];
  let arguments = (ins StrAttr:$name, I32:$index);
  let results = (outs AnyTypeOf<[F32, I32]>:$result);
  let assemblyFormat = "$name `[` $index `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Tile_KvRangeOp : Tile_Op<"kv_range", []> {
  let summary = "the variant's KV-range rule for the Q tile this instance owns";
  let description = [{
    The region receives the first and last query row of the Q tile (unaligned indices), its batch entry and
    query head, and yields a key range [lo, hi) (which may read variant inputs, e.g. per-token document starts). `may`: keys
    outside can never be attended by any row of the tile, so their tiles are skipped. `full`: every row attends
    every key inside, so tiles inside need no mask. Schedules clamp
    both to [0, seqlen_k) and derive loop segments from them. The op declares no memory effects on purpose:
    its results are unused until a schedule splits the loop, and it must survive canonicalization until then.
    ```mlir
    %lo, %hi = tile.kv_range may {
    ^bb0(%first: i32, %last: i32, %b: i32, %h: i32):
      ...
      tile.yield %c0, %end : i32, i32
    }
    ```
  }];
  let arguments = (ins Tile_RangeKindAttr:$kind);
  let results = (outs I32:$lo, I32:$hi);
  let regions = (region SizedRegion<1>:$rule);
  let assemblyFormat = "`` $kind attr-dict-with-keyword custom<TileRegion>($rule)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Whether the rule's lower bound is the constant `key` for every Q tile (e.g. 0 for causal masks).
    bool lowerBoundIs(int64_t key);
    /// Whether the rule's upper bound depends on the block's query rows (its first two region arguments),
    /// e.g. causal masks: later Q tiles then walk more keys.
    bool upperBoundFollowsRows();
  }];
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Tile_LoadOp : Tile_Op<"load", [MemoryEffects<[MemRead]>, AttrSizedOperandSegments]> {
  let summary = "reads a tile of a named tensor (q, k, v; the backward's o, do, lse, delta, dq_accum)";
  let description = [{
    `tile.load q` reads this instance's Q tile; `tile.load k[%j]` / `tile.load v[%j]` read K/V tile `j` (rows
    j·N .. j·N+N-1 of the key sequence, where N is the tile's leading dimension). Rows past the sequence read
    as zero; LSE's as -inf (a row that saw no key, whose tile.probs are 0). Which tensors a program reads, and which of them are the instance's own tile (no index), is its kind's
    (passes/IR/ProgramKinds.h): a backward main program owns a K/V tile and reads `tile.load q[%i]`,
    `tile.load do[%i]`, `tile.load lse[%i] : tensor<64xf32>` and `tile.load delta[%i]` per Q tile. q, k, v, o and
    do are tiles of the program's dtype; lse and delta fp32 rows (rank 1); dq_accum an fp32 tile. A pipelined program reads the tile from the shared-memory slot an asynchronous copy filled:
    `tile.load k[%j] from %slot` (the copy's token must have been waited on).
    `tile.load k[%j] from %slot if %valid`: when the predicate is false there is no tile j (the pipelined walk
    looked one tile past its end); the result is unspecified, a target may read a stale buffer, and nothing
    computed from it may reach the output (the interpreter gives NaNs, so a leak shows).
  }];
  let arguments = (ins Tile_OperandAttr:$operand, Optional<I32>:$index, Optional<Tile_SlotType>:$slot,
                       Optional<I1>:$pred);
  let results = (outs Tile_TileAny:$result);
  let assemblyFormat = [{
    `` $operand (`[` $index^ `]`)? (`from` $slot^ `:` type($slot))? (`if` $pred^)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Asynchrony: shared-memory buffers, slots, copies that return tokens, waits that consume them
//===----------------------------------------------------------------------===//

def Tile_BufferOp : Tile_Op<"buffer", [MemoryEffects<[MemAlloc]>]> {
  let summary = "allocates the shared-memory ring of one operand (placed by a schedule's pipeline pass)";
  let description = [{
    `%kbuf = tile.buffer k : !tile.buffer<tensor<64x128xbf16>, slots = 2>`: `slots` tiles of K in shared memory.
    Q's buffer has one slot. Its tile type is the operand's scheduled tile.
  }];
  let arguments = (ins Tile_OperandAttr:$operand);
  let results = (outs Tile_BufferType:$buffer);
  let assemblyFormat = "`` $operand attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def Tile_SlotOp : Tile_Op<"slot", [Pure, TypesMatchWith<"the slot holds the buffer's tiles", "buffer", "slot",
    "::flashtile::tile::SlotType::get($_self.getContext(), ::llvm::cast<::flashtile::tile::BufferType>($_self).getTile())">]> {
  let summary = "selects a slot of a buffer: tile j's slot is j mod slots";
  let description = [{
    `%s = tile.slot %kbuf[%j] : !tile.buffer<tensor<64x128xbf16>, slots = 2>` is slot j mod 2 (j may be negative
    past the walk's end: the slot is then ((j mod 2) + 2) mod 2); `tile.slot %qbuf` is a one-slot buffer's slot.
  }];
  let arguments = (ins Tile_BufferType:$buffer, Optional<I32>:$index);
  let results = (outs Tile_SlotType:$slot);
  let assemblyFormat = "$buffer (`[` $index^ `]`)? attr-dict `:` type($buffer)";
  let hasVerifier = 1;
}

def Tile_CopyAsyncOp : Tile_Op<"copy_async", [MemoryEffects<[MemRead, MemWrite]>, AttrSizedOperandSegments]> {
  let summary = "starts an asynchronous global-to-shared copy of a tile into a slot; returns its token";
  let description = [{
    `%t = tile.copy_async k[%j] into %slot if %valid : !tile.slot<...>` starts copying K tile `j` into `%slot`;
    nothing is copied when the optional predicate is false (the token then completes at once). The slot's contents
    are undefined until a `tile.wait` consumes `%t`, and the slot must not be read by any thread while the copy is
    in flight. `... into %slot arrive %full[%i]` (a TMA copy) also completes the phase of ring position `%i` of
    the slot's "full" barrier with the tile's bytes: consumers wait for that phase instead of the token.
  }];
  let arguments = (ins Tile_OperandAttr:$operand, Optional<I32>:$index, Tile_SlotType:$slot, Optional<Tile_BarrierType>:$full,
                       Optional<I32>:$position, Optional<I1>:$pred);
  let results = (outs Tile_TokenType:$token);
  let assemblyFormat = [{
    `` $operand (`[` $index^ `]`)? `into` $slot (`arrive` $full^ `[` $position `]`)? (`if` $pred^)? attr-dict `:`
    type($slot) (`,` type($full)^)?
  }];
  let hasVerifier = 1;
}

def Tile_WaitOp : Tile_Op<"wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "waits for tokens' copies, then synchronizes the thread block";
  let description = [{
    `tile.wait %tq, %tk` returns once the copies behind the tokens have landed; copies whose tokens it does not
    name may still be in flight. The barrier makes the landed tiles visible to every thread and guarantees that
    every thread is done with what it read from shared memory before it (so a copy may then overwrite those
    slots). A target with copy groups (sm80: cp.async.wait_group) waits for the fewest groups that cover the
    tokens: groups issued after the newest waited copy stay in flight.
  }];
  let arguments = (ins Variadic<Tile_TokenType>:$tokens);
  let assemblyFormat = "$tokens attr-dict";
  let hasVerifier = 1;
}

def Tile_BarrierOp : Tile_Op<"barrier", [MemoryEffects<[MemAlloc]>, TypesMatchWith<
    "one barrier per slot of the buffer", "buffer", "barrier",
    "::flashtile::tile::BarrierType::get($_self.getContext(), ::llvm::cast<::flashtile::tile::BufferType>($_self).getSlots())">]> {
  let summary = "the full or empty barriers of a buffer's slots (producer/consumer pairs)";
  let description = [{
    `%full = tile.barrier %kbuf {bytes = 16384}` completes a phase of a slot when that many bytes have landed in it
    (one tile: the verifier checks the count against the tile). `%empty = tile.barrier %kbuf {arrivals = 2}`
    completes a phase when that many consumers have released the slot (`tile.barrier_arrive`). A producer waits on
    the empty barrier before it overwrites a slot, a consumer on the full barrier before it reads one.
  }];
  let arguments = (ins Tile_BufferType:$buffer, OptionalAttr<I64Attr>:$bytes, OptionalAttr<I64Attr>:$arrivals);
  let results = (outs Tile_BarrierType:$barrier);
  let assemblyFormat = "$buffer attr-dict `:` type($buffer)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool isFull() { return static_cast<bool>(getBytes()); }
  }];
}

def Tile_BarrierWaitOp : Tile_Op<"barrier_wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "waits until the phase of a ring position completes";
  let description = [{
    `tile.barrier_wait %full[%i]`: the tile of ring position i (slot i mod slots, round i div slots) has landed;
    the waiting threads may read the slot. `tile.barrier_wait %empty[%i]`: every consumer has released the slot's
    previous round (round 0 passes at once); the producer may overwrite it with position i's tile.
  }];
  let arguments = (ins Tile_BarrierType:$barrier, I32:$position);
  let assemblyFormat = "$barrier `[` $position `]` attr-dict `:` type($barrier)";
}

def Tile_BarrierArriveOp : Tile_Op<"barrier_arrive", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "a consumer releases the slot of a ring position (arrives on its empty barrier)";
  let description = [{ `tile.barrier_arrive %empty[%i]`: this role is done reading ring position i's slot. }];
  let arguments = (ins Tile_BarrierType:$barrier, I32:$position);
  let assemblyFormat = "$barrier `[` $position `]` attr-dict `:` type($barrier)";
}

def Tile_RoleOp : Tile_Op<"role", [SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "a part of the thread block (warps, a register budget) running its region beside the other roles";
  let description = [{
    ```mlir
    tile.role "producer" {warps = 4, regs = 24} { ... }    // TMA copies into the ring
    tile.role "consumer" {warps = 8, regs = 240} { ... }   // Q·Kᵀ, softmax, P·V, epilogue
    ```
    The roles of a block run at the same time; they synchronize only through barriers (`tile.barrier_wait` /
    `tile.barrier_arrive`, full/empty pairs), never through `tile.wait`'s block-wide barrier. `warps` is the role's
    share of the block, `regs` the registers per thread it asks for (setmaxnreg on SM90: 24 to 256, a multiple
    of 8). `pingpong`: the role's warpgroups take turns issuing their asynchronous MMAs, one iteration's at a time
    (FA3's inter-warpgroup overlap: one warpgroup's softmax runs while the other's GEMMs use the tensor cores); it
    orders issue only, so the role's results do not change.
  }];
  let arguments = (ins StrAttr:$name, I64Attr:$warps, I64Attr:$regs, UnitAttr:$pingpong);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$name attr-dict-with-keyword custom<TileRegion>($body)";
  let hasVerifier = 1;
}

def Tile_MmaWaitOp : Tile_Op<"mma_wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "waits for asynchronous MMAs (their results readable, their shared-memory operands free)";
  let description = [{
    `tile.mma_wait %t0, %t1` returns once the MMAs behind the tokens completed (SM90: wgmma.wait_group, for the
    issuing warpgroup only; no block-wide barrier).
  }];
  let arguments = (ins Variadic<Tile_TokenType>:$tokens);
  let assemblyFormat = "$tokens attr-dict";
  let hasVerifier = 1;
}

def Tile_StoreOp : Tile_Op<"store", [MemoryEffects<[MemWrite]>]> {
  let summary = "writes a tile of a named output: O (converted to the output type), LSE, or the backward's D, dQ, dK, dV";
  let description = [{
    `tile.store o %o : tensor<?x128xf32>`, `tile.store lse %lse : tensor<?xf32>`. Rows past seqlen_q are not
    written. O is converted to the program's output type (the dtype; bf16 for an f8E4M3FN program). The backward's: `tile.store delta %d : tensor<?xf32>` (preprocess), `tile.store dq %dq :
    tensor<?x128xf32>` (postprocess, converted to the dtype), and `tile.store dk %dk : !tile.acc<?x128>` /
    `tile.store dv ...` (main: the accumulator of this instance's K/V tile, rows past seqlen_k not written). dK
    and dV of a K/V head are the sum over the query heads of its group: each instance's store adds its query
    head's part (how the sum is formed, in registers, partials or atomics, is the target's and the plan's).

    O staging is the schedule's decision: `tile.store o %o through %slot : tensor<128x128xf32>,
    !tile.slot<tensor<128x128xbf16>>` converts O into the shared memory of `%slot` first (each warp its own rows)
    and writes whole rows from there (16-byte stores), instead of storing each thread's fragments directly. The
    slot's tile must have O's rows and at least its columns in a 16-bit type, and its contents are dead from here
    on: nothing may read the slot's tile afterwards, no copy may be filling it, no asynchronous MMA may still read
    it, and a role must not have released it on its empty barrier (a producer may be refilling it). The
    interpreter checks all four.
  }];
  let arguments = (ins Tile_OutputAttr:$operand, AnyTypeOf<[Tile_TileF32, Tile_AccType]>:$value,
                       Optional<Tile_SlotType>:$staging);
  let assemblyFormat = "`` $operand $value (`through` $staging^)? attr-dict `:` type($value) (`,` type($staging)^)?";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Math on tiles
//===----------------------------------------------------------------------===//

def Tile_QkOp : Tile_Op<"qk", [Pure]> {
  let summary = "S = Q·Kᵀ, fp32 accumulation; asynchronous when it returns a token";
  let description = [{
    `%s = tile.qk %q, %k : tensor<?x128xbf16>, tensor<?x128xbf16> -> tensor<?x?xf32>`.
    `%s, %t = tile.qk %q, %k : ... -> tensor<128x128xf32>, !tile.token` is issued asynchronously (SM90's
    wgmma.mma_async): %s may be read, and the shared-memory tiles it reads overwritten, only after
    `tile.mma_wait %t`.
  }];
  let arguments = (ins Tile_TileLowp:$q, Tile_TileLowp:$k);
  let results = (outs Tile_TileF32:$s, Optional<Tile_TokenType>:$token);
  let assemblyFormat = "$q `,` $k attr-dict `:` type($q) `,` type($k) `->` type($s) (`,` type($token)^)?";
  let hasVerifier = 1;
}

def Tile_ScaleOp : Tile_Op<"scale", [Pure, SameOperandsAndResultType]> {
  let summary = "multiplies scores by softmax_scale";
  let description = [{
    `%s1 = tile.scale %s : tensor<?x?xf32>`. In an f8E4M3FN program the factor is softmax_scale · q_descale ·
    k_descale of the instance's (batch, K/V head), so the variant's hooks see the scores a bf16 program of the
    dequantized inputs sees. When nothing between the scale and the softmax needs scaled scores,
    canonicalization folds it into `tile.softmax_update {fold_scale}`, where it joins log2(e) in one multiply.
  }];
  let arguments = (ins Tile_TileF32:$s);
  let results = (outs Tile_TileF32:$result);
  let assemblyFormat = "$s attr-dict `:` type($s)";
}

def Tile_SoftmaxScaleOp : Tile_Op<"softmax_scale", [Pure]> {
  let summary = "softmax_scale, or with `inverse` 1 / softmax_scale: kernel constants";
  let description = [{
    `%c = tile.softmax_scale : f32`, `%inv = tile.softmax_scale inverse : f32`. Canonicalization creates them when
    it moves the scale into a score modifier: an additive one (`score + g`) runs before `tile.scale` on
    g·(1/scale), which lets the scale fold into the softmax's exp2 multiplier; one whose score is first
    multiplied by a block-uniform u (softcap's s·(1/cap)) takes the scale into u. Programs may use them too.
  }];
  let arguments = (ins UnitAttr:$inverse);
  let results = (outs F32:$result);
  let assemblyFormat = "(`inverse` $inverse^)? attr-dict `:` type($result)";
}

def Tile_ScoreModOp : Tile_Op<"score_mod", [AllTypesMatch<["s", "result"]>, SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "the variant's score modifier, applied elementwise";
  let description = [{
    The region maps (score, b, h, q_idx, kv_idx) to a new score, for every element of the tile:
    ```mlir
    %s2 = tile.score_mod %s1 : tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32):
      %cap = tile.param "cap"
      %x = arith.divf %score, %cap : f32
      %t = math.tanh %x : f32
      %y = arith.mulf %cap, %t : f32
      tile.yield %y : f32
    }
    ```
  }];
  let arguments = (ins Tile_TileF32:$s);
  let results = (outs Tile_TileF32:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$s attr-dict `:` type($s) custom<TileRegion>($body)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Tile_MaskOp : Tile_Op<"mask", [AllTypesMatch<["s", "result"]>, SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "the variant's mask predicate plus the key-sequence bound; masked scores become -inf";
  let description = [{
    The region maps (b, h, q_idx, kv_idx) to keep/drop. Keys at or past seqlen_k are always dropped. Schedules
    keep this op only on boundary tiles.
    ```mlir
    %s3 = tile.mask %s2 : tensor<?x?xf32> {
    ^bb0(%b: i32, %h: i32, %q: i32, %kv: i32):
      tile.yield %keep : i1
    }
    ```
  }];
  let arguments = (ins Tile_TileF32:$s);
  let results = (outs Tile_TileF32:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$s attr-dict `:` type($s) custom<TileRegion>($body)";
  let hasVerifier = 1;
}

def Tile_SoftmaxUpdateOp : Tile_Op<"softmax_update", [Pure, AllTypesMatch<["stats", "new_stats"]>]> {
  let summary = "online softmax step: new running max and sum, probabilities P, and the correction factor";
  let description = [{
    For each row: m' = max(m, rowmax(S)), alpha = exp2(m − m'), P = exp2(S·c − m') with c = log2(e)
    (c = softmax_scale·log2(e) with `fold_scale`), l' = alpha·l + rowsum(P). P is rounded to `p`'s element
    type for P·V (e4m3, with saturation at 448, in an f8E4M3FN program). It reads and writes the row statistics only: `tile.rescale` applies alpha to the accumulator,
    so schedules can place or skip that step (FA4 rescales conditionally), and a P·V may still be writing the
    accumulator while this runs (FA3's intra-warpgroup overlap).

    With `rescale_threshold = τ` (1 to 15, at most 8 when P is e4m3; set by the schedule) a row's max moves only when the tile needs more
    than τ of headroom: m' = max(m, rowmax(S)·c) if rowmax(S)·c > m + τ, else m' = m (alpha = 1, P ≤ 2^τ). A
    target may also move the max of rows that do not need it (e.g. all rows of a warp when one must move):
    any m' between those two gives the same O and LSE up to rounding, since P and l share it.
    ```mlir
    %p, %alpha, %m1 = tile.softmax_update %s, %m0 : tensor<?x?xf32>, !tile.stats<?> -> tensor<?x?xbf16>, tensor<?xf32>
    ```
  }];
  let arguments = (ins Tile_TileF32:$s, Tile_StatsType:$stats, UnitAttr:$fold_scale,
                       OptionalAttr<I64Attr>:$rescale_threshold);
  let results = (outs Tile_TileLowp:$p, Tile_TileF32:$alpha, Tile_StatsType:$new_stats);
  let assemblyFormat = "$s `,` $stats attr-dict `:` type($s) `,` qualified(type($stats)) `->` type($p) `,` "
                       "type($alpha)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$s, "::mlir::Value":$stats, "::mlir::Type":$pType)>];
}

def Tile_RescaleOp : Tile_Op<"rescale", [Pure, AllTypesMatch<["acc", "result"]>]> {
  let summary = "acc *= alpha, row by row";
  let description = [{ `%a1 = tile.rescale %a0, %alpha : !tile.acc<?x128>, tensor<?xf32>` }];
  let arguments = (ins Tile_AccType:$acc, Tile_TileF32:$alpha);
  let results = (outs Tile_AccType:$result);
  let assemblyFormat = "$acc `,` $alpha attr-dict `:` qualified(type($acc)) `,` type($alpha)";
  let hasVerifier = 1;
}

def Tile_PvOp : Tile_Op<"pv", [Pure, TypesMatchWith<"the result is the accumulator's type", "acc", "result", "$_self">]> {
  let summary = "acc += P·V, fp32 accumulation; asynchronous when it returns a token";
  let description = [{
    `%a2 = tile.pv %p, %v, %a1 : tensor<?x?xbf16>, tensor<?x128xbf16>, !tile.acc<?x128>`.
    `%a2, %t = tile.pv ... -> !tile.token` is issued asynchronously: %a2 may be read, and V's slot overwritten,
    only after `tile.mma_wait %t`.
  }];
  let arguments = (ins Tile_TileLowp:$p, Tile_TileLowp:$v, Tile_AccType:$acc);
  let results = (outs Tile_AccType:$result, Optional<Tile_TokenType>:$token);
  let assemblyFormat = [{
    $p `,` $v `,` $acc attr-dict `:` type($p) `,` type($v) `,` qualified(type($acc)) (`->` type($token)^)?
  }];
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$p, "::mlir::Value":$v, "::mlir::Value":$acc), [{
    build($_builder, $_state, acc.getType(), ::mlir::Type(), p, v, acc);
  }]>];
}

def Tile_FinalizeOp : Tile_Op<"finalize", [RecursiveMemoryEffects]> {
  let summary = "O = acc / l and LSE = ln(l) + m·ln(2); rows that saw no key give O = 0, LSE = -inf";
  let description = [{
    `%o, %lse = tile.finalize %m, %acc : !tile.stats<?>, !tile.acc<?x128> -> tensor<?x128xf32>, tensor<?xf32>`
    In an f8E4M3FN program O is also multiplied by v_descale of the instance's (batch, K/V head).

    The optional `sink` region is the variant's attention sink: it maps (b, h) to a logit s in the units of the
    scaled scores, which joins every row's softmax as one more score with no value. With m' = max(m, s·log2 e):
    l' = l·2^(m − m') + 2^(s·log2 e − m'), O = acc·2^(m − m') / l', LSE = (m' + log2 l')·ln 2. A row that saw
    no key gets O = 0 and LSE = s; a sink of -inf changes nothing.
    ```mlir
    %o, %lse = tile.finalize %m, %acc sink {
    ^bb0(%b: i32, %h: i32):
      %s = tile.input "sinks"[%h] : f32
      tile.yield %s : f32
    } : !tile.stats<?>, !tile.acc<?x128> -> tensor<?x128xf32>, tensor<?xf32>
    ```
  }];
  let arguments = (ins Tile_StatsType:$stats, Tile_AccType:$acc);
  let results = (outs Tile_TileF32:$o, Tile_TileF32:$lse);
  let regions = (region MaxSizedRegion<1>:$sink);
  let assemblyFormat = "$stats `,` $acc (`sink` custom<TileRegion>($sink)^)? attr-dict `:` qualified(type($stats)) `,` "
                       "qualified(type($acc)) `->` type($o) `,` type($lse)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool hasSink() { return !getSink().empty(); }
  }];
}

def Tile_InitStateOp : Tile_Op<"init_state", [Pure]> {
  let summary = "empty online-softmax state: row statistics m = -inf, l = 0 and accumulator acc = 0";
  let description = [{ `%m0, %acc0 = tile.init_state : !tile.stats<?>, !tile.acc<?x128>` }];
  let results = (outs Tile_StatsType:$stats, Tile_AccType:$acc);
  let assemblyFormat = "attr-dict `:` qualified(type($stats)) `,` qualified(type($acc))";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The K/V loop
//===----------------------------------------------------------------------===//

def Tile_KvLoopOp : Tile_Op<"kv_loop", [SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
                                         AttrSizedOperandSegments]> {
  let summary = "walks K/V tiles, threading the online-softmax state (row statistics and accumulator)";
  let description = [{
    Unscheduled (no bounds), the loop visits every K/V tile in order. Scheduled, it visits tiles
    [from, to) in `order` (`ascending`, omitted, or `descending`); `segment` says which part of the KV range it
    covers (`all`, omitted, `tail_boundary`, `interior`, `head_boundary`), interior segments carry no mask.
    ```mlir
    %m, %acc = tile.kv_loop from %lo to %hi segment interior order descending iter_args(%m0, %acc0)
          : !tile.stats<128>, !tile.acc<128x128> -> !tile.stats<128>, !tile.acc<128x128> {
    ^bb0(%j: i32, %mj: !tile.stats<128>, %aj: !tile.acc<128x128>):
      ...
      tile.yield %m1, %a2 : !tile.stats<128>, !tile.acc<128x128>
    }
    ```
    A software-pipelined loop also carries tiles from one iteration to the next after the state (tile-fa2-pipeline
    with stages = 2 carries the scores of tile j, computed during iteration j + 1's softmax):
    `iter_args(%m0, %acc0, %s0) : !tile.stats<128>, !tile.acc<128x128>, tensor<128x64xf32> -> ...`.
    It carries tokens too: the copies an iteration starts for the next one are waited on there
    (`iter_args(%m0, %acc0, %tk) : !tile.stats<128>, !tile.acc<128x128>, !tile.token -> ...`).
  }];
  let arguments = (ins Optional<I32>:$lower, Optional<I32>:$upper, Tile_StatsType:$init_stats,
                       Tile_AccType:$init_acc, Variadic<Tile_Carried>:$carried,
                       DefaultValuedAttr<Tile_SegmentAttr, "::flashtile::tile::Segment::All">:$segment,
                       DefaultValuedAttr<Tile_KvOrderAttr, "::flashtile::tile::KvOrder::Ascending">:$order);
  let results = (outs Tile_StatsType:$stats, Tile_AccType:$acc, Variadic<Tile_Carried>:$carriedResults);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    (`from` $lower^)? (`to` $upper^)? (`segment` `` $segment^)? (`order` `` $order^)? `iter_args` `(` $init_stats
    `,` $init_acc (`,` $carried^)? `)` attr-dict `:` qualified(type($init_stats)) `,` qualified(type($init_acc))
    (`,` type($carried)^)? `->` qualified(type($stats)) `,` qualified(type($acc)) (`,` type($carriedResults)^)?
    custom<TileRegion>($body)
  }];
  let hasVerifier = 1;
  let builders = [OpBuilder<(ins "::mlir::Value":$lower, "::mlir::Value":$upper, "::mlir::Value":$initStats,
                                 "::mlir::Value":$initAcc, "::mlir::ValueRange":$carried,
                                 "::flashtile::tile::Segment":$segment, "::flashtile::tile::KvOrder":$order), [{
    ::llvm::SmallVector<::mlir::Type> types = {initStats.getType(), initAcc.getType()};
    ::llvm::append_range(types, carried.getTypes());
    build($_builder, $_state, types, lower, upper, initStats, initAcc, carried, segment, order);
  }]>];
  let extraClassDeclaration = [{
    ::mlir::Value getTileIndex() { return getBody().front().getArgument(0); }
    ::mlir::Value getStatsArg() { return getBody().front().getArgument(1); }
    ::mlir::Value getAccArg() { return getBody().front().getArgument(2); }
    /// The block arguments of the carried tiles and tokens, after the tile index and the state.
    ::mlir::Block::BlockArgListType getCarriedArgs() { return getBody().front().getArguments().drop_front(3); }
    /// The number of the carried value `v` stands for (0: the first carried tile or token): `v` one of the body's
    /// carried arguments or one of the loop's carried results; none for anything else (the state, the tile index).
    std::optional<unsigned> carriedNumber(::mlir::Value v) {
      if (auto arg = ::llvm::dyn_cast<::mlir::BlockArgument>(v);
          arg && arg.getOwner() == &getBody().front() && arg.getArgNumber() >= 3)
        return arg.getArgNumber() - 3;
      if (auto result = ::llvm::dyn_cast<::mlir::OpResult>(v);
          result && result.getOwner() == getOperation() && result.getResultNumber() >= 2)
        return result.getResultNumber() - 2;
      return std::nullopt;
    }
    /// What the body yields as carried value i (after the row statistics and the accumulator).
    ::mlir::Value getYieldedCarried(unsigned i) {
      return getBody().front().getTerminator()->getOperand(2 + i);
    }
    bool isBounded() { return getLower() != nullptr; }
  }];
}

def Tile_KvWalkOp : Tile_Op<"kv_walk", [SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "visits K/V tiles [from, to) in order with no softmax state: a producer's loop";
  let description = [{
    ```mlir
    tile.kv_walk from %lo to %hi order descending {
    ^bb0(%j: i32):
      ...   // e.g. wait for a slot's empty barrier, copy K tile j into it
    }
    ```
    The loop of a role that moves tiles rather than computing on them (FA3's producer): the same tiles, in the same
    order, as the consumers' `tile.kv_loop` segments, without their state.
  }];
  let arguments = (ins I32:$lower, I32:$upper,
                       DefaultValuedAttr<Tile_KvOrderAttr, "::flashtile::tile::KvOrder::Ascending">:$order);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`from` $lower `to` $upper (`order` `` $order^)? attr-dict-with-keyword custom<TileRegion>($body)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Value getTileIndex() { return getBody().front().getArgument(0); }
  }];
}

def Tile_WorkQueueOp : Tile_Op<"work_queue", [MemoryEffects<[MemAlloc]>]> {
  let summary = "the one-slot hand-off of a dynamic persistent block's work units, with its full/empty barriers";
  let description = [{
    ```mlir
    %wfull, %wempty = tile.work_queue {arrivals = 1} : !tile.barrier<1>, !tile.barrier<1>
    ```
    A shared-memory cell holding one work unit and the barrier pair that guards it, for `tile.work_loop
    dynamic(%wfull, %wempty)`: at the start of the block's n-th tile the role that takes units (`take`) waits for
    `%wempty[%n]` (every other role released the unit of tile n - 1; position 0 passes at once), takes the next unit
    from the launch's counter, writes it to the cell and completes `%wfull[%n]`; the other roles wait for
    `%wfull[%n]`, read the unit, and release the cell with `tile.barrier_arrive %wempty[%n]` (`arrivals`: how many
    roles release it). So every role of the block runs the same units in the same order.
  }];
  let arguments = (ins DefaultValuedAttr<I64Attr, "1">:$arrivals);
  let results = (outs Tile_BarrierType:$full, Tile_BarrierType:$empty);
  let assemblyFormat = "attr-dict `:` type($full) `,` type($empty)";
  let hasVerifier = 1;
}

def Tile_WorkLoopOp : Tile_Op<"work_loop", [SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
                                             AttrSizedOperandSegments]> {
  let summary = "a persistent thread block's loop over the work tiles the launch gives it";
  let description = [{
    ```mlir
    %ring = tile.work_loop iter_args(%c0) : i32 -> i32 {
    ^bb0(%n: i32, %base: i32):
      ...   // the tile's KV ranges and bounds, the role's copies or math for it; ring positions from %base
      tile.yield %next : i32
    }
    %ring = tile.work_loop dynamic(%wfull, %wempty : !tile.barrier<1>, !tile.barrier<1>) take iter_args(%c0) ...
    ```
    A persistent kernel launches about one thread block per SM, and each block runs tile after tile (a Q tile
    of a (batch, head) pair each) instead of one: the ops of the body see the iteration's tile as the block's
    (tile.kv_range rules, tile.dim, loads and stores), so the body is the program for one tile. `%n` counts
    the tiles this block ran before this one (the ring position of one-slot buffers such as Q's); the
    iter_args carry i32 values from tile to tile (a K/V ring's running position), and the results are their
    values after the last tile. Every role of a block walks the same tiles in the same order, so their ring
    positions agree. Inside a tile.role (the roles stay, with their register budgets, for the whole kernel), or at
    the top level of a tile.func; not nested.

    Which tiles a block gets is the launch's. Static (no `dynamic`): the printer's fixed assignment (units of two
    Q tiles, one unit in every gridDim.x). `dynamic(%wfull, %wempty)`: units of one Q tile, heaviest first,
    taken at run time from a counter the launch shares: the role marked `take` takes the next unit for tile `%n`
    and hands it to the other roles through the cell of a `tile.work_queue` (see there); a unit past the last
    one ends every role's loop. The roles other than the taker release the cell with `tile.barrier_arrive
    %wempty[%n]` in their body. Either every role's loop is dynamic, on one queue, with one taker, or none is.
  }];
  let arguments = (ins Optional<Tile_BarrierType>:$queueFull, Optional<Tile_BarrierType>:$queueEmpty,
                       UnitAttr:$take, Variadic<I32>:$inits);
  let results = (outs Variadic<I32>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    (`dynamic` `(` $queueFull^ `,` $queueEmpty `:` type($queueFull) `,` type($queueEmpty) `)`)? (`take` $take^)?
    (`iter_args` `(` $inits^ `)` `:` type($inits) `->` type($results))? attr-dict-with-keyword custom<TileRegion>($body)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The number of tiles this block ran before the current one.
    ::mlir::Value getTileCount() { return getBody().front().getArgument(0); }
    ::mlir::Block::BlockArgListType getCarriedArgs() { return getBody().front().getArguments().drop_front(); }
    /// Units taken at run time from the launch's counter (tile.work_queue), not assigned by the printer.
    bool isDynamic() { return static_cast<bool>(getQueueFull()); }
  }];
}

//===----------------------------------------------------------------------===//
// K/V steps: the state in global memory between launches (the fa1 schedule)
//===----------------------------------------------------------------------===//

def Tile_StateLoadOp : Tile_Op<"state_load", [MemoryEffects<[MemRead]>]> {
  let summary = "reads the Q tile's online-softmax state that the previous K/V step left in global memory";
  let description = [{
    A program with `tile.state_load` and `tile.state_store` is launched once per K/V tile: launch s
    (`tile.dim kv_step` = s, s = 0 .. ceil(seqlen_k / block_n) - 1, at least one launch) runs every Q tile
    against K/V tile s only, so the K/V loop is the sequence of launches and the Q tiles are the blocks of each
    (FlashAttention-1's orchestration). Between launches each query row's state (m, l, acc in fp32) lives in a
    global-memory workspace. At step 0 this op gives the empty state (as `tile.init_state`); at step s > 0 the
    state that `tile.state_store` wrote for the same rows at step s - 1.
    ```mlir
    %m0, %acc0 = tile.state_load : !tile.stats<64>, !tile.acc<64x128>
    ```
  }];
  let results = (outs Tile_StatsType:$stats, Tile_AccType:$acc);
  let assemblyFormat = "attr-dict `:` qualified(type($stats)) `,` qualified(type($acc))";
  let hasVerifier = 1;
}

def Tile_StateStoreOp : Tile_Op<"state_store", [MemoryEffects<[MemWrite]>, AllTypesMatch<["stats", "stats_out"]>,
                                                 AllTypesMatch<["acc", "acc_out"]>]> {
  let summary = "writes the online-softmax state to global memory for the next K/V step, and passes it on";
  let description = [{
    Writes m, l and the unnormalized acc of the Q tile's rows (fp32; rows past seqlen_q are not written) to the
    workspace that `tile.state_load` of the next K/V step reads; the result is the same state, so that the step
    can still finalize it (O and LSE of the keys seen so far) after the store read it.
    ```mlir
    %m2, %acc2 = tile.state_store %m1, %acc1 : !tile.stats<64>, !tile.acc<64x128>
    ```
  }];
  let arguments = (ins Tile_StatsType:$stats, Tile_AccType:$acc);
  let results = (outs Tile_StatsType:$stats_out, Tile_AccType:$acc_out);
  let assemblyFormat = "$stats `,` $acc attr-dict `:` qualified(type($stats)) `,` qualified(type($acc))";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Split-KV (the decode schedule)
//===----------------------------------------------------------------------===//

def Tile_StoreSplitOp : Tile_Op<"store_split", [MemoryEffects<[MemWrite]>]> {
  let summary = "writes one split's O and LSE: partials for the combine step, or the result when unsplit";
  let description = [{
    Under split-KV (flash-decoding) the key range of a Q tile is split across `num_splits` program instances
    (`tile.dim split_begin`/`split_end`), each finalizing its own softmax. With num_splits = 1 this op is
    `tile.store o` and `tile.store lse` of the instance's O and LSE, after the optional sink joins them
    (LSE' = ln(e^LSE + e^s), O' = O·e^(LSE − LSE')). With num_splits > 1 it writes O (fp32, normalized by the
    split's own sum) and LSE to the split's slice of the workspace, and the combine step merges a row's splits
    exactly: LSE = ln(Σ e^LSE_i [+ e^s]), O = Σ e^(LSE_i − LSE)·O_i. An empty split (no key) contributes
    LSE −inf and O 0; a row that no split sees gets O = 0 and LSE −inf (LSE = s with a sink). The sink region
    is tile.finalize's, moved here so that it joins each row once, not once per split.
    ```mlir
    tile.store_split %o, %lse sink {
    ^bb0(%b: i32, %h: i32):
      %s = tile.input "sinks"[%h] : f32
      tile.yield %s : f32
    } : tensor<64x128xf32>, tensor<64xf32>
    ```
    `through %slot` stages O in shared memory as `tile.store o ... through` does (where O is stored: unsplit).
  }];
  let arguments = (ins Tile_TileF32:$o, Tile_TileF32:$lse, Optional<Tile_SlotType>:$staging);
  let regions = (region MaxSizedRegion<1>:$sink);
  let assemblyFormat = "$o `,` $lse (`through` $staging^)? (`sink` custom<TileRegion>($sink)^)? attr-dict `:` "
                       "type($o) `,` type($lse) (`,` type($staging)^)?";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    bool hasSink() { return !getSink().empty(); }
  }];
}


//===----------------------------------------------------------------------===//
// The backward (program kinds backward_preprocess, backward_main, backward_postprocess; docs/backward.md)
//===----------------------------------------------------------------------===//

def Tile_RowDotOp : Tile_Op<"row_dot", [Pure]> {
  let summary = "D = rowsum(A∘B) in fp32: the backward's D = rowsum(dO∘O)";
  let description = [{
    `%d = tile.row_dot %o, %do : tensor<?x128xbf16>, tensor<?x128xbf16> -> tensor<?xf32>`
  }];
  let arguments = (ins Tile_TileLowp:$a, Tile_TileLowp:$b);
  let results = (outs Tile_TileF32:$result);
  let assemblyFormat = "$a `,` $b attr-dict `:` type($a) `,` type($b) `->` type($result)";
  let hasVerifier = 1;
}

def Tile_ZeroAccOp : Tile_Op<"zero_acc", [Pure]> {
  let summary = "an accumulator of zeros (the backward's dK and dV before the Q-tile loop)";
  let description = [{ `%dk0 = tile.zero_acc : !tile.acc<?x128>` }];
  let results = (outs Tile_AccType:$acc);
  let assemblyFormat = "attr-dict `:` qualified(type($acc))";
}

def Tile_QLoopOp : Tile_Op<"q_loop", [SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects,
                                       AttrSizedOperandSegments]> {
  let summary = "walks the Q tiles that see this instance's K/V tile, threading accumulators (dK, dV)";
  let description = [{
    The backward's main loop, the converse of tile.kv_loop: a program instance owns a K/V tile and visits Q tiles.
    Unscheduled (no bounds) it visits every Q tile of the sequence; scheduled, the Q tiles [from, to) (the rows
    that the variant's KV-range rules let see the instance's keys: passes/Transforms/InvertKvRange.h) in
    ascending order; `segment` says which part of that range it covers, as for tile.kv_loop (`interior`: every row
    sees every key of the tile, no mask).
    ```mlir
    %dk, %dv = tile.q_loop from %lo to %hi iter_args(%dk0, %dv0) : !tile.acc<128x128>, !tile.acc<128x128>
          -> !tile.acc<128x128>, !tile.acc<128x128> {
    ^bb0(%i: i32, %dka: !tile.acc<128x128>, %dva: !tile.acc<128x128>):
      %q = tile.load q[%i] : tensor<64x128xbf16>
      ...
      tile.yield %dka1, %dva1 : !tile.acc<128x128>, !tile.acc<128x128>
    }
    ```
  }];
  let arguments = (ins Optional<I32>:$lower, Optional<I32>:$upper, Variadic<Tile_AccType>:$inits,
                       DefaultValuedAttr<Tile_SegmentAttr, "::flashtile::tile::Segment::All">:$segment);
  let results = (outs Variadic<Tile_AccType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    (`from` $lower^)? (`to` $upper^)? (`segment` `` $segment^)? `iter_args` `(` $inits `)` attr-dict `:`
    qualified(type($inits)) `->` qualified(type($results)) custom<TileRegion>($body)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Value getTileIndex() { return getBody().front().getArgument(0); }
    ::mlir::Block::BlockArgListType getAccArgs() { return getBody().front().getArguments().drop_front(); }
    bool isBounded() { return getLower() != nullptr; }
  }];
}

def Tile_ProbsOp : Tile_Op<"probs", [Pure]> {
  let summary = "P = exp(S − LSE) row by row, in fp32: the forward's probabilities, recomputed";
  let description = [{
    `%p = tile.probs %s, %lse : tensor<?x?xf32>, tensor<?xf32> -> tensor<?x?xf32>`. S are the final logits (after
    scale, score_mod and mask), LSE the forward's (natural log, the sink included). A masked score (-inf) and a
    row whose LSE is -inf (it saw no key) give P = 0.
  }];
  let arguments = (ins Tile_TileF32:$s, Tile_TileF32:$lse);
  let results = (outs Tile_TileF32:$p);
  let assemblyFormat = "$s `,` $lse attr-dict `:` type($s) `,` type($lse) `->` type($p)";
  let hasVerifier = 1;
}

def Tile_DotTnOp : Tile_Op<"dot_tn", [Pure, TypesMatchWith<"the result is the accumulator's type", "acc", "result",
                                                            "$_self">]> {
  let summary = "acc += Aᵀ·B, fp32 accumulation (dV += Pᵀ·dO, dK += dSᵀ·Q)";
  let description = [{
    A (rows x cols) is rounded to B's element type first (as P is for P·V); B has A's rows. The accumulator has A's
    columns as rows and B's columns.
    `%dv1 = tile.dot_tn %p, %do, %dv0 : tensor<64x128xf32>, tensor<64x128xbf16>, !tile.acc<128x128>`
  }];
  let arguments = (ins Tile_TileAny:$a, Tile_TileLowp:$b, Tile_AccType:$acc);
  let results = (outs Tile_AccType:$result);
  let assemblyFormat = "$a `,` $b `,` $acc attr-dict `:` type($a) `,` type($b) `,` qualified(type($acc))";
  let hasVerifier = 1;
}

def Tile_SoftmaxGradOp : Tile_Op<"softmax_grad", [Pure]> {
  let summary = "dS' = P∘(dP − D): the gradient of the logits through the softmax";
  let description = [{
    `%ds = tile.softmax_grad %p, %dp, %d : tensor<?x?xf32>, tensor<?x?xf32>, tensor<?xf32> -> tensor<?x?xf32>`,
    dP = dO·Vᵀ (tile.qk %do, %v), D = rowsum(dO∘O) per row.
  }];
  let arguments = (ins Tile_TileF32:$p, Tile_TileF32:$dp, Tile_TileF32:$delta);
  let results = (outs Tile_TileF32:$ds);
  let assemblyFormat = "$p `,` $dp `,` $delta attr-dict `:` type($p) `,` type($dp) `,` type($delta) `->` type($ds)";
  let hasVerifier = 1;
}

def Tile_ScoreGradOp : Tile_Op<"score_grad", [AllTypesMatch<["ds", "result"]>, SingleBlockImplicitTerminator<"YieldOp">,
                                               RecursiveMemoryEffects]> {
  let summary = "dS = dS'·(d score_mod / d score), elementwise: the chain rule through the variant's score hook";
  let description = [{
    The region is the derivative of the variant's score modifier with respect to its score, built by the compiler
    from the hook's IR (passes/Transforms/DifferentiateScore.h); it maps (score, b, h, q_idx, kv_idx) as
    tile.score_mod's region does, `score` being the element of `%s` (the modifier's input), and the result is
    `%ds` times it; where `%ds` is 0 (a masked score, a padded row: P = 0) the result is 0, whatever the
    derivative is there (it may be infinite or NaN at a padding key).
    ```mlir
    %ds2 = tile.score_grad %ds, %s1 : tensor<?x?xf32>, tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32):
      ...   // softcap: 1 − tanh²(score / cap)
      tile.yield %d : f32
    }
    ```
  }];
  let arguments = (ins Tile_TileF32:$ds, Tile_TileF32:$s);
  let results = (outs Tile_TileF32:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$ds `,` $s attr-dict `:` type($ds) `,` type($s) custom<TileRegion>($body)";
  let hasVerifier = 1;
}

def Tile_AccumulateOp : Tile_Op<"accumulate", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "adds A·B (fp32) into rows of a global fp32 accumulator: the backward's dQ += dS·K";
  let description = [{
    `tile.accumulate dq_accum[%i], %ds, %k : tensor<64x128xf32>, tensor<128x128xbf16>` adds dS·K (A rounded to
    B's element type) into the rows of Q tile `i` of the dQ accumulator. Instances of other K/V tiles add into the
    same rows: the order of the adds is the target's (atomics), or fixed under the call's deterministic mode.
  }];
  let arguments = (ins Tile_OperandAttr:$operand, I32:$index, Tile_TileAny:$a, Tile_TileLowp:$b);
  let assemblyFormat = "`` $operand `[` $index `]` `,` $a `,` $b attr-dict `:` type($a) `,` type($b)";
  let hasVerifier = 1;
}

def Tile_InputGradOp : Tile_Op<"input_grad", [SingleBlockImplicitTerminator<"YieldOp">, MemoryEffects<[MemWrite]>]> {
  let summary = "adds Σ dS'·(d score_mod / d input) over a score tile into the gradient of one f32 input element";
  let description = [{
    The region is the chain rule through the variant's score modifier to one of its f32 `tile.input` reads, built
    by the compiler from the hook's IR (passes/Transforms/DifferentiateScore.h): it maps (score, b, h, q_idx,
    kv_idx), `score` being the element of `%s` (the modifier's input), to the index the hook read and the partial
    derivative of the modified score with respect to that element. The op adds Σ_ij dS'_ij·partial_ij (`%ds` is
    dS', the gradient of the modified score; where it is 0, a masked score, the element adds nothing) into the
    gradient of input `name` at that index. The index depends on (b, h) only (the verifier checks it), so each
    program instance reduces its terms to one number per input read, and the instances' numbers are summed in a
    fixed order: the gradient is deterministic.
    ```mlir
    tile.input_grad "slopes", %ds, %s1 : tensor<?x?xf32>, tensor<?x?xf32> {
    ^bb0(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32):
      ...   // ALiBi: index h, partial −|q − kv|
      tile.yield %index, %partial : i32, f32
    }
    ```
  }];
  let arguments = (ins StrAttr:$name, Tile_TileF32:$ds, Tile_TileF32:$s);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$name `,` $ds `,` $s attr-dict `:` type($ds) `,` type($s) custom<TileRegion>($body)";
  let hasVerifier = 1;
}

def Tile_SinkGradOp : Tile_Op<"sink_grad", [SingleBlockImplicitTerminator<"YieldOp">, MemoryEffects<[MemWrite]>]> {
  let summary = "adds a Q tile's share of the sink's gradient, −Σ_i e^(σ − LSE_i)·D_i, times dσ/d input, into an input";
  let description = [{
    A sink σ(b, h) joins each row's softmax denominator with no value, so dσ = −Σ_i P_sink,i·D_i over the rows of
    (b, h), with P_sink,i = e^(σ − LSE_i). The region, built by the compiler from the variant's sink hook and its
    derivative, maps (b, h) to σ, the index of the f32 input element it read, and dσ/d that element; the op adds
    −Σ_i e^(σ − LSE_i)·D_i·partial over the instance's rows (padded rows add nothing) into the gradient of input
    `name` at that index, as one number per instance summed in a fixed order (deterministic).
    ```mlir
    tile.sink_grad "sinks", %d, %lse : tensor<?xf32>, tensor<?xf32> {
    ^bb0(%b: i32, %h: i32):
      %s = tile.input "sinks"[%h] : f32
      tile.yield %s, %h, %one : f32, i32, f32
    }
    ```
  }];
  let arguments = (ins StrAttr:$name, Tile_TileF32:$delta, Tile_TileF32:$lse);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$name `,` $delta `,` $lse attr-dict `:` type($delta) `,` type($lse) custom<TileRegion>($body)";
  let hasVerifier = 1;
}

// The memory layer: tensor memory, buffers, channels, MMAs completed by a commit.
include "passes/IR/TileMemoryOps.td"

#endif // FLASHTILE_TILE_OPS
