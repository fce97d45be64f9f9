//===- TileDialect.cpp - types, attributes, the forward's and the memory ops' verifiers ---===//
//
// The backward programs' ops are verified in TileBackwardOps.cpp, the canonicalization patterns are in
// TileCanonicalize.cpp; the helpers the three share are declared in TileVerify.h. Why ~1030 lines: the types,
// attributes and forward verifiers are one table of short functions, read op by op; split further they would be
// files of a few verifiers each.
#include "passes/IR/TileDialect.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileKvDtype.h"
#include "passes/IR/TileNames.h"
#include "passes/IR/TileRotary.h"
#include "passes/IR/TileVerify.h"
#include "passes/Target/TargetFamily.h"

#include "mlir/IR/Matchers.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

using namespace mlir;
using namespace flashtile::tile;

/// The largest rescale threshold (log2 units) for an e4m3 P: 2^8 = 256 stays below e4m3's largest finite 448.
static constexpr int64_t kMaxE4m3RescaleThreshold = 8;

#include "passes/IR/TileDialect.cpp.inc"
#include "passes/IR/TileEnums.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "passes/IR/TileTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "passes/IR/TileAttrs.cpp.inc"

namespace flashtile::tile {
/// The regions of tile ops (custom<TileRegion> in TileOps.td): MLIR's parseRegion, plus the clean-up its error path
/// lacks. A name used before it is defined outside a region op may be resolved by a definition inside the region;
/// when the region then fails to parse it is destroyed with its ops, and the outer user would keep a freed value
/// (found by fuzz-ir: a use-after-free in flashtile-opt on malformed input). Dropping every use of the region's
/// values before it goes leaves such users with no operand instead.
static mlir::ParseResult parseTileRegion(mlir::OpAsmParser &parser, mlir::Region &region) {
  const llvm::SMLoc loc = parser.getCurrentLocation();
  const bool parsed = succeeded(parser.parseRegion(region));
  // The same resolution can happen when the region parses: a use before it, outside, then holds a value of the
  // region, which a later error in the op's own syntax (after the region) frees with it. Such uses are dropped here,
  // and the region is an error.
  bool escapes = false;
  llvm::SmallPtrSet<mlir::Operation *, 16> inside;
  region.walk([&](mlir::Operation *op) { inside.insert(op); });
  auto dropOutsideUses = [&](mlir::Value value) {
    for (mlir::OpOperand &use : llvm::make_early_inc_range(value.getUses()))
      if (!inside.contains(use.getOwner())) {
        use.drop();
        escapes = true;
      }
  };
  for (mlir::Operation *op : inside)
    llvm::for_each(op->getResults(), dropOutsideUses);
  region.walk([&](mlir::Block *block) { llvm::for_each(block->getArguments(), dropOutsideUses); });
  if (parsed && !escapes)
    return mlir::success();
  if (parsed)
    parser.emitError(loc, "a value defined in this region is used outside it");
  for (mlir::Block &block : region) {
    for (mlir::BlockArgument arg : block.getArguments())
      arg.dropAllUses();
    block.walk([](mlir::Operation *op) { op->dropAllUses(); });
  }
  return mlir::failure();
}
static void printTileRegion(mlir::OpAsmPrinter &printer, mlir::Operation *, mlir::Region &region) {
  printer.printRegion(region);
}
/// A program's body (tile.func, no terminator): as parseTileRegion, and `{}` is one empty block, as MLIR's own
/// parser makes it for regions without terminators.
static mlir::ParseResult parseTileBody(mlir::OpAsmParser &parser, mlir::Region &region) {
  if (failed(parseTileRegion(parser, region)))
    return mlir::failure();
  if (region.empty())
    region.emplaceBlock();
  return mlir::success();
}
static void printTileBody(mlir::OpAsmPrinter &printer, mlir::Operation *op, mlir::Region &region) {
  printTileRegion(printer, op, region);
}
} // namespace flashtile::tile

#define GET_OP_CLASSES
#include "passes/IR/TileOps.cpp.inc"

void TileDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "passes/IR/TileTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "passes/IR/TileAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "passes/IR/TileOps.cpp.inc"
      >();
}

FuncOp flashtile::tile::getEnclosingFunc(Operation *op) { return op->getParentOfType<FuncOp>(); }

bool flashtile::tile::isComputedFrom(Value v, Value target) {
  SmallVector<Value> work = {v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value next = work.pop_back_val();
    if (next == target)
      return true;
    if (!seen.insert(next).second)
      continue;
    if (Operation *def = next.getDefiningOp())
      work.append(def->operand_begin(), def->operand_end());
  }
  return false;
}

//===----------------------------------------------------------------------===//
// The online softmax's state: row statistics and accumulator
//===----------------------------------------------------------------------===//

llvm::StringRef flashtile::tile::memorySpaceName(MemorySpace space) {
  switch (space) {
  case MemorySpace::Registers:
    return "registers";
  case MemorySpace::Shared:
    return "shared";
  case MemorySpace::Tensor:
    return "tensor";
  }
  return "registers";
}

/// `?` or a positive row count, as `!tile.stats<...>` and `!tile.acc<...>` spell it.
static void printRows(AsmPrinter &printer, int64_t rows) {
  if (rows == ShapedType::kDynamic)
    printer << "?";
  else
    printer << rows;
}

static LogicalResult verifyRows(function_ref<InFlightDiagnostic()> emitError, int64_t rows, StringRef what) {
  if (rows != ShapedType::kDynamic && rows <= 0)
    return emitError() << what << " rows must be positive or '?', got " << rows;
  return success();
}

// StatsType: `!tile.stats<?>`, `!tile.stats<128>`
Type StatsType::parse(AsmParser &parser) {
  int64_t rows = ShapedType::kDynamic;
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalQuestion()) && parser.parseInteger(rows))
    return {};
  if (parser.parseGreater())
    return {};
  return StatsType::getChecked([&] { return parser.emitError(parser.getNameLoc()); }, parser.getContext(), rows);
}

void StatsType::print(AsmPrinter &printer) const {
  printer << "<";
  printRows(printer, getRows());
  printer << ">";
}

LogicalResult StatsType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t rows) {
  return verifyRows(emitError, rows, "row statistics");
}

