//===- Program.cpp - the tile programs of a variant: forward and backward --===//
#include "flashtile/dsl/Program.h"
#include "passes/IR/ProducerOrder.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileKvDtype.h"
#include "passes/IR/TileRotary.h"
#include "passes/Transforms/DifferentiateScore.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace flashtile {

void loadProgramDialects(MLIRContext &context) {
  context.loadDialect<tile::TileDialect, arith::ArithDialect, math::MathDialect>();
}

const char *elementTypeName(ElementType dtype) {
  switch (dtype) {
  case ElementType::F16:
    return "f16";
  case ElementType::BF16:
    return "bf16";
  case ElementType::E4M3:
    return "e4m3";
  }
  return "invalid";
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

/// Erases the ops of `block` whose results nothing reads, users before their producers: what differentiating a
/// hook rebuilt but the region does not yield.
void eraseDeadOps(Block &block) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();
}

class ProgramBuilder {
public:
  ProgramBuilder(MLIRContext &context, const Variant &variant, const ProgramOptions &options)
      : ctx(context), variant(variant), options(options), b(&context), loc(b.getUnknownLoc()) {}

  /// `kind`: a module kind (forward, backward).
  FailureOr<OwningOpRef<ModuleOp>> build(StringRef kind);

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
  /// The module and a `tile.func @name` of `kind` in it, the builder inside its body.
  tile::FuncOp makeFunc(ModuleOp module, StringRef name, StringRef kind);
  /// The variant's score modifier on the scores `s` (the op, null when the variant has none).
  FailureOr<tile::ScoreModOp> scoreMod(Value s);
  /// The variant's sink hook traced into `region`: (b, h) -> the sink's logit.
  LogicalResult sinkHook(Region &region);
  /// The mask on the scores `s`: the variant's predicate and the seqlen_k bound.
  FailureOr<Value> mask(Value s);
  /// The forward's body, and the backward's three programs.
  LogicalResult buildForward(ModuleOp module);
  LogicalResult buildBackwardPreprocess(ModuleOp module);
  LogicalResult buildBackwardMain(ModuleOp module);
  LogicalResult buildBackwardPostprocess(ModuleOp module);
  /// Puts every hook body in its canonical order and verifies the module.
  LogicalResult finish(ModuleOp module);
  Type dtype() { return typeOf(options.dtype); }
  /// K and V's element type: kvDtype where set, else dtype.
  Type kvDtype() { return typeOf(options.kvDtype.value_or(options.dtype)); }
  Type typeOf(ElementType type) {
    switch (type) {
    case ElementType::BF16:
      return b.getBF16Type();
    case ElementType::E4M3:
      return b.getType<Float8E4M3FNType>();
    case ElementType::F16:
      break;
    }
    return b.getF16Type();
  }
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

tile::FuncOp ProgramBuilder::makeFunc(ModuleOp module, StringRef name, StringRef kind) {
  b.setInsertionPointToEnd(module.getBody());
  SmallVector<StringRef> paramNames;
  for (const auto &[param, value] : variant.params())
    paramNames.push_back(param);
  SmallVector<Attribute> inputs;
  for (const auto &[input, kindOf] : variant.inputs())
    inputs.push_back(
        tile::InputAttr::get(&ctx, input, kindOf == dsl::ElementKind::F32 ? Type(b.getF32Type()) : b.getI32Type()));
  auto func = tile::FuncOp::create(b, loc, b.getStringAttr(name), TypeAttr::get(dtype()),
                                   b.getI64IntegerAttr(options.headDim), b.getI64IntegerAttr(options.headDimV),
                                   b.getStringAttr(variant.name()), b.getStrArrayAttr(paramNames), tile::ScheduleAttr(),
                                   tile::TargetAttr(), b.getArrayAttr(inputs));
  if (kind != tile::kForwardProgram)
    func.setKind(kind);
  else if (options.kvDtype && *options.kvDtype != options.dtype)
    func->setAttr(tile::kKvDtypeAttr, TypeAttr::get(kvDtype()));
  b.setInsertionPointToStart(&func.getBody().emplaceBlock());
  return func;
}

FailureOr<tile::ScoreModOp> ProgramBuilder::scoreMod(Value s) {
  if (!variant.scoreFn())
    return tile::ScoreModOp();
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  auto mod = tile::ScoreModOp::create(b, loc, s.getType(), s);
  OpBuilder::InsertionGuard inner(b);
  Block *blk = b.createBlock(&mod.getBody(), {}, {f32, i32, i32, i32, i32}, {loc, loc, loc, loc, loc});
  dsl::Coords c{dsl::Expr(b, blk->getArgument(1)), dsl::Expr(b, blk->getArgument(2)), dsl::Expr(b, blk->getArgument(3)),
                dsl::Expr(b, blk->getArgument(4)), sizes()};
  dsl::HookTrace traced(siteOf(variant.hookSites().score), "score modifier of variant '" + variant.name() + "'");
  dsl::Expr out = variant.scoreFn()(dsl::Expr(b, blk->getArgument(0)), c, params());
  if (traced.failed() || failed(expectType(out, f32, "the score modifier's result")))
    return failure();
  tile::YieldOp::create(b, loc, ValueRange{out.get()});
  return mod;
}

LogicalResult ProgramBuilder::sinkHook(Region &region) {
  OpBuilder::InsertionGuard guard(b);
  Type i32 = b.getI32Type();
  Block *blk = b.createBlock(&region, {}, {i32, i32}, {loc, loc});
  dsl::HookTrace traced(siteOf(variant.hookSites().sink), "sink of variant '" + variant.name() + "'");
  dsl::Expr sink = variant.sinkFn()(
      dsl::HeadCoords{dsl::Expr(b, blk->getArgument(0)), dsl::Expr(b, blk->getArgument(1)), sizes()}, params());
  if (traced.failed() || failed(expectType(sink, b.getF32Type(), "the sink")))
    return failure();
  tile::YieldOp::create(b, loc, ValueRange{sink.get()});
  return success();
}

FailureOr<Value> ProgramBuilder::mask(Value s) {
  // The mask op also drops keys past seqlen_k, so it is there even for variants without a mask rule.
  Type i32 = b.getI32Type();
  auto mask = tile::MaskOp::create(b, loc, s.getType(), s);
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
  return mask.getResult();
}

FailureOr<OwningOpRef<ModuleOp>> ProgramBuilder::build(StringRef kind) {
  loadProgramDialects(ctx);
  OwningOpRef<ModuleOp> module = ModuleOp::create(loc);
  if (std::string error = variant.checkParams(variant.paramValues()); !error.empty())
    return emitError(loc) << error;
  const bool otherKv = options.kvDtype && *options.kvDtype != options.dtype;
  if (otherKv && (*options.kvDtype != ElementType::E4M3 || options.dtype == ElementType::E4M3))
    return emitError(loc) << "kv dtype " << elementTypeName(*options.kvDtype) << " with dtype "
                          << elementTypeName(options.dtype)
                          << " is not supported; accepted: kv dtype e4m3 (an e4m3 KV cache) with dtype bf16 or f16, "
                             "or the dtype itself";
  if (otherKv && kind != tile::kForwardProgram)
    return emitError(loc) << "kv dtype " << elementTypeName(*options.kvDtype)
                          << " has no backward programs: an e4m3 KV cache is read by forward (decode) programs only";
  if (kind == tile::kForwardProgram) {
    if (failed(buildForward(*module)))
      return failure();
  } else if (kind == tile::kBackwardModule) {
    if (options.dtype == ElementType::E4M3)
      return emitError(loc) << "dtype e4m3 has no backward programs: FP8 attention is forward-only (as flash-attn 3); "
                               "build the backward of a bf16 or f16 program";
    if (failed(buildBackwardPreprocess(*module)) || failed(buildBackwardMain(*module)) ||
        failed(buildBackwardPostprocess(*module)))
      return failure();
  } else {
    return emitError(loc) << "unknown module kind '" << kind << "'; accepted: " << tile::joinNames(moduleKinds());
  }
  if (failed(finish(*module)))
    return failure();
  return module;
}

LogicalResult ProgramBuilder::finish(ModuleOp module) {
  module.walk([](Operation *op) {
    if (isa<tile::ScoreModOp, tile::MaskOp, tile::KvRangeOp, tile::FinalizeOp, tile::ScoreGradOp, tile::InputGradOp,
            tile::SinkGradOp>(op))
      for (Region &region : op->getRegions())
        for (Block &block : region)
          if (!block.empty() && block.back().hasTrait<OpTrait::IsTerminator>())
            orderHookBody(block);
  });
  return verify(module);
}

LogicalResult ProgramBuilder::buildForward(ModuleOp module) {
  makeFunc(module, "attention", tile::kForwardProgram);
  Type dtype = this->dtype();
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
    Value k = tile::LoadOp::create(b, loc, RankedTensorType::get({dyn, options.headDim}, kvDtype()), tile::Operand::K,
                                   j, Value(), Value());
    auto scoreType = RankedTensorType::get({dyn, dyn}, f32);
    Value s = tile::QkOp::create(b, loc, scoreType, Type(), q, k).getS();
    s = tile::ScaleOp::create(b, loc, s);
    FailureOr<tile::ScoreModOp> mod = scoreMod(s);
    if (failed(mod))
      return failure();
    if (*mod)
      s = mod->getResult();
    FailureOr<Value> masked = mask(s);
    if (failed(masked))
      return failure();
    s = *masked;
    auto update = tile::SoftmaxUpdateOp::create(b, loc, s, stats, dtype);
    Value rescaled = tile::RescaleOp::create(b, loc, acc, update.getAlpha());
    Value v = tile::LoadOp::create(b, loc, RankedTensorType::get({dyn, options.headDimV}, kvDtype()), tile::Operand::V,
                                   j, Value(), Value());
    Value next = tile::PvOp::create(b, loc, update.getP(), v, rescaled).getResult();
    tile::YieldOp::create(b, loc, ValueRange{update.getNewStats(), next});
  }
  auto fin = tile::FinalizeOp::create(b, loc, RankedTensorType::get({dyn, options.headDimV}, f32),
                                      RankedTensorType::get({dyn}, f32), loop.getStats(), loop.getAcc());
  if (variant.sinkFn() && failed(sinkHook(fin.getSink())))
    return failure();
  tile::StoreOp::create(b, loc, tile::Output::O, fin.getO(), /*staging=*/Value());
  tile::StoreOp::create(b, loc, tile::Output::Lse, fin.getLse(), /*staging=*/Value());
  return success();
}

