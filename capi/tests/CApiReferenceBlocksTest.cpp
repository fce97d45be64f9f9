// CApiReferenceBlocksTest.cpp — the fp64 oracle (flashtile_reference_attention) on blocks of a larger problem, as
// context parallelism calls it: a problem tiled into query and key blocks, each block called with its offsets and
// the larger problem's sizes, gives back the whole problem exactly — O and LSE merged by LSE, gradients summed from
// each block's backward with the whole problem's O and LSE — for masks, windows, ALiBi and document masks; heads
// split across calls see their global index. A key offset one off is caught.
#include "flashtile/runtime/CApiJit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr int kB = 2, kS = 8, kHq = 4, kHkv = 2, kD = 3, kDv = 2;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// [begin, end) of rows or heads.
struct Span {
  int begin, end;
  int size() const { return end - begin; }
};

/// Elements [rows) x [heads) of a batch x rows x heads x dim array.
std::vector<double> slice(const std::vector<double> &x, int rows, int heads, int dim, Span r, Span h) {
  std::vector<double> out;
  for (int b = 0; b < kB; ++b)
    for (int i = r.begin; i < r.end; ++i)
      for (int j = h.begin; j < h.end; ++j)
        for (int d = 0; d < dim; ++d)
          out.push_back(x[((size_t(b) * rows + i) * heads + j) * dim + d]);
  return out;
}

/// Adds a block's batch x rows x heads x dim array into the whole one's [rows) x [heads).
void addInto(std::vector<double> &x, const std::vector<double> &part, int rows, int heads, int dim, Span r, Span h) {
  size_t n = 0;
  for (int b = 0; b < kB; ++b)
    for (int i = r.begin; i < r.end; ++i)
      for (int j = h.begin; j < h.end; ++j)
        for (int d = 0; d < dim; ++d)
          x[((size_t(b) * rows + i) * heads + j) * dim + d] += part[n++];
}

struct Variant {
  const char *name;
  std::vector<double> params;
  bool slopes = false, docStart = false;
};

struct Result {
  std::vector<double> o, lse, dq, dk, dv, dSlopes;
};

class Problem {
public:
  Problem() {
    auto fill = [](std::vector<double> &x, size_t n, double phase) {
      for (size_t i = 0; i < n; ++i)
        x.push_back(std::sin(0.37 * double(i) + phase) + 0.25 * std::cos(1.3 * double(i)));
    };
    fill(q, size_t(kB) * kS * kHq * kD, 0.1);
    fill(k, size_t(kB) * kS * kHkv * kD, 0.7);
    fill(v, size_t(kB) * kS * kHkv * kDv, 0.3);
    fill(dO, size_t(kB) * kS * kHq * kDv, 0.9);
    for (int b = 0; b < kB; ++b) // documents [0, 3), [3, 8) in entry 0; [0, 5), [5, 8) in entry 1
      for (int i = 0; i < kS; ++i)
        docStart.push_back(b == 0 ? (i < 3 ? 0 : 3) : (i < 5 ? 0 : 5));
  }

