//===- TileMemoryOps.cpp - the memory layer's types and verifiers --------===//
//
// Tensor memory, buffers of tiles, channels, MMAs completed by a commit (TileMemoryOps.td). The verifiers check
// what a single op can: shapes, memory spaces, tensor-memory columns. The protocol between roles (who may touch a
// buffer when) is the interpreter's to check (interpreter/MemoryProtocol.h).
//===----------------------------------------------------------------------===//
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileNames.h"

#include "mlir/IR/DialectImplementation.h"

#include <bit>

using namespace mlir;
using namespace flashtile::tile;

namespace {
/// Lanes of tensor memory: row i of a tile in lane i.
constexpr int64_t kTmemLanes = 128;
constexpr int64_t kTmemMinColumns = 32, kTmemMaxColumns = 512;

bool isLowp(Type t) { return t.isF16() || t.isBF16(); }
} // namespace

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

LogicalResult TmemType::verify(function_ref<InFlightDiagnostic()> emitError, int64_t columns) {
  if (columns < kTmemMinColumns || columns > kTmemMaxColumns || !std::has_single_bit(static_cast<uint64_t>(columns)))
    return emitError() << "tensor memory columns must be a power of two in [" << kTmemMinColumns << ", "
                       << kTmemMaxColumns << "] (tcgen05.alloc), got " << columns;
  return success();
}

// MemBufType: `!tile.mbuf<tensor<128x64xf32>, tensor>`, `!tile.mbuf<!tile.stats<128>, registers>`
Type MemBufType::parse(AsmParser &parser) {
  Type tile;
  std::string name;
  if (parser.parseLess() || parser.parseType(tile) || parser.parseComma() || parser.parseKeywordOrString(&name))
    return {};
  std::optional<MemorySpace> space;
  for (MemorySpace s : {MemorySpace::Registers, MemorySpace::Shared, MemorySpace::Tensor})
    if (memorySpaceName(s) == name)
      space = s;
  if (!space) {
    parser.emitError(parser.getNameLoc(), "a buffer's memory space is registers, shared or tensor; got '")
        << name << "'";
    return {};
  }
  if (parser.parseGreater())
    return {};
  return MemBufType::getChecked([&] { return parser.emitError(parser.getNameLoc()); }, parser.getContext(), tile,
                                *space);
}

void MemBufType::print(AsmPrinter &printer) const {
  printer << "<" << getTile() << ", " << memorySpaceName(getSpace()) << ">";
}

LogicalResult MemBufType::verify(function_ref<InFlightDiagnostic()> emitError, Type tile, MemorySpace space) {
  if (auto stats = dyn_cast<StatsType>(tile)) {
    if (!stats.hasStaticRows())
      return emitError() << "a buffer of row statistics needs static rows";
    if (space == MemorySpace::Tensor)
      return emitError() << "row statistics live in registers or shared memory, not tensor memory";
    return success();
  }
  auto tensor = dyn_cast<RankedTensorType>(tile);
  if (!tensor || !tensor.hasStaticShape() || tensor.getRank() < 1 || tensor.getRank() > 2)
    return emitError() << "a buffer holds a static tile of rank 1 or 2 or row statistics, got " << tile;
  Type element = tensor.getElementType();
  if (!element.isF32() && !isLowp(element))
    return emitError() << "a buffer's tile is f32, f16 or bf16, got " << element;
  if (space == MemorySpace::Tensor) {
    if (tensor.getRank() != 2)
      return emitError() << "a tensor-memory buffer holds a 2-D tile (rows in lanes), got " << tensor;
    if (tensor.getDimSize(0) > kTmemLanes)
      return emitError() << "a tensor-memory tile has at most " << kTmemLanes << " rows (lanes), got "
                         << tensor.getDimSize(0);
    if (isLowp(element) && tensor.getDimSize(1) % 2 != 0)
      return emitError() << "a 16-bit tensor-memory tile packs two columns a cell: it needs an even column count";
  }
  return success();
}

int64_t MemBufType::getRows() const {
  if (auto stats = dyn_cast<StatsType>(getTile()))
    return stats.getRows();
  return getTensor().getDimSize(0);
}

