//===- BackwardSm90.cpp - the backward's GEMMs as wgmma -------------------===//
//
// One or two computing warpgroups a block (KernelShape::warps / 4 = W). A wgmma m64 accumulator is the split-Q C
// fragment of its warpgroup's four warps, so the elementwise math is FragmentTiles' as on sm80. Three layouts:
//   split-Q      (keyWarps 1) W·64 query rows × W·64 keys: warpgroup g holds query rows [64g, 64g + 64) of S, dP, P
//                and dS over all the keys (warp w rows [16w, 16w + 16)), and keys [64g, 64g + 64) of dK and dV;
//   key split    (keyWarps W) 64 query rows × W·64 keys: warpgroup g holds keys [64g, 64g + 64) of S, dP, P and dS
//                (warp w the rows [16(w % 4), ...) of the Q tile: warpM, warpCol0 = 64g) and of dK and dV;
//   column split (keyWarps W, block-n 64; splitsColumns) 64 query rows × 64 keys: warpgroup g holds keys
//                [64g / W, ...) of S, dP, P and dS, and all 64 keys × columns [g·d / W, ...) of dK and dV (head dims
//                192 and 256, where a warpgroup's 64 keys over all the columns pass the registers).
// Warp w holds key rows [16w, 16w + 16) of dK and dV in the first two, [16(w % 4), ...) of column part w / 4 in the
// third: the m64 of the GEMMs whose rows are keys.
//   tiles      Q, dO (Q-tile rows) and K, V (K/V-tile rows) in the swizzled column-block layout (128-byte span, or 64
//              where a GEMM starts at a column that is not a multiple of 64: tileSwizzleBytes): by TMA from the load
//              warp (KernelShape::loadWarp), or by cp.async 16-byte chunks of the computing threads, fenced into the
//              async proxy before wgmma reads
//   S, dP      wgmma SS m64nNk16, A (Q or dO) and B (K or V) K-major, N the warpgroup's keys
//   P, dS      rounded to 16 bits and stored transposed (stmatrix.x4.trans): [keys][query rows], a K-major A for
//   dV, dK     wgmma SS m64nNk16, B (dO or Q) MN-major, as V in the forward's P·V; N the head dim, or the
//              warpgroup's part of it under the column split
//   dQ         in rounds of one product a warpgroup (dqRounds; K MN-major), into dq_accum by the dQ writer or with
//              red.global.add.v2: one warpgroup (W = 1) reads dS from registers (wgmma RS, its 64 keys); W = 2 read it
//              from the staged [keys][query rows] buffer as an MN-major A (wgmma SS, trans-a), so each product sums
//              over all the tile's keys and a block adds each Q-tile element once per K/V tile.
// Without overlap (KernelShape::gemmOverlap off) every GEMM is waited on when issued. With it, a Q tile's GEMMs stay in
// flight together and each is waited on (wgmma.wait_group with the count of groups committed after it) where its
// result is first read: S and dP issued back to back, S's softmax under dP; then dQ's products issued first and dV's
// and dK's after them, so that dQ's reductions run under dV and dK, which the end of the iteration waits for.
//===----------------------------------------------------------------------===//
#include "codegen/sm90/BackwardSm90.h"
#include "codegen/sm90/BackwardTargetSm90.h"

