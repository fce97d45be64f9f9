//===- TileEnums.td - the closed vocabularies of the tile dialect --------===//
//
// Every word of the IR that names one of a fixed set of things is an enum: the parser accepts only its values
// (a bad one is a parse error listing them), C++ compares enum values and switches over them (the compiler checks
// the cases), and the generated stringify/symbolize functions are the one map between names and values.
// Included by TileDialect.td after Tile_Dialect. Names plug-ins register (`#tile.target`'s isa, a schedule's name)
// stay strings checked against their registries: docs/ir.md, "Why these stay strings".
//
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_TILE_ENUMS
#define FLASHTILE_TILE_ENUMS

include "mlir/IR/EnumAttr.td"

/// An enum of the tile dialect. `what` names it in the parse error of a value outside the set:
/// "expected a K/V walk order (ascending, descending), got 'sideways'".
class Tile_Enum<string name, string what, string summary, list<I32EnumAttrCase> cases>
    : I32EnumAttr<name, summary, cases> {
  let cppNamespace = "::flashtile::tile";
  let genSpecializedAttr = 0;
  let parameterParser = [{[&]() -> ::mlir::FailureOr<}] # cppType # [{> {
    ::llvm::SMLoc loc = $_parser.getCurrentLocation();
    std::string keyword;
    if (::mlir::succeeded($_parser.parseOptionalKeywordOrString(&keyword)))
      if (std::optional<}] # cppType # [{> value = }] # cppNamespace # "::" # stringToSymbolFnName # [{(keyword))
        return *value;
    return {(::llvm::LogicalResult)($_parser.emitError(loc) << "expected }] # what # [{ (}] #
        !interleave(!foreach(c, cases, c.str), ", ") # [{)" << (keyword.empty() ? "" : ", got '" + keyword + "'"))};
  }()}];
}

/// Printed as ` word` (the leading space separates it from the mnemonic in the generic form, `#tile<order
/// descending>`), so op formats put an empty literal before one: "`` $operand" prints `tile.load k[%j]`.
class Tile_EnumAttr<Tile_Enum enum, string mnemonic> : EnumAttr<Tile_Dialect, enum, mnemonic>;

// The named tensors programs read (tile.load) and write (tile.store). Which ones a program may name is its kind's
// (passes/IR/ProgramKinds.h): the forward reads q, k, v and writes o, lse; the backward's pieces read the forward's
// tensors, its results and dO and write D (delta), the fp32 dQ accumulator, dQ, dK and dV.
def Tile_Operand : Tile_Enum<"Operand", "an input operand", "a tile read from the inputs", [
  I32EnumAttrCase<"Q", 0, "q">,
  I32EnumAttrCase<"K", 1, "k">,
  I32EnumAttrCase<"V", 2, "v">,
  // The forward's output (the backward reads it: D = rowsum(dO∘O)).
  I32EnumAttrCase<"O", 3, "o">,
  // The gradient of the loss with respect to O.
  I32EnumAttrCase<"DO", 4, "do">,
  // The forward's log-sum-exp rows (fp32).
  I32EnumAttrCase<"Lse", 5, "lse">,
  // D = rowsum(dO∘O) (fp32 rows), written by the backward's preprocess.
  I32EnumAttrCase<"Delta", 6, "delta">,
  // The fp32 dQ accumulator the backward's main program adds into (tile.accumulate).
  I32EnumAttrCase<"DqAccum", 7, "dq_accum">
]>;
def Tile_OperandAttr : Tile_EnumAttr<Tile_Operand, "operand">;

def Tile_Output : Tile_Enum<"Output", "an output", "a tile written to the outputs", [
  I32EnumAttrCase<"O", 0, "o">,
  I32EnumAttrCase<"Lse", 1, "lse">,
  // D = rowsum(dO∘O), one fp32 per query row (the backward's preprocess).
  I32EnumAttrCase<"Delta", 2, "delta">,
  // The gradients, converted to the program's dtype: dQ of a Q tile (the backward's postprocess), dK and dV of a
  // K/V tile (the backward's main program; each query head's part, added over a GQA group).
  I32EnumAttrCase<"Dq", 3, "dq">,
  I32EnumAttrCase<"Dk", 4, "dk">,
  I32EnumAttrCase<"Dv", 5, "dv">
]>;
def Tile_OutputAttr : Tile_EnumAttr<Tile_Output, "output">;

def Tile_RangeKind : Tile_Enum<"RangeKind", "a KV-range kind", "which keys a tile.kv_range rule bounds", [
  // Keys outside can never be attended by any row of the Q tile: their tiles are skipped.
  I32EnumAttrCase<"May", 0, "may">,
  // Every row of the Q tile attends every key inside: those tiles need no mask.
  I32EnumAttrCase<"Full", 1, "full">
]>;
def Tile_RangeKindAttr : Tile_EnumAttr<Tile_RangeKind, "range_kind">;