  /// The oracle on query rows `r`, keys `c` and query heads `h` of every batch entry, placed in the whole problem
  /// (a key block after the first one placed `kShift` keys off when not 0: a planted bug). With `whole`, the backward
  /// of that block with the whole problem's O and LSE.
  Result block(const Variant &variant, Span r, Span c, Span h, const Result *whole = nullptr, int kShift = 0) {
    const int group = kHq / kHkv;
    Span kvHeads{h.begin / group, h.end / group};
    std::vector<double> bq = slice(q, kS, kHq, kD, r, h), bk = slice(k, kS, kHkv, kD, c, kvHeads),
                        bv = slice(v, kS, kHkv, kDv, c, kvHeads), bdO = slice(dO, kS, kHq, kDv, r, h);
    Result out;
    out.o.resize(bdO.size()), out.lse.resize(size_t(kB) * h.size() * r.size());
    out.dq.resize(bq.size()), out.dk.resize(bk.size()), out.dv.resize(bv.size()),
        out.dSlopes.assign(slopes.size(), 0.0);
    std::vector<double> fwdO, fwdLse;
    flashtile_reference_call call{};
    call.size = sizeof(call);
    call.variant = variant.name;
    call.q = bq.data(), call.k = bk.data(), call.v = bv.data(), call.o = out.o.data(), call.lse = out.lse.data();
    call.batch = kB, call.seqlen_q = r.size(), call.seqlen_k = c.size(), call.heads_q = h.size();
    call.heads_kv = kvHeads.size(), call.head_dim = kD, call.head_dim_v = kDv;
    call.num_params = int(variant.params.size());
    std::copy(variant.params.begin(), variant.params.end(), call.params);
    if (variant.slopes || variant.docStart) {
      call.num_inputs = 1;
      call.inputs[0] = variant.slopes ? static_cast<const void *>(slopes.data()) : docStart.data();
      call.input_lengths[0] = variant.slopes ? (long long)slopes.size() : (long long)docStart.size();
    }
    call.q_offset = r.begin, call.k_offset = c.begin + (c.begin > 0 ? kShift : 0), call.seqlen_q_global = kS,
    call.seqlen_k_global = kS;
    call.head_offset = h.begin, call.heads_q_global = kHq, call.heads_kv_global = kHkv;
    if (whole) {
      fwdO = slice(whole->o, kS, kHq, kDv, r, h);
      for (int b = 0; b < kB; ++b)
        for (int j = h.begin; j < h.end; ++j)
          for (int i = r.begin; i < r.end; ++i)
            fwdLse.push_back(whole->lse[(size_t(b) * kHq + j) * kS + i]);
      call.d_o = bdO.data(), call.d_q = out.dq.data(), call.d_k = out.dk.data(), call.d_v = out.dv.data();
      call.fwd_o = fwdO.data(), call.fwd_lse = fwdLse.data();
      if (variant.slopes)
        call.input_grads[0] = out.dSlopes.data();
    }
    EXPECT_EQ(flashtile_reference_attention(&call), 0) << variant.name << ": " << flashtile_last_error();
    return out;
  }

  /// The whole problem in one call (its own placement), forward and backward.
  Result whole(const Variant &variant) {
    Result forward = block(variant, {0, kS}, {0, kS}, {0, kHq});
    return block(variant, {0, kS}, {0, kS}, {0, kHq}, &forward);
  }

  /// The whole problem from query blocks x key blocks (all heads), forward merged by LSE, gradients summed.
  Result tiled(const Variant &variant, const std::vector<Span> &rows, const std::vector<Span> &keys,
               const Result &whole, int kShift = 0) {
    Result out;
    out.o.assign(whole.o.size(), 0.0), out.lse.assign(whole.lse.size(), kNegInf);
    out.dq.assign(q.size(), 0.0), out.dk.assign(k.size(), 0.0), out.dv.assign(v.size(), 0.0);
    out.dSlopes.assign(slopes.size(), 0.0);
    Span heads{0, kHq};
    for (Span r : rows)
      for (Span c : keys) {
        Result part = block(variant, r, c, heads, nullptr, kShift);
        for (int b = 0; b < kB; ++b)
          for (int h = 0; h < kHq; ++h)
            for (int i = 0; i < r.size(); ++i) {
              double &lse = out.lse[(size_t(b) * kHq + h) * kS + r.begin + i];
              double partLse = part.lse[(size_t(b) * kHq + h) * r.size() + i];
              double merged = std::max(lse, partLse);
              if (merged == kNegInf)
                continue;
              merged += std::log(std::exp(lse - merged) + std::exp(partLse - merged));
              for (int d = 0; d < kDv; ++d) {
                double &o = out.o[((size_t(b) * kS + r.begin + i) * kHq + h) * kDv + d];
                o = o * std::exp(lse - merged) +
                    part.o[((size_t(b) * r.size() + i) * kHq + h) * kDv + d] * std::exp(partLse - merged);
              }
              lse = merged;
            }
        Result grads = block(variant, r, c, heads, &whole, kShift);
        addInto(out.dq, grads.dq, kS, kHq, kD, r, heads);
        addInto(out.dk, grads.dk, kS, kHkv, kD, c, {0, kHkv});
        addInto(out.dv, grads.dv, kS, kHkv, kDv, c, {0, kHkv});
        for (size_t i = 0; i < slopes.size(); ++i)
          out.dSlopes[i] += grads.dSlopes[i];
      }
    return out;
  }