// AccType: `!tile.acc<?x128>`, `!tile.acc<128x128, tensor>`
Type AccType::parse(AsmParser &parser) {
  SmallVector<int64_t, 2> dims;
  if (parser.parseLess() || parser.parseDimensionList(dims, /*allowDynamic=*/true, /*withTrailingX=*/false))
    return {};
  if (dims.size() != 2) {
    parser.emitError(parser.getNameLoc(), "expected !tile.acc<ROWSxCOLS> or !tile.acc<ROWSxCOLS, SPACE>");
    return {};
  }
  MemorySpace space = MemorySpace::Registers;
  if (succeeded(parser.parseOptionalComma())) {
    std::string name;
    if (parser.parseKeywordOrString(&name))
      return {};
    if (name == "shared")
      space = MemorySpace::Shared;
    else if (name == "tensor")
      space = MemorySpace::Tensor;
    else if (name != "registers") {
      parser.emitError(parser.getNameLoc(), "the accumulator's memory space is registers, shared or tensor; got '")
          << name << "'";
      return {};
    }
  }
  if (parser.parseGreater())
    return {};
  return AccType::getChecked([&] { return parser.emitError(parser.getNameLoc()); }, parser.getContext(), dims[0],
                             dims[1], space);
}

void AccType::print(AsmPrinter &printer) const {
  printer << "<";
  printRows(printer, getRows());
  printer << "x" << getCols();
  if (getSpace() != MemorySpace::Registers)
    printer << ", " << memorySpaceName(getSpace());
  printer << ">";
}

LogicalResult AccType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t rows, int64_t cols,
                              MemorySpace) {
  if (cols <= 0 || cols == ShapedType::kDynamic)
    return emitError() << "accumulator columns (head_dim_v) must be static and positive, got " << cols;
  return verifyRows(emitError, rows, "accumulator");
}

LogicalResult BufferType::verify(function_ref<InFlightDiagnostic()> emitError, RankedTensorType tile,
                                 int64_t slots) {
  if (!tile.hasStaticShape() || tile.getRank() != 2)
    return emitError() << "a buffer holds static rank-2 tiles (a scheduled program's), got " << tile;
  if (!isa<BFloat16Type, Float16Type, Float8E4M3FNType>(tile.getElementType()))
    return emitError() << "a buffer holds bf16, f16 or f8E4M3FN tiles, got " << tile.getElementType();
  if (slots < 1 || slots > kMaxScheduleStages)
    return emitError() << "a buffer has 1 to " << kMaxScheduleStages << " slots, got " << slots;
  return success();
}

//===----------------------------------------------------------------------===//
// Shared helpers for the verifiers
//===----------------------------------------------------------------------===//

namespace flashtile::tile::detail {
bool dimsCompatible(int64_t a, int64_t b) { return a == ShapedType::kDynamic || b == ShapedType::kDynamic || a == b; }

std::string dimStr(int64_t d) { return d == ShapedType::kDynamic ? "?" : std::to_string(d); }

/// Checks a region's entry block signature: `types` block arguments and a terminator yielding `yields`.
LogicalResult checkRegionSignature(Operation *op, Region &region, TypeRange args, TypeRange yields, StringRef what) {
  Block &block = region.front();
  if (block.getArgumentTypes() != args) {
    std::string expect;
    llvm::raw_string_ostream os(expect);
    llvm::interleaveComma(args, os);
    return op->emitOpError() << what << " region must take (" << expect << ")";
  }
  // A region without an implicit terminator (tile.kv_range's) may end without one: getTerminator() needs one.
  auto yield = block.empty() ? YieldOp() : dyn_cast<YieldOp>(block.back());
  if (!yield || yield.getValues().getTypes() != yields) {
    std::string expect;
    llvm::raw_string_ostream os(expect);
    llvm::interleaveComma(yields, os);
    return op->emitOpError() << what << " region must yield (" << expect << ")";
  }
  return success();
}

const ProgramKind &kindAround(Operation *op) {
  FuncOp func = getEnclosingFunc(op);
  const ProgramKind *kind = func ? lookupProgramKind(func.getKind()) : nullptr;
  return kind ? *kind : *lookupProgramKind(kForwardProgram);
}
} // namespace flashtile::tile::detail

using namespace flashtile::tile::detail;

//===----------------------------------------------------------------------===//
// Op verifiers
//===----------------------------------------------------------------------===//

int64_t FuncOp::paramIndex(StringRef name) {
  for (auto [i, attr] : llvm::enumerate(getParams()))
    if (cast<StringAttr>(attr).getValue() == name)
      return static_cast<int64_t>(i);
  return -1;
}

int64_t FuncOp::inputIndex(StringRef name) {
  for (auto [i, attr] : llvm::enumerate(getInputs()))
    if (cast<InputAttr>(attr).getName() == name)
      return static_cast<int64_t>(i);
  return -1;
}

std::string flashtile::tile::dtypeName(Type dtype) {
  if (dtype.isBF16())
    return "bf16";
  if (dtype.isF16())
    return "f16";
  if (isa<Float8E4M3FNType>(dtype))
    return "e4m3";
  std::string text;
  llvm::raw_string_ostream(text) << dtype;
  return text;
}

Type FuncOp::getOutputType() {
  Type dtype = getDtype();
  return isa<Float8E4M3FNType>(dtype) ? Type(BFloat16Type::get(getContext())) : dtype;
}

Type flashtile::tile::kvDtypeOf(FuncOp func) {
  if (auto attr = func->getAttrOfType<TypeAttr>(kKvDtypeAttr))
    return attr.getValue();
  return func.getDtype();
}

bool flashtile::tile::hasKvDtype(FuncOp func) { return func->hasAttr(kKvDtypeAttr); }

