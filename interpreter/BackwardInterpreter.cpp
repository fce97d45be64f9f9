//===- BackwardInterpreter.cpp - runs a backward module's programs on the CPU -===//
#include "interpreter/BackwardInterpreter.h"
#include "interpreter/HookEvaluator.h"
#include "interpreter/Rounding.h"
#include "passes/IR/ProgramKinds.h"
#include "passes/IR/TileDialect.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace flashtile::interp {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// A tile: rows x cols fp32 values, row-major.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
  Mat() = default;
  Mat(int64_t rows, int64_t cols) : rows(rows), cols(cols), data(size_t(rows * cols), 0.0f) {}
  float &at(int64_t r, int64_t c) { return data[size_t(r * cols + c)]; }
  float at(int64_t r, int64_t c) const { return data[size_t(r * cols + c)]; }
};

class BackwardRun {
public:
  BackwardRun(const ReferenceProblem &p, const BackwardTensors &t, int blockM, int blockN)
      : p(p), t(t), blockM(blockM), blockN(blockN), eval(env) {}

  FailureOr<BackwardOutputs> run(ModuleOp module);

private:
  /// The program instance: batch entry, query head, and its own tile (a Q tile; the main program's K/V tile).
  struct Instance {
    int b = 0, h = 0;
    int64_t tile = 0;
    int64_t qTile = 0; ///< the Q tile the main program's loop is at
  };

  LogicalResult runFunc(tile::FuncOp func, int64_t tiles);
  LogicalResult execBlock(Block &block);
  LogicalResult exec(Operation &op);
  LogicalResult exec(tile::LoadOp op);
  LogicalResult exec(tile::StoreOp op);
  LogicalResult exec(tile::QLoopOp op);
  LogicalResult exec(tile::AccumulateOp op);
  /// Applies `region` (args: [score,] b, h, q, kv) to every element of `in`: `combine(element, yielded)`.
  LogicalResult elementwise(Operation *op, Block &region, const Mat &in, bool withScore, Mat &out,
                            const std::function<float(float, const WideScalar &)> &combine);
  LogicalResult fail(Operation *op, const Twine &message) {
    InFlightDiagnostic d = op->emitError() << "backward interpreter: " << message;
    d.attachNote() << "in program instance batch " << inst.b << ", head " << inst.h << ", tile " << inst.tile;
    return failure();
  }
  FailureOr<const Mat *> mat(Operation *user, Value v) {
    auto it = mats.find(v);
    if (it == mats.end())
      return fail(user, "reads a tile no op computed");
    return &it->second;
  }
  float round(float x) const { return rounding(x); }
  int kvHead() const { return inst.h / (p.headsQ / p.headsKv); }
  /// The first row of the tile a load or store names: its own (index-less) or the loop's Q tile.
  int64_t qRow0() const { return inst.qTile * blockM; }
  size_t qAt(int64_t row, int d) const { return ((size_t(inst.b) * p.seqlenQ + row) * p.headsQ + inst.h) * p.headDim + d; }
  size_t oAt(int64_t row, int d) const {
    return ((size_t(inst.b) * p.seqlenQ + row) * p.headsQ + inst.h) * p.headDimV + d;
  }
  size_t kAt(int64_t row, int d, int width) const {
    return ((size_t(inst.b) * p.seqlenK + row) * p.headsKv + kvHead()) * width + d;
  }
  size_t rowAt(int64_t row) const { return (size_t(inst.b) * p.headsQ + inst.h) * p.seqlenQ + row; }

  const ReferenceProblem &p;
  const BackwardTensors &t;
  const int blockM, blockN;
  RoundFn rounding = roundToBf16;
  HookEnv env;
  HookEvaluator eval;
  Instance inst;
  llvm::DenseMap<Value, Mat> mats;
  llvm::DenseMap<Value, int64_t> indices;
  std::vector<float> delta, dqAccum, dkAccum, dvAccum, dq;
};