  std::vector<double> q, k, v, dO, slopes{0.5, -0.25, 0.75, 0.125};
  std::vector<int> docStart;
};

double worstDifference(const std::vector<double> &a, const std::vector<double> &b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (a[i] == b[i]) // equal infinities included
      continue;
    worst = std::max(worst, std::abs(a[i] - b[i]));
  }
  return worst;
}

const std::vector<Variant> &placedVariants() {
  static const std::vector<Variant> variants = {
      {"causal", {}},
      {"causal_top_left", {}},
      {"sliding_window", {2, 1}},
      {"softcap_causal", {2.0}},
      {"alibi_causal", {}, true},
      {"document_mask", {}, false, true},
  };
  return variants;
}

} // namespace

TEST(CApiReferenceBlocks, TiledProblemIsTheWholeProblem) {
  Problem p;
  const std::vector<Span> rows{{0, 3}, {3, 6}, {6, 8}}, keys{{0, 2}, {2, 7}, {7, 8}};
  for (const Variant &variant : placedVariants()) {
    SCOPED_TRACE(variant.name);
    Result whole = p.whole(variant), tiled = p.tiled(variant, rows, keys, whole);
    EXPECT_LT(worstDifference(tiled.o, whole.o), 1e-12);
    EXPECT_LT(worstDifference(tiled.lse, whole.lse), 1e-12);
    EXPECT_LT(worstDifference(tiled.dq, whole.dq), 1e-12);
    EXPECT_LT(worstDifference(tiled.dk, whole.dk), 1e-12);
    EXPECT_LT(worstDifference(tiled.dv, whole.dv), 1e-12);
    EXPECT_LT(worstDifference(tiled.dSlopes, whole.dSlopes), 1e-12);
    if (variant.slopes)
      EXPECT_GT(std::abs(whole.dSlopes[0]) + std::abs(whole.dSlopes[3]), 1e-3) << "vacuous: zero slope gradients";
  }
}

TEST(CApiReferenceBlocks, AKeyOffsetOneOffIsCaught) {
  // The tiling check above must fail when every key block but the first is placed one key early: causal, window,
  // ALiBi and document masks all read the key's position.
  Problem p;
  const std::vector<Span> rows{{0, 4}, {4, 8}}, keys{{0, 4}, {4, 8}};
  for (const Variant &variant : placedVariants()) {
    SCOPED_TRACE(variant.name);
    if (std::string(variant.name) == "softcap_causal" || std::string(variant.name) == "causal_top_left")
      continue; // the one key shifted out of a block may be masked anyway: shown by the others
    Result whole = p.whole(variant), shifted = p.tiled(variant, rows, {{0, 4}, {4, 8}}, whole, -1);
    EXPECT_GT(worstDifference(shifted.o, whole.o), 1e-3);
  }
}

