//===- InterpreterMath.cpp - math on tiles and the backward's ops -------===//
//
// The Interpreter's math (InterpreterState.h): GEMMs, the variant's hooks on scores, the online softmax and its
// state, and the backward's ops (its GEMMs, softmax gradient, input gradients, the Q-tile walk).
//===----------------------------------------------------------------------===//
#include "interpreter/InterpreterState.h"

namespace flashtile::interp::detail {

//===----------------------------------------------------------------------===//
// Math on tiles
//===----------------------------------------------------------------------===//

LogicalResult Interpreter::exec(QkOp op) {
  FailureOr<TilePtr> qt = tile(op, op.getQ()), kt = tile(op, op.getK());
  if (failed(qt) || failed(kt))
    return failure();
  if ((*qt)->cols != (*kt)->cols)
    return fail(op, "Q has " + Twine((*qt)->cols) + " columns but K has " + Twine((*kt)->cols));
  if (failed(define(op, op.getS(), qk(**qt, **kt))))
    return failure();
  if (Value token = op.getToken())
    return startMma(op, token, tiles[op.getS()].get(), {qt->get(), kt->get()});
  return success();
}

LogicalResult Interpreter::exec(ScaleOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS());
  if (failed(s))
    return failure();
  Tile out = **s;
  const float scale = softmaxScale();
  for (float &x : out.data)
    x *= scale;
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(ScoreModOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS());
  if (failed(s))
    return failure();
  Tile out = **s;
  Block &body = op.getBody().front();
  SmallVector<Scalar, 1> result;
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      // A tile's padding key past seqlen_k (its score is masked later) reaches the region as the last key, so
      // per-key input reads stay in range; the CUDA printer does the same.
      int64_t kv = std::min<int64_t>(out.colBase + c, std::max<int64_t>(inst.seqlenK - 1, 0));
      auto [query, head] = rowOf(out.rowBase + r);
      Scalar args[] = {Scalar::real(out.at(r, c)), Scalar::integer(inst.b), Scalar::integer(head),
                       Scalar::integer(query), Scalar::integer(kv)};
      if (failed(evalRegion(body, args, result)))
        return failure();
      out.at(r, c) = result[0].f;
    }
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(MaskOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS());
  if (failed(s))
    return failure();
  Tile out = **s;
  Block &body = op.getBody().front();
  SmallVector<Scalar, 1> keep;
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      int64_t kv = out.colBase + c;
      bool kept = kv < inst.seqlenK; // keys past the sequence are always dropped
      if (kept) {
        auto [query, head] = rowOf(out.rowBase + r);
        Scalar args[] = {Scalar::integer(inst.b), Scalar::integer(head), Scalar::integer(query), Scalar::integer(kv)};
        if (failed(evalRegion(body, args, keep)))
          return failure();
        kept = keep[0].isTrue();
      }
      if (!kept)
        out.at(r, c) = -std::numeric_limits<float>::infinity();
    }
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(SoftmaxUpdateOp op) {
  // The softmax reads and writes m and l only: an asynchronous P·V may still be writing the accumulator (FA3's
  // intra-warpgroup overlap).
  FailureOr<TilePtr> s = tile(op, op.getS());
  FailureOr<StatsPtr> st = rowStats(op, op.getStats());
  if (failed(s) || failed(st))
    return failure();
  if ((*s)->rows != (*st)->rows)
    return fail(op, "the score tile has " + Twine((*s)->rows) + " rows but the row statistics " +
                        Twine((*st)->rows));
  RoundFn roundP = roundFor(cast<RankedTensorType>(op.getP().getType()).getElementType());
  float c = std::numbers::log2e_v<float>;
  if (op.getFoldScale())
    c = softmaxScale() * std::numbers::log2e_v<float>;
  SoftmaxStep step = softmaxUpdate(**s, **st, c, roundP, static_cast<int>(op.getRescaleThreshold().value_or(0)));
  if (failed(define(op, op.getP(), std::move(step.p))) || failed(define(op, op.getAlpha(), std::move(step.alpha))))
    return failure();
  return define(op, op.getNewStats(), std::move(step.stats));
}

LogicalResult Interpreter::exec(RescaleOp op) {
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  FailureOr<TilePtr> alpha = tile(op, op.getAlpha());
  if (failed(acc) || failed(alpha))
    return failure();
  if ((*alpha)->rows != (*acc)->rows)
    return fail(op, "alpha has " + Twine((*alpha)->rows) + " rows but the accumulator " + Twine((*acc)->rows));
  return define(op, op.getResult(), rescale(**acc, **alpha));
}

