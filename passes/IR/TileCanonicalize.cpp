//===- TileCanonicalize.cpp - the tile ops' canonicalization patterns -----===//
//
// Patterns that move softmax_scale to where it costs least: into the softmax's exp2 multiplier
// (FoldScaleIntoSoftmax), before an additive score modifier, or into a modifier's own factor (softcap).
//===----------------------------------------------------------------------===//
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileVerify.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace flashtile::tile;

//===----------------------------------------------------------------------===//
// Canonicalization
//===----------------------------------------------------------------------===//

namespace {
/// `tile.scale` whose only consumers on the way to the softmax are masks is folded into the softmax's exp2
/// multiplier (c = scale·log2 e): one multiply per score instead of two. Masks only look at coordinates and
/// scale > 0 (the runtime rejects other scales), so moving the multiply past them changes nothing.
struct FoldScaleIntoSoftmax : OpRewritePattern<SoftmaxUpdateOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(SoftmaxUpdateOp op, PatternRewriter &rewriter) const override {
    if (op.getFoldScale())
      return rewriter.notifyMatchFailure(op, "scale already folded");
    Value v = op.getS();
    while (auto mask = v.getDefiningOp<MaskOp>()) {
      if (!mask->hasOneUse())
        return rewriter.notifyMatchFailure(op, "a mask result has other users");
      v = mask.getS();
    }
    auto scale = v.getDefiningOp<ScaleOp>();
    if (!scale || !scale->hasOneUse())
      return rewriter.notifyMatchFailure(op, "scores are not scaled right before masks and softmax");
    rewriter.replaceOp(scale, scale.getS());
    rewriter.modifyOpInPlace(op, [&] { op.setFoldScale(true); });
    return success();
  }
};

/// What the scale-moving patterns below look at: the `tile.scale` right before a score modifier (its only user),
/// the modifier's score argument, and which values are the same for every score of a block (computed without
/// the score, q or kv: slopes, parameters, sequence lengths).
struct ScaledScoreMod {
  ScaleOp scale;
  Value score;
  std::function<bool(Value)> uniform;

  static FailureOr<ScaledScoreMod> match(ScoreModOp op, PatternRewriter &rewriter) {
    auto scale = op.getS().getDefiningOp<ScaleOp>();
    if (!scale || !scale->hasOneUse())
      return rewriter.notifyMatchFailure(op, "scores are not scaled right before the modifier");
    Block &body = op.getBody().front();
    Value score = body.getArgument(0), q = body.getArgument(3), kv = body.getArgument(4);
    if (!score.hasOneUse())
      return rewriter.notifyMatchFailure(op, "the modifier uses the score more than once");
    return ScaledScoreMod{scale, score, [=](Value v) {
                            return !isComputedFrom(v, score) && !isComputedFrom(v, q) && !isComputedFrom(v, kv);
                          }};
  }

  /// `tile.softmax_scale [inverse]` at the start of the modifier's body.
  static Value constant(ScoreModOp op, PatternRewriter &rewriter, bool inverse) {
    OpBuilder::InsertionGuard guard(rewriter);
    rewriter.setInsertionPointToStart(&op.getBody().front());
    return SoftmaxScaleOp::create(rewriter, op.getLoc(), rewriter.getF32Type(), inverse);
  }

  /// Replaces `user`'s operand `value` by value·factor, put on a block-uniform operand of `value`'s product when
  /// it has one (computed once per block), else one multiply.
  void multiply(PatternRewriter &rewriter, Operation *user, Value value, Value factor) const {
    OpBuilder::InsertionGuard guard(rewriter);
    auto product = value.getDefiningOp<arith::MulFOp>();
    if (product && product->hasOneUse() && (uniform(product.getLhs()) || uniform(product.getRhs()))) {
      unsigned index = uniform(product.getLhs()) ? 0 : 1;
      rewriter.setInsertionPoint(product);
      Value scaled = arith::MulFOp::create(rewriter, product.getLoc(), product->getOperand(index), factor);
      rewriter.modifyOpInPlace(product, [&] { product->setOperand(index, scaled); });
      return;
    }
    rewriter.setInsertionPoint(user);
    Value scaled = arith::MulFOp::create(rewriter, user->getLoc(), value, factor);
    rewriter.modifyOpInPlace(user, [&] { user->replaceUsesOfWith(value, scaled); });
  }
};