LogicalResult ProgramBuilder::buildBackwardPreprocess(ModuleOp module) {
  makeFunc(module, "attention_bwd_preprocess", tile::kBackwardPreprocess);
  const int64_t dyn = ShapedType::kDynamic;
  auto tileType = RankedTensorType::get({dyn, options.headDimV}, dtype());
  Value o = tile::LoadOp::create(b, loc, tileType, tile::Operand::O, Value(), Value(), Value());
  Value dO = tile::LoadOp::create(b, loc, tileType, tile::Operand::DO, Value(), Value(), Value());
  auto rowsType = RankedTensorType::get({dyn}, b.getF32Type());
  Value d = tile::RowDotOp::create(b, loc, rowsType, o, dO);
  tile::StoreOp::create(b, loc, tile::Output::Delta, d, /*staging=*/Value());
  if (!variant.sinkFn())
    return success();
  // The sink's gradient dσ = −Σ_i e^(σ − LSE_i)·D_i, chained to each f32 input element the sink hook reads: one
  // tile.sink_grad per read, its region (b, h) -> (σ, index, dσ/d element), derived from the hook's IR.
  Type i32 = b.getI32Type();
  Value lse = tile::LoadOp::create(b, loc, rowsType, tile::Operand::Lse, Value(), Value(), Value());
  auto hook = tile::SinkGradOp::create(b, loc, "", d, lse); // the traced hook, erased below
  if (failed(sinkHook(hook.getBody())))
    return failure();
  for (size_t read = 0;; ++read) {
    auto grad = tile::SinkGradOp::create(b, loc, "", d, lse);
    OpBuilder::InsertionGuard guard(b);
    Block *blk = b.createBlock(&grad.getBody(), {}, {i32, i32}, {loc, loc});
    FailureOr<tile::HookDerivative> derivative = tile::differentiateSink(b, hook.getBody(), blk->getArguments());
    if (failed(derivative))
      return failure();
    if (read >= derivative->inputs.size()) {
      grad.erase();
      break;
    }
    const tile::InputPartial &partial = derivative->inputs[read];
    grad.setName(partial.name);
    tile::YieldOp::create(b, loc, ValueRange{derivative->value, partial.index, partial.partial});
    eraseDeadOps(*blk);
  }
  hook.erase();
  return success();
}

