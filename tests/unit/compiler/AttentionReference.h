//===- AttentionReference.h - naive attention, the ground truth of the tests ===//
//
// softmax(Q·Kᵀ·scale)·V in double on the dtype-rounded inputs, plus the same with P and O rounded to the dtype:
// the distance between the two is the error budget of a 16-bit kernel (FlashAttention's test rule). No MLIR.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_TESTS_UNIT_COMPILER_ATTENTIONREFERENCE_H
#define FLASHTILE_TESTS_UNIT_COMPILER_ATTENTIONREFERENCE_H

#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace flashtile::test {

struct Inputs {
  std::vector<float> q, k, v;
};

/// Standard normal Q, K, V (BSHD) from a seeded generator, not yet rounded to any dtype.
inline Inputs randomInputs(const interp::Problem &p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> x(n);
    for (float &e : x)
      e = normal(rng);
    return x;
  };
  return Inputs{fill(int64_t{p.batch} * p.seqlenQ * p.headsQ * p.headDim),
                fill(int64_t{p.batch} * p.seqlenK * p.headsKv * p.headDim),
                fill(int64_t{p.batch} * p.seqlenK * p.headsKv * p.headDimV)};
}

enum class Mask {
  None,
  Causal, ///< bottom-right aligned: query i sees keys j <= i + seqlenK - seqlenQ
};

struct Reference {
  std::vector<double> o;     ///< BSHD, exact up to double rounding
  std::vector<double> oLowp; ///< P (normalized) and O rounded to the dtype
  std::vector<double> lse;   ///< B x Hq x Sq, natural log; -inf where a row sees no key
  std::vector<char> noKeys;  ///< B x Hq x Sq: the row sees no key (O must be exactly 0, LSE -inf)
};

inline Reference referenceAttention(const interp::Problem &p, const Inputs &in, Mask mask, interp::RoundFn round) {
  const int64_t B = p.batch, Sq = p.seqlenQ, Sk = p.seqlenK, Hq = p.headsQ, Hkv = p.headsKv, D = p.headDim,
                Dv = p.headDimV;
  Reference ref{std::vector<double>(B * Sq * Hq * Dv), std::vector<double>(B * Sq * Hq * Dv),
                std::vector<double>(B * Hq * Sq), std::vector<char>(B * Hq * Sq)};
  auto rounded = [&](const std::vector<float> &x) {
    std::vector<double> r(x.size());
    std::transform(x.begin(), x.end(), r.begin(), [&](float e) { return double(round(e)); });
    return r;
  };
  const std::vector<double> q = rounded(in.q), k = rounded(in.k), v = rounded(in.v);
  std::vector<double> s(Sk), prob(Sk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t hk = h / (Hq / Hkv);
      for (int64_t i = 0; i < Sq; ++i) {
        int64_t keys = mask == Mask::Causal ? std::clamp<int64_t>(i + Sk - Sq + 1, 0, Sk) : Sk;
        int64_t row = (b * Hq + h) * Sq + i;
        double *o = &ref.o[((b * Sq + i) * Hq + h) * Dv], *oLowp = &ref.oLowp[((b * Sq + i) * Hq + h) * Dv];
        if (keys == 0) {
          ref.lse[row] = -std::numeric_limits<double>::infinity();
          ref.noKeys[row] = 1;
          continue;
        }
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < keys; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[((b * Sq + i) * Hq + h) * D + d] * k[((b * Sk + j) * Hkv + hk) * D + d];
          s[j] = dot * p.softmaxScale;
          m = std::max(m, s[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < keys; ++j)
          l += prob[j] = std::exp(s[j] - m);
        ref.lse[row] = m + std::log(l);
        for (int64_t j = 0; j < keys; ++j) {
          double pj = prob[j] / l, pLowp = round(static_cast<float>(pj));
          const double *vRow = &v[((b * Sk + j) * Hkv + hk) * Dv];
          for (int64_t d = 0; d < Dv; ++d) {
            o[d] += pj * vRow[d];
            oLowp[d] += pLowp * vRow[d];
          }
        }
        for (int64_t d = 0; d < Dv; ++d)
          oLowp[d] = round(static_cast<float>(oLowp[d]));
      }
    }
  return ref;
}

/// max |a − b|; NaN anywhere counts as infinitely far.
template <typename A, typename B> double maxAbsDiff(const std::vector<A> &a, const std::vector<B> &b) {
  if (a.size() != b.size())
    return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  return worst;
}

/// FlashAttention's rule: a kernel may be off by twice what rounding P and O to the dtype costs, plus atol.
inline double errorBound(const Reference &ref, double atol = 1e-5) { return 2 * maxAbsDiff(ref.oLowp, ref.o) + atol; }

} // namespace flashtile::test

#endif // FLASHTILE_TESTS_UNIT_COMPILER_ATTENTIONREFERENCE_H