namespace flashtile::codegen::sm90 {
namespace detail {

void BackwardSm90::issueScore(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) const {
  if (shape.lateV && (a.name == "sV" || b.name == "sV"))
    w.line("sm90::mbarrier::wait(vBar, 0);  // late-v: V landed (its one phase: at once after the first Q tile)");
  if (shape.swapScores) {
    // Sᵀ = K·Qᵀ (dPᵀ = V·dOᵀ): the warpgroup's 64 keys of the K/V tile on M, the Q tile's rows on N.
    w.comment(cat(acc, " = (", a.name.substr(1), "·", b.name.substr(1), "ᵀ)ᵀ = ", b.name.substr(1), "·", a.name.substr(1),
                  "ᵀ (tile.qk, swapped; wgmma m64n", shape.blockM, "k16 ", mmaType,
                  " SS, both K-major, fp32): the warpgroup's keys x the Q tile's rows"));
    w.open("");
    w.line(cat("const unsigned aAddr = ", address(b.name, cat(" + warpCol0 * ", swizzle)), ", bAddr = ", address(a.name),
               ";"));
    w.line(cat("const unsigned long long aDesc = sm90::desc::kMajor", sw(), "(aAddr), bDesc = sm90::desc::kMajor", sw(),
               "(bAddr);"));
    w.line("sm90::warpgroup::arrive();");
    w.openUnrolledFor("ks", cat(a.width / 16));
    w.line(cat("sm90::warpgroup::Wgmma<kBlockM>::", mmaType, "SS<sm90::warpgroup::kKMajor>(", flat(acc, "kSTiles * 4"),
               ", sm90::desc::offsetLow(aDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockN)), "
               "sm90::desc::offsetLow(bDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockM)), ks > 0);"));
    w.close();
    w.close();
    return;
  }
  w.comment(cat(acc, " = ", a.name.substr(1), "·", b.name.substr(1), "ᵀ (tile.qk; wgmma m64n", shape.blockN / shape.keyWarps,
                "k16 ", mmaType, " SS, both K-major, fp32): the warpgroup's query rows x ",
                keySplit ? "its keys of the K/V tile" : "the K/V tile's keys"));
  w.open("");
  w.line(cat("const unsigned aAddr = ", address(a.name, keySplit ? "" : warpgroupRows()),
             ", bAddr = ", address(b.name, keySplit ? cat(" + warpCol0 * ", swizzle) : ""), ";"));
  w.line(cat("const unsigned long long aDesc = sm90::desc::kMajor", sw(), "(aAddr), bDesc = sm90::desc::kMajor", sw(),
             "(bAddr);"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("ks", cat(a.width / 16));
  w.line(cat("sm90::warpgroup::Wgmma<", keySplit ? "kSTiles * 8" : "kBlockN", ">::", mmaType,
             "SS<sm90::warpgroup::kKMajor>(", flat(acc, "kSTiles * 4"),
             ", sm90::desc::offsetLow(aDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockM)), "
             "sm90::desc::offsetLow(bDesc, sm90::desc::kMajorStepBytes", sw(), "(ks, kBlockN)), ks > 0);"));
  w.close();
  w.close();
}

void BackwardSm90::scoreGemm(CudaWriter &w, const std::string &acc, const SharedTile &a, const SharedTile &b) {
  w.line(cat("float ", acc, "[kMTiles][kSTiles][4];"));
  issueScore(w, acc, a, b);
  retire(w, flat(acc, "kSTiles * 4"));
}

void BackwardSm90::scoreGemms(CudaWriter &w, const std::string &first, const SharedTile &a, const SharedTile &b,
                              const std::string &second, const SharedTile &a2, const SharedTile &b2) {
  w.comment(cat("overlap: ", first, " and ", second, " issued back to back, a group each; ", first,
                "'s math runs while ", second, " computes"));
  w.line(cat("float ", first, "[kMTiles][kSTiles][4], ", second, "[kMTiles][kSTiles][4];"));
  issueScore(w, first, a, b);
  commit(w, first, flat(first, "kSTiles * 4"));
  issueScore(w, second, a2, b2);
  commit(w, second, flat(second, "kSTiles * 4"));
  waitFor(w, first);
}

void BackwardSm90::endIteration(CudaWriter &w) {
  dotFrags = 0;
  packed.clear();
  if (deferred.empty() && inFlight.empty())
    return;
  for (const DeferredDot &dot : deferred)
    issueDot(w, dot);
  deferred.clear();
  w.comment("overlap: the iteration's GEMMs landed before the next Q tile's barrier hands its buffers on");
  waitFor(w, inFlight.back().acc);
}

std::string BackwardSm90::stageWords(CudaWriter &w, const std::string &from) const {
  // The four 8x8 matrices of n8 tiles 2nt, 2nt + 1 are the words of k16 step nt of dotTn's packing (under the swap).
  if (const auto it = packed.find(from); it != packed.end())
    return it->second + "[nt]";
  w.line(cat("const unsigned frag[4] = {", pack, "(", from, "[0][2 * nt][0], ", from, "[0][2 * nt][1]), ", pack, "(",
             from, "[0][2 * nt][2], ", from, "[0][2 * nt][3]),"));
  w.line(cat("                          ", pack, "(", from, "[0][2 * nt + 1][0], ", from, "[0][2 * nt + 1][1]), ", pack,
             "(", from, "[0][2 * nt + 1][2], ", from, "[0][2 * nt + 1][3])};"));
  return "frag";
}

void BackwardSm90::stage(CudaWriter &w, const std::string &buffer, const std::string &from) {
  if (shape.swapScores) {
    // dS (transposed: keys x query rows) for dQ's GEMM: as [keys][rows] (its MN-major A), or transposed by stmatrix
    // into [rows][keys] where dQ is transposed too (dQᵀ's K-major B).
    const bool dqT = transposesDq(shape);
    w.comment(cat(from, " (transposed: keys x query rows) rounded to 16 bits", dqT ? " and transposed" : "", " into ",
                  buffer, dqT ? " [kBlockM query rows][kBlockN keys] (stmatrix.x4.trans, swizzled):"
                              : " [kBlockN keys][kBlockM query rows] (stmatrix.x4, swizzled):"));
    w.comment(dqT ? "this warp's 16 keys of each row, the K-major B operand of dQᵀ's GEMM"
                  : "this warp's 16 keys, the MN-major A operand of dQ's GEMM");
    w.openUnrolledFor("nt", "kSTiles / 2");
    const std::string words = stageWords(w, from);
    if (dqT) {
      w.comment("lane l addresses row l % 8 of matrix l / 8, stored transposed: query row 16·nt + 8·(l / 16) + l % 8, keys");
      w.comment("from this warp's first + 8·((l / 8) % 2)");
      w.line("const int q = 16 * nt + 8 * (lane / 16) + lane % 8, key = warpCol0 + 16 * warpM + 8 * ((lane / 8) % 2);");
      w.line(cat("sm90::warp::stmatrixX4Trans(", ns, "smemAddress(", buffer,
                 ") + sm90::swizzle128Offset(q, key, kBlockM), ", words, ");"));
    } else {
      w.comment("lane l addresses row l % 8 of matrix l / 8: key 8·((l / 8) % 2) + l % 8 of this warp's keys, query rows");
      w.comment("16·nt + 8·(l / 16)");
      w.line("const int key = warpCol0 + 16 * warpM + 8 * ((lane / 8) % 2) + lane % 8, q = 16 * nt + 8 * (lane / 16);");
      w.line(cat("sm90::warp::stmatrixX4(", ns, "smemAddress(", buffer, ") + sm90::swizzle128Offset(key, q, kBlockN), ",
                 words, ");"));
    }
    w.close();
    return;
  }
  w.comment(cat(from, " rounded to 16 bits and transposed into ", buffer,
                " [kBlockN keys][kBlockM query rows] (stmatrix.x4.trans, swizzled):"));
  w.comment("this warp's query columns, the K-major A operand of the GEMMs whose rows are keys");
  w.openUnrolledFor("nt", "kSTiles / 2");
  const std::string words = stageWords(w, from);
  w.comment("lane l addresses row l % 8 of matrix l / 8: key 16·nt + 8·(l / 16) + l % 8 of this warp's keys, query");
  w.comment("rows from this warp's first + 8·((l / 8) % 2)");
  w.line(cat("const int key = ", keySplit ? "warpCol0 + " : "", "16 * nt + 8 * (lane / 16) + lane % 8, q = ",
             keySplit ? "warpM" : "warp", " * kWarpRows + 8 * ((lane / 8) % 2);"));
  w.line(cat("sm90::warp::stmatrixX4Trans(", ns, "smemAddress(", buffer,
             ") + sm90::swizzle128Offset(key, q, kBlockN), ", words, ");"));
  w.close();
}

std::string BackwardSm90::packDotOperand(CudaWriter &w, const std::string &a, const std::string &acc) {
  // Aᵀ in registers: the transposed score tile's C fragments of n8 tiles 2k, 2k + 1 are the A fragment of k16 step k
  // (the forward's P·V). Packed where the tile is final, so its fp32 registers die before dQ's GEMM; stage() stores dS
  // from the same words.
  std::string frag = cat("dotFrag", dotFrags++);
  packed[a] = frag;
  w.comment(cat(a, " rounded to 16 bits into ", frag, ": the A fragments of ", acc, "'s GEMM (k16 step k: n8 tiles 2k, "
                "2k + 1)"));
  w.line(cat("unsigned ", frag, "[kSTiles / 2][4];"));
  w.openUnrolledFor("k", "kSTiles / 2");
  for (int r = 0; r < 4; ++r)
    w.line(cat(frag, "[k][", r, "] = ", pack, "(", a, "[0][2 * k", r >= 2 ? " + 1" : "", "][", 2 * (r % 2), "], ", a,
               "[0][2 * k", r >= 2 ? " + 1" : "", "][", 2 * (r % 2) + 1, "]);"));
  w.close();
  return frag;
}

void BackwardSm90::dotTn(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
                         int64_t warpCols) {
  const std::string frag = shape.swapScores ? packDotOperand(w, a, acc) : std::string();
  if (shape.gemmOverlap) {
    w.comment(cat(acc, " += Aᵀ·", b.name.substr(1), " (tile.dot_tn): issued after dQ's products (overlap)"));
    deferred.push_back({acc, a, frag, b, warpCols});
    return;
  }
  issueDot(w, {acc, a, frag, b, warpCols});
}

void BackwardSm90::dotTnEarly(CudaWriter &w, const std::string &acc, const std::string &a, const SharedTile &b,
                              int64_t warpCols) {
  earlyDot = acc;
  if (!shape.gemmOverlap)
    return dotTn(w, acc, a, b, warpCols);
  // Issued now, a group of its own: dV's GEMM runs under dS's math; dQ's and dK's groups come after it, and each
  // wait counts the groups committed after the one it needs (waitFor).
  w.comment(cat(acc, " += Aᵀ·", b.name.substr(1), " (tile.dot_tn, tile.issue_early): issued as soon as its A is ready, "
                "under dS's math"));
  issueDot(w, {acc, a, shape.swapScores ? packDotOperand(w, a, acc) : std::string(), b, warpCols});
}

void BackwardSm90::issueSwappedKvDot(CudaWriter &w, const DeferredDot &dot) {
  const int64_t keys = shape.blockN / shape.keyWarps, mTiles = dot.b.width / kWgmmaM;
  const std::string whole = cat("reinterpret_cast<float (&)[", mTiles * keys / 2, "]>(", dot.acc, ")");
  w.comment(cat(dot.acc, "ᵀ += ", dot.b.name.substr(1), "ᵀ·A (tile.dot_tn transposed, tile.swap_kv; wgmma m64n", keys,
                "k16 ", mmaType, " SS, fp32, one a ", kWgmmaM, "-column m-tile): ", dot.b.name.substr(1),
                "ᵀ MN-major (its columns on M), A staged in ", dot.a, " [keys][query rows] K-major, the warpgroup's keys"));
  w.open("");
  w.line(cat("const unsigned aAddr = ", address(dot.b.name), ", bAddr = ",
             address(dot.a, cat(" + warpCol0 * ", kSwizzleBytes)), ";"));
  w.line("const unsigned long long bDesc = sm90::desc::kMajor(bAddr);");
  w.line(cat("sm90::warpgroup::fenceOperands(", whole, ");"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("mt", cat(mTiles));
  w.comment("column c of a column-block tile starts c · rows · 2 bytes in");
  w.line(cat("const unsigned long long aDesc = sm90::desc::mnMajor", sw(), "(aAddr + mt * ", kWgmmaM,
             " * kBlockM * 2, kBlockM * ", swizzle, ");"));
  w.openUnrolledFor("ks", "kBlockM / 16");
  w.line(cat("sm90::warpgroup::WgmmaMnA<", keys, ">::", mmaType, "SS<sm90::warpgroup::kKMajor>(",
             "reinterpret_cast<float (&)[", keys / 2, "]>(", dot.acc, "[mt]), "
             "sm90::desc::offsetLow(aDesc, sm90::desc::mnMajorStepBytes", sw(), "(ks)), "
             "sm90::desc::offsetLow(bDesc, sm90::desc::kMajorStepBytes(ks, kBlockN)), 1);"));
  w.close();
  w.close();
  if (shape.gemmOverlap)
    commit(w, dot.acc, whole);
  else
    retire(w, whole);
  w.close();
}

void BackwardSm90::issueDot(CudaWriter &w, const DeferredDot &dot) {
  if (shape.swapKv)
    return issueSwappedKvDot(w, dot);
  const std::string floats = cat(dot.warpCols / 2);
  if (shape.swapScores) {
    // Aᵀ from the words dotTn packed (fenced where the group is waited for: not reused before the wgmma read them).
    const std::string &frag = dot.frag;
    w.comment(cat(dot.acc, " += Aᵀ·", dot.b.name.substr(1), " (tile.dot_tn; wgmma m64n", dot.warpCols, "k16 ", mmaType,
                  " RS, fp32): Aᵀ = ", dot.a, " from registers (", frag, "), ", dot.b.name.substr(1), " MN-major;"));
    w.comment("the warpgroup's rows are its keys of the K/V tile");
    w.open("");
    w.line(cat("const unsigned long long bDesc = sm90::desc::mnMajor", sw(), "(", address(dot.b.name), ", kBlockM * ",
               swizzle, ");"));
    w.line(cat("sm90::warpgroup::fenceOperands(", flat(dot.acc, floats), ");"));
    w.line("sm90::warpgroup::arrive();");
    w.openUnrolledFor("ks", "kSTiles / 2");
    w.line(cat("sm90::warpgroup::Wgmma<", dot.warpCols, ">::", mmaType, "RS<sm90::warpgroup::kMNMajor>(",
               flat(dot.acc, floats), ", ", frag, "[ks], sm90::desc::offsetLow(bDesc, sm90::desc::mnMajorStepBytes", sw(),
               "(ks)), 1);"));
    w.close();
    const std::string operand = cat("reinterpret_cast<unsigned (&)[kSTiles / 2 * 4]>(", frag, "[0])");
    if (shape.gemmOverlap) {
      w.line("sm90::warpgroup::commitGroup();");
      inFlight.push_back({dot.acc, flat(dot.acc, floats), operand});
    } else {
      retire(w, flat(dot.acc, floats));
      w.line(cat("sm90::warpgroup::fenceOperands(", operand, ");"));
    }
    w.close();
    return;
  }
  w.comment(cat(dot.acc, " += Aᵀ·", dot.b.name.substr(1), " (tile.dot_tn; wgmma m64n", dot.warpCols, "k16 ", mmaType,
                " SS, fp32): Aᵀ staged in ", dot.a, " (K-major), ", dot.b.name.substr(1), " MN-major;"));
  w.comment(columnSplit ? "the warpgroup's rows are all the K/V tile's keys, its columns its part of the head dim"
                        : "the warpgroup's rows are the K/V tile's keys");
  w.open("");
  // The column split: every warpgroup all the keys (A's m64 rows) and its own columns of B; else its own keys.
  w.line(cat("const unsigned aAddr = ", address(dot.a, columnSplit ? std::string() : warpgroupRows()),
             ", bAddr = ",
             address(dot.b.name, columnSplit ? cat(" + warp / ", kWarpgroupWarps, " * ", dot.warpCols, " * kBlockM * 2")
                                             : std::string()),
             ";"));
  w.line(cat("const unsigned long long aDesc = sm90::desc::kMajor(aAddr), bDesc = sm90::desc::mnMajor", sw(),
             "(bAddr, kBlockM * ", swizzle, ");"));
  w.line(cat("sm90::warpgroup::fenceOperands(", flat(dot.acc, floats), ");"));
  w.line("sm90::warpgroup::arrive();");
  w.openUnrolledFor("ks", "kBlockM / 16");
  w.line(cat("sm90::warpgroup::Wgmma<", dot.warpCols, ">::", mmaType, "SS<sm90::warpgroup::kMNMajor>(",
             flat(dot.acc, floats),
             ", sm90::desc::offsetLow(aDesc, sm90::desc::kMajorStepBytes(ks, kBlockN)), "
             "sm90::desc::offsetLow(bDesc, sm90::desc::mnMajorStepBytes", sw(), "(ks)), 1);"));
  w.close();
  if (shape.gemmOverlap)
    commit(w, dot.acc, flat(dot.acc, floats));
  else
    retire(w, flat(dot.acc, floats));
  w.close();
}

void BackwardSm90::dqOperand(CudaWriter &w, const std::string &staged, const std::string &regs) {
  if (!earlyDot.empty())
    releaseDo(w);
  if (dqReadsRegisters()) {
    w.comment(cat("tile.accumulate dq_accum[qt]: dQ += A·K, A = ", regs,
                  " from registers (wgmma RS: the accumulator layout is the A operand's), K MN-major;"));
    w.comment(cat(kDqColumns, " columns at a time, added to the fp32 accumulator (red.global.add.v2)"));
    w.line("unsigned dsFrag[kMTiles][kBlockN / 16][4];");
    w.openUnrolledFor("k", "kBlockN / 16");
    w.line(cat("dsFrag[0][k][0] = ", pack, "(", regs, "[0][2 * k][0], ", regs, "[0][2 * k][1]);"));
    w.line(cat("dsFrag[0][k][1] = ", pack, "(", regs, "[0][2 * k][2], ", regs, "[0][2 * k][3]);"));
    w.line(cat("dsFrag[0][k][2] = ", pack, "(", regs, "[0][2 * k + 1][0], ", regs, "[0][2 * k + 1][1]);"));
    w.line(cat("dsFrag[0][k][3] = ", pack, "(", regs, "[0][2 * k + 1][2], ", regs, "[0][2 * k + 1][3]);"));
    w.close();
  } else {
    dqA = staged;
    w.comment(cat("tile.accumulate dq_accum[qt]: dQ += A·K over all kBlockN keys, A = ", regs, " read back from ",
                  staged, " [keys][query rows]"));
    w.comment(cat("(wgmma SS, A MN-major: every warpgroup's keys), K MN-major; ", kDqColumns,
                  " columns at a time, ", keySplit ? "this warpgroup's column blocks" : "this warpgroup's query rows",
                  ", added to the fp32 accumulator (red.global.add.v2)"));
  }
  if (shape.gemmOverlap)
    issueDqProducts(w, kTile());
}

void BackwardSm90::dqReductions(CudaWriter &w, const SharedTile &k, const std::string &part, const DqBlock &block) {
  if (shape.dqAddV4) {
    // Lanes 2j and 2j + 1 hold columns [4j', 4j' + 2) and [4j' + 2, 4j' + 4) of rows fragRow and fragRow + 8: the even
    // lane takes the odd one's half of the first row, the odd lane the even one's half of the second.
    w.comment("dq-add-v4: the lane pair's halves swapped (two shuffles an n8 tile), each lane adds four consecutive floats");
    w.comment("of one row: the even lane of row fragRow, the odd lane of row fragRow + 8");
    w.open("");
    w.line("const bool oddLane = lane & 1;");
    w.openUnrolledFor("mt", "kMTiles");
    w.line(cat("const int q = ", FragmentTiles::threadRow("oddLane"), ";"));
    openKeptFragments(w, block);
    const std::string e = cat(part, "[0][nt]");
    w.line(cat("const float give0 = oddLane ? ", e, "[0] : ", e, "[2], give1 = oddLane ? ", e, "[1] : ", e, "[3];"));
    w.line("const float take0 = __shfl_xor_sync(0xffffffffu, give0, 1), take1 = __shfl_xor_sync(0xffffffffu, give1, 1);");
    w.line("if (q < p.seqlenQ)");
    w.line(cat("  sm90::redAdd4(gDqAccum + (long long)q * ", k.width, " + ", block.col,
               " + 8 * nt + (fragCol & ~3), oddLane ? take0 : ", e, "[0], oddLane ? take1 : ", e, "[1], oddLane ? ", e,
               "[2] : take0, oddLane ? ", e, "[3] : take1);"));
    w.close();
    w.close();
    w.close();
    return;
  }
  fragments.forEachRow(w, [&] {
    w.line(cat("const int q = ", FragmentTiles::threadRow(), ";"));
    w.line("if (q >= p.seqlenQ)");
    w.line("  continue;");
    openKeptFragments(w, block);
    w.line(cat("float *const dst = gDqAccum + (long long)q * ", k.width, " + ", block.col, " + 8 * nt + fragCol;"));
    w.line(reduceAdd2("dst", cat(part, "[0][nt][2 * r]"), cat(part, "[0][nt][2 * r + 1]")));
    w.close();
  });
}

std::string BackwardSm90::dqFragmentIndex(const std::string &row, const std::string &col) const {
  if (!shape.dqFragments)
    return {};
  // The computing threads (kThreads of the main kernel; the postprocess has its own count): a literal.
  const std::string r = cat("(", row, ")"), c = cat("(", col, ")"), threads = cat(shape.warps * 32);
  if (transposesDq(shape))
    // dQᵀ: float i of chunk nt is query row 8·nt + fragCol + i % 2, column 64·g + 16·(warp % 4) + fragRow + 8·(i / 2).
    return cat("(4 * (", r, " / 8 * ", threads, " + (4 * (", c, " / 64) + ", c, " % 64 / 16) * 32 + 4 * (", c, " % 8) + ", r,
               " % 8 / 2) + 2 * (", c, " % 16 / 8) + ", r, " % 2)");
  // dQ: float e of chunk nt is row 16·(warp % 4) + fragRow + 8·(e / 2), column 64·g + 8·nt + fragCol + e % 2.
  return cat("(4 * (", c, " % 64 / 8 * ", threads, " + (4 * (", c, " / 64) + ", r, " / 16) * 32 + 4 * (", r, " % 8) + ", c,
             " % 8 / 2) + 2 * (", r, " % 16 / 8) + ", c, " % 2)");
}

void BackwardSm90::dqToShared(CudaWriter &w, const std::string &part, const DqBlock &block) {
  if (shape.dqFragments) {
    w.comment(cat("dQ", transposesDq(shape) ? "ᵀ" : "", "'s fragments into sDq in their own order (dq-fragments): n8 tile nt's four floats"));
    w.comment("at 4·(nt·kThreads + thread), a warp's 16-byte stores on consecutive bytes (dqFragmentIndex); a tile cut");
    w.comment("by seqlen_q in rows, as dq_accum keeps it (its neighbours are the next head's or sequence's rows), so that");
    w.comment("the writer adds it with one bulk reduce-add too");
    w.open("if ((qt + 1) * kBlockM <= p.seqlenQ)");
    w.openUnrolledFor("nt", cat(block.width / 8));
    w.line(cat("*reinterpret_cast<float4 *>(sDq + 4 * (nt * kThreads + threadIdx.x)) = make_float4(", part, "[0][nt][0], ",
               part, "[0][nt][1], ", part, "[0][nt][2], ", part, "[0][nt][3]);"));
    w.close();
    w.close();
    w.open("else");
    dqRowsToShared(w, part, block);
    w.close();
    return;
  }
  dqRowsToShared(w, part, block);
}

void BackwardSm90::dqRowsToShared(CudaWriter &w, const std::string &part, const DqBlock &block) {
  if (transposesDq(shape)) {
    w.comment("dQᵀ's fragments into sDq [query rows][kDqPitch], a float each: element i of n8 tile nt is column");
    if (shape.dqSwizzle) {
      w.comment(cat(block.col, " + 16·(warp % 4) + fragRow + 8·(i / 2) of query row 8·nt + fragCol + i % 2 (its columns permuted"));
      w.comment("by the row: a warp's 32 stores fall on the 32 banks)");
    } else {
      w.comment(cat(block.col, " + 16·(warp % 4) + fragRow + 8·(i / 2) of query row 8·nt + fragCol + i % 2"));
    }
    w.openUnrolledFor("nt", cat(block.width / 8));
    w.openUnrolledFor("i", "4");
    w.line(cat("const int row = 8 * nt + fragCol + (i & 1), col = ", block.col, " + 16 * (warp % ", kWarpgroupWarps,
               ") + fragRow + 8 * (i >> 1);"));
    w.line(cat("sDq[row * kDqPitch + ", dqAccumColumn("row", "col"), "] = ", part, "[0][nt][i];"));
    w.close();
    w.close();
    return;
  }
  fragments.forEachRow(w, [&] {
    w.line(cat("const int row = ", keySplit ? "warpM" : "warp", " * kWarpRows + 16 * mt + fragRow + 8 * r;"));
    openKeptFragments(w, block);
    w.line(cat("*reinterpret_cast<float2 *>(sDq + row * kDqPitch + ",
               dqAccumColumn("row", cat(block.col, " + 8 * nt + fragCol")), ") = make_float2(", part,
               "[0][nt][2 * r], ", part, "[0][nt][2 * r + 1]);"));
    w.close();
  });
}

void BackwardSm90::dqGemm(CudaWriter &w, const SharedTile &k, const DqBlock &block, const std::string &part) {
  if (transposesDq(shape)) {
    w.comment(cat("dQᵀ = Kᵀ·dSᵀ (wgmma m64n", block.width, "k16 ", mmaType, " SS, fp32): A = Kᵀ, this warpgroup's ",
                  kWgmmaM, " columns of K (MN-major), B = dS staged ", dqA, " [query rows][keys] (K-major); the head dim"));
    w.comment("on M, the Q tile's rows on N");
    w.line("sm90::warpgroup::arrive();");
    w.open("");
    w.line(cat("const unsigned aAddr = ", address(k.name, cat(" + (", block.col, ") * ", k.rows, " * 2")), ", bAddr = ",
               address(dqA), ";"));
    w.line(cat("const unsigned long long aDesc = sm90::desc::mnMajor", sw(), "(aAddr, ", k.rows, " * ", swizzle,
               "), bDesc = sm90::desc::kMajor(bAddr);"));
    w.openUnrolledFor("ks", "kBlockN / 16");
    w.line(cat("sm90::warpgroup::WgmmaMnA<", block.width, ">::", mmaType, "SS<sm90::warpgroup::kKMajor>(",
               flat(part, cat(block.width / 2)), ", sm90::desc::offsetLow(aDesc, sm90::desc::mnMajorStepBytes", sw(),
               "(ks)), sm90::desc::offsetLow(bDesc, sm90::desc::kMajorStepBytes(ks, kBlockM)), ks > 0);"));
    w.close();
    w.close();
    return;
  }
  w.line("sm90::warpgroup::arrive();");
  w.open("");
  // Column c of a column-block tile starts c · rows · 2 bytes in, at any span (c a multiple of the span's columns).
  w.line(cat("const unsigned bAddr = ", address(k.name, cat(" + (", block.col, ") * ", k.rows, " * 2")),
             ";  // columns [", block.col, ", +", block.width, ") of K"));
  if (!dqReadsRegisters())
    w.line(cat("const unsigned aAddr = ",
               address(dqA, keySplit ? std::string() : cat(" + warp / ", kWarpgroupWarps, " * kBlockN * ", kSwizzleBytes)),
               ";  // dS, ", keySplit ? "the Q tile's rows" : "this warpgroup's query rows (a column block)"));
  w.line(cat("const unsigned long long bDesc = sm90::desc::mnMajor", sw(), "(bAddr, ", k.rows, " * ", swizzle, ");"));
  if (!dqReadsRegisters())
    w.line(cat("const unsigned long long aDesc = sm90::desc::mnMajor(aAddr, kBlockN * ", kSwizzleBytes, ");"));
  w.openUnrolledFor("ks", "kBlockN / 16");
  if (dqReadsRegisters())
    w.line(cat("sm90::warpgroup::Wgmma<", block.width, ">::", mmaType, "RS<sm90::warpgroup::kMNMajor>(",
               flat(part, cat(block.width / 2)), ", dsFrag[0][ks], sm90::desc::offsetLow(bDesc, "
               "sm90::desc::mnMajorStepBytes", sw(), "(ks)), ks > 0);"));
  else
    w.line(cat("sm90::warpgroup::WgmmaMnA<", block.width, ">::", mmaType, "SS<sm90::warpgroup::kMNMajor>(",
               flat(part, cat(block.width / 2)), ", sm90::desc::offsetLow(aDesc, sm90::desc::mnMajorStepBytes(ks)), ",
               "sm90::desc::offsetLow(bDesc, sm90::desc::mnMajorStepBytes", sw(), "(ks)), ks > 0);"));
  w.close();
  w.close();
}

void BackwardSm90::issueDqRound(CudaWriter &w, const SharedTile &k, const DqBlock &round) {
  dqGemm(w, k, round, "dqPart");
  commit(w, "dqPart", flat("dqPart", cat(dqWidth(k) / 2)));
}

void BackwardSm90::issueDqProducts(CudaWriter &w, const SharedTile &k) {
  if (transposesDq(shape) && deferred.size() == 2) {
    // dQᵀ's accumulator (blockM / 2 floats a thread) beside both RS operands in flight (P and dS, packed) and dK and
    // dV passes setmaxnreg's 240 registers at 80 rows, and ptxas then serializes every wgmma of the kernel (its
    // C7512 advisory). FA3's order instead: dV's GEMM first, then dQ's, and dK's once dV's landed (P's registers
    // free), so that at most one packed operand and dQᵀ are live beside dK and dV.
    w.comment("overlap: dV's GEMM first, then dQ's product, then dK's once dV's landed (P's registers free), a group");
    w.comment("each (before deterministic mode's turn: the products do not depend on it); dqProduct waits for dQ's");
    w.line(cat("float dqPart[1][", dqWidth(k) / 8, "][4];"));
    issueDot(w, deferred[0]);
    issueDqRound(w, k, dqRounds(k).front());
    waitFor(w, deferred[0].acc);
    issueDot(w, deferred[1]);
    deferred.clear();
    return;
  }
  w.comment("overlap: dQ's first product issued first, then dV's and dK's, a group each (before deterministic");
  w.comment("mode's turn: the products do not depend on it); dqProduct waits for it");
  w.line(cat("float dqPart[1][", dqWidth(k) / 8, "][4];"));
  issueDqRound(w, k, dqRounds(k).front());
  for (const DeferredDot &dot : deferred)
    issueDot(w, dot);
  deferred.clear();
}

void BackwardSm90::fenceDsFragments(CudaWriter &w) const {
  if (dqReadsRegisters())
    w.line("sm90::warpgroup::fenceOperands(reinterpret_cast<unsigned (&)[kBlockN / 16 * 4]>(dsFrag[0]));");
}

void BackwardSm90::dqProductOverlapped(CudaWriter &w, const SharedTile &k) {
  const std::vector<DqBlock> rounds = dqRounds(k);
  w.comment("overlap: each product's reductions once it landed, the first under dV's and dK's GEMMs");
  for (size_t i = 0; i < rounds.size(); ++i) {
    if (i > 0)
      issueDqRound(w, k, rounds[i]);
    waitFor(w, "dqPart");
    if (i == rounds.size() - 1)
      fenceDsFragments(w);
    if (shape.dqWriter) {
      if (i == 0)
        dqHandOver(w, true);
      dqToShared(w, "dqPart", rounds[i]);
    } else {
      dqReductions(w, k, "dqPart", rounds[i]);
    }
  }
  if (shape.dqWriter)
    dqHandOver(w, false);
}

void BackwardSm90::dqProduct(CudaWriter &w, const SharedTile &k) {
  if (shape.gemmOverlap) {
    dqProductOverlapped(w, k);
    return;
  }
  if (shape.dqWriter)
    dqHandOver(w, true);
  const int64_t width = dqWidth(k);
  for (const DqBlock &round : dqRounds(k)) {
    w.open("");
    w.line(cat("float part[1][", width / 8, "][4];"));
    w.open("");
    dqGemm(w, k, round, "part");
    retire(w, flat("part", cat(width / 2)));
    fenceDsFragments(w);
    w.close();
    if (shape.dqWriter)
      dqToShared(w, "part", round);
    else
      dqReductions(w, k, "part", round);
    w.close();
  }
  if (shape.dqWriter)
    dqHandOver(w, false);
}

} // namespace detail

using namespace detail;

std::optional<std::string> checkBackwardShape(const KernelShape &shape) {
  const int warpgroups = shape.warps / kWarpgroupWarps;
  if (shape.warps % kWarpgroupWarps != 0 || warpgroups < 1 || warpgroups > kMaxWarpgroups)
    return cat("sm90 backward: a block is 1 to ", kMaxWarpgroups, " computing warpgroups (4 warps each); got ",
               shape.warps, " warps");
  if (shape.warpRows != kWgmmaM / kWarpgroupWarps)
    return cat("sm90 backward: a warp holds ", kWgmmaM / kWarpgroupWarps, " query rows (a quarter of an m", kWgmmaM,
               "); got ", shape.warpRows);
  if (shape.keyWarps == 1) {
    if (shape.blockM != kWgmmaM * warpgroups || shape.blockN != kWgmmaM * warpgroups)
      return cat("sm90 backward: with the query rows split over ", warpgroups, " warpgroup(s), block-m and block-n must "
                 "be ", kWgmmaM * warpgroups, " (a warpgroup's m64 query rows of S and m64 keys of dK and dV); got "
                 "block-m ", shape.blockM, ", block-n ", shape.blockN);
  } else {
    const bool keys = shape.blockN == kWgmmaM * warpgroups, columns = splitsColumns(shape),
               swappedKeys = shape.swapKv && shape.blockN % (16 * warpgroups) == 0 &&
                             shape.blockN / warpgroups <= kWgmmaM;
    if (shape.swapKv && (shape.keyWarps != warpgroups || shape.blockM != kWgmmaM || !swappedKeys ||
                         shape.headDim % kWgmmaM != 0 || shape.headDimV % kWgmmaM != 0))
      return cat("sm90 backward: transposed dK and dV (tile.swap_kv) need key-warps ", warpgroups, ", block-m ", kWgmmaM,
                 ", block-n a multiple of ", 16 * warpgroups, " up to ", kWgmmaM * warpgroups,
                 " (a warpgroup's keys on wgmma's N, in k16 steps of the staged tiles) and head dims multiples of ",
                 kWgmmaM, " (their m64s); got key-warps ", shape.keyWarps, ", block-m ", shape.blockM, ", block-n ",
                 shape.blockN, ", head dims ", shape.headDim, ", ", shape.headDimV);
    if (shape.keyWarps != warpgroups || (shape.blockM != kWgmmaM && !(keys && transposesDq(shape))) ||
        !(keys || columns || swappedKeys))
      return cat("sm90 backward: with the keys split over ", warpgroups, " warpgroups, key-warps must be ", warpgroups,
                 ", block-m ", kWgmmaM, " and block-n ", kWgmmaM * warpgroups,
                 " (a warpgroup's m64 keys) or, splitting dK's and dV's columns, ", kWgmmaM,
                 " (every warpgroup the tile's m64 keys); got key-warps ", shape.keyWarps, ", block-m ", shape.blockM,
                 ", block-n ", shape.blockN);
  }
  if (shape.stagingRing && (!shape.swapScores || !shape.loadWarp))
    return cat("sm90 backward: dS staged in a ring (tile.staging_ring) needs the score tiles transposed "
               "(tile.swap_scores: dS the one staged tile) and the load warp (its ring's stage)");
  if (shape.swapScores && (shape.keyWarps == 1 || splitsColumns(shape) ||
                           (shape.blockM != kWgmmaM && shape.blockM != kRowsTransposedDq)))
    return cat("sm90 backward: swapped score GEMMs (tile.swap_scores) need the keys split over the warpgroups, each its "
               "m64 keys over the whole head dim, and block-m ", kWgmmaM, " (a warp's 16 keys of S and 16 query rows of "
               "dQ) or ", kRowsTransposedDq, " (dQ transposed); got key-warps ", shape.keyWarps, ", block-m ",
               shape.blockM, ", block-n ", shape.blockN);
  if (transposesDq(shape) && (!shape.dqWriter || (!shape.dqSwizzle && !shape.dqFragments) ||
                              shape.headDim != kWgmmaM * warpgroups || shape.headDimV != shape.headDim))
    return cat("sm90 backward: dQ transposed (block-m ", shape.blockM, " with the scores swapped) needs the dQ writer "
               "with dq_accum's permuted rows (dq-swizzle) or its fragments' order (dq-fragments) and head dims of one "
               "m64 a warpgroup (", kWgmmaM * warpgroups, "); got dq-writer ", shape.dqWriter, ", dq-swizzle ",
               shape.dqSwizzle, ", dq-fragments ", shape.dqFragments, ", head dims ", shape.headDim, ", ",
               shape.headDimV);
  if (shape.dqFragments && (!shape.dqWriter || shape.dqSwizzle || shape.keyWarps != warpgroups ||
                            shape.blockN != kWgmmaM * warpgroups ||
                            shape.headDim != kWgmmaM * warpgroups || shape.headDimV != shape.headDim))
    return cat("sm90 backward: dq_accum in the fragments' order (dq-fragments) needs the dQ writer without dq-swizzle, "
               "the keys split over the warpgroups and head dims of one m64 a warpgroup (", kWgmmaM * warpgroups,
               "): every thread keeps all of its dQ product; got dq-writer ", shape.dqWriter, ", dq-swizzle ",
               shape.dqSwizzle, ", key-warps ", shape.keyWarps, ", head dims ", shape.headDim, ", ", shape.headDimV);
  // A thread holds its warpgroup's part of dK and dV in fp32: 64 keys x (head_dim + head_dim_v) / 128 floats, or a
  // W-th of that under the column split; at most 128 of its 240 registers. Transposed, its keys x (head_dim +
  // head_dim_v) / 128, at most 144 (S and dP of at most 48 keys beside them).
  if (shape.swapKv) {
    const int64_t floats = shape.blockN / warpgroups * (shape.headDim + shape.headDimV) / (kWarpgroupWarps * 32);
    if (floats > 144)
      return cat("sm90 backward: transposed dK and dV would take ", floats, " fp32 registers a thread (",
                 shape.blockN / warpgroups, " keys a warpgroup, head dims ", shape.headDim, ", ", shape.headDimV,
                 "); at most 144: fewer keys a K/V tile (block-n)");
    if (shape.headDim / warpgroups % 32 != 0)
      return cat("sm90 backward: head_dim (", shape.headDim, ") / ", warpgroups,
                 " must be whole 32-column blocks (dQ's columns a warpgroup)");
    return std::nullopt;
  }
  const bool columns = splitsColumns(shape);
  const int64_t parts = columns ? shape.keyWarps : 1;
  for (auto [name, value] : {std::pair{"head_dim", shape.headDim}, {"head_dim_v", shape.headDimV}})
    if (value < 64 || value > 256 || value % (32 * parts) != 0)
      return cat("sm90 backward: ", name, " (", value, ") must be a multiple of ", 32 * parts, " in [64, 256] (whole ",
                 "32-column blocks", columns ? " a warpgroup" : "", "); the fa2 backward serves the others");
  if (const int64_t floats = kWgmmaM * (shape.headDim + shape.headDimV) / parts / (kWarpgroupWarps * 32); floats > 128)
    return cat("sm90 backward: dK and dV would take ", floats, " fp32 registers a thread (head dims ", shape.headDim,
               ", ", shape.headDimV, columns ? "" : ", a warpgroup's 64 keys over all their columns",
               "); at most 128: split their columns over the warpgroups (block-n ", kWgmmaM, ")");
  return std::nullopt;
}

std::unique_ptr<BackwardTarget> createBackwardTarget(const KernelShape &shape) {
  return std::make_unique<BackwardSm90>(shape);
}

} // namespace flashtile::codegen::sm90
