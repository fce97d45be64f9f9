//===- TileDialect.td - the tile dialect: attention as tile programs -----===//
//
// A tile program says *what* attention computes, one Q tile at a time: load tiles, S = Q·Kᵀ, the variant's score
// modifier and mask, the online softmax (state m, l, acc), P·V, finalize, store. Schedules decide who computes
// which tile and when; they refine this IR (tile sizes, loop segments, async copies) but never its math.
//
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_TILE_DIALECT
#define FLASHTILE_TILE_DIALECT

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Tile_Dialect : Dialect {
  let name = "tile";
  let summary = "Tile programs for attention kernels";
  let description = [{
    Values are register/shared-memory tiles, written as builtin ranked tensors whose leading dimension is `?`
    until a schedule fixes the tile size (`tensor<?x128xbf16>` becomes `tensor<128x128xbf16>`), and the online
    softmax state as two values: the row statistics `!tile.stats<R>` (running max m, running sum l) and the
    unnormalized accumulator `!tile.acc<RxD>` (in a memory space).
  }];
  let cppNamespace = "::flashtile::tile";
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

include "passes/IR/TileEnums.td"

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class Tile_Type<string name, string typeMnemonic> : TypeDef<Tile_Dialect, name> {
  let mnemonic = typeMnemonic;
}

def Tile_StatsType : Tile_Type<"Stats", "stats"> {
  let summary = "the online softmax's row statistics of a Q tile: running max m and running sum l";
  let description = [{
    `!tile.stats<?>` holds, for each of `rows` query rows, the running maximum `m` (log2 domain) and the running
    sum `l`, in fp32 registers. `rows` is `?` until scheduled. `tile.softmax_update` reads and writes them,
    `tile.finalize` reads them; they are a value of their own, apart from the accumulator (`!tile.acc`), so that a
    softmax step depends on the previous step's statistics only, never on the P·V that writes the accumulator (FA3
    runs the two side by side; FA4 keeps the accumulator in tensor memory and these in registers).
  }];
  let parameters = (ins "int64_t":$rows);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool hasStaticRows() const { return getRows() != ::mlir::ShapedType::kDynamic; }
    StatsType withRows(int64_t rows) const { return get(getContext(), rows); }
  }];
}

def Tile_AccType : Tile_Type<"Acc", "acc"> {
  let summary = "the unnormalized output accumulator of a Q tile, in a memory space";
  let description = [{
    `!tile.acc<?x128>` holds `rows` x `cols` fp32 values: Σ P·V of the tiles seen so far, rescaled by
    `tile.rescale` whenever a row's max moved. `rows` is `?` until scheduled. It lives in registers (the default),
    shared memory or tensor memory (SM100's TMEM, where FA4 keeps it while a correction role rescales it):
    `!tile.acc<128x128, tensor>`. `tile.rescale` and `tile.pv` are its only writers.
  }];
  let parameters = (ins "int64_t":$rows, "int64_t":$cols,
                        DefaultValuedParameter<"::flashtile::tile::MemorySpace",
                                               "::flashtile::tile::MemorySpace::Registers">:$space);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    bool hasStaticRows() const { return getRows() != ::mlir::ShapedType::kDynamic; }
    /// The same accumulator with `rows` rows (in the same memory space).
    AccType withRows(int64_t rows) const { return get(getContext(), rows, getCols(), getSpace()); }
  }];
}

def Tile_BufferType : Tile_Type<"Buffer", "buffer"> {
  let summary = "a shared-memory ring of `slots` tiles of one operand";
  let description = [{
    `!tile.buffer<tensor<64x128xbf16>, slots = 2>`: made by `tile.buffer`, one per staged operand. A pipeline
    fills its slots with asynchronous copies and reads them with `tile.load ... from %slot`; which slot holds which
    tile is the schedule's choice, written in the IR with `tile.slot`.
  }];
  let parameters = (ins "::mlir::RankedTensorType":$tile, "int64_t":$slots);
  let assemblyFormat = "`<` $tile `,` `slots` `=` $slots `>`";
  let genVerifyDecl = 1;
}

def Tile_SlotType : Tile_Type<"Slot", "slot"> {
  let summary = "one slot of a shared-memory buffer";
  let description = [{ `!tile.slot<tensor<64x128xbf16>>`, selected by `tile.slot %buffer[%j]`. }];
  let parameters = (ins "::mlir::RankedTensorType":$tile);
  let assemblyFormat = "`<` $tile `>`";
}

