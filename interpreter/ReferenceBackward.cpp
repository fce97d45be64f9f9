//===- ReferenceBackward.cpp - attention forward and backward in fp64 -----===//
#include "interpreter/ReferenceBackward.h"

#include "passes/IR/TileDialect.h"
#include "passes/Transforms/DifferentiateScore.h"

#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>

using namespace mlir;

namespace flashtile::interp {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// A partial derivative of a hook at one score: d hook / d (element `element` of input `which`, or parameter
/// `which`).
struct Partial {
  bool isParam = false;
  int which = 0;
  int64_t element = 0;
  double value = 0;
};

/// One kept key of a row: its logit and, for the backward, d logit / d (Q·Kᵀ) and the hook's partials.
struct KeyTerm {
  int j = 0;
  double logit = 0;
  double dLogitDRaw = 1;  ///< through the scales and the score hook
  double dLogitDHook = 1; ///< d logit / d s' (the scale folded after the hook, or 1)
  llvm::SmallVector<Partial> partials;
};

/// A hook's derivative IR, built in a block of its own that only the reference evaluates.
struct DerivativeBlock {
  std::unique_ptr<Block> block;
  tile::HookDerivative derivative;
};

class Reference {
public:
  Reference(tile::FuncOp func, const ReferenceProblem &p, const std::vector<double> &q, const std::vector<double> &k,
            const std::vector<double> &v)
      : func(func), p(p), q(q), k(k), v(v), eval(env) {}

  LogicalResult prepare(bool gradients);
  /// The kept keys of row i of (b, h), and the sink's logit (-inf without one).
  LogicalResult row(int b, int h, int i, SmallVectorImpl<KeyTerm> &keys, double &sink);
  /// The sink's partials at (b, h), scaled by `adjoint`, added into the gradients; with `magnitudes`, their
  /// absolute values scaled by `absAdjoint` and `viaDAdjoint` added into the inputs' magnitudes.
  LogicalResult sinkPartials(int b, int h, double adjoint, ReferenceGradients &grads, double absAdjoint = 0,
                             double viaDAdjoint = 0);
  /// Enters sequence b: its lengths (what tile.dim seqlen_q / seqlen_k give) and where its rows are.
  void beginBatch(int b) {
    entry = p.isVarlen() ? 0 : b;
    qRow0 = p.isVarlen() ? p.cuSeqlensQ[b] : 0;
    kRow0 = p.isVarlen() ? p.cuSeqlensK[b] : 0;
    seqlenQ = p.isVarlen() ? p.cuSeqlensQ[b + 1] - qRow0 : p.seqlenQ;
    seqlenK = p.isVarlen() ? p.cuSeqlensK[b + 1] - kRow0 : p.seqlenK;
    // What the hooks see: the larger problem's positions and sizes (the call's own without a placement).
    const ReferenceProblem::Placement &g = p.placement;
    if (p.isVarlen()) {
      qPos0 = g.qOffsets.empty() ? 0 : g.qOffsets[b];
      kPos0 = g.kOffsets.empty() ? 0 : g.kOffsets[b];
      env.seqlenQ = g.cuSeqlensQ.empty() ? seqlenQ : g.cuSeqlensQ[b + 1] - g.cuSeqlensQ[b];
      env.seqlenK = g.cuSeqlensK.empty() ? seqlenK : g.cuSeqlensK[b + 1] - g.cuSeqlensK[b];
      env.keyOffset = g.cuSeqlensK.empty() ? kRow0 : g.cuSeqlensK[b];
    } else {
      qPos0 = g.qOffset, kPos0 = g.kOffset;
      env.seqlenQ = g.seqlenQ ? g.seqlenQ : seqlenQ;
      env.seqlenK = g.seqlenK ? g.seqlenK : seqlenK;
      env.keyOffset = int64_t{b} * env.seqlenK;
    }
  }