int64_t MemBufType::tmemColumns() const {
  RankedTensorType tensor = getTensor();
  int64_t cols = tensor.getRank() == 2 ? tensor.getDimSize(1) : 1;
  return isLowp(tensor.getElementType()) ? cols / 2 : cols;
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

namespace {
/// An op that only a role may run (its threads or its MMA issuer).
LogicalResult verifyInRole(Operation *op) {
  if (!op->getParentOfType<RoleOp>())
    return op->emitOpError() << "runs inside a tile.role";
  return success();
}

/// `buffer`'s type in tensor memory, or an error naming `what`.
FailureOr<MemBufType> tmemBuffer(Operation *op, Value buffer, StringRef what) {
  auto type = cast<MemBufType>(buffer.getType());
  if (type.getSpace() != MemorySpace::Tensor || !type.getTensor())
    return op->emitOpError() << what << " must be a tensor-memory tile buffer, got " << type;
  return type;
}

/// Whether `value`'s type is what buffer `type` holds: its tile, or (an f32 2-D tile) an accumulator of its shape.
bool holds(MemBufType type, Type value) {
  if (value == type.getTile())
    return true;
  auto acc = dyn_cast<AccType>(value);
  RankedTensorType tensor = type.getTensor();
  return acc && tensor && tensor.getRank() == 2 && tensor.getElementType().isF32() &&
         acc.getRows() == tensor.getDimSize(0) && acc.getCols() == tensor.getDimSize(1);
}
} // namespace

LogicalResult TmemOp::verify() {
  if (!isa_and_nonnull<FuncOp>((*this)->getParentOp()))
    return emitOpError() << "declares tensor memory at the top level of a tile.func";
  return success();
}

LogicalResult TmemAllocOp::verify() { return verifyInRole(*this); }
LogicalResult TmemFreeOp::verify() { return verifyInRole(*this); }

LogicalResult TmemBufferOp::verify() {
  auto type = getBuffer().getType();
  if (type.getSpace() != MemorySpace::Tensor || !type.getTensor())
    return emitOpError() << "cuts a tile buffer in the tensor memory space, got " << type;
  int64_t column = getColumn(), columns = getTmem().getType().getColumns();
  if (column < 0 || column + type.tmemColumns() > columns)
    return emitOpError() << "takes columns [" << column << ", " << column + type.tmemColumns()
                         << ") of a tensor memory of " << columns << " columns";
  return success();
}

LogicalResult SmemBufferOp::verify() {
  if (getBuffer().getType().getSpace() == MemorySpace::Tensor)
    return emitOpError() << "makes shared-memory or register buffers; tensor memory is cut by tile.tmem_buffer";
  if (!isIdentifierName(getName()))
    return emitOpError() << "buffer name '" << getName() << "' is not an identifier";
  return success();
}

LogicalResult ChannelOp::verify() {
  if (!isIdentifierName(getName()))
    return emitOpError() << "channel name '" << getName() << "' is not an identifier";
  for (auto [what, count] : {std::pair{"full", getFullArrivals()}, {"empty", getEmptyArrivals()}})
    if (count < 1 || static_cast<int64_t>(count) > kMaxScheduleWarps * 32)
      return emitOpError() << "expects 1 to " << kMaxScheduleWarps * 32 << " " << what
                           << " arrivals per phase, got " << count;
  if (getFull().getType().getSlots() != 1 || getEmpty().getType().getSlots() != 1)
    return emitOpError() << "is a one-slot channel: its barriers are !tile.barrier<slots = 1>";
  return success();
}

LogicalResult MmaQkOp::verify() {
  FailureOr<MemBufType> s = tmemBuffer(*this, getS(), "S");
  if (failed(s))
    return failure();
  auto q = getQ().getType(), k = getK().getType();
  RankedTensorType sTile = s->getTensor();
  if (!sTile.getElementType().isF32())
    return emitOpError() << "accumulates S in f32, got " << sTile;
  if (q.getRank() != 2 || k.getRank() != 2 || q.getElementType() != k.getElementType())
    return emitOpError() << "multiplies 2-D Q and K tiles of one element type";
  if (q.getDimSize(1) != k.getDimSize(1))
    return emitOpError() << "Q has " << q.getDimSize(1) << " columns but K " << k.getDimSize(1);
  if (!k.isDynamicDim(0) && sTile.getDimSize(1) != k.getDimSize(0))
    return emitOpError() << "S has " << sTile.getDimSize(1) << " columns for " << k.getDimSize(0) << " keys";
  int64_t offset = getQRowOffset(), rows = sTile.getDimSize(0);
  if (offset < 0 || offset % rows != 0 || (!q.isDynamicDim(0) && offset + rows > q.getDimSize(0)))
    return emitOpError() << "reads Q rows [" << offset << ", " << offset + rows << "): a whole " << rows
                         << "-row tile of Q's " << q.getDimSize(0);
  return success();
}

LogicalResult MmaPvOp::verify() {
  FailureOr<MemBufType> p = tmemBuffer(*this, getP(), "P"), o = tmemBuffer(*this, getO(), "O");
  if (failed(p) || failed(o))
    return failure();
  RankedTensorType pTile = p->getTensor(), oTile = o->getTensor(), v = getV().getType();
  if (!isLowp(pTile.getElementType()) || pTile.getElementType() != v.getElementType())
    return emitOpError() << "takes P in V's 16-bit type, got " << pTile << " and " << v;
  if (!oTile.getElementType().isF32())
    return emitOpError() << "accumulates O in f32, got " << oTile;
  if (v.getRank() != 2 || (!v.isDynamicDim(0) && pTile.getDimSize(1) != v.getDimSize(0)) ||
      pTile.getDimSize(0) != oTile.getDimSize(0) || v.getDimSize(1) != oTile.getDimSize(1))
    return emitOpError() << "P " << pTile << " times V " << v << " does not fit O " << oTile;
  return success();
}

LogicalResult MemLoadOp::verify() {
  if (!holds(getBuffer().getType(), getValue().getType()))
    return emitOpError() << "reads " << getValue().getType() << " from a buffer of " << getBuffer().getType().getTile();
  return verifyInRole(*this);
}

LogicalResult MemStoreOp::verify() {
  if (!holds(getBuffer().getType(), getValue().getType()))
    return emitOpError() << "writes " << getValue().getType() << " into a buffer of "
                         << getBuffer().getType().getTile();
  return verifyInRole(*this);
}