LogicalResult ScheduleAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef name, int64_t blockM,
                                   int64_t blockN, int64_t warps, WarpLayout warpLayout, int64_t warpRows,
                                   int64_t stages, int64_t rescaleThreshold, int64_t minBlocksPerSm,
                                   int64_t lptGroupBlocks, ShapeClass) {
  // Every number a schedule can set, bounded here once: the printer and the runtime compute sizes, launch bounds
  // and grids from them in 32-bit ints. A schedule checks its own, tighter, rules on top.
  struct Bound {
    StringRef field;
    int64_t value, min, max;
  };
  // P may reach 2^rescaleThreshold: at most 15 keeps it finite in fp16 (tile.softmax_update). The kernels' block
  // order multiplies group sizes in 32-bit ints (lptGroupBlocks).
  const Bound bounds[] = {
      {"blockM", blockM, 1, kMaxScheduleRows},       {"blockN", blockN, 1, kMaxScheduleRows},
      {"warps", warps, 1, kMaxScheduleWarps},        {"stages", stages, 1, kMaxScheduleStages},
      {"rescaleThreshold", rescaleThreshold, 0, 15}, {"minBlocksPerSm", minBlocksPerSm, 0, kMaxScheduleBlocksPerSm},
      {"lptGroupBlocks", lptGroupBlocks, 0, 1 << 20}};
  for (const Bound &b : bounds)
    if (b.value < b.min || b.value > b.max)
      return emitError() << "schedule " << b.field << " = " << b.value << " is not supported; accepted: " << b.min
                         << " to " << b.max;
  if (name.empty() || !llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; }))
    return emitError() << "schedule name '" << name << "' is not an identifier ([A-Za-z0-9_]+)";
  // The layout's own arithmetic; that warpRows is a multiple of an MMA's rows is the target family's check (its MMA
  // shape), in tile-lower-to-target and the printer.
  if (warpRows < 1 || blockM % warpRows != 0)
    return emitError() << "schedule warpRows = " << warpRows << " must divide blockM (" << blockM << ")";
  switch (warpLayout) {
  case WarpLayout::SplitQ:
    if (blockM / warpRows > warps)
      return emitError() << "schedule warp layout split_q: blockM / warpRows = " << blockM / warpRows
                         << " computing warps, but the block has " << warps;
    break;
  case WarpLayout::SplitKeys:
    if (warpRows != blockM)
      return emitError() << "schedule warp layout split_keys: every warp holds all blockM (" << blockM
                         << ") rows, got warpRows = " << warpRows;
    break;
  }
  return success();
}

LogicalResult TargetAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef arch, StringRef isa) {
  // The instruction families are plug-ins (codegen/<family>/): the registry, not the IR, knows their names.
  if (target::lookupTarget(std::string_view(isa)))
    return success();
  std::vector<std::string> names = target::targetNames();
  InFlightDiagnostic diag = emitError() << "target isa '" << isa << "' is not a registered instruction family; ";
  if (names.empty())
    return diag << "none is registered (the tool must call codegen::registerBuiltinTargets)";
  diag << "registered: ";
  llvm::interleaveComma(names, diag);
  return diag;
}

/// `name` with quotes, backslashes and unprintable characters escaped (\\XX): safe to quote in a diagnostic.
static std::string escapedName(StringRef name) {
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::printEscapedString(name, os);
  return text;
}

bool flashtile::tile::isIdentifierName(StringRef name) {
  return !name.empty() && name.size() <= kMaxNameLength && (llvm::isAlpha(name[0]) || name[0] == '_') &&
         llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_'; });
}

bool flashtile::tile::isVariantName(StringRef name) {
  return !name.empty() && name.size() <= kMaxNameLength && (llvm::isAlpha(name[0]) || name[0] == '_') &&
         llvm::all_of(name, [](char c) { return llvm::isAlnum(c) || c == '_' || c == '.' || c == '-'; });
}

LogicalResult FuncOp::verify() {
  if (!lookupProgramKind(getKind())) {
    std::string known;
    for (const std::string &name : programKindNames())
      known += (known.empty() ? "" : ", ") + name;
    return emitOpError() << "program kind '" << getKind() << "' is not registered; known: " << known;
  }
  Type dtype = getDtype();
  if (!dtype.isF16() && !dtype.isBF16() && !isa<Float8E4M3FNType>(dtype))
    return emitOpError() << "dtype must be f16, bf16 or f8E4M3FN (e4m3), got " << dtype;
  if (isa<Float8E4M3FNType>(dtype) && getKind() != kForwardProgram)
    return emitOpError() << "dtype " << dtype << " (e4m3) is for forward programs only, not " << getKind()
                         << ": FP8 attention has no backward (as flash-attn 3)";
  if (Attribute kv = (*this)->getAttr(kKvDtypeAttr)) {
    // An e4m3 KV cache read by a 16-bit program (TileKvDtype.h): the only pair a target widens exactly.
    auto type = dyn_cast<TypeAttr>(kv);
    if (!type || !isa<Float8E4M3FNType>(type.getValue()))
      return emitOpError() << kKvDtypeAttr << " must be f8E4M3FN (an e4m3 KV cache), got " << kv;
    if (!dtype.isF16() && !dtype.isBF16())
      return emitOpError() << kKvDtypeAttr << " (e4m3 K and V) needs a bf16 or f16 program, got dtype " << dtype
                           << "; an e4m3 program's K and V are e4m3 already";
    if (getKind() != kForwardProgram)
      return emitOpError() << kKvDtypeAttr << " is for forward programs only, not " << getKind()
                           << ": an e4m3 KV cache has no backward";
  }
  for (auto [name, dim] : {std::pair<StringRef, int64_t>{"head_dim", getHeadDim()}, {"head_dim_v", getHeadDimV()}})
    if (dim < 8 || dim > 512 || dim % 8 != 0)
      return emitOpError() << name << " must be a multiple of 8 in [8, 512], got " << dim;
  // Names are printed into generated CUDA and manifests: an alphabet that cannot end a comment or a line there.
  if (!isVariantName(getVariant()))
    return emitOpError() << "variant name \"" << escapedName(getVariant())
                         << "\" is not accepted: [A-Za-z_] then [A-Za-z0-9_.-], at most " << kMaxNameLength
                         << " characters";
  llvm::StringSet<> seen;
  for (Attribute p : getParams()) {
    StringRef name = cast<StringAttr>(p).getValue();
    if (!isIdentifierName(name))
      return emitOpError() << "parameter name \"" << escapedName(name)
                           << "\" is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most " << kMaxNameLength
                           << " characters)";
    if (!seen.insert(name).second)
      return emitOpError() << "parameter '" << name << "' is declared twice";
  }
  llvm::StringSet<> inputs;
  for (Attribute a : getInputs()) {
    auto input = cast<InputAttr>(a);
    if (!isIdentifierName(input.getName()))
      return emitOpError() << "input name \"" << escapedName(input.getName())
                           << "\" is not an identifier ([A-Za-z_][A-Za-z0-9_]*, at most " << kMaxNameLength
                           << " characters)";
    if (!inputs.insert(input.getName()).second)
      return emitOpError() << "input '" << input.getName() << "' is declared twice";
    if (!input.getElementType().isF32() && !input.getElementType().isInteger(32))
      return emitOpError() << "input '" << input.getName() << "' must have f32 or i32 elements, got "
                           << input.getElementType();
  }
  return success();
}