  // Row i (key j) of the current sequence, batch b (b is the sequence's; its tensors' entry and rows are entered).
  size_t qAt(int, int i, int h) const { return ((size_t(entry) * p.seqlenQ + qRow0 + i) * p.headsQ + h) * p.headDim; }
  size_t kAt(int, int j, int h) const {
    return ((size_t(entry) * p.seqlenK + kRow0 + j) * p.headsKv + kvHead(h)) * p.headDim;
  }
  size_t vAt(int, int j, int h) const {
    return ((size_t(entry) * p.seqlenK + kRow0 + j) * p.headsKv + kvHead(h)) * p.headDimV;
  }
  size_t oAt(int, int i, int h) const { return ((size_t(entry) * p.seqlenQ + qRow0 + i) * p.headsQ + h) * p.headDimV; }
  size_t rowAt(int, int h, int i) const { return (size_t(entry) * p.headsQ + h) * p.seqlenQ + qRow0 + i; }
  int seqlenQ = 0, seqlenK = 0; ///< of the current sequence

  tile::FuncOp func;
  const ReferenceProblem &p;
  const std::vector<double> &q, &k, &v;

private:
  int kvHead(int h) const { return h / (p.headsQ / p.headsKv); }
  LogicalResult fail(const Twine &message) { return func.emitError() << "reference attention: " << message; }
  void collectPartials(const tile::HookDerivative &d, double scale, SmallVectorImpl<Partial> &out);
  int inputIndex(StringRef name) { return static_cast<int>(func.inputIndex(name)); }
  int paramIndex(StringRef name) { return static_cast<int>(func.paramIndex(name)); }

  /// Checks that the placement describes a larger problem this call is a block of.
  LogicalResult checkPlacement();

