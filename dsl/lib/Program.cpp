//===- Program.cpp - the attention-forward tile program -------------------===//
#include "flashtile/dsl/Program.h"
#include "passes/IR/ProducerOrder.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileRotary.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace flashtile {

void loadProgramDialects(MLIRContext &context) {
  context.loadDialect<tile::TileDialect, arith::ArithDialect, math::MathDialect>();
}

std::string hashHex(llvm::StringRef text) {
  uint64_t h = 1469598103934665603ull; // FNV-1a 64 offset basis
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull; // FNV-1a 64 prime
  }
  std::string out;
  llvm::raw_string_ostream(out) << llvm::format_hex_no_prefix(h, 16);
  return out;
}

namespace dsl {
namespace {
Expr dim(const Expr &anchor, tile::Dim which) {
  OpBuilder &b = anchor.getBuilder();
  return Expr(b, tile::DimOp::create(b, b.getUnknownLoc(), which));
}
} // namespace
Expr Sizes::batch() const { return dim(seqlenQ, tile::Dim::Batch); }
Expr Sizes::headsQ() const { return dim(seqlenQ, tile::Dim::HeadsQ); }
Expr Sizes::headsKv() const { return dim(seqlenQ, tile::Dim::HeadsKv); }
Expr Sizes::keyOffset() const { return dim(seqlenQ, tile::Dim::KeyOffset); }
} // namespace dsl

namespace {

/// Puts a hook's ops in one order that depends only on what the hook computes: operands before users, the
/// terminator's operands left to right, each operand's producers depth first. C++ leaves the evaluation order of
/// an operator's operands to the compiler (GCC builds `a < b` right to left, Clang left to right) and the Python
/// tracer evaluates left to right; without this, one variant would print, and hash, differently per front end.
/// Ops the terminator does not reach keep their place, before the others.
void orderHookBody(Block &block) {
  Operation *terminator = block.getTerminator();
  auto inBlock = [&](Operation *def) { return def->getBlock() == &block; };
  for (Operation *op : tile::producersFirst(terminator->getOperands(), inBlock))
    op->moveBefore(terminator);
}

class ProgramBuilder {
public:
  ProgramBuilder(MLIRContext &context, const Variant &variant, const ProgramOptions &options)
      : ctx(context), variant(variant), options(options), b(&context), loc(b.getUnknownLoc()) {}

  FailureOr<OwningOpRef<ModuleOp>> build();

private:
  dsl::Params params() {
    return dsl::Params([this](const std::string &name) { return dsl::Expr(b, tile::ParamOp::create(b, loc, name)); },
                       [this](const std::string &name, const dsl::Expr &index) {
                         // An undeclared name is read as f32; the op's verifier then names the input.
                         Type type = b.getF32Type();
                         for (const auto &[declared, kind] : variant.inputs())
                           if (declared == name && kind == dsl::ElementKind::I32)
                             type = b.getI32Type();
                         return dsl::Expr(b, tile::InputOp::create(b, loc, type, name, index.get()));
                       });
  }
  dsl::Sizes sizes() {
    return {dsl::Expr(b, tile::DimOp::create(b, loc, tile::Dim::SeqlenQ)),
            dsl::Expr(b, tile::DimOp::create(b, loc, tile::Dim::SeqlenK))};
  }
  dsl::Expr constant(int64_t v) { return dsl::Expr(b, arith::ConstantIntOp::create(b, loc, v, 32)); }

  /// `tile.kv_range kind { (first, last, b, h) -> (lo, hi) }`; `rule` may be empty, then `fallback` gives the range.
  LogicalResult kvRange(tile::RangeKind kind, const dsl::RangeFn &rule,
                        const std::function<dsl::Range(dsl::Sizes)> &fallback);
  LogicalResult expectType(dsl::Expr e, Type type, StringRef what);
  /// Where the user gave a hook, as an MLIR location (diagnostics of its trace point there).
  Location siteOf(const std::source_location &where) {
    if (!where.file_name() || !*where.file_name())
      return loc;
    return FileLineColLoc::get(&ctx, where.file_name(), where.line(), where.column());
  }