LogicalResult Interpreter::exec(PvOp op) {
  FailureOr<TilePtr> p = tile(op, op.getP()), vt = tile(op, op.getV());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(p) || failed(vt) || failed(acc))
    return failure();
  const Tile &pT = **p, &vT = **vt;
  const Accumulator &a = **acc;
  if (pT.cols != vT.rows || pT.rows != a.rows || vT.cols != a.cols)
    return fail(op, "P is " + Twine(pT.rows) + "x" + Twine(pT.cols) + ", V " + Twine(vT.rows) + "x" + Twine(vT.cols) +
                        " and the accumulator " + Twine(a.rows) + "x" + Twine(a.cols) +
                        ": P·V does not fit the accumulator");
  // P and V must come from the same K/V tile.
  if (pT.colBase != vT.rowBase)
    return fail(op, "P covers keys from " + Twine(pT.colBase) + " but V rows from " + Twine(vT.rowBase));
  if (failed(define(op, op.getResult(), pv(pT, vT, a))))
    return failure();
  if (Value token = op.getToken())
    return startMma(op, token, accs[op.getResult()].get(), {p->get(), vt->get()});
  return success();
}

LogicalResult Interpreter::exec(FinalizeOp op) {
  FailureOr<StatsPtr> st = rowStats(op, op.getStats());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(st) || failed(acc))
    return failure();
  std::optional<float> sink;
  if (op.hasSink() && packed)
    return fail(op, "has a sink in a program that packs query heads; the sink joins at tile.store_split there");
  if (op.hasSink()) {
    SmallVector<Scalar, 1> logit;
    if (failed(evalRegion(op.getSink().front(), {Scalar::integer(inst.b), Scalar::integer(inst.h)}, logit)))
      return failure();
    sink = logit[0].f;
  }
  Finalized out = finalize(**st, **acc, sink);
  // An e4m3 program's V descale (a problem of another dtype has none: 1).
  if (const float vScale = descale(problem.vDescale); vScale != 1.0f)
    for (float &x : out.o.data)
      x *= vScale;
  if (failed(define(op, op.getO(), std::move(out.o))))
    return failure();
  return define(op, op.getLse(), std::move(out.lse));
}

LogicalResult Interpreter::checkStateRows(Operation *op, Value acc) {
  auto type = cast<AccType>(acc.getType());
  if (type.hasStaticRows() && type.getRows() != inst.rows)
    return fail(op, "the state has " + Twine(type.getRows()) + " rows but the program instance owns " +
                        Twine(inst.rows) + " query rows");
  return success();
}

LogicalResult Interpreter::defineEmptyState(Operation *op, Value stats, Value acc) {
  if (failed(define(op, stats, RowStats::empty(inst.rows))))
    return failure();
  return define(op, acc, Accumulator::zeros(inst.rows, cast<AccType>(acc.getType()).getCols()));
}

LogicalResult Interpreter::exec(InitStateOp op) {
  if (failed(checkStateRows(op, op.getAcc())))
    return failure();
  return defineEmptyState(op, op.getStats(), op.getAcc());
}

LogicalResult Interpreter::exec(StateLoadOp op) {
  if (failed(checkStateRows(op, op.getAcc())))
    return failure();
  if (kvStep == 0)
    return defineEmptyState(op, op.getStats(), op.getAcc());
  auto it = stepStates.find({inst.b, inst.h, inst.qTile});
  if (it == stepStates.end() || it->second.step != kvStep - 1)
    return fail(op, "K/V step " + Twine(kvStep) + " reads a state that step " + Twine(kvStep - 1) +
                        " did not store (tile.state_store) for these rows");
  if (failed(define(op, op.getStats(), it->second.stats)))
    return failure();
  return define(op, op.getAcc(), it->second.acc);
}

LogicalResult Interpreter::exec(StateStoreOp op) {
  FailureOr<StatsPtr> st = rowStats(op, op.getStats());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(st) || failed(acc))
    return failure();
  stepStates[{inst.b, inst.h, inst.qTile}] = {kvStep, **st, **acc};
  if (failed(define(op, op.getStatsOut(), **st)))
    return failure();
  return define(op, op.getAccOut(), **acc);
}

//===----------------------------------------------------------------------===//
// The backward's ops
//===----------------------------------------------------------------------===//