  int entry = 0, qRow0 = 0, kRow0 = 0;
  int64_t qPos0 = 0, kPos0 = 0; ///< the current sequence's first query row and key in the larger problem
  HookEnv env;
  HookEvaluator eval;
  tile::ScoreModOp scoreMod;
  tile::MaskOp mask;
  Region *sink = nullptr;
  double scaleBeforeHook = 1, scaleAfterHook = 1;
  std::optional<DerivativeBlock> scoreGrad, sinkGrad;
};

/// Builds `build`'s derivative IR in a fresh block with arguments of `types`.
template <typename Build> FailureOr<DerivativeBlock> derivativeBlock(MLIRContext *ctx, TypeRange types, Build build) {
  DerivativeBlock out{std::make_unique<Block>(), {}};
  for (Type type : types)
    out.block->addArgument(type, UnknownLoc::get(ctx));
  OpBuilder b(ctx); // a block without a parent region: the builder cannot take the context from it
  b.setInsertionPointToEnd(out.block.get());
  FailureOr<tile::HookDerivative> d = build(b, out.block->getArguments());
  if (failed(d))
    return failure();
  out.derivative = std::move(*d);
  return out;
}

LogicalResult Reference::prepare(bool gradients) {
  if (p.headsKv <= 0 || p.headsQ % p.headsKv != 0)
    return fail("heads_q (" + Twine(p.headsQ) + ") must be a multiple of heads_kv (" + Twine(p.headsKv) + ")");
  const size_t entries = p.isVarlen() ? 1 : size_t(p.batch);
  size_t rowsQ = entries * p.seqlenQ * p.headsQ, rowsK = entries * p.seqlenK * p.headsKv;
  if (q.size() != rowsQ * p.headDim || k.size() != rowsK * p.headDim || v.size() != rowsK * p.headDimV)
    return fail("Q, K or V does not have the problem's size");
  if (p.isVarlen() || !p.cuSeqlensK.empty())
    for (const auto &[offsets, total] : {std::pair{&p.cuSeqlensQ, p.seqlenQ}, std::pair{&p.cuSeqlensK, p.seqlenK}})
      for (int b = 0; b <= p.batch; ++b)
        if (offsets->size() != size_t(p.batch) + 1 || (*offsets)[b] < (b ? (*offsets)[b - 1] : 0) ||
            (*offsets)[b] > total || (*offsets)[0] != 0)
          return fail("cu_seqlens_q and cu_seqlens_k must be batch + 1 non-decreasing offsets from 0 to the packed "
                      "rows");
  if (p.params.size() != func.getParams().size() || p.inputs.size() != func.getInputs().size())
    return fail("the call gives " + Twine(p.params.size()) + " parameters and " + Twine(p.inputs.size()) +
                " inputs; the program declares " + Twine(func.getParams().size()) + " and " +
                Twine(func.getInputs().size()));
  if (failed(checkPlacement()))
    return failure();
  const ReferenceProblem::Placement &g = p.placement;
  const int headsQ = g.headsQ ? g.headsQ : p.headsQ, headsKv = g.headsKv ? g.headsKv : p.headsKv;
  env = HookEnv{p.batch, headsQ, headsKv, p.seqlenQ, p.seqlenK, 0, p.softmaxScale, {}, {}};
  for (auto [name, value] : llvm::zip_equal(func.getParams(), p.params))
    env.params[cast<StringAttr>(name).str()] = value;
  for (auto [input, value] : llvm::zip_equal(func.getInputs(), p.inputs))
    env.inputs[cast<tile::InputAttr>(input).getName().str()] = value;
  // Where the program applies softmax_scale: before the hook (tile.scale) or after it (fold_scale).
  func.walk([&](Operation *op) {
    if (isa<tile::ScaleOp>(op))
      scaleBeforeHook = p.softmaxScale;
    if (auto update = dyn_cast<tile::SoftmaxUpdateOp>(op); update && update.getFoldScale())
      scaleAfterHook = p.softmaxScale;
    if (auto op2 = dyn_cast<tile::ScoreModOp>(op); op2 && !scoreMod)
      scoreMod = op2;
    if (auto op2 = dyn_cast<tile::MaskOp>(op); op2 && !mask)
      mask = op2;
    if (auto fin = dyn_cast<tile::FinalizeOp>(op); fin && fin.hasSink())
      sink = &fin.getSink();
  });
  if (!gradients)
    return success();
  MLIRContext *ctx = func.getContext();
  Builder types(ctx);
  Type i32 = types.getI32Type(), f32 = types.getF32Type();
  if (scoreMod) {
    auto built = derivativeBlock(ctx, {f32, i32, i32, i32, i32}, [&](OpBuilder &b, ValueRange args) {
      return tile::differentiateScoreMod(b, scoreMod, args);
    });
    if (failed(built))
      return failure();
    scoreGrad = std::move(*built);
  }
  if (sink) {
    auto built = derivativeBlock(
        ctx, {i32, i32}, [&](OpBuilder &b, ValueRange args) { return tile::differentiateSink(b, *sink, args); });
    if (failed(built))
      return failure();
    sinkGrad = std::move(*built);
  }
  return success();
}

LogicalResult Reference::checkPlacement() {
  const ReferenceProblem::Placement &g = p.placement;
  const int headsQ = g.headsQ ? g.headsQ : p.headsQ, headsKv = g.headsKv ? g.headsKv : p.headsKv;
  if (g.headOffset < 0 || headsKv < 1 || headsQ % headsKv != 0 || headsQ / headsKv != p.headsQ / p.headsKv ||
      g.headOffset % (p.headsQ / p.headsKv) != 0 || g.headOffset + p.headsQ > headsQ)
    return fail("head_offset (" + Twine(g.headOffset) + "), heads_q_global (" + Twine(headsQ) +
                ") and heads_kv_global (" + Twine(headsKv) + ") must place the call's " + Twine(p.headsQ) +
                " query heads inside the larger problem's, in whole groups of " + Twine(p.headsQ / p.headsKv) +
                " a K/V head");
  // Each sequence's rows (keys) must lie inside the larger problem's sequence: [offset, offset + length].
  auto inside = [&](const char *what, int64_t offset, int64_t length, int64_t total, int b) -> LogicalResult {
    if (offset >= 0 && offset + length <= total)
      return success();
    std::string where = p.isVarlen() ? " (sequence " + std::to_string(b) + ")" : "";
    return fail(Twine(what) + where + ": rows [" + Twine(offset) + ", " + Twine(offset + length) +
                ") are not inside the larger problem's " + Twine(total));
  };
  if (!p.isVarlen()) {
    if (!g.qOffsets.empty() || !g.kOffsets.empty() || !g.cuSeqlensQ.empty() || !g.cuSeqlensK.empty())
      return fail("q_offsets, k_offsets, cu_seqlens_q_global and cu_seqlens_k_global are for varlen calls");
    if (g.seqlenQ < 0 || g.seqlenK < 0)
      return fail("seqlen_q_global and seqlen_k_global must be >= 0 (0: the call's)");
    if (failed(inside("q_offset", g.qOffset, p.seqlenQ, g.seqlenQ ? g.seqlenQ : p.seqlenQ, 0)) ||
        failed(inside("k_offset", g.kOffset, p.seqlenK, g.seqlenK ? g.seqlenK : p.seqlenK, 0)))
      return failure();
  } else {
    if (g.qOffset || g.kOffset || g.seqlenQ || g.seqlenK)
      return fail("varlen calls place each sequence with q_offsets, k_offsets, cu_seqlens_q_global and "
                  "cu_seqlens_k_global, not q_offset, k_offset, seqlen_q_global or seqlen_k_global");
    for (const auto &[name, values, count] :
         {std::tuple{"q_offsets", &g.qOffsets, p.batch}, std::tuple{"k_offsets", &g.kOffsets, p.batch},
          std::tuple{"cu_seqlens_q_global", &g.cuSeqlensQ, p.batch + 1},
          std::tuple{"cu_seqlens_k_global", &g.cuSeqlensK, p.batch + 1}})
      if (!values->empty() && values->size() != size_t(count))
        return fail(Twine(name) + " must have " + Twine(count) + " values, got " + Twine(values->size()));
    for (const std::vector<int32_t> *cu : {&g.cuSeqlensQ, &g.cuSeqlensK})
      for (size_t b = 0; b < cu->size(); ++b)
        if ((*cu)[b] < (b ? (*cu)[b - 1] : 0) || (*cu)[0] != 0)
          return fail("cu_seqlens_q_global and cu_seqlens_k_global must be non-decreasing offsets from 0");
    for (int b = 0; b < p.batch; ++b) {
      int64_t lenQ = p.cuSeqlensQ[b + 1] - p.cuSeqlensQ[b], lenK = p.cuSeqlensK[b + 1] - p.cuSeqlensK[b];
      int64_t totalQ = g.cuSeqlensQ.empty() ? lenQ : g.cuSeqlensQ[b + 1] - g.cuSeqlensQ[b];
      int64_t totalK = g.cuSeqlensK.empty() ? lenK : g.cuSeqlensK[b + 1] - g.cuSeqlensK[b];
      if (failed(inside("q_offsets", g.qOffsets.empty() ? 0 : g.qOffsets[b], lenQ, totalQ, b)) ||
          failed(inside("k_offsets", g.kOffsets.empty() ? 0 : g.kOffsets[b], lenK, totalK, b)))
        return failure();
    }
  }
  const size_t rows = (p.isVarlen() ? 1 : size_t(p.batch)) * p.headsQ * p.seqlenQ;
  if ((p.forwardO == nullptr) != (p.forwardLse == nullptr))
    return fail("the larger problem's O and LSE are given together or not at all");
  if (p.forwardO && (p.forwardO->size() != rows * p.headDimV || p.forwardLse->size() != rows))
    return fail("the larger problem's O and LSE must have the call's O and LSE sizes");
  return success();
}

void Reference::collectPartials(const tile::HookDerivative &d, double scale, SmallVectorImpl<Partial> &out) {
  for (const tile::InputPartial &partial : d.inputs)
    out.push_back(
        {false, inputIndex(partial.name), eval.value(partial.index).i, scale * eval.value(partial.partial).f});
  for (const tile::ParamPartial &partial : d.params)
    out.push_back({true, paramIndex(partial.name), 0, scale * eval.value(partial.partial).f});
}

LogicalResult Reference::row(int b, int h, int i, SmallVectorImpl<KeyTerm> &keys, double &sinkLogit) {
  keys.clear();
  sinkLogit = kNegInf;
  for (int j = 0; j < seqlenK; ++j) {
    WideScalar coords[] = {WideScalar::integer(b), WideScalar::integer(p.placement.headOffset + h),
                           WideScalar::integer(qPos0 + i), WideScalar::integer(kPos0 + j)};
    if (mask) {
      FailureOr<SmallVector<WideScalar>> keep = eval.yielded(mask.getBody().front(), coords);
      if (failed(keep))
        return failure();
      if (!(*keep)[0].isTrue())
        continue;
    }
    double raw = 0;
    for (int d = 0; d < p.headDim; ++d)
      raw += q[qAt(b, i, h) + d] * k[kAt(b, j, h) + d];
    KeyTerm key{j, raw * scaleBeforeHook, scaleBeforeHook * scaleAfterHook, scaleAfterHook, {}};
    WideScalar args[] = {WideScalar::real(key.logit), coords[0], coords[1], coords[2], coords[3]};
    if (scoreGrad) {
      const tile::HookDerivative &d = scoreGrad->derivative;
      if (failed(eval.run(*scoreGrad->block, args)))
        return failure();
      key.logit = eval.value(d.value).f;
      key.dLogitDRaw *= eval.value(d.dArg).f;
      collectPartials(d, 1.0, key.partials);
    } else if (scoreMod) {
      FailureOr<SmallVector<WideScalar>> modified = eval.yielded(scoreMod.getBody().front(), args);
      if (failed(modified))
        return failure();
      key.logit = (*modified)[0].f;
    }
    key.logit *= scaleAfterHook;
    keys.push_back(std::move(key));
  }
  if (sink) {
    WideScalar head[] = {WideScalar::integer(b), WideScalar::integer(p.placement.headOffset + h)};
    FailureOr<SmallVector<WideScalar>> logit = eval.yielded(sink->front(), head);
    if (failed(logit))
      return failure();
    sinkLogit = (*logit)[0].f;
  }
  return success();
}

LogicalResult Reference::sinkPartials(int b, int h, double adjoint, ReferenceGradients &grads, double absAdjoint,
                                      double viaDAdjoint) {
  if (!sinkGrad)
    return success();
  WideScalar head[] = {WideScalar::integer(b), WideScalar::integer(p.placement.headOffset + h)};
  if (failed(eval.run(*sinkGrad->block, head)))
    return failure();
  SmallVector<Partial> partials;
  collectPartials(sinkGrad->derivative, 1.0, partials);
  ReferenceGradients::Magnitudes &mag = grads.magnitudes;
  for (const Partial &partial : partials) {
    if (partial.isParam) {
      grads.dParams[partial.which] += adjoint * partial.value;
      continue;
    }
    grads.dInputs[partial.which][partial.element] += adjoint * partial.value;
    mag.dInputsAbs[partial.which][partial.element] += absAdjoint * std::abs(partial.value);
    mag.dInputsViaD[partial.which][partial.element] += viaDAdjoint * std::abs(partial.value);
  }
  return success();
}

/// LSE of a row: ln(Σ e^logit + e^sink), -inf when there is neither a key nor a sink.
double logSumExp(ArrayRef<KeyTerm> keys, double sink) {
  double m = sink;
  for (const KeyTerm &key : keys)
    m = std::max(m, key.logit);
  if (m == kNegInf)
    return kNegInf;
  double l = std::exp(sink - m);
  for (const KeyTerm &key : keys)
    l += std::exp(key.logit - m);
  return m + std::log(l);
}

/// Runs the forward (and with dO the backward) over every row.
FailureOr<ReferenceGradients> attention(Reference &ref, const std::vector<double> *dO) {
  const ReferenceProblem &p = ref.p;
  if (failed(ref.prepare(dO != nullptr)))
    return failure();
  ReferenceGradients g;
  size_t rows = (p.isVarlen() ? 1 : size_t(p.batch)) * p.headsQ * p.seqlenQ;
  g.o.assign(rows * p.headDimV, 0.0);
  g.lse.assign(rows, kNegInf);
  if (dO && dO->size() != g.o.size())
    return ref.func.emitError() << "reference attention: dO does not have O's size";
  if (dO) {
    g.d.assign(rows, 0.0);
    g.dq.assign(ref.q.size(), 0.0);
    g.dk.assign(ref.k.size(), 0.0);
    g.dv.assign(ref.v.size(), 0.0);
    g.dParams.assign(p.params.size(), 0.0);
    g.magnitudes = {g.dq, g.dk, g.dv, g.dq, g.dk};
    for (const WideInput &input : p.inputs)
      g.dInputs.push_back(std::vector<double>(
          std::holds_alternative<std::vector<double>>(input) ? std::get<std::vector<double>>(input).size() : 0, 0.0));
    g.magnitudes.dInputsAbs = g.magnitudes.dInputsViaD = g.dInputs;
  }
  SmallVector<KeyTerm> keys;
  for (int b = 0; b < p.batch; ++b) {
    ref.beginBatch(b);
    for (int h = 0; h < p.headsQ; ++h) {
      double dSink = 0, dSinkAbs = 0, dSinkViaD = 0; // d loss / d the head's sink logit, and its magnitudes
      for (int i = 0; i < ref.seqlenQ; ++i) {
        double sink = kNegInf;
        if (failed(ref.row(b, h, i, keys, sink)))
          return failure();
        const double ownLse = logSumExp(keys, sink);
        g.lse[ref.rowAt(b, h, i)] = ownLse;
        if (ownLse == kNegInf)
          continue; // no key and no sink: O = 0 and no gradient
        double *ownO = &g.o[ref.oAt(b, i, h)];
        for (const KeyTerm &key : keys)
          for (int d = 0; d < p.headDimV; ++d)
            ownO[d] += std::exp(key.logit - ownLse) * ref.v[ref.vAt(b, key.j, h) + d];
        if (!dO)
          continue;
        // The backward of a block of a larger problem takes that problem's O and LSE (P and D are its).
        const double lse = p.forwardLse ? (*p.forwardLse)[ref.rowAt(b, h, i)] : ownLse;
        const double *o = p.forwardO ? &(*p.forwardO)[ref.oAt(b, i, h)] : ownO;
        if (lse == kNegInf)
          continue;
        const double *dOi = &(*dO)[ref.oAt(b, i, h)];
        double D = 0, absD = 0;
        for (int d = 0; d < p.headDimV; ++d) {
          D += dOi[d] * o[d];
          absD += std::abs(dOi[d] * o[d]);
        }
        ReferenceGradients::Magnitudes &mag = g.magnitudes;
        g.d[ref.rowAt(b, h, i)] = D;
        dSink -= std::exp(sink - lse) * D;
        dSinkAbs += std::exp(sink - lse) * std::abs(D);
        dSinkViaD += std::exp(sink - lse) * absD;
        for (const KeyTerm &key : keys) {
          double prob = std::exp(key.logit - lse), dP = 0;
          for (int d = 0; d < p.headDimV; ++d) {
            dP += dOi[d] * ref.v[ref.vAt(b, key.j, h) + d];
            g.dv[ref.vAt(b, key.j, h) + d] += prob * dOi[d];
            mag.dvAbs[ref.vAt(b, key.j, h) + d] += prob * std::abs(dOi[d]);
          }
          double dLogit = prob * (dP - D), dRaw = dLogit * key.dLogitDRaw;
          double viaD = prob * std::abs(key.dLogitDRaw) * absD;
          for (int d = 0; d < p.headDim; ++d) {
            const double kd = ref.k[ref.kAt(b, key.j, h) + d], qd = ref.q[ref.qAt(b, i, h) + d];
            g.dq[ref.qAt(b, i, h) + d] += dRaw * kd;
            g.dk[ref.kAt(b, key.j, h) + d] += dRaw * qd;
            mag.dqAbs[ref.qAt(b, i, h) + d] += std::abs(dRaw * kd);
            mag.dkAbs[ref.kAt(b, key.j, h) + d] += std::abs(dRaw * qd);
            mag.dqViaD[ref.qAt(b, i, h) + d] += viaD * std::abs(kd);
            mag.dkViaD[ref.kAt(b, key.j, h) + d] += viaD * std::abs(qd);
          }
          for (const Partial &partial : key.partials) {
            const double term = key.dLogitDHook * partial.value;
            if (partial.isParam) {
              g.dParams[partial.which] += dLogit * term;
              continue;
            }
            g.dInputs[partial.which][partial.element] += dLogit * term;
            mag.dInputsAbs[partial.which][partial.element] += std::abs(dLogit * term);
            mag.dInputsViaD[partial.which][partial.element] += prob * std::abs(term) * absD;
          }
        }
      }
      if (dO && failed(ref.sinkPartials(b, h, dSink, g, dSinkAbs, dSinkViaD)))
        return failure();
    }
  }
  return g;
}

} // namespace

FailureOr<ReferenceForward> referenceForward(tile::FuncOp func, const ReferenceProblem &problem,
                                             const std::vector<double> &q, const std::vector<double> &k,
                                             const std::vector<double> &v) {
  Reference ref(func, problem, q, k, v);
  FailureOr<ReferenceGradients> out = attention(ref, nullptr);
  if (failed(out))
    return failure();
  return ReferenceForward{std::move(out->o), std::move(out->lse)};
}

FailureOr<ReferenceGradients> referenceBackward(tile::FuncOp func, const ReferenceProblem &problem,
                                                const std::vector<double> &q, const std::vector<double> &k,
                                                const std::vector<double> &v, const std::vector<double> &dO) {
  Reference ref(func, problem, q, k, v);
  return attention(ref, &dO);
}

} // namespace flashtile::interp