/// A score modifier that only adds a term to the score (`score + g`, `g + score`, `score - g`, g computed
/// without the score: ALiBi, a bias table, a per-key bias) commutes with the scale: scale·s + g =
/// scale·(s + g·(1/scale)) for scale > 0 (the runtime rejects other scales). Moved before `tile.scale`, the scale
/// can fold into the softmax's exp2 multiplier (FoldScaleIntoSoftmax): one multiply per score fewer. The
/// reciprocal goes on a block-uniform factor of g (g = slope·|distance|: on the slope), else g·(1/scale) is one
/// multiply, as the scale was. The rounding differs from scale·s + g by a few ulp of g.
struct MoveAdditiveScoreModBeforeScale : OpRewritePattern<ScoreModOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ScoreModOp op, PatternRewriter &rewriter) const override {
    FailureOr<ScaledScoreMod> m = ScaledScoreMod::match(op, rewriter);
    if (failed(m))
      return failure();
    Operation *sum = op.getBody().front().getTerminator()->getOperand(0).getDefiningOp();
    Value score = m->score, term;
    if (auto add = dyn_cast_or_null<arith::AddFOp>(sum))
      term = add.getLhs() == score ? add.getRhs() : add.getRhs() == score ? add.getLhs() : Value();
    else if (auto sub = dyn_cast_or_null<arith::SubFOp>(sum))
      term = sub.getLhs() == score ? sub.getRhs() : Value();
    if (!term || isComputedFrom(term, score))
      return rewriter.notifyMatchFailure(op, "the modifier is not score + a term computed without the score");

    m->multiply(rewriter, sum, term, ScaledScoreMod::constant(op, rewriter, /*inverse=*/true));
    rewriter.modifyOpInPlace(op, [&] { op.getSMutable().assign(m->scale.getS()); });
    rewriter.setInsertionPointAfter(op);
    auto moved = ScaleOp::create(rewriter, m->scale.getLoc(), op.getType(), op.getResult());
    rewriter.replaceAllUsesExcept(op.getResult(), moved.getResult(), moved);
    rewriter.eraseOp(m->scale);
    return success();
  }
};

/// A score modifier that first multiplies or divides the score by a block-uniform u (softcap: s·(1/cap)) takes
/// the scale into u: (scale·s)·u = s·(u·scale), (scale·s)/u = s/(u·(1/scale)). The multiply per score for the
/// scale goes away (u·scale is computed once per block); the rounding differs by an ulp.
struct AbsorbScaleIntoScoreMod : OpRewritePattern<ScoreModOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ScoreModOp op, PatternRewriter &rewriter) const override {
    FailureOr<ScaledScoreMod> m = ScaledScoreMod::match(op, rewriter);
    if (failed(m))
      return failure();
    Operation *user = *m->score.getUsers().begin();
    Value u;
    bool divides = false;
    if (auto mul = dyn_cast<arith::MulFOp>(user))
      u = mul.getLhs() == m->score ? mul.getRhs() : mul.getLhs();
    else if (auto div = dyn_cast<arith::DivFOp>(user); div && div.getLhs() == m->score)
      u = div.getRhs(), divides = true;
    if (!u || !m->uniform(u))
      return rewriter.notifyMatchFailure(op, "the score is not first multiplied or divided by a block-uniform value");

    m->multiply(rewriter, user, u, ScaledScoreMod::constant(op, rewriter, /*inverse=*/divides));
    rewriter.modifyOpInPlace(op, [&] { op.getSMutable().assign(m->scale.getS()); });
    rewriter.eraseOp(m->scale);
    return success();
  }
};
} // namespace

void ScoreModOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<MoveAdditiveScoreModBeforeScale, AbsorbScaleIntoScoreMod>(context);
}

void SoftmaxUpdateOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *context) {
  results.add<FoldScaleIntoSoftmax>(context);
}