LogicalResult BackwardRun::runFunc(tile::FuncOp func, int64_t tiles) {
  for (inst.b = 0; inst.b < p.batch; ++inst.b) {
    env.keyOffset = int64_t{inst.b} * p.seqlenK;
    for (inst.h = 0; inst.h < p.headsQ; ++inst.h)
      for (inst.tile = 0; inst.tile < tiles; ++inst.tile) {
        inst.qTile = inst.tile;
        mats.clear();
        indices.clear();
        if (failed(execBlock(func.getBodyBlock())))
          return failure();
      }
  }
  return success();
}

LogicalResult BackwardRun::execBlock(Block &block) {
  for (Operation &op : block)
    if (!op.hasTrait<OpTrait::IsTerminator>() && failed(exec(op)))
      return failure();
  return success();
}

LogicalResult BackwardRun::exec(Operation &op) {
  const float scale = static_cast<float>(p.softmaxScale);
  return llvm::TypeSwitch<Operation *, LogicalResult>(&op)
      .Case([&](tile::KvRangeOp) { return success(); }) // rules for a schedule to invert; every Q tile is walked
      .Case([&](tile::LoadOp load) { return exec(load); })
      .Case([&](tile::StoreOp store) { return exec(store); })
      .Case([&](tile::QLoopOp loop) { return exec(loop); })
      .Case([&](tile::AccumulateOp add) { return exec(add); })
      .Case([&](tile::ZeroAccOp zero) {
        auto type = cast<tile::AccType>(zero.getAcc().getType());
        mats[zero.getAcc()] = Mat(blockN, type.getCols());
        return success();
      })
      .Case([&](tile::RowDotOp dot) -> LogicalResult {
        auto a = mat(dot, dot.getA()), b = mat(dot, dot.getB());
        if (failed(a) || failed(b))
          return failure();
        Mat d((*a)->rows, 1);
        for (int64_t r = 0; r < d.rows; ++r)
          for (int64_t c = 0; c < (*a)->cols; ++c)
            d.at(r, 0) += (*a)->at(r, c) * (*b)->at(r, c);
        mats[dot.getResult()] = std::move(d);
        return success();
      })
      .Case([&](tile::QkOp qk) -> LogicalResult {
        auto a = mat(qk, qk.getQ()), b = mat(qk, qk.getK());
        if (failed(a) || failed(b))
          return failure();
        Mat s((*a)->rows, (*b)->rows);
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t c = 0; c < s.cols; ++c)
            for (int64_t d = 0; d < (*a)->cols; ++d)
              s.at(r, c) += (*a)->at(r, d) * (*b)->at(c, d);
        mats[qk.getS()] = std::move(s);
        return success();
      })
      .Case([&](tile::ScaleOp op) -> LogicalResult {
        auto s = mat(op, op.getS());
        if (failed(s))
          return failure();
        Mat out = **s;
        for (float &x : out.data)
          x *= scale;
        mats[op.getResult()] = std::move(out);
        return success();
      })
      .Case([&](tile::ScoreModOp op) -> LogicalResult {
        auto s = mat(op, op.getS());
        if (failed(s))
          return failure();
        Mat out;
        if (failed(elementwise(op, op.getBody().front(), **s, true, out,
                               [](float, const WideScalar &y) { return static_cast<float>(y.f); })))
          return failure();
        mats[op.getResult()] = std::move(out);
        return success();
      })
      .Case([&](tile::MaskOp op) -> LogicalResult {
        auto s = mat(op, op.getS());
        if (failed(s))
          return failure();
        Mat out;
        if (failed(elementwise(op, op.getBody().front(), **s, false, out,
                               [](float x, const WideScalar &keep) { return keep.isTrue() ? x : -kInf; })))
          return failure();
        // Keys past the sequence are dropped whatever the predicate says.
        for (int64_t r = 0; r < out.rows; ++r)
          for (int64_t c = 0; c < out.cols; ++c)
            if (inst.tile * blockN + c >= p.seqlenK)
              out.at(r, c) = -kInf;
        mats[op.getResult()] = std::move(out);
        return success();
      })
      .Case([&](tile::ProbsOp op) -> LogicalResult {
        auto s = mat(op, op.getS()), lse = mat(op, op.getLse());
        if (failed(s) || failed(lse))
          return failure();
        Mat out((*s)->rows, (*s)->cols);
        for (int64_t r = 0; r < out.rows; ++r) {
          float l = (*lse)->at(r, 0);
          for (int64_t c = 0; c < out.cols; ++c) {
            float x = (*s)->at(r, c);
            out.at(r, c) = x == -kInf || l == -kInf ? 0.0f : std::exp(x - l);
          }
        }
        mats[op.getP()] = std::move(out);
        return success();
      })
      .Case([&](tile::DotTnOp op) -> LogicalResult {
        auto a = mat(op, op.getA()), b = mat(op, op.getB()), acc = mat(op, op.getAcc());
        if (failed(a) || failed(b) || failed(acc))
          return failure();
        Mat out = **acc;
        for (int64_t r = 0; r < (*a)->rows; ++r)
          for (int64_t c = 0; c < (*a)->cols; ++c) {
            float x = round((*a)->at(r, c));
            for (int64_t d = 0; d < (*b)->cols; ++d)
              out.at(c, d) += x * (*b)->at(r, d);
          }
        mats[op.getResult()] = std::move(out);
        return success();
      })
      .Case([&](tile::SoftmaxGradOp op) -> LogicalResult {
        auto pm = mat(op, op.getP()), dp = mat(op, op.getDp()), d = mat(op, op.getDelta());
        if (failed(pm) || failed(dp) || failed(d))
          return failure();
        Mat out((*pm)->rows, (*pm)->cols);
        for (int64_t r = 0; r < out.rows; ++r)
          for (int64_t c = 0; c < out.cols; ++c)
            out.at(r, c) = (*pm)->at(r, c) * ((*dp)->at(r, c) - (*d)->at(r, 0));
        mats[op.getDs()] = std::move(out);
        return success();
      })
      .Case([&](tile::ScoreGradOp op) -> LogicalResult {
        auto ds = mat(op, op.getDs()), s = mat(op, op.getS());
        if (failed(ds) || failed(s))
          return failure();
        Mat factor;
        if (failed(elementwise(op, op.getBody().front(), **s, true, factor,
                               [](float, const WideScalar &y) { return static_cast<float>(y.f); })))
          return failure();
        Mat out = **ds;
        for (size_t i = 0; i < out.data.size(); ++i)
          out.data[i] *= factor.data[i];
        mats[op.getResult()] = std::move(out);
        return success();
      })
      .Default([&](Operation *other) {
        return fail(other, "does not run '" + other->getName().getStringRef() + "' in a backward program");
      });
}