LogicalResult Interpreter::storeBackward(StoreOp op) {
  const Output output = op.getOperand();
  StringRef name = stringifyOutput(output);
  if (!backward || op.getStaging())
    return fail(op, "stores " + name +
                        (backward ? " through a slot, which the interpreter stages for O only"
                                  : ", which a forward program does not write"));
  ++backwardStores[output];
  if (output == Output::Dk || output == Output::Dv) {
    // The main program's accumulator of its K/V tile: this query head's part of the K/V head's gradient.
    FailureOr<AccPtr> acc = accumulator(op, op.getValue());
    if (failed(acc))
      return failure();
    Tensor &parts = output == Output::Dk ? backward->dkParts : backward->dvParts;
    if ((*acc)->rows != inst.kvRows || (*acc)->cols != parts.width)
      return fail(op, "stores a " + Twine((*acc)->rows) + "x" + Twine((*acc)->cols) + " " + name +
                          " accumulator but the program instance owns " + Twine(inst.kvRows) + " keys of " +
                          Twine(parts.width) + " values");
    // Keys past the sequence are not written.
    for (int64_t r = 0; r < (*acc)->rows && inst.n0 + r < inst.seqlenK; ++r)
      for (int64_t d = 0; d < parts.width; ++d)
        parts.at(inst.entry, inst.kRow0 + inst.n0 + r, inst.h, d) = (*acc)->acc[r * parts.width + d];
    return success();
  }
  FailureOr<TilePtr> value = tile(op, op.getValue());
  if (failed(value))
    return failure();
  const Tile &t = **value;
  // D (fp32 rows) of the preprocess, dQ (converted to the dtype) of the postprocess: the instance's Q tile.
  Tensor &out = output == Output::Delta ? backward->delta : backward->dq;
  if (t.rows != inst.rows || t.cols != out.width)
    return fail(op, "stores a " + Twine(t.rows) + "x" + Twine(t.cols) + " " + name +
                        " tile but the program instance owns " + Twine(inst.rows) + " query rows of " +
                        Twine(out.width) + " values");
  RoundFn round = output == Output::Dq ? roundOut : nullptr;
  for (int64_t r = 0; r < t.rows && inst.m0 + r < rowCount(); ++r) {
    auto [query, head] = rowOf(inst.m0 + r);
    for (int64_t d = 0; d < out.width; ++d)
      out.at(inst.entry, inst.qRow0 + query, head, d) = round ? round(t.at(r, d)) : t.at(r, d);
  }
  return success();
}

LogicalResult Interpreter::exec(RowDotOp op) {
  FailureOr<TilePtr> a = tile(op, op.getA()), b = tile(op, op.getB());
  if (failed(a) || failed(b))
    return failure();
  if ((*a)->rows != (*b)->rows || (*a)->cols != (*b)->cols || (*a)->rowBase != (*b)->rowBase)
    return fail(op, "multiplies a " + Twine((*a)->rows) + "x" + Twine((*a)->cols) + " tile of rows from " +
                        Twine((*a)->rowBase) + " by a " + Twine((*b)->rows) + "x" + Twine((*b)->cols) +
                        " tile of rows from " + Twine((*b)->rowBase) + ": the tiles must be the same rows");
  return define(op, op.getResult(), rowDot(**a, **b));
}

LogicalResult Interpreter::exec(ZeroAccOp op) {
  auto type = cast<AccType>(op.getAcc().getType());
  // The main program's dK and dV: a row per key of the instance's K/V tile.
  const int64_t rows = mainProgram ? inst.kvRows : inst.rows;
  if (type.hasStaticRows() && type.getRows() != rows)
    return fail(op, "makes an accumulator of " + Twine(type.getRows()) + " rows but the program instance owns " +
                        Twine(rows) + (mainProgram ? " keys" : " query rows"));
  return define(op, op.getAcc(), Accumulator::zeros(rows, type.getCols()));
}