def Tile_Segment : Tile_Enum<"Segment", "a K/V loop segment", "the part of the KV range a tile.kv_loop covers", [
  // The whole range (an unsplit loop).
  I32EnumAttrCase<"All", 0, "all">,
  // The masked tiles at the high end: from the end of the "full" range to the end of the "may" range.
  I32EnumAttrCase<"TailBoundary", 1, "tail_boundary">,
  // The tiles inside the "full" range: no mask.
  I32EnumAttrCase<"Interior", 2, "interior">,
  // The masked tiles at the low end, when the "may" range starts below the "full" range.
  I32EnumAttrCase<"HeadBoundary", 3, "head_boundary">
]>;
def Tile_SegmentAttr : Tile_EnumAttr<Tile_Segment, "segment">;

def Tile_KvOrder : Tile_Enum<"KvOrder", "a K/V walk order", "the order K/V tiles are visited in", [
  I32EnumAttrCase<"Ascending", 0, "ascending">,
  I32EnumAttrCase<"Descending", 1, "descending">
]>;
def Tile_KvOrderAttr : Tile_EnumAttr<Tile_KvOrder, "order">;

def Tile_Dim : Tile_Enum<"Dim", "a dimension", "a problem size read from the kernel arguments (tile.dim)", [
  I32EnumAttrCase<"Batch", 0, "batch">,
  I32EnumAttrCase<"HeadsQ", 1, "heads_q">,
  I32EnumAttrCase<"HeadsKv", 2, "heads_kv">,
  I32EnumAttrCase<"SeqlenQ", 3, "seqlen_q">,
  I32EnumAttrCase<"SeqlenK", 4, "seqlen_k">,
  I32EnumAttrCase<"KeyOffset", 5, "key_offset">,
  I32EnumAttrCase<"SplitBegin", 6, "split_begin">,
  I32EnumAttrCase<"SplitEnd", 7, "split_end">,
  I32EnumAttrCase<"KvStep", 8, "kv_step">,
  // This program instance's batch entry and query head (what a forward instance's KV-range rules are given).
  I32EnumAttrCase<"BatchIndex", 9, "batch_index">,
  I32EnumAttrCase<"HeadIndex", 10, "head_index">,
  // The K/V tile a backward_main instance owns (0 in other programs).
  I32EnumAttrCase<"KvTile", 11, "kv_tile">,
  // Programs that are a block of a larger problem (tile-offset-positions, passes/IR/TilePositions.h): where the
  // block's first query row, key and query head sit in it, and its sizes, which the hooks read in place of
  // seqlen_q, seqlen_k, heads_q, heads_kv and key_offset.
  I32EnumAttrCase<"QOffset", 12, "q_offset">,
  I32EnumAttrCase<"KOffset", 13, "k_offset">,
  I32EnumAttrCase<"SeqlenQGlobal", 14, "seqlen_q_global">,
  I32EnumAttrCase<"SeqlenKGlobal", 15, "seqlen_k_global">,
  I32EnumAttrCase<"KeyOffsetGlobal", 16, "key_offset_global">,
  I32EnumAttrCase<"HeadOffset", 17, "head_offset">,
  I32EnumAttrCase<"HeadsQGlobal", 18, "heads_q_global">,
  I32EnumAttrCase<"HeadsKvGlobal", 19, "heads_kv_global">
]>;
def Tile_DimAttr : Tile_EnumAttr<Tile_Dim, "dim">;

// The runtime picks a call's shape class with one generic rule (Runtime::shapeClassFor) from a fixed list
// (runtime/KernelInfo.h: kShapeClasses); a schedule only decides whether it tiles a class differently. The values
// and their order equal kShapeClasses (checked by a static_assert and a unit test).
def Tile_ShapeClass : Tile_Enum<"ShapeClass", "a shape class", "the shapes a kernel is tiled for", [
  // Any shape.
  I32EnumAttrCase<"Default", 0, "default">,
  // At most 1024 query and key rows per sequence on average.
  I32EnumAttrCase<"Short", 1, "short">
]>;

// How a schedule spreads a block's query rows over the warps that compute (the schedule's decision; the printers
// lay out registers and shared-memory reads by it and reject a layout they do not print).
def Tile_WarpLayout : Tile_Enum<"WarpLayout", "a warp layout", "how a block's query rows are spread over its warps", [
  // Split-Q (FA2): computing warp w owns rows [w·warpRows, (w + 1)·warpRows) of the block, in MMA-m tiles; the
  // warps never exchange row statistics.
  I32EnumAttrCase<"SplitQ", 0, "split_q">,
  // Split-keys, for decode's few query rows: every computing warp holds all warpRows = blockM rows and takes its
  // share of each K/V tile's keys; the warps merge m, l and acc at the end. Reserved: no schedule sets it and no
  // target prints it yet (the printers reject it, naming split_q).
  I32EnumAttrCase<"SplitKeys", 1, "split_keys">
]>;

#endif // FLASHTILE_TILE_ENUMS