LogicalResult ParamOp::verify() {
  FuncOp func = getEnclosingFunc(*this);
  if (!func)
    return emitOpError() << "must be inside a tile.func";
  if (func.paramIndex(getName()) < 0)
    return emitOpError() << "'" << getName() << "' is not a parameter of @" << func.getSymName()
                         << " (declared: " << func.getParams() << ")";
  return success();
}

LogicalResult InputOp::verify() {
  FuncOp func = getEnclosingFunc(*this);
  if (!func)
    return emitOpError() << "must be inside a tile.func";
  int64_t index = func.inputIndex(getName());
  if (index < 0)
    return emitOpError() << "'" << getName() << "' is not an input of @" << func.getSymName()
                         << " (declared: " << func.getInputs() << ")";
  Type declared = cast<InputAttr>(func.getInputs()[index]).getElementType();
  if (getResult().getType() != declared)
    return emitOpError() << "'" << getName() << "' is declared with " << declared << " elements but read as "
                         << getResult().getType();
  return success();
}

LogicalResult KvRangeOp::verify() {
  Type i32 = IntegerType::get(getContext(), 32);
  return checkRegionSignature(*this, getRule(), {i32, i32, i32, i32}, {i32, i32}, "kv_range");
}

static LogicalResult checkSlotOperand(Operation *op, Operand operand, Value slot);


/// Shared by load and copy_async: the program's kind reads the tensor; its own tile (the forward's Q) has no tile
/// index, the others (K and V in the forward) have one.
static LogicalResult verifyOperandIndex(Operation *op, Operand operand, Value index) {
  const ProgramKind &kind = kindAround(op);
  StringRef name = stringifyOperand(operand);
  if (!kind.readsTensor(name))
    return op->emitOpError() << "a " << kind.name << " program reads " << joinNames(kind.reads) << ", not " << name;
  bool own = kind.ownsTensor(name);
  if (own && index)
    return op->emitOpError() << "the " << (operand == Operand::Q ? StringRef("Q") : name)
                             << " tile takes no tile index";
  if (!own && !index)
    return op->emitOpError() << "the " << name << " tile needs a tile index: " << name << "[%j]";
  return success();
}

/// The width of an operand's tiles: V's head dim for V, O and dO, Q and K's for the others.
static int64_t headDimOf(FuncOp func, Operand operand) {
  return operand == Operand::V || operand == Operand::O || operand == Operand::DO ? func.getHeadDimV()
                                                                                  : func.getHeadDim();
}

/// The element type of `operand`'s tiles: the program's kv_dtype for the forward's K and V (TileKvDtype.h), else
/// its dtype.
static Type operandDtype(FuncOp func, Operand operand) {
  return operand == Operand::K || operand == Operand::V ? kvDtypeOf(func) : func.getDtype();
}

/// The rank-1 fp32 rows a program reads (LSE and D), one per query row.
static bool isRowTensor(Operand operand) { return operand == Operand::Lse || operand == Operand::Delta; }

LogicalResult LoadOp::verify() {
  if (failed(verifyOperandIndex(*this, getOperand(), getIndex())))
    return failure();
  if (getPred() && !getIndex())
    return emitOpError() << "a predicate only applies to a K/V tile index (tile.load k[%j] if %valid)";
  auto type = cast<RankedTensorType>(getResult().getType());
  FuncOp func = getEnclosingFunc(*this);
  if (isRowTensor(getOperand())) {
    if (type.getRank() != 1 || !type.getElementType().isF32())
      return emitOpError() << stringifyOperand(getOperand()) << " is read as fp32 rows (tensor<?xf32>), got " << type;
    return success();
  }
  if (type.getRank() != 2)
    return emitOpError() << "loads a rank-2 tile, got rank " << type.getRank();
  if (!func)
    return success();
  if (getOperand() == Operand::DqAccum) {
    if (!type.getElementType().isF32())
      return emitOpError() << "the dq_accum tile is fp32, got " << type.getElementType();
  } else if (Type expected = operandDtype(func, getOperand()); type.getElementType() != expected) {
    return emitOpError() << "element type " << type.getElementType() << " differs from the program's "
                         << (expected == func.getDtype() ? "dtype " : "kv_dtype ") << expected;
  }
  int64_t width = headDimOf(func, getOperand());
  if (type.getDimSize(1) != width)
    return emitOpError() << stringifyOperand(getOperand()) << " tile must have " << width << " columns (head dim), got "
                         << dimStr(type.getDimSize(1));
  if (Attribute rotary = (*this)->getAttr(kRotaryAttr)) {
    std::string error;
    if (getOperand() != Operand::Q)
      return emitOpError() << kRotaryAttr << " rotates the Q tile only (the appended keys follow Q's attribute)";
    if (!parseRotary(rotary, &error))
      return emitOpError() << kRotaryAttr << " " << error << ", got " << rotary;
  }
  if (Value slot = getSlot()) {
    if (cast<SlotType>(slot.getType()).getTile() != type)
      return emitOpError() << "reads a " << type << " from a slot of " << cast<SlotType>(slot.getType()).getTile();
    if (failed(checkSlotOperand(*this, getOperand(), slot)))
      return failure();
  }
  return success();
}

/// The staged operand a slot's buffer holds, when the slot comes from tile.slot of a tile.buffer (the only way
/// a pipeline makes them); a slot from elsewhere (a block argument) is not checked here.
static std::optional<Operand> slotOperand(Value slot) {
  auto select = slot.getDefiningOp<SlotOp>();
  auto buffer = select ? select.getBuffer().getDefiningOp<BufferOp>() : BufferOp();
  return buffer ? std::optional<Operand>(buffer.getOperand()) : std::nullopt;
}

static LogicalResult checkSlotOperand(Operation *op, Operand operand, Value slot) {
  std::optional<Operand> holds = slotOperand(slot);
  if (holds && *holds != operand)
    return op->emitOpError() << "moves a " << stringifyOperand(operand) << " tile through a slot of the "
                             << stringifyOperand(*holds) << " buffer";
  return success();
}