LogicalResult Interpreter::exec(QLoopOp op) {
  SmallVector<AccPtr> carried;
  for (Value init : op.getInits()) {
    FailureOr<AccPtr> acc = accumulator(op, init);
    if (failed(acc))
      return failure();
    carried.push_back(*acc);
  }
  // Unbounded: every Q tile of the sequence; bounded: the schedule's [from, to), ascending.
  int64_t from = 0, to = blockM > 0 ? ceilDiv(rowCount(), blockM) : 0;
  if (op.isBounded()) {
    FailureOr<Scalar> lo = scalar(op, op.getLower()), hi = scalar(op, op.getUpper());
    if (failed(lo) || failed(hi))
      return failure();
    from = lo->i;
    to = hi->i;
  }
  Block &body = op.getBody().front();
  auto yield = cast<YieldOp>(body.getTerminator());
  for (int64_t i = from; i < to; ++i) {
    if (qTileVisits)
      ++*qTileVisits;
    scalars[op.getTileIndex()] = Scalar::integer(i);
    for (auto [arg, acc] : llvm::zip_equal(op.getAccArgs(), carried))
      accs[arg] = acc;
    if (failed(execBlock(body)))
      return failure();
    for (auto [slot, value] : llvm::zip_equal(carried, yield.getValues())) {
      FailureOr<AccPtr> next = accumulator(yield, value);
      if (failed(next))
        return failure();
      slot = *next;
    }
  }
  for (auto [result, acc] : llvm::zip_equal(op.getResults(), carried))
    accs[result] = acc;
  return success();
}

LogicalResult Interpreter::exec(ProbsOp op) {
  FailureOr<TilePtr> s = tile(op, op.getS()), lse = tile(op, op.getLse());
  if (failed(s) || failed(lse))
    return failure();
  if ((*s)->rows != (*lse)->rows || (*s)->rowBase != (*lse)->rowBase)
    return fail(op, "the scores are " + Twine((*s)->rows) + " rows from query row " + Twine((*s)->rowBase) +
                        " but the LSE " + Twine((*lse)->rows) + " rows from " + Twine((*lse)->rowBase));
  return define(op, op.getP(), probs(**s, **lse));
}

LogicalResult Interpreter::exec(SoftmaxGradOp op) {
  FailureOr<TilePtr> p = tile(op, op.getP()), dp = tile(op, op.getDp()), delta = tile(op, op.getDelta());
  if (failed(p) || failed(dp) || failed(delta))
    return failure();
  const Tile &pT = **p, &dpT = **dp, &dT = **delta;
  if (pT.rows != dpT.rows || pT.cols != dpT.cols || pT.rowBase != dpT.rowBase || pT.colBase != dpT.colBase)
    return fail(op, "P is " + Twine(pT.rows) + "x" + Twine(pT.cols) + " at (" + Twine(pT.rowBase) + ", " +
                        Twine(pT.colBase) + ") but dP " + Twine(dpT.rows) + "x" + Twine(dpT.cols) + " at (" +
                        Twine(dpT.rowBase) + ", " + Twine(dpT.colBase) + "): the same query rows and keys");
  if (dT.rows != pT.rows || dT.rowBase != pT.rowBase)
    return fail(op, "D has " + Twine(dT.rows) + " rows from query row " + Twine(dT.rowBase) + " but P " +
                        Twine(pT.rows) + " from " + Twine(pT.rowBase));
  return define(op, op.getDs(), softmaxGrad(pT, dpT, dT));
}

LogicalResult Interpreter::exec(ScoreGradOp op) {
  FailureOr<TilePtr> ds = tile(op, op.getDs()), s = tile(op, op.getS());
  if (failed(ds) || failed(s))
    return failure();
  const Tile &sT = **s;
  if ((*ds)->rows != sT.rows || (*ds)->cols != sT.cols || (*ds)->rowBase != sT.rowBase || (*ds)->colBase != sT.colBase)
    return fail(op, "dS' and the scores the derivative is taken at are not the same query rows and keys");
  Tile out = **ds;
  Block &body = op.getBody().front();
  SmallVector<Scalar, 1> result;
  for (int64_t r = 0; r < out.rows; ++r)
    for (int64_t c = 0; c < out.cols; ++c) {
      // Where dS' is 0 (a masked score, a padded row: P = 0) dS is 0, whatever the derivative is there.
      if (out.at(r, c) == 0.f)
        continue;
      if (failed(evalScoreRegion(body, sT, r, c, result)))
        return failure();
      out.at(r, c) *= result[0].f;
    }
  return define(op, op.getResult(), std::move(out));
}