LogicalResult BackwardRun::elementwise(Operation *op, Block &region, const Mat &in, bool withScore, Mat &out,
                                       const std::function<float(float, const WideScalar &)> &combine) {
  out = Mat(in.rows, in.cols);
  SmallVector<WideScalar, 5> args;
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t c = 0; c < in.cols; ++c) {
      args.clear();
      if (withScore)
        args.push_back(WideScalar::real(in.at(r, c)));
      args.push_back(WideScalar::integer(inst.b));
      args.push_back(WideScalar::integer(inst.h));
      args.push_back(WideScalar::integer(qRow0() + r));
      args.push_back(WideScalar::integer(inst.tile * blockN + c));
      auto yielded = eval.yielded(region, args);
      if (failed(yielded))
        return fail(op, "its region failed");
      out.at(r, c) = combine(in.at(r, c), (*yielded)[0]);
    }
  return success();
}

LogicalResult BackwardRun::exec(tile::LoadOp load) {
  if (Value index = load.getIndex())
    inst.qTile = indices.lookup(index);
  const int64_t row0 = qRow0();
  switch (load.getOperand()) {
  case tile::Operand::Q:
  case tile::Operand::O:
  case tile::Operand::DO:
  case tile::Operand::DqAccum: {
    const bool isQ = load.getOperand() == tile::Operand::Q, isAcc = load.getOperand() == tile::Operand::DqAccum;
    const int width = isQ || isAcc ? p.headDim : p.headDimV;
    const std::vector<float> &src = isQ ? t.q : isAcc ? dqAccum : load.getOperand() == tile::Operand::O ? t.o : t.dO;
    Mat m(blockM, width);
    for (int64_t r = 0; r < blockM && row0 + r < p.seqlenQ; ++r)
      for (int d = 0; d < width; ++d) {
        float x = src[isQ || isAcc ? qAt(row0 + r, d) : oAt(row0 + r, d)];
        m.at(r, d) = isAcc ? x : round(x);
      }
    mats[load.getResult()] = std::move(m);
    return success();
  }
  case tile::Operand::Lse:
  case tile::Operand::Delta: {
    // Rows past the sequence: LSE +inf, so that their P is 0.
    const bool isLse = load.getOperand() == tile::Operand::Lse;
    Mat m(blockM, 1);
    for (int64_t r = 0; r < blockM; ++r)
      m.at(r, 0) = row0 + r < p.seqlenQ ? (isLse ? t.lse : delta)[rowAt(row0 + r)] : (isLse ? kInf : 0.0f);
    mats[load.getResult()] = std::move(m);
    return success();
  }
  case tile::Operand::K:
  case tile::Operand::V: {
    const bool isK = load.getOperand() == tile::Operand::K;
    const int width = isK ? p.headDim : p.headDimV;
    Mat m(blockN, width);
    for (int64_t r = 0; r < blockN && inst.tile * blockN + r < p.seqlenK; ++r)
      for (int d = 0; d < width; ++d)
        m.at(r, d) = round((isK ? t.k : t.v)[kAt(inst.tile * blockN + r, d, width)]);
    mats[load.getResult()] = std::move(m);
    return success();
  }
  }
  return fail(load, "unknown tensor");
}

