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
#include <functional>
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
  std::vector<double> lse;   ///< B x Hq x Sq, natural log; -inf where a row sees no key (and there is no sink)
  std::vector<char> noKeys;  ///< B x Hq x Sq: the row sees no key (O must be exactly 0; LSE -inf, or the sink)
};

/// A variant's semantics in plain C++: which keys query row i keeps, what a score becomes (the scaled score
/// in, before masking), and a sink logit per (batch, head). Empty members: every key, no change, no sink.
struct VariantRef {
  std::function<bool(int64_t b, int64_t h, int64_t i, int64_t j)> keep;
  std::function<double(double score, int64_t b, int64_t h, int64_t i, int64_t j)> score;
  std::function<double(int64_t b, int64_t h)> sink;
};

/// softmax over the kept scores (and the sink, which has no value) times V, in double.
inline Reference referenceAttention(const interp::Problem &p, const Inputs &in, const VariantRef &variant,
                                    interp::RoundFn round) {
  const int64_t B = p.batch, Sq = p.seqlenQ, Sk = p.seqlenK, Hq = p.headsQ, Hkv = p.headsKv, D = p.headDim,
                Dv = p.headDimV;
  const double inf = std::numeric_limits<double>::infinity();
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
      const double sink = variant.sink ? variant.sink(b, h) : -inf;
      for (int64_t i = 0; i < Sq; ++i) {
        int64_t row = (b * Hq + h) * Sq + i;
        double *o = &ref.o[((b * Sq + i) * Hq + h) * Dv], *oLowp = &ref.oLowp[((b * Sq + i) * Hq + h) * Dv];
        double m = sink;
        bool anyKey = false;
        for (int64_t j = 0; j < Sk; ++j) {
          s[j] = -inf;
          if (variant.keep && !variant.keep(b, h, i, j))
            continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[((b * Sq + i) * Hq + h) * D + d] * k[((b * Sk + j) * Hkv + hk) * D + d];
          s[j] = dot * p.softmaxScale;
          if (variant.score)
            s[j] = variant.score(s[j], b, h, i, j);
          m = std::max(m, s[j]);
          anyKey = true;
        }
        ref.noKeys[row] = !anyKey;
        if (m == -inf) {
          ref.lse[row] = -inf;
          continue;
        }
        double l = std::exp(sink - m);
        for (int64_t j = 0; j < Sk; ++j)
          l += prob[j] = std::exp(s[j] - m);
        ref.lse[row] = m + std::log(l);
        for (int64_t j = 0; j < Sk; ++j) {
          if (prob[j] == 0)
            continue;
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

inline Reference referenceAttention(const interp::Problem &p, const Inputs &in, Mask mask, interp::RoundFn round) {
  VariantRef variant;
  if (mask == Mask::Causal)
    variant.keep = [&p](int64_t, int64_t, int64_t i, int64_t j) { return j <= i + p.seqlenK - p.seqlenQ; };
  return referenceAttention(p, in, variant, round);
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

/// FlashAttention's rule: a kernel may be off by `factor` (2; 3 for softcap) times what rounding P and O to the
/// dtype costs, plus atol.
inline double errorBound(const Reference &ref, double atol = 1e-5, double factor = 2) {
  return factor * maxAbsDiff(ref.oLowp, ref.o) + atol;
}

} // namespace flashtile::test

#endif // FLASHTILE_TESTS_UNIT_COMPILER_ATTENTIONREFERENCE_H
