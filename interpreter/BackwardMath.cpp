//===- BackwardMath.cpp - the numerics of the backward's tile ops ---------===//
#include "interpreter/BackwardMath.h"

#include <cmath>
#include <limits>

namespace flashtile::interp {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
} // namespace

Tile rowDot(const Tile &a, const Tile &b) {
  Tile d = Tile::zeros(a.rows, 1);
  d.rowBase = a.rowBase;
  for (int64_t r = 0; r < a.rows; ++r) {
    float sum = 0.0f;
    for (int64_t c = 0; c < a.cols; ++c)
      sum += a.at(r, c) * b.at(r, c);
    d.at(r, 0) = sum;
  }
  return d;
}

Tile probs(const Tile &s, const Tile &lse) {
  Tile p = s;
  for (int64_t r = 0; r < s.rows; ++r) {
    const float rowLse = lse.at(r, 0);
    for (int64_t c = 0; c < s.cols; ++c) {
      const float score = s.at(r, c);
      p.at(r, c) = score == kNegInf || rowLse == kNegInf ? 0.0f : std::exp(score - rowLse);
    }
  }
  return p;
}

Tile softmaxGrad(const Tile &p, const Tile &dp, const Tile &delta) {
  Tile ds = p;
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c)
      ds.at(r, c) = p.at(r, c) * (dp.at(r, c) - delta.at(r, 0));
  return ds;
}

Accumulator dotTn(const Tile &a, RoundFn roundA, const Tile &b, Accumulator acc) {
  for (int64_t n = 0; n < a.cols; ++n)
    for (int64_t m = 0; m < b.cols; ++m) {
      float sum = 0.0f;
      for (int64_t r = 0; r < a.rows; ++r)
        sum += roundA(a.at(r, n)) * b.at(r, m);
      acc.acc[n * acc.cols + m] += sum;
    }
  return acc;
}

std::vector<float> rowTimes(const Tile &a, RoundFn roundA, const Tile &b, int64_t r) {
  std::vector<float> row(b.cols, 0.0f);
  for (int64_t m = 0; m < b.cols; ++m) {
    float sum = 0.0f;
    for (int64_t n = 0; n < a.cols; ++n)
      sum += roundA(a.at(r, n)) * b.at(n, m);
    row[m] = sum;
  }
  return row;
}

} // namespace flashtile::interp