LogicalResult BackwardRun::exec(tile::StoreOp store) {
  auto value = mat(store, store.getValue());
  if (failed(value))
    return failure();
  const Mat &m = **value;
  switch (store.getOperand()) {
  case tile::Output::Delta:
    for (int64_t r = 0; r < m.rows && qRow0() + r < p.seqlenQ; ++r)
      delta[rowAt(qRow0() + r)] = m.at(r, 0);
    return success();
  case tile::Output::Dq:
    for (int64_t r = 0; r < m.rows && qRow0() + r < p.seqlenQ; ++r)
      for (int d = 0; d < p.headDim; ++d)
        dq[qAt(qRow0() + r, d)] = round(m.at(r, d));
    return success();
  case tile::Output::Dk:
  case tile::Output::Dv: {
    // A query head's part, added into its K/V head's fp32 sum (rounded once every part is in).
    const bool isK = store.getOperand() == tile::Output::Dk;
    const int width = isK ? p.headDim : p.headDimV;
    for (int64_t r = 0; r < m.rows && inst.tile * blockN + r < p.seqlenK; ++r)
      for (int d = 0; d < width; ++d)
        (isK ? dkAccum : dvAccum)[kAt(inst.tile * blockN + r, d, width)] += m.at(r, d);
    return success();
  }
  default:
    return fail(store, "a backward program does not store " + stringifyOutput(store.getOperand()));
  }
}

LogicalResult BackwardRun::exec(tile::QLoopOp loop) {
  if (loop.isBounded())
    return fail(loop, "runs unscheduled programs only (a bounded tile.q_loop is a schedule's)");
  Block &body = loop.getBody().front();
  SmallVector<Mat> accs;
  for (Value init : loop.getInits()) {
    auto m = mat(loop, init);
    if (failed(m))
      return failure();
    accs.push_back(**m);
  }
  const int64_t qTiles = (p.seqlenQ + blockM - 1) / blockM;
  for (int64_t i = 0; i < qTiles; ++i) {
    inst.qTile = i;
    indices[loop.getTileIndex()] = i;
    for (auto [arg, acc] : llvm::zip_equal(loop.getAccArgs(), accs))
      mats[arg] = acc;
    if (failed(execBlock(body)))
      return failure();
    for (auto [k, yielded] : llvm::enumerate(body.getTerminator()->getOperands())) {
      auto m = mat(loop, yielded);
      if (failed(m))
        return failure();
      accs[k] = **m;
    }
  }
  for (auto [result, acc] : llvm::zip_equal(loop.getResults(), accs))
    mats[result] = std::move(acc);
  return success();
}