LogicalResult ProgramBuilder::buildBackwardMain(ModuleOp module) {
  makeFunc(module, "attention_bwd", tile::kBackwardMain);
  Type dtype = this->dtype();
  Type i32 = b.getI32Type(), f32 = b.getF32Type();
  const int64_t dyn = ShapedType::kDynamic;
  // The variant's KV-range rules, as the forward's: the schedule inverts them into the Q tiles that see a K/V tile.
  std::function<dsl::Range(dsl::Sizes)> allKeys = [this](dsl::Sizes s) { return dsl::Range{constant(0), s.seqlenK}; };
  std::function<dsl::Range(dsl::Sizes)> noKeys = [this](dsl::Sizes) { return dsl::Range{constant(0), constant(0)}; };
  if (failed(kvRange(tile::RangeKind::May, variant.kvRangeFn(), allKeys)) ||
      failed(kvRange(tile::RangeKind::Full, variant.fullRangeFn(), variant.maskFn() ? noKeys : allKeys)))
    return failure();

  auto qkType = RankedTensorType::get({dyn, options.headDim}, dtype);
  auto vType = RankedTensorType::get({dyn, options.headDimV}, dtype);
  auto rowsType = RankedTensorType::get({dyn}, f32);
  auto scoreType = RankedTensorType::get({dyn, dyn}, f32);
  Value k = tile::LoadOp::create(b, loc, qkType, tile::Operand::K, Value(), Value(), Value());
  Value v = tile::LoadOp::create(b, loc, vType, tile::Operand::V, Value(), Value(), Value());
  auto dkType = tile::AccType::get(&ctx, dyn, options.headDim, tile::MemorySpace::Registers);
  auto dvType = tile::AccType::get(&ctx, dyn, options.headDimV, tile::MemorySpace::Registers);
  Value dk0 = tile::ZeroAccOp::create(b, loc, dkType);
  Value dv0 = tile::ZeroAccOp::create(b, loc, dvType);
  auto loop = tile::QLoopOp::create(b, loc, TypeRange{dkType, dvType}, Value(), Value(), ValueRange{dk0, dv0},
                                    tile::Segment::All);
  {
    OpBuilder::InsertionGuard guard(b);
    Block *body = b.createBlock(&loop.getBody(), {}, {i32, dkType, dvType}, {loc, loc, loc});
    Value i = body->getArgument(0), dk = body->getArgument(1), dv = body->getArgument(2);
    // Recompute the forward's logits and probabilities: S = Q·Kᵀ·scale, the score hook, the mask, P = e^(S − LSE).
    Value q = tile::LoadOp::create(b, loc, qkType, tile::Operand::Q, i, Value(), Value());
    Value s = tile::QkOp::create(b, loc, scoreType, Type(), q, k).getS();
    Value scaled = tile::ScaleOp::create(b, loc, s);
    FailureOr<tile::ScoreModOp> mod = scoreMod(scaled);
    if (failed(mod))
      return failure();
    FailureOr<Value> logits = mask(*mod ? mod->getResult() : scaled);
    if (failed(logits))
      return failure();
    Value lse = tile::LoadOp::create(b, loc, rowsType, tile::Operand::Lse, i, Value(), Value());
    Value p = tile::ProbsOp::create(b, loc, scoreType, *logits, lse);
    // dV += Pᵀ·dO; dP = dO·Vᵀ; dS' = P∘(dP − D), through the score hook's derivative, times the scale.
    Value dO = tile::LoadOp::create(b, loc, vType, tile::Operand::DO, i, Value(), Value());
    Value dvNext = tile::DotTnOp::create(b, loc, dvType, p, dO, dv);
    Value dp = tile::QkOp::create(b, loc, scoreType, Type(), dO, v).getS();
    Value delta = tile::LoadOp::create(b, loc, rowsType, tile::Operand::Delta, i, Value(), Value());
    Value ds = tile::SoftmaxGradOp::create(b, loc, scoreType, p, dp, delta);
    if (*mod) {
      auto grad = tile::ScoreGradOp::create(b, loc, scoreType, ds, scaled);
      bool identity = false;
      {
        OpBuilder::InsertionGuard inner(b);
        Block *blk = b.createBlock(&grad.getBody(), {}, {f32, i32, i32, i32, i32}, {loc, loc, loc, loc, loc});
        FailureOr<tile::HookDerivative> derivative = tile::differentiateScoreMod(b, *mod, blk->getArguments());
        if (failed(derivative))
          return failure();
        tile::YieldOp::create(b, loc, ValueRange{derivative->dArg});
        // differentiateScoreMod also rebuilt the hook's value and its input partials: only d/dscore stays.
        eraseDeadOps(*blk);
        identity = matchPattern(derivative->dArg, m_OneFloat());
      }
      // Gradients of the f32 inputs the hook reads: dInput[index] += Σ dS'·(d s' / d element), one op a read.
      for (size_t read = 0;; ++read) {
        auto inputGrad = tile::InputGradOp::create(b, loc, "", ds, scaled);
        OpBuilder::InsertionGuard inner(b);
        Block *blk = b.createBlock(&inputGrad.getBody(), {}, {f32, i32, i32, i32, i32}, {loc, loc, loc, loc, loc});
        FailureOr<tile::HookDerivative> derivative = tile::differentiateScoreMod(b, *mod, blk->getArguments());
        if (failed(derivative))
          return failure();
        if (read >= derivative->inputs.size()) {
          inputGrad.erase();
          break;
        }
        const tile::InputPartial &partial = derivative->inputs[read];
        inputGrad.setName(partial.name);
        tile::YieldOp::create(b, loc, ValueRange{partial.index, partial.partial});
        eraseDeadOps(*blk);
        if (failed(mlir::verify(inputGrad)))
          return failure();
      }
      // A hook that only adds a term (ALiBi, a bias table) has derivative 1: dS' passes through unchanged.
      if (identity)
        grad.erase();
      else
        ds = grad.getResult();
    }
    ds = tile::ScaleOp::create(b, loc, ds);
    // dK += dSᵀ·Q; dQ += dS·K into the fp32 accumulator of Q tile i.
    Value dkNext = tile::DotTnOp::create(b, loc, dkType, ds, q, dk);
    tile::AccumulateOp::create(b, loc, tile::Operand::DqAccum, i, ds, k);
    tile::YieldOp::create(b, loc, ValueRange{dkNext, dvNext});
  }
  tile::StoreOp::create(b, loc, tile::Output::Dk, loop.getResult(0), /*staging=*/Value());
  tile::StoreOp::create(b, loc, tile::Output::Dv, loop.getResult(1), /*staging=*/Value());
  return success();
}

LogicalResult ProgramBuilder::buildBackwardPostprocess(ModuleOp module) {
  makeFunc(module, "attention_bwd_postprocess", tile::kBackwardPostprocess);
  auto accType = RankedTensorType::get({ShapedType::kDynamic, options.headDim}, b.getF32Type());
  Value dq = tile::LoadOp::create(b, loc, accType, tile::Operand::DqAccum, Value(), Value(), Value());
  tile::StoreOp::create(b, loc, tile::Output::Dq, dq, /*staging=*/Value());
  return success();
}

} // namespace

FailureOr<OwningOpRef<ModuleOp>> buildAttentionProgram(MLIRContext &context, const Variant &variant,
                                                       const ProgramOptions &options) {
  return ProgramBuilder(context, variant, options).build(tile::kForwardProgram);
}

FailureOr<OwningOpRef<ModuleOp>> buildProgram(MLIRContext &context, const Variant &variant,
                                              const ProgramOptions &options, StringRef moduleKind) {
  return ProgramBuilder(context, variant, options).build(moduleKind);
}

std::vector<std::string> moduleKinds() { return tile::moduleKindNames(); }

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
