//===- FragmentTiles.cpp - register-tile math in the C-fragment layout ----===//
#include "codegen/common/FragmentTiles.h"

#include <utility>

namespace flashtile::codegen {

FragmentTiles::FragmentTiles(FragmentLayout fragmentLayout) : layout(std::move(fragmentLayout)) {
  const std::string &ns = layout.primitives;
  negInf = ns + "::kNegInf";
  log2e = ns + "::kLog2e";
  ln2 = ns + "::kLn2";
  exp2 = ns + "::exp2";
  quadMax = ns + "::quadMax";
  quadSum = ns + "::quadSum";
  pack = ns + (layout.dtype == "bf16" ? "::packBf16x2" : "::packF16x2");
}

std::vector<std::string> FragmentTiles::reservedNames() const {
  return {layout.primitives,
          // the layout's names (FragmentLayout)
          "kMTiles", "kSTiles", "kOTiles", "warp", "lane", "fragRow", "fragCol", "warpRow0", "b", "h", "rowQuery",
          "rowHead", "packedRows",
          // locals of the printed loops
          "mt", "nt", "k", "r", "c", "i", "s", "l", "q", "kv", "hRow", "invL", "tileMax", "chainMax", "pairMax",
          "laneMax", "tileSum", "maxNew", "maxUsed", "maxFresh", "maxMoved", "alpha", "lse", "scoreScale", "sinkLog2",
          "carry", "gO", "gLse", "sLo", "sHi"};
}

void FragmentTiles::initState(CudaWriter &w, const StateNames &st) const {
  w.comment("---- online-softmax state of this thread's rows: running max m (log2 domain), running sum l, acc ----");
  w.comment("Every K/V loop argument and result is this one state: the loops update it in place.");
  w.line(cat("float ", st.acc, "[kMTiles][kOTiles][4] = {};"));
  w.line(cat("float ", st.rowMax, "[kMTiles][2], ", st.rowSum, "[kMTiles][2];"));
  forEachRow(w, [&] {
    w.line(cat(st.rowMax, "[mt][r] = ", negInf, ";"));
    w.line(cat(st.rowSum, "[mt][r] = 0.f;"));
  });
}

void FragmentTiles::carryScores(CudaWriter &w, const std::string &to, const std::string &from) const {
  w.comment(cat("the next tile's scores become this loop's scores (register moves the compiler folds away)"));
  forEachElement(w, "kSTiles", {cat(to, "[mt][nt][i] = ", from, "[mt][nt][i];")});
}

void FragmentTiles::scale(CudaWriter &w, const std::string &s) const {
  w.comment("scale: S *= softmax_scale");
  forEachElement(w, "kSTiles", {cat(s, "[mt][nt][i] *= p.softmaxScale;")});
}

void FragmentTiles::forEachElement(CudaWriter &w, const char *nTiles, const std::vector<std::string> &perTile,
                                   const std::vector<std::string> &body) const {
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("nt", nTiles);
  for (const std::string &line : perTile)
    w.line(line);
  w.openUnrolledFor("i", "4");
  for (const std::string &line : body)
    w.line(line);
  w.close();
  w.close();
  w.close();
}

void FragmentTiles::forEachRow(CudaWriter &w, const std::function<void()> &body) const {
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("r", "2");
  body();
  w.close();
  w.close();
}

void FragmentTiles::forEachScore(CudaWriter &w, const std::string &kTile, const std::vector<std::string> &body) const {
  std::vector<std::string> lines;
  if (layout.transposed) {
    // Keys on the rows: the key's per-lane part (kvTile) and its per-element constant (kvStep) as in the C layout.
    lines = {cat("const int q = ", scoreQuery(), ";"),
             cat("const int kvTile = ", kTile, " * kBlockN + ", layout.keyOffset.empty() ? "" : layout.keyOffset + " + ",
                 "fragRow, kvStep = 16 * mt + 8 * (i / 2);"),
             "const int kv = kvTile + kvStep;"};
  } else {
    lines = {layout.packQueryHeads ? "const int q = rowQuery[mt][i / 2], hRow = rowHead[mt][i / 2];"
                                   : cat("const int q = ", threadRow("(i / 2)"), ";"),
             cat("const int kvTile = ", kTile, " * kBlockN + ", layout.keyOffset.empty() ? "" : layout.keyOffset + " + ",
                 "fragCol, kvStep = 8 * nt + i % 2;"),
             "const int kv = kvTile + kvStep;"};
  }
  lines.insert(lines.end(), body.begin(), body.end());
  forEachElement(w, "kSTiles", lines);
}

std::string FragmentTiles::scoreQuery() const {
  return layout.transposed ? cat(layout.queryOffset, " + 8 * nt + fragCol + i % 2") : threadRow("(i / 2)");
}

std::string FragmentTiles::scoreKey(const std::string &kTile) const {
  const std::string offset = layout.keyOffset.empty() ? "" : layout.keyOffset + " + ";
  return layout.transposed ? cat(kTile, " * kBlockN + ", offset, "16 * mt + fragRow + 8 * (i / 2)")
                           : cat(kTile, " * kBlockN + ", offset, "8 * nt + fragCol + i % 2");
}

void FragmentTiles::forEachRowValue(CudaWriter &w, const std::function<void()> &body) const {
  if (!layout.transposed) {
    forEachRow(w, body);
    return;
  }
  w.openUnrolledFor("nt", "kSTiles");
  w.openUnrolledFor("r", "2");
  body();
  w.close();
  w.close();
}

namespace {

/// The C arguments of a variant function's key, in forEachScore's names.
std::string keyArgs(KeyArg key) {
  switch (key) {
  case KeyArg::Kv:
    return "kv";
  case KeyArg::Clamped:
    return "min(kv, p.seqlenK - 1)";
  case KeyArg::Split:
    return "kvTile, kvStep";
  }
  return "kv";
}

} // namespace

void FragmentTiles::scoreMod(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn,
                             KeyArg key) const {
  w.comment(cat("score_mod: S = ", fn, "(S, b, h, q, kv) element by element"));
  if (key == KeyArg::Clamped)
    w.comment("(it reads per-key inputs: a key past seqlen_k, whose score the mask drops, reads key seqlen_k - 1's)");
  forEachScore(w, kTile,
               {cat(s, "[mt][nt][i] = ", fn, "(", s, "[mt][nt][i], b, ", head(), ", q, ", keyArgs(key), ", p);")});
}

void FragmentTiles::mask(CudaWriter &w, const std::string &s, const std::string &kTile, const std::string &fn,
                         KeyArg key, bool readsInputs) const {
  w.comment(cat("mask: keys past seqlen_k and keys ", fn, "() drops get -inf"));
  if (readsInputs) {
    w.comment(cat("Both tests run for every score (| is not ||): no branch around ", fn, "()'s reads, so the"));
    w.comment("compiler can share them across a row's keys.");
    if (key == KeyArg::Clamped)
      w.comment(cat(fn, "() reads per-key inputs: a key past seqlen_k reaches it as key seqlen_k - 1."));
  }
  forEachScore(w, kTile,
               {cat("if ((kv >= p.seqlenK) ", readsInputs ? "|" : "||", " !", fn, "(b, ", head(), ", q, ", keyArgs(key),
                    ", p))"),
                cat("  ", s, "[mt][nt][i] = ", negInf, ";")});
}

void FragmentTiles::softmaxUpdate(CudaWriter &w, const StateNames &st, const std::string &s, bool foldScale,
                                  int rescaleThreshold, const std::string &softExp2, int softShare, int maxChains,
                                  bool laneVote) const {
  w.comment("online softmax, in the exp2 domain with c = scoreScale: m' = max(m, rowmax(S)·c), alpha = exp2(m - m'),");
  w.comment("P = exp2(S·c - m'), l' = alpha·l + rowsum(P); a row with no key yet (m' = -inf) subtracts 0, not -inf,");
  w.comment("so it gets P = 0 and alpha = 0 instead of NaN. Rows are reduced over the 4 lanes of a quad; l stays a");
  w.comment("per-lane partial sum until finalize.");
  if (softShare > 0)
    w.comment(cat("Software exp2: n8 tiles nt with nt % 8 < ", softShare, " take ", softExp2,
                  " (two values at a time on the FMA pipe), the others the MUFU unit."));
  w.line(foldScale ? "const float scoreScale = p.scaleLog2;  // softmax_scale·log2(e): tile.scale folded in here"
                   : cat("const float scoreScale = ", log2e, ";  // scores are already scaled"));
  w.line("float alpha[kMTiles][2];");
  if (maxChains > 1) {
    w.comment(cat("the row maxima in ", maxChains, " chains (n8 tiles nt % ", maxChains,
                  "), combined at the end: fewer dependent steps before the exp2s"));
    w.line(cat("static_assert(kSTiles >= ", maxChains, ", \"max-chains: a chain an n8 tile at least\");"));
  }
  auto tileMax = [&] {
    if (maxChains <= 1) {
      w.line(cat("float tileMax = ", negInf, ";"));
      w.openUnrolledFor("nt", "kSTiles");
      w.line(cat("tileMax = fmaxf(tileMax, fmaxf(", s, "[mt][nt][2 * r], ", s, "[mt][nt][2 * r + 1]));"));
      w.close();
      return;
    }
    w.line(cat("float chainMax[", maxChains, "];"));
    w.openUnrolledFor("nt", "kSTiles");
    w.line(cat("const float pairMax = fmaxf(", s, "[mt][nt][2 * r], ", s, "[mt][nt][2 * r + 1]);"));
    w.line(cat("chainMax[nt % ", maxChains, "] = nt < ", maxChains, " ? pairMax : fmaxf(chainMax[nt % ", maxChains,
               "], pairMax);"));
    w.close();
    w.line(maxChains == 2
               ? "const float tileMax = fmaxf(chainMax[0], chainMax[1]);"
               : "const float tileMax = fmaxf(fmaxf(chainMax[0], chainMax[1]), fmaxf(chainMax[2], chainMax[3]));");
  };
  if (rescaleThreshold > 0) {
    w.comment(cat("conditional rescaling (rescale_threshold = ", rescaleThreshold, "): the maxes of this warp's rows"));
    w.comment(cat("move only when one of them would need more than 2^", rescaleThreshold,
                  " of headroom, and then all move; else m' = m, alpha = 1"));
    w.comment(cat("and P <= 2^", rescaleThreshold,
                  ", and tile.rescale skips acc *= alpha. The vote is warp-uniform: no divergence."));
    w.line("float maxFresh[kMTiles][2];");
    w.line("bool maxMoved = false;");
    if (laneVote) {
      w.comment(
          "the vote from each lane's own max (lane-vote): a row's quad max passes m + threshold exactly when one");
      w.comment("of its lanes' maxes does (x·c is monotone in x), so the quad's shuffles wait for a warp whose maxes");
      w.comment("moved, and the exponentials of the others wait for the vote alone");
      w.line("float laneMax[kMTiles][2];");
      forEachRow(w, [&] {
        tileMax();
        w.line("laneMax[mt][r] = tileMax;");
        w.line(cat("maxFresh[mt][r] = ", st.rowMax, "[mt][r];"));
        w.line(cat("maxMoved |= tileMax * scoreScale > ", st.rowMax, "[mt][r] + ", rescaleThreshold, ".f;"));
      });
      w.line("maxMoved = __any_sync(0xffffffffu, maxMoved);");
      w.open("if (maxMoved)");
      forEachRow(w, [&] {
        w.line(cat("maxFresh[mt][r] = fmaxf(", st.rowMax, "[mt][r], ", quadMax, "(laneMax[mt][r]) * scoreScale);"));
      });
      w.close();
    } else {
      forEachRow(w, [&] {
        tileMax();
        w.line(cat("maxFresh[mt][r] = fmaxf(", st.rowMax, "[mt][r], ", quadMax, "(tileMax) * scoreScale);"));
        w.line(cat("maxMoved |= maxFresh[mt][r] > ", st.rowMax, "[mt][r] + ", rescaleThreshold, ".f;"));
      });
      w.line("maxMoved = __any_sync(0xffffffffu, maxMoved);");
    }
  }
  forEachRow(w, [&] {
    if (rescaleThreshold > 0) {
      w.line(cat("const float maxNew = maxMoved ? maxFresh[mt][r] : ", st.rowMax, "[mt][r];"));
    } else {
      tileMax();
      w.line(cat("const float maxNew = fmaxf(", st.rowMax, "[mt][r], ", quadMax, "(tileMax) * scoreScale);"));
    }
    w.line(cat("const float maxUsed = maxNew == ", negInf, " ? 0.f : maxNew;"));
    w.line(cat("alpha[mt][r] = ", exp2, "(", st.rowMax, "[mt][r] - maxUsed);"));
    w.line("float tileSum = 0.f;");
    w.openUnrolledFor("nt", "kSTiles");
    if (softShare > 0) {
      w.comment("software exp2 for this n8 tile or not: a constant choice once unrolled");
      w.open(cat("if (nt % 8 < ", softShare, ")"));
      w.line(cat("float &sLo = ", s, "[mt][nt][2 * r], &sHi = ", s, "[mt][nt][2 * r + 1];"));
      w.line("sLo = fmaf(sLo, scoreScale, -maxUsed);");
      w.line("sHi = fmaf(sHi, scoreScale, -maxUsed);");
      w.line(cat(softExp2, "(sLo, sHi);"));
      w.line("tileSum += sLo;");
      w.line("tileSum += sHi;");
      w.close();
      w.open("else");
    }
    w.openUnrolledFor("c", "2");
    w.line(cat("float &s = ", s, "[mt][nt][2 * r + c];"));
    w.line(cat("s = ", exp2, "(fmaf(s, scoreScale, -maxUsed));"));
    w.line("tileSum += s;");
    w.close();
    if (softShare > 0)
      w.close();
    w.close();
    w.line(cat(st.rowMax, "[mt][r] = maxNew;"));
    w.line(cat(st.rowSum, "[mt][r] = alpha[mt][r] * ", st.rowSum, "[mt][r] + tileSum;"));
  });
}

void FragmentTiles::packProbabilities(CudaWriter &w, const std::string &s, const std::string &p, bool declare) const {
  w.comment(cat("P as ", layout.dtype,
                " A fragments of P·V: the C layout of n8 tiles 2k and 2k + 1 is the A layout of k16 step k"));
  if (declare)
    w.line(cat("unsigned ", p, "[kMTiles][kBlockN / 16][4];"));
  w.openUnrolledFor("mt", "kMTiles");
  w.openUnrolledFor("k", "kBlockN / 16");
  w.line(cat(p, "[mt][k][0] = ", pack, "(", s, "[mt][2 * k][0], ", s, "[mt][2 * k][1]);"));
  w.line(cat(p, "[mt][k][1] = ", pack, "(", s, "[mt][2 * k][2], ", s, "[mt][2 * k][3]);"));
  w.line(cat(p, "[mt][k][2] = ", pack, "(", s, "[mt][2 * k + 1][0], ", s, "[mt][2 * k + 1][1]);"));
  w.line(cat(p, "[mt][k][3] = ", pack, "(", s, "[mt][2 * k + 1][2], ", s, "[mt][2 * k + 1][3]);"));
  w.close();
  w.close();
}

void FragmentTiles::scaleByVDescale(CudaWriter &w, const StateNames &st) const {
  w.comment("FP8: O *= v_descale of this (batch, K/V head)");
  forEachElement(w, "kOTiles", {cat(st.acc, "[mt][nt][i] *= vDescale;")});
}

void FragmentTiles::rescale(CudaWriter &w, const StateNames &st, bool onlyWhenMoved) const {
  w.comment("rescale: acc *= alpha, row by row (the division by l waits until finalize)");
  if (!onlyWhenMoved) {
    forEachElement(w, "kOTiles", {cat(st.acc, "[mt][nt][i] *= alpha[mt][i / 2];")});
    return;
  }
  w.comment("only when the softmax step moved this warp's maxes: else every alpha is 1");
  w.open("if (maxMoved)");
  forEachElement(w, "kOTiles", {cat(st.acc, "[mt][nt][i] *= alpha[mt][i / 2];")});
  w.close();
}

void FragmentTiles::finalize(CudaWriter &w, const StateNames &st, const std::string &sinkFn, bool scaleAcc) const {
  if (sinkFn.empty()) {
    w.comment("---- finalize: l = quad sum of the partial sums, O = acc / l, LSE = (m + log2 l)·ln 2 ----");
    w.comment("m is in the log2 domain; a row that saw no key (l = 0) gets O = 0 and LSE = -inf.");
  } else {
    w.comment(cat("---- finalize with the attention sink s = ", sinkFn,
                  "(b, h): one more score, with no value, in every row ----"));
    w.comment("m' = max(m, s·log2 e) (log2 domain), l' = l·2^(m - m') + 2^(s·log2 e - m'), O = acc·2^(m - m') / l',");
    w.comment("LSE = (m' + log2 l')·ln 2; a row that saw no key gets O = 0 and LSE = s.");
    w.line(cat("const float sinkLog2 = ", sinkFn, "(b, h, p) * ", log2e, ";"));
  }
  w.line("float lse[kMTiles][2];");
  if (!scaleAcc)
    w.line("float invL[kMTiles][2];  // 1 / l of each row: O is scaled where it is read (the accumulator is not here)");
  const std::string invL = scaleAcc ? "const float invL" : "invL[mt][r]";
  forEachRow(w, [&] {
    if (sinkFn.empty()) {
      w.line(cat("const float l = ", quadSum, "(", st.rowSum, "[mt][r]);"));
      w.line(cat(invL, " = l == 0.f ? 0.f : 1.f / l;"));
      w.line(cat("lse[mt][r] = l == 0.f ? ", negInf, " : (", st.rowMax, "[mt][r] + log2f(l)) * ", ln2, ";"));
    } else {
      w.line(cat("const float maxNew = fmaxf(", st.rowMax, "[mt][r], sinkLog2);"));
      w.line(cat("const float maxUsed = maxNew == ", negInf, " ? 0.f : maxNew;"));
      w.line(cat("const float carry = ", exp2, "(", st.rowMax, "[mt][r] - maxUsed);"));
      w.line(cat("const float l = ", quadSum, "(", st.rowSum, "[mt][r]) * carry + ", exp2, "(sinkLog2 - maxUsed);"));
      w.line(cat(invL, " = l == 0.f ? 0.f : carry / l;"));
      w.line(cat("lse[mt][r] = l == 0.f ? ", negInf, " : (maxUsed + log2f(l)) * ", ln2, ";"));
    }
    if (!scaleAcc)
      return;
    w.openUnrolledFor("nt", "kOTiles");
    w.line(cat(st.acc, "[mt][nt][2 * r] *= invL;"));
    w.line(cat(st.acc, "[mt][nt][2 * r + 1] *= invL;"));
    w.close();
  });
}

void FragmentTiles::storeODirect(CudaWriter &w, const StateNames &st) const {
  w.comment(cat("store O: convert to ", layout.dtype, ", two adjacent columns (4 bytes) per store, rows < seqlen_q"));
  w.line(cat("unsigned short *const gO = static_cast<unsigned short *>(p.o) + b * p.oBatchStride + h * "
             "p.oHeadStride;"));
  forEachRow(w, [&] {
    w.line(cat("const int q = ", threadRow(), ";"));
    w.open("if (q < p.seqlenQ)");
    w.openUnrolledFor("nt", "kOTiles");
    w.line(cat("*reinterpret_cast<unsigned *>(gO + q * p.oRowStride + 8 * nt + fragCol) = ", packedPair(st), ";"));
    w.close();
    w.close();
  });
}

void FragmentTiles::storeLse(CudaWriter &w) const {
  if (layout.packQueryHeads) {
    w.comment("store LSE (fp32; B x Hq x Sq, varlen Hq x total_q): the first lane of each quad writes its two rows,");
    w.comment("each at its own query row and head (GQA packing), rows < packedRows");
    w.open("if (lane % 4 == 0)");
    forEachRow(w, [&] {
      w.line(cat("if (", threadRow(), " < packedRows)"));
      w.line("  p.lse[b * p.lseBatchStride + rowHead[mt][r] * p.lseHeadStride + rowQuery[mt][r]] = lse[mt][r];");
    });
    w.close();
    return;
  }
  w.comment("store LSE (fp32; B x Hq x Sq, varlen Hq x total_q): the first lane of each quad writes its two rows,");
  w.comment("rows < seqlen_q");
  w.line("float *const gLse = p.lse + b * p.lseBatchStride + h * p.lseHeadStride;");
  w.open("if (lane % 4 == 0)");
  forEachRow(w, [&] {
    w.line(cat("const int q = ", threadRow(), ";"));
    w.line("if (q < p.seqlenQ)");
    w.line("  gLse[q] = lse[mt][r];");
  });
  w.close();
}

} // namespace flashtile::codegen