def Tile_TokenType : Tile_Type<"Token", "token"> {
  let summary = "the completion of an asynchronous operation";
  let description = [{
    `!tile.token`: returned by `tile.copy_async`, consumed by `tile.wait`. Tokens carry no data; a pipeline passes
    them from one K/V iteration to the next as loop-carried values, so what each wait waits for is explicit.
  }];
}

def Tile_BarrierType : Tile_Type<"Barrier", "barrier"> {
  let summary = "one barrier per slot of a buffer (an mbarrier each, on SM90)";
  let description = [{
    `!tile.barrier<slots = 2>`, made by `tile.barrier`: a "full" barrier completes a phase of a slot when the bytes
    of its tile have landed, an "empty" barrier when every consumer has released the slot. Waits and arrivals name
    the ring position of a tile: position i is slot i mod slots, in its round i div slots.
  }];
  let parameters = (ins "int64_t":$slots);
  let assemblyFormat = "`<` `slots` `=` $slots `>`";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Tile_Attr<string name, string attrMnemonic> : AttrDef<Tile_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Tile_ShapeClassParameter : EnumParameter<Tile_ShapeClass> {
  let defaultValue = "::flashtile::tile::ShapeClass::Default";
}

def Tile_WarpLayoutParameter : EnumParameter<Tile_WarpLayout>;

def Tile_ScheduleAttr : Tile_Attr<"Schedule", "schedule"> {
  let summary = "the schedule a program was scheduled with";
  let description = [{
    Attached to `tile.func` by `tile-apply-schedule`. `blockM` query rows per thread block, `blockN` keys per K/V
    tile, `warps` per block, `stages` shared-memory buffers per K/V operand (K/V tile j in buffer j mod stages;
    for FA2, 2 also means Q·Kᵀ runs one tile ahead of the softmax), `rescaleThreshold` the rescale policy (0,
    omitted: acc is rescaled every tile; τ > 0: only when a row max grows by more than τ, in log2 units),
    `minBlocksPerSm` the occupancy the register allocation must allow (0, omitted: no request), `lptGroupBlocks`
    the block order (0, omitted: Q tiles heaviest first within each batch entry and head; N: heaviest first across
    groups of (batch, head) pairs of at least N blocks), `shapeClass` the shapes the kernel is for (`default`,
    omitted: any; `short`: at most 1024 query and key rows per sequence on average), which the kernel's name carries.
    `warpLayout` and `warpRows` are how the block's query rows are spread over the warps that compute them
    (`split_q`: each computing warp owns `warpRows` rows of its own, blockM / warpRows warps compute; docs/ir.md).
    Example: `#tile.schedule<name = "fa2", blockM = 128, blockN = 64, warps = 4, warpLayout = split_q, warpRows = 32,
    stages = 2, rescaleThreshold = 8>`.
  }];
  let parameters = (ins StringRefParameter<>:$name, "int64_t":$blockM, "int64_t":$blockN, "int64_t":$warps,
                        Tile_WarpLayoutParameter:$warpLayout, "int64_t":$warpRows,
                        "int64_t":$stages, DefaultValuedParameter<"int64_t", "0">:$rescaleThreshold,
                        DefaultValuedParameter<"int64_t", "0">:$minBlocksPerSm,
                        DefaultValuedParameter<"int64_t", "0">:$lptGroupBlocks,
                        Tile_ShapeClassParameter:$shapeClass);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tile_TargetAttr : Tile_Attr<"Target", "target"> {
  let summary = "the GPU target and the instruction family a program was lowered to";
  let description = [{
    Attached to `tile.func` by `tile-lower-to-target`: `arch` is what NVRTC compiles for (sm_80, sm_90a, sm_100a),
    `isa` the instruction family the schedule's tile ops were lowered to (sm80: mma.sync, ldmatrix, cp.async), one
    of the families registered with codegen/common/TargetRegistry.h (the verifier names them).
    Example: `#tile.target<arch = "sm_90a", isa = "sm80">`.
  }];
  let parameters = (ins StringRefParameter<>:$arch, StringRefParameter<>:$isa);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Tile_InputAttr : Tile_Attr<"Input", "input"> {
  let summary = "a variant's extra input: a named device array of f32 or i32 elements";
  let description = [{
    Declared in `tile.func`'s `inputs` (their order is the order of FlashtileFwdParams::inputs) and read with
    `tile.input`. Example: `#tile.input<"slopes" : f32>`.
  }];
  let parameters = (ins StringRefParameter<>:$name, "::mlir::Type":$elementType);
  let assemblyFormat = "`<` $name `:` $elementType `>`";
}

#endif // FLASHTILE_TILE_DIALECT