LogicalResult Interpreter::exec(DotTnOp op) {
  FailureOr<TilePtr> a = tile(op, op.getA()), b = tile(op, op.getB());
  FailureOr<AccPtr> acc = accumulator(op, op.getAcc());
  if (failed(a) || failed(b) || failed(acc))
    return failure();
  const Tile &aT = **a, &bT = **b;
  const Accumulator &accT = **acc;
  if (aT.rows != bT.rows || aT.cols != accT.rows || bT.cols != accT.cols)
    return fail(op, "A is " + Twine(aT.rows) + "x" + Twine(aT.cols) + ", B " + Twine(bT.rows) + "x" + Twine(bT.cols) +
                        " and the accumulator " + Twine(accT.rows) + "x" + Twine(accT.cols) +
                        ": Aᵀ·B does not fit the accumulator");
  // A and B are the same query rows; A's columns are the keys of the instance's K/V tile, the accumulator's rows.
  if (aT.rowBase != bT.rowBase)
    return fail(op, "A covers query rows from " + Twine(aT.rowBase) + " but B rows from " + Twine(bT.rowBase));
  if (mainProgram && aT.colBase != inst.n0)
    return fail(op, "A covers keys from " + Twine(aT.colBase) + " but the program instance's K/V tile starts at key " +
                        Twine(inst.n0));
  RoundFn roundA = roundFor(cast<RankedTensorType>(op.getB().getType()).getElementType());
  return define(op, op.getResult(), dotTn(aT, roundA, bT, accT));
}

LogicalResult Interpreter::exec(AccumulateOp op) {
  FailureOr<TilePtr> a = tile(op, op.getA()), b = tile(op, op.getB());
  FailureOr<Scalar> index = scalar(op, op.getIndex());
  if (failed(a) || failed(b) || failed(index))
    return failure();
  Tensor *target = backward && op.getOperand() == Operand::DqAccum ? &backward->dqAccum : nullptr;
  if (!target)
    return fail(op, "adds into " + stringifyOperand(op.getOperand()) + ", which is not the backward's dq_accum");
  const Tile &aT = **a, &bT = **b;
  if (aT.cols != bT.rows || bT.cols != target->width)
    return fail(op, "A is " + Twine(aT.rows) + "x" + Twine(aT.cols) + " and B " + Twine(bT.rows) + "x" +
                        Twine(bT.cols) + ": A·B does not fit rows of " + Twine(target->width) + " values");
  // A's rows are Q tile `index`'s, its columns B's keys.
  if (aT.rowBase != index->i * blockM || aT.rows != blockM)
    return fail(op, "A is " + Twine(aT.rows) + " query rows from " + Twine(aT.rowBase) + " but Q tile " +
                        Twine(index->i) + " is " + Twine(blockM) + " rows from " + Twine(index->i * blockM));
  if (aT.colBase != bT.rowBase)
    return fail(op, "A covers keys from " + Twine(aT.colBase) + " but B rows from " + Twine(bT.rowBase));
  RoundFn roundA = roundFor(cast<RankedTensorType>(op.getB().getType()).getElementType());
  // Rows past the query sequence are not added.
  for (int64_t r = 0; r < aT.rows && aT.rowBase + r < rowCount(); ++r) {
    auto [query, head] = rowOf(aT.rowBase + r);
    std::vector<float> row = rowTimes(aT, roundA, bT, r);
    for (int64_t d = 0; d < target->width; ++d)
      target->at(inst.entry, inst.qRow0 + query, head, d) += row[d];
  }
  return success();
}

FailureOr<float *> Interpreter::inputGradAt(Operation *op, StringRef name, int64_t index) {
  const int64_t input = func.inputIndex(name);
  if (!backward || input < 0 || static_cast<size_t>(input) >= backward->inputGrads.size())
    return fail(op, "adds into the gradient of '" + name + "', which is not an input of the backward");
  std::vector<float> &grad = backward->inputGrads[input];
  if (index < 0 || index >= static_cast<int64_t>(grad.size()))
    return fail(op, "adds into element " + Twine(index) + " of the gradient of '" + name + "', which has " +
                        Twine(grad.size()) + " elements");
  return &grad[index];
}