LogicalResult BufferOp::verify() {
  const ProgramKind &kind = kindAround(*this);
  if (!kind.readsTensor(stringifyOperand(getOperand())))
    return emitOpError() << "a " << kind.name << " program reads " << joinNames(kind.reads) << ", not "
                         << stringifyOperand(getOperand());
  BufferType type = getBuffer().getType();
  if (getOperand() == Operand::Q && type.getSlots() != 1)
    return emitOpError() << "Q's buffer holds the instance's one Q tile: slots = 1, got " << type.getSlots();
  FuncOp func = getEnclosingFunc(*this);
  if (!func)
    return success();
  RankedTensorType tile = type.getTile();
  if (Type expected = operandDtype(func, getOperand()); tile.getElementType() != expected)
    return emitOpError() << "holds " << tile.getElementType() << " tiles but the program's "
                         << (expected == func.getDtype() ? "dtype" : "kv_dtype") << " is " << expected;
  int64_t width = headDimOf(func, getOperand());
  if (tile.getDimSize(1) != width)
    return emitOpError() << "holds " << stringifyOperand(getOperand()) << " tiles of " << tile.getDimSize(1)
                         << " columns; the head dim is " << width;
  return success();
}

LogicalResult SlotOp::verify() {
  int64_t slots = getBuffer().getType().getSlots();
  if (!getIndex() && slots != 1)
    return emitOpError() << "a buffer of " << slots << " slots needs a tile index: tile.slot %buffer[%j]";
  return success();
}

/// Whether `token` comes from an asynchronous MMA (tile.qk / tile.pv) or a copy, where its producer is visible (a
/// token carried by a loop is checked where it is made).
static std::optional<bool> isMmaToken(Value token) {
  Operation *def = token.getDefiningOp();
  if (isa_and_nonnull<QkOp, PvOp>(def))
    return true;
  if (isa_and_nonnull<CopyAsyncOp>(def))
    return false;
  return std::nullopt;
}

/// The buffer behind a slot or barrier value, when a tile.slot / tile.barrier of a tile.buffer made it.
static Value bufferBehind(Value v) {
  if (auto slot = v.getDefiningOp<SlotOp>())
    return slot.getBuffer();
  if (auto barrier = v.getDefiningOp<BarrierOp>())
    return barrier.getBuffer();
  return Value();
}

LogicalResult CopyAsyncOp::verify() {
  if (failed(verifyOperandIndex(*this, getOperand(), getIndex())))
    return failure();
  if (getPred() && !getIndex())
    return emitOpError() << "a predicate only applies to a K/V tile index (tile.copy_async k[%j] into %s if %valid)";
  if (Value full = getFull()) {
    auto barrier = full.getDefiningOp<BarrierOp>();
    if (barrier && !barrier.isFull())
      return emitOpError() << "arrives on an empty barrier; a copy completes the phase of its slot's full barrier";
    Value a = bufferBehind(full), b = bufferBehind(getSlot());
    if (a && b && a != b)
      return emitOpError() << "arrives on the full barrier of another buffer than the one its slot is in";
  } else if ((*this)->getParentOfType<RoleOp>()) {
    return emitOpError() << "inside a tile.role must arrive on a full barrier (roles do not share tile.wait's "
                            "block-wide barrier)";
  }
  return checkSlotOperand(*this, getOperand(), getSlot());
}

LogicalResult WaitOp::verify() {
  if (getTokens().empty())
    return emitOpError() << "waits for at least one token";
  for (Value token : getTokens())
    if (isMmaToken(token) == std::optional<bool>(true))
      return emitOpError() << "waits for an MMA's token; asynchronous MMAs are waited by tile.mma_wait";
  if ((*this)->getParentOfType<RoleOp>())
    return emitOpError() << "is a block-wide barrier, which roles do not share; a role waits on a full barrier "
                            "(tile.barrier_wait)";
  return success();
}

LogicalResult MmaWaitOp::verify() {
  if (getTokens().empty())
    return emitOpError() << "waits for at least one token";
  for (Value token : getTokens())
    if (isMmaToken(token) == std::optional<bool>(false))
      return emitOpError() << "waits for a copy's token; copies are waited by tile.wait or a full barrier";
  return success();
}

LogicalResult BarrierOp::verify() {
  if (static_cast<bool>(getBytes()) == static_cast<bool>(getArrivals()))
    return emitOpError() << "is a full barrier (bytes = the tile's bytes) or an empty one (arrivals = consumers): "
                            "give exactly one";
  if (std::optional<uint64_t> bytes = getBytes()) {
    RankedTensorType tile = getBuffer().getType().getTile();
    int64_t expected = tile.getNumElements() * (tile.getElementTypeBitWidth() / 8);
    if (static_cast<int64_t>(*bytes) != expected)
      return emitOpError() << "expects " << *bytes << " bytes per phase, but a " << tile << " tile is " << expected;
  }
  if (std::optional<uint64_t> arrivals = getArrivals(); arrivals && (*arrivals < 1 || *arrivals > kMaxScheduleWarps))
    return emitOpError() << "expects 1 to " << kMaxScheduleWarps << " arrivals per phase, got " << *arrivals;
  return success();
}

LogicalResult KvWalkOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 || !body.getArgument(0).getType().isInteger(32))
    return emitOpError() << "body takes the tile index (i32) only";
  if (!cast<YieldOp>(body.getTerminator()).getValues().empty())
    return emitOpError() << "body yields nothing";
  return success();
}

