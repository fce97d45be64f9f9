//===- TestDifferentiateScore.cpp - tile-test-differentiate-score ---------===//
//
// Shows the derivative IR of DifferentiateScore.h in place of the hooks it differentiates, so lit tests can read
// it and the interpreter can run it (a score_mod that yields ds'/ds is still a score_mod).
//===----------------------------------------------------------------------===//
#include "passes/Transforms/DifferentiateScore.h"
#include "passes/Transforms/Passes.h"

namespace flashtile::tile {
#define GEN_PASS_DEF_TILETESTDIFFERENTIATESCORE
#include "passes/Transforms/Passes.h.inc"
} // namespace flashtile::tile

using namespace mlir;
using namespace flashtile::tile;

namespace {

/// What `wrt` asks for.
struct Wrt {
  enum class Kind { Score, Input, Param } kind = Kind::Score;
  std::string name;
};

FailureOr<Wrt> parseWrt(StringRef text) {
  if (text == "score")
    return Wrt{};
  for (auto [prefix, kind] :
       {std::pair{StringRef("input:"), Wrt::Kind::Input}, std::pair{StringRef("param:"), Wrt::Kind::Param}})
    if (text.starts_with(prefix) && text.size() > prefix.size())
      return Wrt{kind, text.drop_front(prefix.size()).str()};
  return failure();
}

/// The derivative `wrt` names, out of everything differentiateHook built (zero when the hook does not read it).
Value chosen(OpBuilder &b, const HookDerivative &d, const Wrt &wrt) {
  Value sum;
  auto add = [&](Value term) { sum = sum ? arith::AddFOp::create(b, b.getUnknownLoc(), sum, term) : term; };
  if (wrt.kind == Wrt::Kind::Score)
    return d.dArg;
  if (wrt.kind == Wrt::Kind::Input)
    for (const InputPartial &p : d.inputs)
      if (p.name == wrt.name)
        add(p.partial);
  if (wrt.kind == Wrt::Kind::Param)
    for (const ParamPartial &p : d.params)
      if (p.name == wrt.name)
        add(p.partial);
  if (!sum)
    sum = arith::ConstantFloatOp::create(b, b.getUnknownLoc(), b.getF32Type(), APFloat(0.0f));
  return sum;
}

/// Replaces the single block of `region` by one that yields the derivative.
LogicalResult rewriteHook(Region &region, std::optional<unsigned> wrtArg, StringRef hook, StringRef variant,
                          const Wrt &wrt) {
  Block &old = region.front();
  auto *fresh = new Block();
  region.push_back(fresh);
  for (BlockArgument arg : old.getArguments())
    fresh->addArgument(arg.getType(), arg.getLoc());
  OpBuilder b = OpBuilder::atBlockEnd(fresh);
  FailureOr<HookDerivative> d = differentiateHook(b, old, fresh->getArguments(), wrtArg, hook, variant);
  if (failed(d)) {
    fresh->erase();
    return failure();
  }
  YieldOp::create(b, old.getTerminator()->getLoc(), ValueRange{chosen(b, *d, wrt)});
  old.erase();
  // The pieces the chosen derivative does not use (the others' partials, the recomputed result).
  SmallVector<Operation *> built = llvm::map_to_vector(fresh->without_terminator(), [](Operation &op) { return &op; });
  for (Operation *op : llvm::reverse(built))
    if (isOpTriviallyDead(op))
      op->erase();
  return success();
}

struct TileTestDifferentiateScorePass
    : flashtile::tile::impl::TileTestDifferentiateScoreBase<TileTestDifferentiateScorePass> {
  using Base::Base;

  void runOnOperation() override {
    FuncOp func = getOperation();
    FailureOr<Wrt> parsed = parseWrt(wrt);
    if (failed(parsed)) {
      func.emitOpError() << "cannot differentiate with respect to '" << wrt
                         << "': expected score, input:NAME or param:NAME";
      return signalPassFailure();
    }
    SmallVector<std::pair<Region *, bool>> hooks; // (region, is a score modifier)
    func.walk([&](ScoreModOp op) { hooks.push_back({&op.getBody(), true}); });
    if (parsed->kind != Wrt::Kind::Score)
      func.walk([&](FinalizeOp op) {
        if (op.hasSink())
          hooks.push_back({&op.getSink(), false});
      });
    for (auto [region, isScore] : hooks)
      if (failed(rewriteHook(*region, isScore ? std::optional<unsigned>(0) : std::nullopt,
                             isScore ? "score hook" : "sink", func.getVariant(), *parsed)))
        return signalPassFailure();
  }
};

} // namespace
