//===- TileMath.cpp - the numerics of the tile ops ------------------------===//
#include "interpreter/TileMath.h"

#include <cmath>
#include <limits>
#include <numbers>

namespace flashtile::interp {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
} // namespace

SoftmaxState SoftmaxState::empty(int64_t rows, int64_t cols) {
  return SoftmaxState{rows, cols, std::vector<float>(rows, -kInf), std::vector<float>(rows, 0.0f),
                      std::vector<float>(rows * cols, 0.0f)};
}

Tile qk(const Tile &q, const Tile &k) {
  Tile s = Tile::zeros(q.rows, k.rows);
  s.rowBase = q.rowBase;
  s.colBase = k.rowBase;
  for (int64_t r = 0; r < q.rows; ++r) {
    const float *qRow = &q.data[r * q.cols];
    for (int64_t c = 0; c < k.rows; ++c) {
      const float *kRow = &k.data[c * k.cols];
      float dot = 0.0f;
      for (int64_t d = 0; d < q.cols; ++d)
        dot += qRow[d] * kRow[d];
      s.at(r, c) = dot;
    }
  }
  return s;
}

SoftmaxStep softmaxUpdate(const Tile &s, const SoftmaxState &state, float c, RoundFn roundP, int rescaleThreshold) {
  SoftmaxStep step{Tile::zeros(s.rows, s.cols), Tile::zeros(s.rows, 1), state};
  step.p.rowBase = s.rowBase;
  step.p.colBase = s.colBase;
  step.alpha.rowBase = s.rowBase;
  for (int64_t r = 0; r < s.rows; ++r) {
    float m = state.m[r];
    float mNew = m;
    for (int64_t j = 0; j < s.cols; ++j)
      mNew = std::max(mNew, s.at(r, j) * c);
    if (rescaleThreshold > 0 && !(mNew > m + static_cast<float>(rescaleThreshold)))
      mNew = m; // enough headroom: keep the max, P <= 2^τ
    float mUse = mNew == -kInf ? 0.0f : mNew;
    float alpha = std::exp2(m - mUse);
    float rowSum = 0.0f;
    for (int64_t j = 0; j < s.cols; ++j) {
      float p = std::exp2(s.at(r, j) * c - mUse);
      rowSum += p;
      step.p.at(r, j) = roundP(p);
    }
    step.alpha.at(r, 0) = alpha;
    step.state.m[r] = mNew;
    step.state.l[r] = alpha * state.l[r] + rowSum;
  }
  return step;
}

SoftmaxState rescale(SoftmaxState state, const Tile &alpha) {
  for (int64_t r = 0; r < state.rows; ++r)
    for (int64_t d = 0; d < state.cols; ++d)
      state.acc[r * state.cols + d] *= alpha.at(r, 0);
  return state;
}

SoftmaxState pv(const Tile &p, const Tile &v, SoftmaxState state) {
  std::vector<float> row(state.cols);
  for (int64_t r = 0; r < p.rows; ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t j = 0; j < p.cols; ++j) {
      float pj = p.at(r, j);
      const float *vRow = &v.data[j * v.cols];
      for (int64_t d = 0; d < v.cols; ++d)
        row[d] += pj * vRow[d];
    }
    for (int64_t d = 0; d < state.cols; ++d)
      state.acc[r * state.cols + d] += row[d];
  }
  return state;
}

Finalized finalize(const SoftmaxState &state, std::optional<float> sink) {
  Finalized out{Tile::zeros(state.rows, state.cols), Tile::zeros(state.rows, 1)};
  const float sinkLog2 = sink ? *sink * std::numbers::log2e_v<float> : -kInf;
  for (int64_t r = 0; r < state.rows; ++r) {
    // The sink is one more score: take it into the max, then rescale l and acc to the new max.
    float m = std::max(state.m[r], sinkLog2);
    float mUse = m == -kInf ? 0.0f : m;
    float carry = std::exp2(state.m[r] - mUse);
    float l = state.l[r] * carry + std::exp2(sinkLog2 - mUse);
    if (l == 0.0f) {
      out.lse.at(r, 0) = -kInf;
      continue;
    }
    for (int64_t d = 0; d < state.cols; ++d)
      out.o.at(r, d) = state.acc[r * state.cols + d] * carry / l;
    out.lse.at(r, 0) = (mUse + std::log2(l)) * std::numbers::ln2_v<float>;
  }
  return out;
}

} // namespace flashtile::interp