LogicalResult WorkLoopOp::verify() {
  Block &body = getBody().front();
  size_t carried = getInits().size();
  if (body.getNumArguments() != carried + 1 ||
      llvm::any_of(body.getArgumentTypes(), [](Type t) { return !t.isInteger(32); }))
    return emitOpError() << "body takes the tile count and one i32 per iter_arg (" << carried + 1
                         << " i32 arguments), got " << body.getNumArguments();
  if (getResults().size() != carried)
    return emitOpError() << "has " << getResults().size() << " results for " << carried << " iter_args";
  if (cast<YieldOp>(body.getTerminator()).getValues().size() != carried)
    return emitOpError() << "body yields one i32 per iter_arg (" << carried << ")";
  Operation *parent = (*this)->getParentOp();
  if (!isa_and_nonnull<FuncOp, RoleOp>(parent) || (isa<RoleOp>(parent) && !isa<FuncOp>(parent->getParentOp())))
    return emitOpError() << "must be at the top level of a tile.func or of one of its tile.role regions";
  if (static_cast<bool>(getQueueFull()) != static_cast<bool>(getQueueEmpty()))
    return emitOpError() << "takes the full and the empty barrier of its tile.work_queue, or neither";
  if (getTake() && !isDynamic())
    return emitOpError() << "takes units (take) but is not dynamic: only a dynamic loop takes them from a counter";
  if (isDynamic()) {
    auto queue = getQueueFull().getDefiningOp<WorkQueueOp>();
    if (!queue || queue.getFull() != getQueueFull() || queue.getEmpty() != getQueueEmpty())
      return emitOpError() << "dynamic(full, empty) must be the two barriers of one tile.work_queue, in that order";
    if (isa<FuncOp>(parent) && !getTake())
      return emitOpError() << "is dynamic outside roles, so it must take its units itself (take)";
  }
  if (isa<FuncOp>(parent))
    return success();
  int takers = 0;
  for (RoleOp role : parent->getBlock()->getOps<RoleOp>()) {
    auto loops = role.getBody().getOps<WorkLoopOp>();
    if (loops.empty())
      return emitOpError() << "is in role '" << cast<RoleOp>(parent).getName() << "' but role '" << role.getName()
                           << "' has none: the roles of a block walk the same tiles";
    WorkLoopOp other = *loops.begin();
    if (other.getQueueFull() != getQueueFull())
      return emitOpError() << "is " << (isDynamic() ? "dynamic" : "static") << " in role '"
                           << cast<RoleOp>(parent).getName() << "' but role '" << role.getName() << "' loops "
                           << (other.isDynamic() ? "dynamically" : "statically")
                           << (isDynamic() && other.isDynamic() ? " on another tile.work_queue" : "")
                           << ": the roles of a block walk the same tiles";
    takers += other.getTake() ? 1 : 0;
  }
  if (isDynamic() && takers != 1)
    return emitOpError() << "is dynamic in roles of which " << takers
                         << " take units; exactly one role takes them (take) and hands them to the others";
  return success();
}

LogicalResult WorkQueueOp::verify() {
  for (Value barrier : {getFull(), getEmpty()})
    if (cast<BarrierType>(barrier.getType()).getSlots() != 1)
      return emitOpError() << "hands over one unit at a time: its barriers have 1 slot, got "
                           << cast<BarrierType>(barrier.getType()).getSlots();
  if (getArrivals() < 1 || getArrivals() > kMaxScheduleWarps)
    return emitOpError() << "expects 1 to " << kMaxScheduleWarps << " releasing roles (arrivals), got "
                         << getArrivals();
  if (!isa_and_nonnull<FuncOp>((*this)->getParentOp()))
    return emitOpError() << "must be at the top level of a tile.func";
  return success();
}

LogicalResult RoleOp::verify() {
  if (!isIdentifierName(getName()))
    return emitOpError() << "role name '" << getName() << "' is not an identifier";
  if (getWarps() < 1 || getWarps() > kMaxScheduleWarps)
    return emitOpError() << "warps must be in [1, " << kMaxScheduleWarps << "], got " << getWarps();
  if (getRegs() < 24 || getRegs() > 256 || getRegs() % 8 != 0)
    return emitOpError() << "regs must be a multiple of 8 in [24, 256] (setmaxnreg), got " << getRegs();
  if (!isa_and_nonnull<FuncOp>((*this)->getParentOp()))
    return emitOpError() << "must be at the top level of a tile.func";
  if (getPingpong() && getWarps() < 8)
    return emitOpError() << "takes turns (pingpong) between warpgroups but has " << getWarps()
                         << " warps; it needs at least two warpgroups (8 warps)";
  int64_t warps = 0;
  for (RoleOp role : (*this)->getBlock()->getOps<RoleOp>()) {
    // A sibling is verified on its own: one without its attributes (invalid IR) counts no warps here.
    auto roleWarps = role->getAttrOfType<IntegerAttr>(role.getWarpsAttrName());
    auto roleName = role->getAttrOfType<StringAttr>(role.getNameAttrName());
    warps += roleWarps ? roleWarps.getInt() : 0;
    if (role != *this && roleName && roleName.getValue() == getName() && role->isBeforeInBlock(*this))
      return emitOpError() << "role '" << getName() << "' is defined twice";
  }
  // Said once, at the block's last role.
  bool last = llvm::none_of((*this)->getBlock()->getOps<RoleOp>(),
                            [&](RoleOp role) { return role != *this && (*this)->isBeforeInBlock(role); });
  if (last && warps > kMaxScheduleWarps)
    return emitOpError() << "the roles of a block have " << warps << " warps; a block has at most "
                         << kMaxScheduleWarps;
  return success();
}

/// `through %slot` of tile.store o / tile.store_split: the slot holds O's rows and at least its columns, 16 bits an
/// element (O is stored in the program's dtype).
static LogicalResult verifyStaging(Operation *op, Value staging, RankedTensorType o) {
  if (!staging)
    return success();
  RankedTensorType slot = cast<SlotType>(staging.getType()).getTile();
  if (slot.getRank() != 2 || !slot.getElementType().isIntOrFloat() ||
      slot.getElementType().getIntOrFloatBitWidth() != 16)
    return op->emitOpError() << "stages O through a slot of " << slot << "; a staging slot holds a rank-2 tile of a "
                             << "16-bit type (O is stored in the program's dtype)";
  if (!dimsCompatible(slot.getDimSize(0), o.getDimSize(0)) ||
      (!ShapedType::isDynamic(slot.getDimSize(1)) && !ShapedType::isDynamic(o.getDimSize(1)) &&
       slot.getDimSize(1) < o.getDimSize(1)))
    return op->emitOpError() << "stages a " << dimStr(o.getDimSize(0)) << "x" << dimStr(o.getDimSize(1))
                             << " O tile through a slot of " << dimStr(slot.getDimSize(0)) << "x"
                             << dimStr(slot.getDimSize(1)) << "; the slot needs O's rows and at least its columns";
  return success();
}

