//===- TileMath.cpp - the numerics of the tile ops ------------------------===//
#include "interpreter/TileMath.h"

#include <cmath>
#include <limits>
#include <numbers>

namespace flashtile::interp {

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
} // namespace

RowStats RowStats::empty(int64_t rows) {
  return RowStats{rows, std::vector<float>(rows, -kInf), std::vector<float>(rows, 0.0f)};
}

Accumulator Accumulator::zeros(int64_t rows, int64_t cols) {
  return Accumulator{rows, cols, std::vector<float>(rows * cols, 0.0f)};
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

SoftmaxStep softmaxUpdate(const Tile &s, const RowStats &stats, float c, RoundFn roundP, int rescaleThreshold) {
  SoftmaxStep step{Tile::zeros(s.rows, s.cols), Tile::zeros(s.rows, 1), stats};
  step.p.rowBase = s.rowBase;
  step.p.colBase = s.colBase;
  step.alpha.rowBase = s.rowBase;
  for (int64_t r = 0; r < s.rows; ++r) {
    float m = stats.m[r];
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
    step.stats.m[r] = mNew;
    step.stats.l[r] = alpha * stats.l[r] + rowSum;
  }
  return step;
}

Accumulator rescale(Accumulator acc, const Tile &alpha) {
  for (int64_t r = 0; r < acc.rows; ++r)
    for (int64_t d = 0; d < acc.cols; ++d)
      acc.acc[r * acc.cols + d] *= alpha.at(r, 0);
  return acc;
}

Accumulator pv(const Tile &p, const Tile &v, Accumulator acc) {
  std::vector<float> row(acc.cols);
  for (int64_t r = 0; r < p.rows; ++r) {
    std::fill(row.begin(), row.end(), 0.0f);
    for (int64_t j = 0; j < p.cols; ++j) {
      float pj = p.at(r, j);
      const float *vRow = &v.data[j * v.cols];
      for (int64_t d = 0; d < v.cols; ++d)
        row[d] += pj * vRow[d];
    }
    for (int64_t d = 0; d < acc.cols; ++d)
      acc.acc[r * acc.cols + d] += row[d];
  }
  return acc;
}

Finalized finalize(const RowStats &stats, const Accumulator &acc, std::optional<float> sink) {
  Finalized out{Tile::zeros(acc.rows, acc.cols), Tile::zeros(acc.rows, 1)};
  const float sinkLog2 = sink ? *sink * std::numbers::log2e_v<float> : -kInf;
  for (int64_t r = 0; r < acc.rows; ++r) {
    // The sink is one more score: take it into the max, then rescale l and acc to the new max.
    float m = std::max(stats.m[r], sinkLog2);
    float mUse = m == -kInf ? 0.0f : m;
    float carry = std::exp2(stats.m[r] - mUse);
    float l = stats.l[r] * carry + std::exp2(sinkLog2 - mUse);
    if (l == 0.0f) {
      out.lse.at(r, 0) = -kInf;
      continue;
    }
    for (int64_t d = 0; d < acc.cols; ++d)
      out.o.at(r, d) = acc.acc[r * acc.cols + d] * carry / l;
    out.lse.at(r, 0) = (mUse + std::log2(l)) * std::numbers::ln2_v<float>;
  }
  return out;
}

} // namespace flashtile::interp