  MLIRContext &ctx;
  const Variant &variant;
  const ProgramOptions &options;
  OpBuilder b;
  Location loc;
};

LogicalResult ProgramBuilder::expectType(dsl::Expr e, Type type, StringRef what) {
  if (e.get().getType() == type)
    return success();
  return emitError(loc) << "variant '" << variant.name() << "': " << what << " must be " << type << ", got "
                        << e.get().getType();
}

LogicalResult ProgramBuilder::kvRange(tile::RangeKind kind, const dsl::RangeFn &rule,
                                      const std::function<dsl::Range(dsl::Sizes)> &fallback) {
  OpBuilder::InsertionGuard guard(b);
  auto op = tile::KvRangeOp::create(b, loc, b.getI32Type(), b.getI32Type(), kind);
  Type i32 = b.getI32Type();
  Block *block = b.createBlock(&op.getRule(), {}, {i32, i32, i32, i32}, {loc, loc, loc, loc});
  b.setInsertionPointToStart(block);
  dsl::Sizes s = sizes();
  auto arg = [&](unsigned i) { return dsl::Expr(b, block->getArgument(i)); };
  const Variant::HookSites &sites = variant.hookSites();
  dsl::HookTrace traced(
      siteOf(kind == tile::RangeKind::May ? sites.kvRange : sites.fullRange),
      ("kvRange rule \"" + tile::stringifyRangeKind(kind) + "\" of variant '" + variant.name() + "'").str());
  dsl::Range range = rule ? rule(dsl::QTile{arg(0), arg(1), arg(2), arg(3), s}, params()) : fallback(s);
  if (traced.failed())
    return failure();
  std::string what = ("kvRange rule \"" + tile::stringifyRangeKind(kind) + "\" bounds").str();
  if (failed(expectType(range.lo, b.getI32Type(), what)) || failed(expectType(range.hi, b.getI32Type(), what)))
    return failure();
  tile::YieldOp::create(b, loc, ValueRange{range.lo.get(), range.hi.get()});
  return success();
}

FailureOr<OwningOpRef<ModuleOp>> ProgramBuilder::build() {
  loadProgramDialects(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  Type dtype = options.dtype == ElementType::BF16 ? Type(b.getBF16Type()) : Type(b.getF16Type());
  if (std::string error = variant.checkParams(variant.paramValues()); !error.empty())
    return emitError(loc) << error;
  SmallVector<StringRef> paramNames;
  for (const auto &[name, value] : variant.params())
    paramNames.push_back(name);
  SmallVector<Attribute> inputs;
  for (const auto &[name, kind] : variant.inputs())
    inputs.push_back(
        tile::InputAttr::get(&ctx, name, kind == dsl::ElementKind::F32 ? Type(b.getF32Type()) : b.getI32Type()));
  auto func = tile::FuncOp::create(b, loc, b.getStringAttr("attention"), TypeAttr::get(dtype),
                                   b.getI64IntegerAttr(options.headDim), b.getI64IntegerAttr(options.headDimV),
                                   b.getStringAttr(variant.name()), b.getStrArrayAttr(paramNames), tile::ScheduleAttr(),
                                   tile::TargetAttr(), b.getArrayAttr(inputs));
  b.setInsertionPointToStart(&func.getBody().emplaceBlock());
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  const int64_t dyn = ShapedType::kDynamic;

  // KV-range rules: without a mask every key is attended; a mask without a full-range rule masks every tile.
  std::function<dsl::Range(dsl::Sizes)> allKeys = [this](dsl::Sizes s) { return dsl::Range{constant(0), s.seqlenK}; };
  std::function<dsl::Range(dsl::Sizes)> noKeys = [this](dsl::Sizes) { return dsl::Range{constant(0), constant(0)}; };
  if (failed(kvRange(tile::RangeKind::May, variant.kvRangeFn(), allKeys)) ||
      failed(kvRange(tile::RangeKind::Full, variant.fullRangeFn(), variant.maskFn() ? noKeys : allKeys)))
    return failure();

  auto loadQ = tile::LoadOp::create(b, loc, RankedTensorType::get({dyn, options.headDim}, dtype), tile::Operand::Q,
                                    Value(), Value(), Value());
  if (options.rotary != RotaryMode::None)
    loadQ->setAttr(tile::kRotaryAttr,
                   tile::rotaryAttr(&ctx, {options.rotary == RotaryMode::Interleaved, variant.maskFn() != nullptr}));
  Value q = loadQ;
  auto statsType = tile::StatsType::get(&ctx, dyn);
  auto accType = tile::AccType::get(&ctx, dyn, options.headDimV, tile::MemorySpace::Registers);
  auto init = tile::InitStateOp::create(b, loc, statsType, accType);
  auto loop = tile::KvLoopOp::create(b, loc, Value(), Value(), init.getStats(), init.getAcc(), ValueRange(),
                                     tile::Segment::All, tile::KvOrder::Ascending);
  {
    OpBuilder::InsertionGuard guard(b);
    Block *body = b.createBlock(&loop.getBody(), {}, {i32, statsType, accType}, {loc, loc, loc});
    Value j = body->getArgument(0), stats = body->getArgument(1), acc = body->getArgument(2);
    Value k = tile::LoadOp::create(b, loc, RankedTensorType::get({dyn, options.headDim}, dtype), tile::Operand::K, j,
                                   Value(), Value());
    auto scoreType = RankedTensorType::get({dyn, dyn}, f32);
    Value s = tile::QkOp::create(b, loc, scoreType, Type(), q, k).getS();
    s = tile::ScaleOp::create(b, loc, s);
    if (variant.scoreFn()) {
      auto mod = tile::ScoreModOp::create(b, loc, scoreType, s);
      OpBuilder::InsertionGuard inner(b);
      Block *blk = b.createBlock(&mod.getBody(), {}, {f32, i32, i32, i32, i32}, {loc, loc, loc, loc, loc});
      dsl::Coords c{dsl::Expr(b, blk->getArgument(1)), dsl::Expr(b, blk->getArgument(2)),
                    dsl::Expr(b, blk->getArgument(3)), dsl::Expr(b, blk->getArgument(4)), sizes()};
      dsl::HookTrace traced(siteOf(variant.hookSites().score), "score modifier of variant '" + variant.name() + "'");
      dsl::Expr out = variant.scoreFn()(dsl::Expr(b, blk->getArgument(0)), c, params());
      if (traced.failed() || failed(expectType(out, f32, "the score modifier's result")))
        return failure();
      tile::YieldOp::create(b, loc, ValueRange{out.get()});
      s = mod.getResult();
    }
    {
      // The mask op also drops keys past seqlen_k, so it is there even for variants without a mask rule.
      auto mask = tile::MaskOp::create(b, loc, scoreType, s);
      OpBuilder::InsertionGuard inner(b);
      Block *blk = b.createBlock(&mask.getBody(), {}, {i32, i32, i32, i32}, {loc, loc, loc, loc});
      Value keep;
      if (variant.maskFn()) {
        dsl::Coords c{dsl::Expr(b, blk->getArgument(0)), dsl::Expr(b, blk->getArgument(1)),
                      dsl::Expr(b, blk->getArgument(2)), dsl::Expr(b, blk->getArgument(3)), sizes()};
        dsl::HookTrace traced(siteOf(variant.hookSites().mask), "mask predicate of variant '" + variant.name() + "'");
        dsl::Expr out = variant.maskFn()(c, params());
        if (traced.failed() || failed(expectType(out, b.getI1Type(), "the mask predicate")))
          return failure();
        keep = out.get();
      } else {
        keep = arith::ConstantIntOp::create(b, loc, 1, 1);
      }
      tile::YieldOp::create(b, loc, ValueRange{keep});
      s = mask.getResult();
    }
    auto update = tile::SoftmaxUpdateOp::create(b, loc, s, stats, dtype);
    Value rescaled = tile::RescaleOp::create(b, loc, acc, update.getAlpha());
    Value v = tile::LoadOp::create(b, loc, RankedTensorType::get({dyn, options.headDimV}, dtype), tile::Operand::V, j,
                                   Value(), Value());
    Value next = tile::PvOp::create(b, loc, update.getP(), v, rescaled).getResult();
    tile::YieldOp::create(b, loc, ValueRange{update.getNewStats(), next});
  }
  auto fin = tile::FinalizeOp::create(b, loc, RankedTensorType::get({dyn, options.headDimV}, f32),
                                      RankedTensorType::get({dyn}, f32), loop.getStats(), loop.getAcc());
  if (variant.sinkFn()) {
    OpBuilder::InsertionGuard guard(b);
    Block *blk = b.createBlock(&fin.getSink(), {}, {i32, i32}, {loc, loc});
    dsl::HookTrace traced(siteOf(variant.hookSites().sink), "sink of variant '" + variant.name() + "'");
    dsl::Expr sink = variant.sinkFn()(
        dsl::HeadCoords{dsl::Expr(b, blk->getArgument(0)), dsl::Expr(b, blk->getArgument(1)), sizes()}, params());
    if (traced.failed() || failed(expectType(sink, f32, "the sink")))
      return failure();
    tile::YieldOp::create(b, loc, ValueRange{sink.get()});
  }
  tile::StoreOp::create(b, loc, tile::Output::O, fin.getO(), /*staging=*/Value());
  tile::StoreOp::create(b, loc, tile::Output::Lse, fin.getLse(), /*staging=*/Value());
  func.walk([](Operation *op) {
    if (isa<tile::ScoreModOp, tile::MaskOp, tile::KvRangeOp, tile::FinalizeOp>(op))
      for (Region &region : op->getRegions())
        for (Block &block : region)
          if (!block.empty() && block.back().hasTrait<OpTrait::IsTerminator>())
            orderHookBody(block);
  });
  if (failed(verify(*module)))
    return failure();
  return module;
}

} // namespace

FailureOr<OwningOpRef<ModuleOp>> buildAttentionProgram(MLIRContext &context, const Variant &variant,
                                                       const ProgramOptions &options) {
  return ProgramBuilder(context, variant, options).build();
}

FailureOr<std::string> variantId(const Variant &variant) {
  MLIRContext context;
  // The hooks' IR does not depend on dtype or head dims; any fixed choice gives the same hash.
  auto module = buildAttentionProgram(context, variant, ProgramOptions{});
  if (failed(module))
    return failure();
  std::string text;
  llvm::raw_string_ostream os(text);
  (*module)->print(os, OpPrintingFlags().printGenericOpForm());
  // The rules are not IR but kernels carry them: two variants that differ only in their rules are two ids.
  auto rules = variant.paramRules();
  if (!rules.ok())
    return failure();
  os << "\nparamRules=" << serializeParamRules(*rules);
  return variant.name() + "#" + hashHex(text);
}

} // namespace flashtile