LogicalResult StoreOp::verify() {
  Output output = getOperand();
  StringRef name = stringifyOutput(output);
  const ProgramKind &kind = kindAround(*this);
  if (!kind.writesTensor(name))
    return emitOpError() << "a " << kind.name << " program writes " << joinNames(kind.writes) << ", not " << name;
  if (output == Output::Dk || output == Output::Dv) {
    auto acc = dyn_cast<AccType>(getValue().getType());
    if (!acc)
      return emitOpError() << "stores " << name << " from its accumulator (!tile.acc), got " << getValue().getType();
    FuncOp func = getEnclosingFunc(*this);
    int64_t width = !func ? acc.getCols() : output == Output::Dk ? func.getHeadDim() : func.getHeadDimV();
    if (acc.getCols() != width)
      return emitOpError() << name << " must have " << width << " columns (head dim), got " << acc.getCols();
    if (getStaging())
      return emitOpError() << "stages " << name << " through shared memory; only O is staged";
    return success();
  }
  auto type = dyn_cast<RankedTensorType>(getValue().getType());
  if (!type)
    return emitOpError() << "stores " << name << " from an fp32 tile, got " << getValue().getType();
  int64_t rank = output == Output::O || output == Output::Dq ? 2 : 1;
  if (type.getRank() != rank)
    return emitOpError() << "the " << name << " tile must have rank " << rank << ", got " << type.getRank();
  if (getStaging() && output != Output::O)
    return emitOpError() << "stages " << (output == Output::Lse ? StringRef("LSE") : name)
                         << " through shared memory; only O is staged (`tile.store o ... through`)";
  return verifyStaging(*this, getStaging(), type);
}

/// An e4m3 K or V tile (tile.kv_dtype) meets a 16-bit Q or P: it is widened to their type, exactly.
static bool widensExactly(Type narrow, Type wide) {
  return isa<Float8E4M3FNType>(narrow) && (wide.isBF16() || wide.isF16());
}

LogicalResult QkOp::verify() {
  auto q = cast<RankedTensorType>(getQ().getType()), k = cast<RankedTensorType>(getK().getType());
  auto s = cast<RankedTensorType>(getS().getType());
  if (q.getRank() != 2 || k.getRank() != 2 || s.getRank() != 2)
    return emitOpError() << "expects rank-2 tiles";
  if (q.getElementType() != k.getElementType() && !widensExactly(k.getElementType(), q.getElementType()))
    return emitOpError() << "Q and K element types differ: " << q.getElementType() << " vs " << k.getElementType();
  if (!dimsCompatible(q.getDimSize(1), k.getDimSize(1)))
    return emitOpError() << "Q and K head dims differ: " << dimStr(q.getDimSize(1)) << " vs "
                         << dimStr(k.getDimSize(1));
  if (!dimsCompatible(s.getDimSize(0), q.getDimSize(0)) || !dimsCompatible(s.getDimSize(1), k.getDimSize(0)))
    return emitOpError() << "result must be " << dimStr(q.getDimSize(0)) << "x" << dimStr(k.getDimSize(0))
                         << " (Q rows x K rows), got " << dimStr(s.getDimSize(0)) << "x" << dimStr(s.getDimSize(1));
  return success();
}

LogicalResult ScoreModOp::verify() {
  if (getS().getType() != getResult().getType())
    return emitOpError() << "result type must equal the score tile type";
  Builder b(getContext());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  return checkRegionSignature(*this, getBody(), {f32, i32, i32, i32, i32}, {f32}, "score_mod");
}

LogicalResult MaskOp::verify() {
  if (getS().getType() != getResult().getType())
    return emitOpError() << "result type must equal the score tile type";
  Builder b(getContext());
  Type i32 = b.getI32Type();
  return checkRegionSignature(*this, getBody(), {i32, i32, i32, i32}, {b.getI1Type()}, "mask");
}

void SoftmaxUpdateOp::build(OpBuilder &builder, OperationState &state, Value s, Value stats, Type pElement) {
  auto sType = cast<RankedTensorType>(s.getType());
  auto pType = RankedTensorType::get(sType.getShape(), pElement);
  auto alphaType = RankedTensorType::get({sType.getDimSize(0)}, builder.getF32Type());
  build(builder, state, pType, alphaType, stats.getType(), s, stats, /*fold_scale=*/false,
        /*rescale_threshold=*/nullptr);
}

LogicalResult SoftmaxUpdateOp::verify() {
  auto s = cast<RankedTensorType>(getS().getType());
  auto p = cast<RankedTensorType>(getP().getType());
  auto alpha = cast<RankedTensorType>(getAlpha().getType());
  auto stats = cast<StatsType>(getStats().getType());
  if (s.getRank() != 2 || p.getShape() != s.getShape())
    return emitOpError() << "P must have the score tile's shape";
  if (alpha.getRank() != 1 || !dimsCompatible(alpha.getDimSize(0), s.getDimSize(0)) ||
      !dimsCompatible(stats.getRows(), s.getDimSize(0)))
    return emitOpError() << "alpha and the row statistics must have one entry per score row";
  // P may reach 2^τ: τ ≤ 15 keeps it finite in fp16 (largest finite 65504), τ ≤ 8 below e4m3's saturation at 448.
  const int64_t maxThreshold = isa<Float8E4M3FNType>(p.getElementType()) ? kMaxE4m3RescaleThreshold : 15;
  if (auto threshold = getRescaleThreshold(); threshold && (*threshold < 1 || *threshold > maxThreshold))
    return emitOpError() << "rescale_threshold = " << *threshold << " is not supported"
                         << (maxThreshold < 15 ? " with an e4m3 P" : "") << "; accepted: 1 to " << maxThreshold
                         << " (log2 units; omit it to rescale every tile)";
  return success();
}

LogicalResult RescaleOp::verify() {
  auto acc = cast<AccType>(getAcc().getType());
  auto alpha = cast<RankedTensorType>(getAlpha().getType());
  if (alpha.getRank() != 1 || !dimsCompatible(alpha.getDimSize(0), acc.getRows()))
    return emitOpError() << "alpha must have one entry per accumulator row";
  return success();
}

LogicalResult PvOp::verify() {
  auto p = cast<RankedTensorType>(getP().getType()), v = cast<RankedTensorType>(getV().getType());
  auto acc = cast<AccType>(getAcc().getType());
  if (p.getRank() != 2 || v.getRank() != 2)
    return emitOpError() << "expects rank-2 P and V tiles";
  if (p.getElementType() != v.getElementType() && !widensExactly(v.getElementType(), p.getElementType()))
    return emitOpError() << "P and V element types differ: " << p.getElementType() << " vs " << v.getElementType();
  if (!dimsCompatible(p.getDimSize(1), v.getDimSize(0)))
    return emitOpError() << "P columns (" << dimStr(p.getDimSize(1)) << ") must equal V rows ("
                         << dimStr(v.getDimSize(0)) << ")";
  if (v.getDimSize(1) != acc.getCols() || !dimsCompatible(p.getDimSize(0), acc.getRows()))
    return emitOpError() << "the accumulator must be (P rows) x (V columns)";
  return success();
}