LogicalResult Interpreter::exec(InputGradOp op) {
  FailureOr<TilePtr> ds = tile(op, op.getDs()), s = tile(op, op.getS());
  if (failed(ds) || failed(s))
    return failure();
  const Tile &dsT = **ds, &sT = **s;
  if (dsT.rows != sT.rows || dsT.cols != sT.cols || dsT.rowBase != sT.rowBase || dsT.colBase != sT.colBase)
    return fail(op, "dS' and the scores the derivative is taken at are not the same query rows and keys");
  Block &body = op.getBody().front();
  SmallVector<Scalar, 2> result;
  // The instance's terms, summed in fp32 per index (one index per (b, h): the verifier's rule), then added once, as
  // a kernel's block adds its partial.
  std::map<int64_t, float> sums;
  for (int64_t r = 0; r < dsT.rows; ++r)
    for (int64_t c = 0; c < dsT.cols; ++c) {
      if (dsT.at(r, c) == 0.f) // a masked score, a padded row: nothing to add
        continue;
      if (failed(evalScoreRegion(body, sT, r, c, result)))
        return failure();
      sums[result[0].i] += dsT.at(r, c) * result[1].f;
    }
  for (auto [index, sum] : sums) {
    FailureOr<float *> at = inputGradAt(op, op.getName(), index);
    if (failed(at))
      return failure();
    **at += sum;
  }
  return success();
}

LogicalResult Interpreter::exec(SinkGradOp op) {
  FailureOr<TilePtr> delta = tile(op, op.getDelta()), lse = tile(op, op.getLse());
  if (failed(delta) || failed(lse))
    return failure();
  const Tile &dT = **delta, &lT = **lse;
  if (dT.rows != lT.rows || dT.rowBase != lT.rowBase)
    return fail(op, "D and LSE are not the same rows");
  Block &body = op.getBody().front();
  SmallVector<Scalar, 3> result;
  std::map<int64_t, float> sums;
  for (int64_t r = 0; r < dT.rows && dT.rowBase + r < rowCount(); ++r) {
    auto [query, head] = rowOf(dT.rowBase + r);
    Scalar args[] = {Scalar::integer(inst.b), Scalar::integer(head)};
    if (failed(evalRegion(body, args, result)))
      return failure();
    // dσ's term of row i: −e^(σ − LSE_i)·D_i (0 for a row that saw nothing: LSE = −inf would give e^σ·0 only with
    // a sink, whose LSE is finite).
    const float pSink = std::exp(result[0].f - lT.at(r, 0));
    sums[result[1].i] += -pSink * dT.at(r, 0) * result[2].f;
  }
  for (auto [index, sum] : sums) {
    FailureOr<float *> at = inputGradAt(op, op.getName(), index);
    if (failed(at))
      return failure();
    **at += sum;
  }
  return success();
}

LogicalResult Interpreter::runBackwardProgram(int64_t *visits) {
  qTileVisits = visits;
  StringRef kind = func.getKind();
  const std::map<Output, int> expected = kind == kBackwardPreprocess ? std::map<Output, int>{{Output::Delta, 1}}
                                         : mainProgram ? std::map<Output, int>{{Output::Dk, 1}, {Output::Dv, 1}}
                                                       : std::map<Output, int>{{Output::Dq, 1}};
  const int64_t longest = longestSeqlenQ(problem);
  if (longest > 0 && blockM <= 0)
    return func.emitError() << "the Q tile has " << blockM << " rows";
  for (int64_t b = 0; b < problem.batch; ++b)
    for (int64_t h = 0; h < problem.headsQ; ++h) {
      const Instance seq = sequenceOf(problem, b);
      // The main program: one instance per K/V tile of the sequence (none without keys), its loop over the Q tiles;
      // the others one per Q tile (varlen: none past a shorter sequence's rows, as the kernels' blocks).
      const int64_t kvRows = mainProgram ? kvTileRows(func, seq.seqlenK, problem.tileRowsK) : 0;
      const int64_t tiles = mainProgram ? (kvRows > 0 ? ceilDiv(seq.seqlenK, kvRows) : 0)
                                        : (blockM > 0 ? ceilDiv(seq.seqlenQ, blockM) : 0);
      for (int64_t t = 0; t < tiles; ++t) {
        inst = seq;
        inst.h = h;
        inst.hKv = h / group;
        inst.splitEnd = inst.seqlenK;
        if (mainProgram) {
          // Its Q rows are the whole sequence's (tile.kv_range, outside the loop, sees all of them).
          inst.kvTile = t;
          inst.n0 = t * kvRows;
          inst.kvRows = kvRows;
          inst.rows = inst.seqlenQ;
        } else {
          inst.qTile = t;
          inst.m0 = t * blockM;
          inst.rows = blockM;
        }
        if (failed(runInstance()))
          return failure();
        for (const auto &[output, count] : expected)
          if (int stored = backwardStores[output]; stored != count)
            return fail(func, "a program instance must store " + stringifyOutput(output) + " once; it stored it " +
                                  Twine(stored) + " times");
      }
    }
  return success();
}

} // namespace flashtile::interp::detail