TEST(CApiReferenceBlocks, SplitHeadsSeeTheirGlobalIndex) {
  // ALiBi per batch entry reads b * heads_q + h; sinks read h: heads [2, 4) are heads 2 and 3 of 4.
  Problem p;
  std::vector<double> sinks{0.3, -1.2, 0.8, 0.1};
  for (const char *name : {"alibi_per_batch", "sinks_causal"}) {
    SCOPED_TRACE(name);
    std::vector<double> slopes = p.slopes;
    if (std::string(name) == "alibi_per_batch")
      p.slopes = {0.5, -0.25, 0.75, 0.125, 0.3, 0.6, -0.9, 0.2};
    else
      p.slopes = sinks;
    Variant variant{name, {}, true};
    Result whole = p.whole(variant);
    Result low = p.block(variant, {0, kS}, {0, kS}, {0, 2}, &whole),
           high = p.block(variant, {0, kS}, {0, kS}, {2, 4}, &whole);
    Result lowFwd = p.block(variant, {0, kS}, {0, kS}, {0, 2}), highFwd = p.block(variant, {0, kS}, {0, kS}, {2, 4});
    std::vector<double> o(whole.o.size(), 0.0), dq(whole.dq.size(), 0.0), dk(whole.dk.size(), 0.0);
    addInto(o, lowFwd.o, kS, kHq, kDv, {0, kS}, {0, 2});
    addInto(o, highFwd.o, kS, kHq, kDv, {0, kS}, {2, 4});
    addInto(dq, low.dq, kS, kHq, kD, {0, kS}, {0, 2});
    addInto(dq, high.dq, kS, kHq, kD, {0, kS}, {2, 4});
    addInto(dk, low.dk, kS, kHkv, kD, {0, kS}, {0, 1});
    addInto(dk, high.dk, kS, kHkv, kD, {0, kS}, {1, 2});
    EXPECT_LT(worstDifference(o, whole.o), 1e-12);
    EXPECT_LT(worstDifference(dq, whole.dq), 1e-12);
    EXPECT_LT(worstDifference(dk, whole.dk), 1e-12);
    std::vector<double> dInputs(low.dSlopes);
    for (size_t i = 0; i < dInputs.size(); ++i)
      dInputs[i] += high.dSlopes[i];
    EXPECT_LT(worstDifference(dInputs, whole.dSlopes), 1e-12);
    p.slopes = slopes;
  }
}

TEST(CApiReferenceBlocks, BadPlacementsAreErrorsNamingTheArgument) {
  std::vector<double> q(2 * 2, 0.5), k(3 * 2, 0.25), v(3, 1.0), o(2), lse(2), dO(2, 1.0), dq(4), dk(6), dv(3);
  auto errorOf = [&](auto change) {
    flashtile_reference_call call{};
    call.size = sizeof(call);
    call.variant = "causal";
    call.q = q.data(), call.k = k.data(), call.v = v.data(), call.o = o.data(), call.lse = lse.data();
    call.batch = 1, call.seqlen_q = 2, call.seqlen_k = 3, call.heads_q = call.heads_kv = 1;
    call.head_dim = 2, call.head_dim_v = 1;
    change(call);
    return flashtile_reference_attention(&call) == 0 ? std::string() : std::string(flashtile_last_error());
  };
  EXPECT_EQ(errorOf([](flashtile_reference_call &c) { c.q_offset = 4, c.seqlen_q_global = 6; }), "");
  EXPECT_NE(errorOf([](flashtile_reference_call &c) { c.q_offset = 5, c.seqlen_q_global = 6; }).find("q_offset"),
            std::string::npos);
  EXPECT_NE(errorOf([](flashtile_reference_call &c) { c.k_offset = 1; }).find("k_offset"), std::string::npos);
  EXPECT_NE(errorOf([](flashtile_reference_call &c) { c.head_offset = 1; }).find("head_offset"), std::string::npos);
  EXPECT_NE(errorOf([&](flashtile_reference_call &c) { c.fwd_o = o.data(), c.fwd_lse = lse.data(); }).find("fwd_o"),
            std::string::npos);
  static const int offsets[] = {0};
  EXPECT_NE(errorOf([](flashtile_reference_call &c) { c.q_offsets = offsets; }).find("for varlen calls"),
            std::string::npos);
  static const int cuQ[] = {0, 3}, cuK[] = {0, 3};
  EXPECT_NE(errorOf([](flashtile_reference_call &c) {
              c.cu_seqlens_q = cuQ, c.cu_seqlens_k = cuK;
            }).find("cu_seqlens_q: must be batch + 1 non-decreasing offsets from 0 to 2"),
            std::string::npos);
}