LogicalResult BackwardRun::exec(tile::AccumulateOp add) {
  inst.qTile = indices.lookup(add.getIndex());
  auto a = mat(add, add.getA()), b = mat(add, add.getB());
  if (failed(a) || failed(b))
    return failure();
  for (int64_t r = 0; r < (*a)->rows && qRow0() + r < p.seqlenQ; ++r)
    for (int64_t c = 0; c < (*a)->cols; ++c) {
      float x = round((*a)->at(r, c));
      for (int d = 0; d < p.headDim; ++d)
        dqAccum[qAt(qRow0() + r, d)] += x * (*b)->at(c, d);
    }
  return success();
}

FailureOr<BackwardOutputs> BackwardRun::run(ModuleOp module) {
  tile::FuncOp pre, main, post;
  for (tile::FuncOp func : module.getOps<tile::FuncOp>()) {
    StringRef kind = func.getKind();
    (kind == tile::kBackwardPreprocess ? pre : kind == tile::kBackwardMain ? main : post) = func;
  }
  if (!pre || !main || !post || pre == post || main == post)
    return module.emitError() << "backward interpreter: the module needs one program of each backward kind";
  if (p.headsKv <= 0 || p.headsQ % p.headsKv != 0 || blockM <= 0 || blockN <= 0)
    return module.emitError() << "backward interpreter: bad sizes (heads " << p.headsQ << "/" << p.headsKv
                              << ", tiles " << blockM << "x" << blockN << ")";
  size_t rowsQ = size_t(p.batch) * p.seqlenQ * p.headsQ, rowsK = size_t(p.batch) * p.seqlenK * p.headsKv;
  if (t.q.size() != rowsQ * p.headDim || t.k.size() != rowsK * p.headDim || t.v.size() != rowsK * p.headDimV ||
      t.o.size() != rowsQ * p.headDimV || t.dO.size() != rowsQ * p.headDimV || t.lse.size() != rowsQ)
    return module.emitError() << "backward interpreter: a tensor does not have the problem's size";
  if (p.params.size() != main.getParams().size() || p.inputs.size() != main.getInputs().size())
    return module.emitError() << "backward interpreter: the call's parameters or inputs are not the program's";
  rounding = main.getDtype().isBF16() ? roundToBf16 : roundToF16;
  env = HookEnv{p.batch, p.headsQ, p.headsKv, p.seqlenQ, p.seqlenK, 0, p.softmaxScale, {}, {}};
  for (auto [name, value] : llvm::zip_equal(main.getParams(), p.params))
    env.params[cast<StringAttr>(name).str()] = value;
  for (auto [input, value] : llvm::zip_equal(main.getInputs(), p.inputs))
    env.inputs[cast<tile::InputAttr>(input).getName().str()] = value;
  delta.assign(rowsQ, std::numeric_limits<float>::quiet_NaN());
  dqAccum.assign(rowsQ * p.headDim, 0.0f); // the plan's zeroed workspace
  dq.assign(rowsQ * p.headDim, std::numeric_limits<float>::quiet_NaN());
  dkAccum.assign(rowsK * p.headDim, 0.0f);
  dvAccum.assign(rowsK * p.headDimV, 0.0f);
  const int64_t qTiles = (p.seqlenQ + blockM - 1) / blockM, kvTiles = (p.seqlenK + blockN - 1) / blockN;
  if (failed(runFunc(pre, qTiles)) || failed(runFunc(main, kvTiles)) || failed(runFunc(post, qTiles)))
    return failure();
  BackwardOutputs out{std::move(delta), std::move(dq), {}, {}};
  for (float x : dkAccum)
    out.dk.push_back(rounding(x));
  for (float x : dvAccum)
    out.dv.push_back(rounding(x));
  return out;
}

} // namespace

FailureOr<BackwardOutputs> runBackward(ModuleOp module, const ReferenceProblem &problem, const BackwardTensors &t,
                                       int blockM, int blockN) {
  return BackwardRun(problem, t, blockM, blockN).run(module);
}

} // namespace flashtile::interp