/// The row statistics and the accumulator of one Q tile have the same rows.
static LogicalResult verifyStateRows(Operation *op, Value stats, Value acc) {
  auto s = cast<StatsType>(stats.getType());
  auto a = cast<AccType>(acc.getType());
  if (s.getRows() != a.getRows())
    return op->emitOpError() << "row statistics of " << dimStr(s.getRows()) << " rows with an accumulator of "
                             << dimStr(a.getRows()) << " rows: they must belong to the same Q rows";
  return success();
}

LogicalResult InitStateOp::verify() { return verifyStateRows(*this, getStats(), getAcc()); }

LogicalResult FinalizeOp::verify() {
  if (failed(verifyStateRows(*this, getStats(), getAcc())))
    return failure();
  auto acc = cast<AccType>(getAcc().getType());
  auto o = cast<RankedTensorType>(getO().getType()), lse = cast<RankedTensorType>(getLse().getType());
  if (o.getRank() != 2 || o.getDimSize(1) != acc.getCols() || !dimsCompatible(o.getDimSize(0), acc.getRows()))
    return emitOpError() << "O must be " << dimStr(acc.getRows()) << "x" << acc.getCols();
  if (lse.getRank() != 1 || !dimsCompatible(lse.getDimSize(0), acc.getRows()))
    return emitOpError() << "LSE must have one entry per row";
  if (!hasSink())
    return success();
  Builder b(getContext());
  return checkRegionSignature(*this, getSink(), {b.getI32Type(), b.getI32Type()}, {b.getF32Type()}, "sink");
}

LogicalResult StoreSplitOp::verify() {
  auto o = cast<RankedTensorType>(getO().getType()), lse = cast<RankedTensorType>(getLse().getType());
  if (o.getRank() != 2 || lse.getRank() != 1 || !dimsCompatible(o.getDimSize(0), lse.getDimSize(0)))
    return emitOpError() << "takes an O tile (rows x head_dim_v) and an LSE tile of one entry per row";
  if (failed(verifyStaging(*this, getStaging(), o)))
    return failure();
  if (!hasSink())
    return success();
  Builder b(getContext());
  return checkRegionSignature(*this, getSink(), {b.getI32Type(), b.getI32Type()}, {b.getF32Type()}, "sink");
}

/// tile.state_load and tile.state_store come as a pair at the top level of a tile.func: the program is launched once
/// per K/V tile, and the state one step stores is the state the next one loads.
template <typename Self, typename Other> static LogicalResult verifyStatePair(Self op, StringRef other) {
  auto func = dyn_cast_or_null<FuncOp>(op->getParentOp());
  if (!func)
    return op.emitOpError() << "must be at the top level of a tile.func: the state moves through global memory "
                               "between launches, once per program instance";
  auto ops = func.getBody().template getOps<Other>();
  int64_t n = std::distance(ops.begin(), ops.end());
  if (n != 1)
    return op.emitOpError() << "needs exactly one " << other << " in its tile.func, found " << n;
  auto self = func.getBody().template getOps<Self>();
  if (std::distance(self.begin(), self.end()) != 1)
    return op.emitOpError() << "appears more than once in its tile.func";
  return success();
}

LogicalResult StateLoadOp::verify() {
  if (failed(verifyStateRows(*this, getStats(), getAcc())))
    return failure();
  return verifyStatePair<StateLoadOp, StateStoreOp>(*this, "tile.state_store");
}

LogicalResult StateStoreOp::verify() {
  if (failed(verifyStateRows(*this, getStats(), getAcc())) ||
      failed(verifyStatePair<StateStoreOp, StateLoadOp>(*this, "tile.state_load")))
    return failure();
  if (getStats().getDefiningOp<StateLoadOp>() && getAcc().getDefiningOp<StateLoadOp>())
    return emitOpError() << "stores the state it loaded, unchanged: a K/V step must visit its tile (tile.kv_loop) "
                            "between tile.state_load and tile.state_store";
  return success();
}

bool KvRangeOp::lowerBoundIs(int64_t key) {
  auto yield = cast<YieldOp>(getRule().front().getTerminator());
  APInt value;
  return matchPattern(yield.getValues()[0], m_ConstantInt(&value)) && value.getSExtValue() == key;
}

bool KvRangeOp::upperBoundFollowsRows() {
  Block &rule = getRule().front();
  auto yield = cast<YieldOp>(rule.getTerminator());
  // Walk the upper bound's operands back to the rule's arguments (the rule holds scalar ops only).
  SmallVector<Value> work = {yield.getValues()[1]};
  llvm::SmallPtrSet<Value, 16> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == &rule && arg.getArgNumber() < 2)
        return true;
      continue;
    }
    if (Operation *def = v.getDefiningOp())
      llvm::append_range(work, def->getOperands());
  }
  return false;
}

LogicalResult KvLoopOp::verify() {
  if (static_cast<bool>(getLower()) != static_cast<bool>(getUpper()))
    return emitOpError() << "takes both bounds (from %lo to %hi) or neither";
  if (getSegment() != Segment::All && !getLower())
    return emitOpError() << "segment " << stringifySegment(getSegment()) << " needs bounds (from %lo to %hi)";
  Type i32 = IntegerType::get(getContext(), 32);
  SmallVector<Type> carried(getCarried().getTypes());
  if (failed(verifyStateRows(*this, getInitStats(), getInitAcc())))
    return failure();
  Type stats = getInitStats().getType(), acc = getInitAcc().getType();
  SmallVector<Type> args = {i32, stats, acc}, yields = {stats, acc};
  args.append(carried);
  yields.append(carried);
  if (failed(checkRegionSignature(*this, getBody(), args, yields, "kv_loop")))
    return failure();
  if (getStats().getType() != stats || getAcc().getType() != acc)
    return emitOpError() << "results must have the types of the state it starts from (row statistics, accumulator)";
  if (SmallVector<Type>(getCarriedResults().getTypes()) != carried)
    return emitOpError() << "carried results must have the types of the carried operands";
  return success();
}
