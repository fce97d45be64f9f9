// BackwardCodegenTest.cpp — the backward module (docs/backward.md) through the JIT: every built-in variant's three
// kernels at head dims 64 and 128 (and 192, 256 for a few), bf16 and fp16, compile with NVRTC to one cubin (no GPU
// needed); the plan launches the preprocess, main and postprocess kernels with the delta and dQ-accumulator workspaces;
// the printed source follows the scheduled IR (the bounded Q-tile walk, the variant's hooks); configurations the
// printer does not serve are refused with a diagnostic naming the knob. The fa3 schedule's backward (codegen/sm90:
// wgmma) compiles for sm_90a for every built-in variant at head dims 64 and 128, bf16 and fp16; the head dims it does
// not serve (192/128, 256, 96) are refused naming the head dim, and fa2 serves them.
#include "Printers.h"
#include "PlanSupport.h"
#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "flashtile/runtime/Nvrtc.h"
#include "jit/Jit.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

using namespace flashtile;

namespace {

jit::CompileOptions backwardOptions(ElementType dtype, int headDim, const std::string &arch = "sm_90a",
                                    schedule::Knobs knobs = {}, const std::string &scheduleName = "fa2") {
  jit::CompileOptions options;
  options.kind = "backward";
  options.dtype = dtype;
  options.headDim = options.headDimV = headDim;
  options.schedule = schedule::Request{scheduleName, arch, "default", std::move(knobs)};
  return options;
}

int count(const std::string &text, const std::string &needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size()))
    ++n;
  return n;
}

/// fa3's backward at `headDim` with `knobs` is refused, naming `knob` = `value`.
void expectFa3Refuses(int headDim, const schedule::Knobs &knobs, const std::string &knob, int64_t value) {
  StatusOr<jit::CompileResult> result = jit::compile(
      *variants::byName("causal"), backwardOptions(ElementType::BF16, headDim, "sm_90a", knobs, "fa3"), jit::Stage::Cuda);
  ASSERT_FALSE(result.ok()) << knob << " at head dim " << headDim;
  EXPECT_NE(result.status().message().find(knob + " = " + std::to_string(value) + " is not supported"),
            std::string::npos)
      << result.status().message();
}

using Config = std::tuple<std::string, ElementType, int>; // variant, dtype, head dim

class BackwardCompiles : public testing::TestWithParam<Config> {};

TEST_P(BackwardCompiles, ThreeKernelsToOneCubin) {
  auto [variant, dtype, headDim] = GetParam();
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName(variant), backwardOptions(dtype, headDim), jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const KernelInfo &info = result->info;
  EXPECT_EQ(info.kind, "backward");
  // A variant with f32 inputs (ALiBi's slopes, the sinks) has a fourth kernel: its input gradients' sums.
  std::vector<std::string> entries{info.entry + "_preprocess", info.entry, info.entry + "_postprocess"};
  if (variant.starts_with("alibi") || variant.starts_with("sinks"))
    entries.push_back(info.entry + "_input_grads");
  EXPECT_EQ(plans::launchedEntries(info), entries);
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  for (const std::string &entry : plans::launchedEntries(info))
    EXPECT_NE(result->cubin.find(entry), std::string::npos) << entry;
}

std::string configName(const testing::TestParamInfo<Config> &info) {
  auto [variant, dtype, headDim] = info.param;
  return variant + "_" + (dtype == ElementType::BF16 ? "bf16" : "f16") + "_d" + std::to_string(headDim);
}

INSTANTIATE_TEST_SUITE_P(Fa2, BackwardCompiles,
                         testing::Combine(testing::ValuesIn(variants::names()),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(64, 128)),
                         configName);

// Head dims 32 and 96 (padded shared-memory rows), and sm_80.
INSTANTIATE_TEST_SUITE_P(Fa2HeadDims, BackwardCompiles,
                         testing::Combine(testing::Values("causal"), testing::Values(ElementType::BF16),
                                          testing::Values(32, 96)),
                         configName);

// Head dims above 128: two warps share each m16 tile of keys, half of dK's and dV's columns each.
INSTANTIATE_TEST_SUITE_P(Fa2WideHeadDims, BackwardCompiles,
                         testing::Combine(testing::Values("none", "causal", "softcap_causal", "sliding_window"),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(192, 256)),
                         configName);

class Fa3BackwardCompiles : public testing::TestWithParam<Config> {};

TEST_P(Fa3BackwardCompiles, ThreeKernelsToOneCubinWithWgmma) {
  auto [variant, dtype, headDim] = GetParam();
  StatusOr<jit::CompileResult> result = jit::compile(
      *variants::byName(variant), backwardOptions(dtype, headDim, "sm_90a", {}, "fa3"), jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const KernelInfo &info = result->info;
  EXPECT_EQ(info.kind, "backward");
  EXPECT_EQ(info.schedule, "fa3");
  EXPECT_TRUE(info.verify().ok()) << info.verify().message();
  for (const std::string &entry : plans::launchedEntries(info))
    EXPECT_NE(result->cubin.find(entry), std::string::npos) << entry;
  EXPECT_FALSE(reportsSerializedWgmma(result->nvrtcLog)) << result->nvrtcLog;
  // The five GEMMs: S and dP (SS, K-major), dV and dK (SS, MN-major B), dQ (two warpgroups: SS with dS read back
  // MN-major from its staging buffer), P and dS staged transposed; 128-key K/V tiles over two warpgroups, split-Q at
  // head dim 64 and the keys split at 128.
  const std::string &cuda = result->cuda;
  EXPECT_NE(cuda.find("SS<sm90::warpgroup::kKMajor>"), std::string::npos);
  EXPECT_NE(cuda.find("SS<sm90::warpgroup::kMNMajor>"), std::string::npos);
  EXPECT_NE(cuda.find("sm90::warpgroup::WgmmaMnA<64>::"), std::string::npos);
  EXPECT_EQ(cuda.find("RS<sm90::warpgroup::kMNMajor>("), std::string::npos);
  EXPECT_NE(cuda.find("__launch_bounds__(256) flashtile_"), std::string::npos);
  EXPECT_NE(cuda.find("constexpr int kBlockN = 128;"), std::string::npos);
  EXPECT_EQ(cuda.find("constexpr int kKeyWarps = 2;") != std::string::npos, headDim == 128);
  EXPECT_NE(cuda.find("sm90::warp::stmatrixX4Trans("), std::string::npos);
  // The prelude defines the fragment primitives; no kernel calls the mma.sync ones.
  EXPECT_EQ(cuda.find("frag::mmaBf16("), std::string::npos);
  EXPECT_EQ(cuda.find("frag::mmaF16("), std::string::npos);
  EXPECT_EQ(cuda.find("frag::ldmatrixX4Trans("), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fa3, Fa3BackwardCompiles,
                         testing::Combine(testing::ValuesIn(variants::names()),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(64, 128)),
                         configName);

// Head dims 96, 192 and 256 (64-byte tiles at 96 and 192; at 192 96-key tiles with dK and dV transposed, swap-dkv's
// default; at 256 dK's and dV's columns split over 64-key tiles): the variants whose hooks read positions, inputs or
// the score, in both element types, to one cubin.
class Fa3WideBackwardCompiles : public testing::TestWithParam<Config> {};

TEST_P(Fa3WideBackwardCompiles, ThreeKernelsToOneCubin) {
  auto [variant, dtype, headDim] = GetParam();
  StatusOr<jit::CompileResult> result = jit::compile(
      *variants::byName(variant), backwardOptions(dtype, headDim, "sm_90a", {}, "fa3"), jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_EQ(result->info.schedule, "fa3");
  EXPECT_TRUE(result->info.verify().ok()) << result->info.verify().message();
  for (const std::string &entry : plans::launchedEntries(result->info))
    EXPECT_NE(result->cubin.find(entry), std::string::npos) << entry;
  EXPECT_FALSE(reportsSerializedWgmma(result->nvrtcLog)) << result->nvrtcLog;
  const char *blockN = headDim == 192 ? "96;" : headDim > 128 ? "64;" : "128;";
  EXPECT_NE(result->cuda.find("constexpr int kBlockN = " + std::string(blockN)), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Fa3Wide, Fa3WideBackwardCompiles,
                         testing::Combine(testing::Values("alibi_causal", "sliding_window", "softcap_causal",
                                                          "document_mask"),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(96, 192, 256)),
                         configName);

// swap-sdp 1 (FA3's SdP_swapAB, where the warpgroups split the keys): S and dP computed transposed (K·Qᵀ, wgmma N = the
// Q tile's 64 rows), dV's and dK's GEMMs from registers (RS) with their A words packed once, only dS staged (stmatrix
// without .trans), LSE and D per column; variants whose hooks read positions, inputs or the score, both element
// types, to one cubin (and printed without overlap). Refused where the keys are not split.
class Fa3SwappedScoresCompile : public testing::TestWithParam<Config> {};

TEST_P(Fa3SwappedScoresCompile, TransposedScoresAndRegisterOperands) {
  auto [variant, dtype, headDim] = GetParam();
  for (int overlap : {1, 0}) {
    StatusOr<jit::CompileResult> result = jit::compile(
        *variants::byName(variant),
        backwardOptions(dtype, headDim, "sm_90a", {{"swap-sdp", 1}, {"intra-wg-overlap", overlap}}, "fa3"),
        overlap ? jit::Stage::Cubin : jit::Stage::Cuda);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_TRUE(result->info.verify().ok()) << result->info.verify().message();
    const std::string &cuda = result->cuda;
    EXPECT_NE(cuda.find("(tile.qk, swapped; wgmma m64n64k16"), std::string::npos);
    EXPECT_NE(cuda.find("sm90::warpgroup::Wgmma<kBlockM>::"), std::string::npos);
    // Two RS GEMMs (dV, dK) a Q-tile iteration, three segments; P is never staged.
    EXPECT_EQ(count(cuda, "RS<sm90::warpgroup::kMNMajor>("), 6);
    EXPECT_EQ(count(cuda, "unsigned dotFrag0[kSTiles / 2][4];"), 3);
    EXPECT_EQ(count(cuda, "sm90::warp::stmatrixX4Trans("), 0);
    EXPECT_EQ(count(cuda, "sm90::warp::stmatrixX4(frag::smemAddress(sStage0)"), 3);
    EXPECT_EQ(cuda.find("sStage1"), std::string::npos);
    // LSE·log2(e) and D of the transposed tiles' query rows read where they are used, a float2 an n8 tile.
    EXPECT_EQ(cuda.find("float lse1[kSTiles][2];"), std::string::npos);
    EXPECT_EQ(count(cuda, "const float2 lsePair = *reinterpret_cast<const float2 *>(sLse + 8 * nt + fragCol);"), 3);
    EXPECT_EQ(count(cuda, "const float2 deltaPair = *reinterpret_cast<const float2 *>(sDelta + 8 * nt + fragCol);"), 3);
    EXPECT_NE(cuda.find("const int q = qt * kBlockM + 8 * nt + fragCol + i % 2;"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Fa3Swapped, Fa3SwappedScoresCompile,
                         testing::Combine(testing::Values("softcap_causal", "document_mask", "sinks"),
                                          testing::Values(ElementType::BF16, ElementType::F16),
                                          testing::Values(96, 128)),
                         configName);

// swap-dkv 1 (FA3's dKV_swapAB) at head dims 192 and 256: two warpgroups split K/V tiles of 96 and 64 keys, each
// holding dKᵀ and dVᵀ (one wgmma m64nKk16 an m64 of the head dim, N its 48 or 32 keys, A = Qᵀ or dOᵀ MN-major, B the
// staged dS or P K-major), dQ a warpgroup's half of the columns (64-byte tiles at 192), stored through a lane swap;
// variants whose hooks read positions, inputs or the score, both element types, GQA's fp32 adds, to one cubin
// without serialized wgmma; and printed without overlap.
TEST(BackwardCodegen, Fa3SwapDkvAccumulatesDkAndDvTransposed) {
  for (const char *variant : {"causal", "alibi", "softcap_causal", "document_mask"})
    for (ElementType dtype : {ElementType::BF16, ElementType::F16})
      for (int headDim : {192, 256}) {
        StatusOr<jit::CompileResult> result = jit::compile(
            *variants::byName(variant), backwardOptions(dtype, headDim, "sm_90a", {{"swap-dkv", 1}}, "fa3"),
            dtype == ElementType::BF16 ? jit::Stage::Cubin : jit::Stage::Cuda);
        ASSERT_TRUE(result.ok()) << variant << headDim << ": " << result.status().message();
        EXPECT_TRUE(result->info.verify().ok()) << result->info.verify().message();
        EXPECT_FALSE(reportsSerializedWgmma(result->nvrtcLog)) << result->nvrtcLog;
        const std::string &cuda = result->cuda;
        const int keys = headDim == 192 ? 48 : 32, mTiles = headDim / 64;
        const std::string m = std::to_string(keys);
        EXPECT_NE(cuda.find("constexpr int kBlockN = " + std::to_string(2 * keys) + ";"), std::string::npos);
        EXPECT_NE(cuda.find("constexpr int kKvColRows = 16 * kWarps / kKeyWarps, kKvKeyTiles = kBlockN / kKeyWarps / 8;"),
                  std::string::npos);
        EXPECT_NE(cuda.find("float acc[" + std::to_string(mTiles) + "][kKvKeyTiles][4] = {};"), std::string::npos);
        // dV's and dK's GEMMs, three walk segments: Qᵀ / dOᵀ MN-major over the m-tiles, the staged tile K-major.
        EXPECT_EQ(count(cuda, "sm90::warpgroup::WgmmaMnA<" + m + ">::" + (dtype == ElementType::BF16 ? "bf16" : "f16") +
                                  "SS<sm90::warpgroup::kKMajor>("),
                  6)
            << variant << headDim;
        EXPECT_EQ(count(cuda, "for (int mt = 0; mt < " + std::to_string(mTiles) + "; ++mt) {"), 6 + 2 + 1)
            << variant << headDim; // the GEMMs, the stores, the copy into the carried accumulator's second registers
        EXPECT_NE(cuda.find("bAddr = sm90::warp::uniform(frag::smemAddress(sStage0) + warpCol0 * 128);"),
                  std::string::npos);
        EXPECT_NE(cuda.find(headDim == 192 ? "sm90::desc::mnMajor<64>(aAddr + mt * 64 * kBlockM * 2, kBlockM * 64);"
                                           : "sm90::desc::mnMajor(aAddr + mt * 64 * kBlockM * 2, kBlockM * 128);"),
                  std::string::npos);
        // dQ: each warpgroup its half of the columns, summed over all the tile's keys.
        EXPECT_NE(cuda.find("sm90::warpgroup::WgmmaMnA<" + std::to_string(headDim / 2) + ">::"), std::string::npos);
        // The stores: dK and dV, a lane swap each element pair, GQA's fp32 adds.
        EXPECT_EQ(count(cuda, "__shfl_xor_sync(0xffffffffu, oddRow ? mine0 : mine1, 4);"), 2);
        EXPECT_EQ(count(cuda, "sm90::redAdd2(dst, lo, hi);"), 2);
        EXPECT_EQ(cuda.find("kKvMTiles"), std::string::npos);
        // At 192 dO has one buffer (the dQ writer's then fits), released in each of the three walk segments once
        // dV's GEMM, issued early, landed; the load warp brings the next tile's dO after that release. At 256 neither.
        const bool single = headDim == 192;
        EXPECT_EQ(count(cuda, "sm90::mbarrier::arrive(&doBars[1]);"), single ? 3 : 0) << variant << headDim;
        EXPECT_EQ(count(cuda, "sm90::mbarrier::wait(&doBars[0], tileUses & 1);"), single ? 3 : 0);
        EXPECT_EQ(count(cuda, "  sm90::mbarrier::wait(&doBars[1], (loads - 1) & 1);"), single ? 3 : 0);
        EXPECT_EQ(count(cuda, "(tile.dot_tn, tile.issue_early)"), single ? 3 : 0) << variant << headDim;
        EXPECT_EQ(cuda.find("unsigned char *const sDO1"), single ? std::string::npos : cuda.find("unsigned char *const sDO1"));
        EXPECT_EQ(cuda.find("float *const sDq") != std::string::npos, single) << variant << headDim;
        if (single) {
          const size_t release = cuda.find("sm90::mbarrier::arrive(&doBars[1]);");
          EXPECT_LT(cuda.find("dV's GEMM, dO's last reader, landed"), release);
          EXPECT_LT(release, cuda.find("tile.accumulate dq_accum[qt]", release - 400)) << "released before dQ's GEMMs";
        }
      }
  // Without overlap each GEMM is waited on where it is issued: no group is left in flight.
  StatusOr<jit::CompileResult> plain =
      jit::compile(*variants::byName("causal"),
                   backwardOptions(ElementType::BF16, 192, "sm_90a", {{"swap-dkv", 1}, {"intra-wg-overlap", 0}}, "fa3"),
                   jit::Stage::Cuda);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->cuda.find("later group(s) in flight"), std::string::npos);
  EXPECT_EQ(count(plain->cuda, "sm90::warpgroup::WgmmaMnA<48>::bf16SS<sm90::warpgroup::kKMajor>("), 6);
}

TEST(BackwardCodegen, Fa3SwapDkvIsRefusedWhereItCannotBe) {
  expectFa3Refuses(128, {{"swap-dkv", 1}}, "swap-dkv", 1);
  expectFa3Refuses(64, {{"swap-dkv", 1}}, "swap-dkv", 1);
  expectFa3Refuses(192, {{"swap-dkv", 1}, {"block-n", 80}}, "block-n", 80);
  expectFa3Refuses(192, {{"swap-dkv", 1}, {"block-n", 128}}, "block-n", 128);
  expectFa3Refuses(256, {{"swap-dkv", 1}, {"block-n", 96}}, "block-n", 96);
  expectFa3Refuses(192, {{"swap-dkv", 1}, {"swap-sdp", 1}}, "swap-sdp", 1);
  expectFa3Refuses(192, {{"swap-dkv", 1}, {"consumer-warpgroups", 1}}, "consumer-warpgroups", 1);
  // The dQ writer's buffer fits beside 96-key tiles with one dO buffer, not with two: refused by the shared-memory
  // check, naming the bytes.
  StatusOr<jit::CompileResult> writer = jit::compile(
      *variants::byName("causal"),
      backwardOptions(ElementType::BF16, 192, "sm_90a", {{"swap-dkv", 1}, {"dq-writer", 1}, {"do-buffers", 2}}, "fa3"),
      jit::Stage::Cuda);
  ASSERT_FALSE(writer.ok());
  EXPECT_NE(writer.status().message().find("needs 249920 bytes of shared memory"), std::string::npos)
      << writer.status().message();
  // One dO buffer needs the load warp.
  expectFa3Refuses(192, {{"swap-dkv", 1}, {"do-buffers", 1}, {"load-warp", 0}}, "do-buffers", 1);
}

// early-dv 1 (the key split, with overlap): dV's GEMM issued once P is staged, behind its warpgroup's own barrier and
// before dP is waited for (dV's group in flight then), dK's after dQ's; variants whose hooks read positions or the
// score, with and without the swap, to one cubin.
TEST(BackwardCodegen, Fa3EarlyDvIssuesDvUnderDsMath) {
  for (const char *variant : {"causal", "softcap_causal"})
    for (int headDim : {96, 128})
      for (int swap : {0, 1}) {
        StatusOr<jit::CompileResult> result = jit::compile(
            *variants::byName(variant),
            backwardOptions(ElementType::BF16, headDim, "sm_90a", {{"early-dv", 1}, {"swap-sdp", swap}}, "fa3"),
            jit::Stage::Cubin);
        ASSERT_TRUE(result.ok()) << result.status().message();
        const std::string &cuda = result->cuda;
        // Three walk segments, each with one early dV whose issue comes before dP's wait.
        EXPECT_EQ(count(cuda, "(tile.dot_tn, tile.issue_early)"), 3) << variant << headDim << swap;
        EXPECT_EQ(count(cuda, "sm90::namedBarrier::sync(2 + warp / 4, 128);"), swap ? 0 : 3) << variant << headDim;
        const size_t early = cuda.find("(tile.dot_tn, tile.issue_early)");
        const size_t dpWait = cuda.find(swap ? "dp landed" : "dp landed (1 later group(s) in flight)");
        ASSERT_NE(dpWait, std::string::npos) << variant << headDim << swap;
        EXPECT_LT(early, dpWait) << variant << headDim << swap;
        EXPECT_EQ(count(cuda, "issued after dQ's products (overlap)"), 3) << variant << headDim << swap;
      }
}

TEST(BackwardCodegen, Fa3EarlyDvNeedsTheKeysSplitAndOverlap) {
  for (auto [headDim, overlap] : {std::pair{64, 1}, {192, 1}, {256, 1}, {128, 0}})
    expectFa3Refuses(headDim, {{"early-dv", 1}, {"intra-wg-overlap", overlap}, {"swap-dkv", 0}}, "early-dv", 1);
}

// dq-writer-warps (default 3 at head dims 96 to 192, where sDq's rows are padded and added one by one): warp kWarps and
// the two after the load warp share each tile's row adds, the empty barrier counts their arrivals, deterministic mode
// adds with the first alone; 1 keeps one writer. Refused where the rows are not padded (64, 256) or without the writer.
TEST(BackwardCodegen, Fa3DqWriterWarpsShareTheRowAdds) {
  for (int headDim : {96, 128, 192})
    for (int warps : {0, 1, 2}) {
      schedule::Knobs knobs;
      if (warps)
        knobs["dq-writer-warps"] = warps;
      StatusOr<jit::CompileResult> result =
          jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, headDim, "sm_90a", knobs, "fa3"),
                       warps == 0 && headDim == 128 ? jit::Stage::Cubin : jit::Stage::Cuda);
      ASSERT_TRUE(result.ok()) << result.status().message();
      const std::string &cuda = result->cuda;
      const int expected = warps ? warps : 3;
      const std::string n = std::to_string(expected);
      EXPECT_EQ(count(cuda, "sm90::mbarrier::init(&dqBars[1], " + n + ");"), 1) << headDim << " " << warps;
      EXPECT_EQ(count(cuda, "const int writer = warp == kWarps ? 0 : warp - kWarps - 1;"), expected > 1 ? 1 : 0)
          << headDim << " " << warps;
      if (expected > 1) {
        EXPECT_NE(cuda.find("(warp >= kWarps + 2 && warp < kWarps + " + std::to_string(expected + 1) + ")"),
                  std::string::npos);
        // Every writer adds its rows, in deterministic mode too: the first takes the turn and passes it once every
        // writer's adds landed (their named barrier, twice a tile).
        EXPECT_NE(cuda.find("for (int row = writer + " + n + " * lane; row < rows; row += 32 * " + n + ")"),
                  std::string::npos);
        EXPECT_EQ(count(cuda, "sm90::namedBarrier::sync(4, " + std::to_string(32 * expected) + ");"), 2);
        EXPECT_EQ(count(cuda, "if (writer == 0 && lane == 0)"), 2);
      }
      // sDq is handed back once the engine read it, before the adds land and the turn passes.
      const size_t freed = cuda.find("sm90::mbarrier::arrive(&dqBars[1]);"), landed = cuda.find("sm90::tma::storeWait<0>();");
      ASSERT_NE(freed, std::string::npos);
      EXPECT_LT(freed, landed) << headDim << " " << warps;
    }
  for (auto [headDim, writer] : {std::pair{64, 1}, {256, 1}, {128, 0}})
    expectFa3Refuses(headDim, {{"dq-writer-warps", 2}, {"dq-writer", writer}}, "dq-writer-warps", 2);
}

// dq-swizzle 1: dq_accum's rows chunk-permuted by the row, so sDq is unpadded, the computing warps store each float2 at
// its permuted column, the writer adds a tile with one bulk reduce-add, and the postprocess reads each pair back from
// the same permuted column; every head dim, to one cubin. Refused without the writer and with several writer warps.
TEST(BackwardCodegen, Fa3DqSwizzleAddsATileAtOnce) {
  const std::string permuted = "(((((c) >> 2) ^ ((i) & 7)) << 2) | ((c) & 3))";
  for (int headDim : {64, 96, 128, 192}) {
    StatusOr<jit::CompileResult> result =
        jit::compile(*variants::byName("causal"),
                     backwardOptions(ElementType::BF16, headDim, "sm_90a", {{"dq-swizzle", 1}}, "fa3"),
                     headDim == 96 ? jit::Stage::Cubin : jit::Stage::Cuda);
    ASSERT_TRUE(result.ok()) << result.status().message();
    const std::string &cuda = result->cuda;
    EXPECT_NE(cuda.find("constexpr int kDqPitch = kHeadDim + 0;"), std::string::npos) << headDim;
    EXPECT_EQ(count(cuda, "sm90::bulkReduceAddF32(gDqAccum + (long long)tile * kBlockM * kHeadDim, sDq,"), 1) << headDim;
    EXPECT_EQ(cuda.find("sDq + row * kDqPitch, kHeadDim * 4u"), std::string::npos) << headDim;
    EXPECT_EQ(cuda.find("const int writer = warp == kWarps"), std::string::npos) << headDim;
    EXPECT_NE(cuda.find("const float2 x = *reinterpret_cast<const float2 *>(gAcc + i * kHeadDim + " + permuted + ");"),
              std::string::npos)
        << headDim;
    EXPECT_GE(count(cuda, ") >> 2) ^ ((row) & 7)) << 2) | (("), 3) << headDim;
  }
  StatusOr<jit::CompileResult> plain = jit::compile(
      *variants::byName("causal"), backwardOptions(ElementType::BF16, 128, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_NE(plain->cuda.find("gAcc + i * kHeadDim + c);"), std::string::npos);
  expectFa3Refuses(128, {{"dq-swizzle", 1}, {"dq-writer", 0}}, "dq-swizzle", 1);
  expectFa3Refuses(128, {{"dq-swizzle", 1}, {"dq-writer-warps", 2}}, "dq-writer-warps", 2);
}

// ring-rows 1 (head dim 64, the warpgroups splitting the Q tile's rows): each warpgroup's rows of the ring's first Q
// and dO buffers are broadcast once before the walk and the S and dP GEMMs' A operands add only the stage's offset;
// the default keeps `warp / 4` in the loop; refused where the warpgroups split the keys; NVRTC compiles it.
TEST(BackwardCodegen, Fa3RingRowsBroadcastsTheWarpgroupsRowsOnce) {
  StatusOr<jit::CompileResult> rows = jit::compile(
      *variants::byName("causal"), backwardOptions(ElementType::BF16, 64, "sm_90a", {{"ring-rows", 1}}, "fa3"),
      jit::Stage::Cubin);
  ASSERT_TRUE(rows.ok()) << rows.status().message();
  EXPECT_NE(rows->cuda.find("const unsigned qRingRows = sm90::warp::uniform(frag::smemAddress(sQ0) + warp / 4 * "),
            std::string::npos);
  EXPECT_GE(count(rows->cuda, "const unsigned aAddr = (qRingRows + ringOffset)"), 1);
  EXPECT_GE(count(rows->cuda, "const unsigned aAddr = (doRingRows + ringOffset)"), 1);
  StatusOr<jit::CompileResult> plain = jit::compile(
      *variants::byName("causal"), backwardOptions(ElementType::BF16, 64, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->cuda.find("qRingRows"), std::string::npos);
  expectFa3Refuses(128, {{"ring-rows", 1}}, "ring-rows", 1);
}

// ds-buffers 2 (with swap-sdp 1: dS the one staged tile): dS staged in two buffers, the ring stage's, and no
// barrier of the computing warps before an iteration stages (one a Q tile left: after staging); dQ's A operand is
// the stage's buffer from a base broadcast once; refused without the swap or the load warp; NVRTC compiles it at both
// head dims the swap takes, with and without a causal mask.
TEST(BackwardCodegen, Fa3DsBuffersStageDsInTheRingsStage) {
  for (const char *variant : {"none", "causal"})
    for (int headDim : {96, 128}) {
      StatusOr<jit::CompileResult> ring =
          jit::compile(*variants::byName(variant),
                       backwardOptions(ElementType::BF16, headDim, "sm_90a", {{"swap-sdp", 1}, {"ds-buffers", 2}}, "fa3"),
                       jit::Stage::Cubin);
      ASSERT_TRUE(ring.ok()) << ring.status().message();
      StatusOr<jit::CompileResult> one = jit::compile(
          *variants::byName(variant), backwardOptions(ElementType::BF16, headDim, "sm_90a", {{"swap-sdp", 1}}, "fa3"),
          jit::Stage::Cuda);
      ASSERT_TRUE(one.ok()) << one.status().message();
      const std::string start = "// every warp is done with the last iteration's staging buffers";
      EXPECT_GE(count(one->cuda, start), 1) << headDim;
      EXPECT_EQ(count(ring->cuda, start), 0) << headDim;
      EXPECT_EQ(count(ring->cuda, "// every warp's rows staged"), count(one->cuda, "// every warp's rows staged"));
      EXPECT_NE(ring->cuda.find("unsigned char *const sStageRing = "), std::string::npos);
      EXPECT_GE(count(ring->cuda, "unsigned char *const sStage0 = sStageRing + stage * kStagingBytes;"), 1);
      EXPECT_EQ(count(ring->cuda, "unsigned char *const sStage0 = "),
                count(ring->cuda, "unsigned char *const sStage0 = sStageRing + stage * kStagingBytes;"));
      EXPECT_GE(count(ring->cuda, "(stagingRing + stagingOffset)"), 1) << headDim;
      EXPECT_EQ(one->cuda.find("stagingRing"), std::string::npos);
    }
  expectFa3Refuses(128, {{"ds-buffers", 2}}, "ds-buffers", 2);
  expectFa3Refuses(128, {{"ds-buffers", 2}, {"swap-sdp", 1}, {"load-warp", 0}, {"dq-writer", 0}}, "ds-buffers", 2);
  expectFa3Refuses(64, {{"ds-buffers", 2}}, "ds-buffers", 2);
}

// block-m 80 at head dim 128 (FA3's non-causal tile there): S and dP transposed (swap-sdp 1 by default), dQ
// transposed (dQᵀ = Kᵀ·dSᵀ: wgmma m64n80, A MN-major from K, B K-major from dS staged [query rows][keys] by
// stmatrix.trans), its fragments into an unpadded, permuted sDq (dq-swizzle 1 by default), one bulk add a tile; every
// variant compiles under NVRTC, with ds-buffers 2 too (beside one dO buffer: two would pass the shared memory by 64
// bytes); every tile after the LSE and D rows 1024-byte aligned (80 rows of them are 1280 bytes); refused without the swap, the writer or the permutation, and
// at other head dims.
TEST(BackwardCodegen, Fa3EightyRowTilesTransposeDq) {
  for (const char *variant : {"none", "causal", "softcap", "alibi_causal", "sliding_window"})
    for (ElementType dtype : {ElementType::BF16, ElementType::F16}) {
      StatusOr<jit::CompileResult> rows80 = jit::compile(
          *variants::byName(variant), backwardOptions(dtype, 128, "sm_90a", {{"block-m", 80}}, "fa3"), jit::Stage::Cubin);
      ASSERT_TRUE(rows80.ok()) << variant << ": " << rows80.status().message();
      EXPECT_FALSE(reportsSerializedWgmma(rows80->nvrtcLog)) << variant << ": " << rows80->nvrtcLog;
      const std::string &cuda = rows80->cuda;
      EXPECT_NE(cuda.find("constexpr int kBlockM = 80;"), std::string::npos);
      EXPECT_NE(cuda.find("constexpr int kDqPitch = kHeadDim + 0;"), std::string::npos);
      EXPECT_NE(cuda.find("unsigned char *const sStage0 = reinterpret_cast<unsigned char *>(sRows + 512);"),
                std::string::npos);
      EXPECT_GE(count(cuda, "sm90::warpgroup::WgmmaMnA<80>::"), 1);
      EXPECT_GE(count(cuda, "SS<sm90::warpgroup::kKMajor>(reinterpret_cast<float (&)[40]>(dqPart[0])"), 1);
      EXPECT_GE(count(cuda, "sm90::swizzle128Offset(q, key, kBlockM)"), 1);
      EXPECT_GE(count(cuda, "sm90::warpgroup::Wgmma<kBlockM>::"), 1);  // S and dP: the Q tile's rows on N
      EXPECT_NE(cuda.find("struct Wgmma<80> {"), std::string::npos);
      EXPECT_EQ(count(cuda, "sm90::bulkReduceAddF32(gDqAccum + (long long)tile * kBlockM * kHeadDim, sDq,"), 1);
      // LSE·log2(e) and D read where they are used (a float2 an n8 tile), not held in 2 · kSTiles registers each;
      // dV's GEMM, then dQᵀ's, then dK's once dV's landed: without both, ptxas serializes every wgmma (C7512).
      EXPECT_EQ(count(cuda, "const float2 lsePair = *reinterpret_cast<const float2 *>(sLse + 8 * nt + fragCol);"), 3);
      EXPECT_EQ(count(cuda, "const float2 deltaPair = *reinterpret_cast<const float2 *>(sDelta + 8 * nt + fragCol);"),
                3);
      EXPECT_EQ(count(cuda, "float lse1["), 0);
      const size_t dv = cuda.find("acc1 += Aᵀ·DO (tile.dot_tn; wgmma"), dq = cuda.find("dQᵀ = Kᵀ·dSᵀ (wgmma", dv),
                   dvLanded = cuda.find("sm90::warpgroup::wait<1>();  // acc1 landed", dq),
                   dk = cuda.find("acc += Aᵀ·Q (tile.dot_tn; wgmma", dvLanded),
                   dqLanded = cuda.find("sm90::warpgroup::wait<1>();  // dqPart landed", dk);
      EXPECT_NE(dqLanded, std::string::npos) << variant << ": dV, dQ, dV landed, dK, dQ landed";
    }
  StatusOr<jit::CompileResult> ring = jit::compile(
      *variants::byName("none"), backwardOptions(ElementType::BF16, 128, "sm_90a", {{"block-m", 80}, {"ds-buffers", 2}, {"do-buffers", 1}},
                     "fa3"),
      jit::Stage::Cubin);
  ASSERT_TRUE(ring.ok()) << ring.status().message();
  EXPECT_GE(count(ring->cuda, "(stagingRing + stagingOffset)"), 1);
  expectFa3Refuses(128, {{"block-m", 80}, {"swap-sdp", 0}}, "swap-sdp", 0);
  expectFa3Refuses(128, {{"block-m", 80}, {"dq-swizzle", 0}}, "dq-swizzle", 0);
  expectFa3Refuses(128, {{"block-m", 80}, {"dq-writer", 0}}, "dq-writer", 0);
  expectFa3Refuses(96, {{"block-m", 80}}, "block-m", 80);
  expectFa3Refuses(64, {{"block-m", 80}}, "block-m", 80);
}

// dq-fragments 1 at head dim 128 (FA3's dQ accumulator): each computing thread stores its dQ (or dQᵀ, block-m 80)
// fragments into sDq as 16-byte chunks at 4·(nt·kThreads + thread) and a tile cut by seqlen_q in rows (as dq_accum
// keeps it), the writer adds either with one bulk reduce-add of its rows, and the postprocess reads whole tiles through
// the inverse map (dqFragmentIndex; checked against the fragments' coordinates for both layouts, every thread,
// chunk and float: bench/NOTES.md v46). NVRTC compiles it without a serialization advisory. Refused without the
// writer, with dq-swizzle, and at other head dims, by name.
TEST(BackwardCodegen, Fa3DqFragmentsKeepWholeTilesInTheFragmentsOrder) {
  for (int rows : {64, 80})
    for (const char *variant : {"none", "causal", "softcap_causal"}) {
      schedule::Knobs knobs{{"dq-fragments", 1}};
      if (rows == 80)
        knobs["block-m"] = 80;
      StatusOr<jit::CompileResult> result = jit::compile(
          *variants::byName(variant), backwardOptions(ElementType::BF16, 128, "sm_90a", knobs, "fa3"), jit::Stage::Cubin);
      ASSERT_TRUE(result.ok()) << variant << " " << rows << ": " << result.status().message();
      EXPECT_FALSE(reportsSerializedWgmma(result->nvrtcLog)) << variant << " " << rows << ": " << result->nvrtcLog;
      const std::string &cuda = result->cuda;
      EXPECT_NE(cuda.find("constexpr int kDqPitch = kHeadDim + 0;"), std::string::npos);
      EXPECT_EQ(count(cuda, "*reinterpret_cast<float4 *>(sDq + 4 * (nt * kThreads + threadIdx.x)) = make_float4("), 3);
      // the writer: one bulk reduce-add a tile, whole or cut, never float by float (a cut tile is in rows in sDq)
      EXPECT_EQ(count(cuda, "sm90::bulkReduceAddF32(gDqAccum + (long long)tile * kBlockM * kHeadDim, sDq, unsigned(rows) "
                            "* kHeadDim * 4u);"),
                1);
      EXPECT_EQ(cuda.find("atomicAdd(gDqAccum"), std::string::npos);
      EXPECT_EQ(count(cuda, "if ((qt + 1) * kBlockM <= p.seqlenQ) {"), 3);
      // a cut tile's rows: the stores of the unpermuted row layout, once for each of the walk's three loop segments
      EXPECT_EQ(count(cuda, rows == 80 ? "sDq[row * kDqPitch + col] = dqPart[0][nt][i];"
                                       : "*reinterpret_cast<float2 *>(sDq + row * kDqPitch + "),
                3);
      EXPECT_EQ(count(cuda, "const bool whole = (tile + 1) * kBlockM <= p.seqlenQ;"), 1);
    }
  expectFa3Refuses(64, {{"dq-fragments", 1}}, "dq-fragments", 1);
  expectFa3Refuses(192, {{"dq-fragments", 1}}, "dq-fragments", 1);
  expectFa3Refuses(128, {{"dq-fragments", 1}, {"dq-writer", 0}}, "dq-fragments", 1);
  expectFa3Refuses(128, {{"dq-fragments", 1}, {"dq-swizzle", 1}}, "dq-swizzle", 1);
}

// dkv-staged 1 (head dims 64, 96, 128; FA3's epilogue through shared memory): once every computing warp is past the
// walk (one barrier), each thread writes its dK and dV fragments into padded rows from sK on (16 bytes a row of
// padding: 16-byte aligned rows, a warp's 8 fragment rows on distinct banks), and the warp holding the rows copies
// each one with one bulk copy (lane l row l), commits, and the kernel drains the copies' reads before it exits. A
// dK or dV not 16-byte aligned in global memory, and GQA/MQA's fp32 adds, keep their stores. NVRTC compiles it
// without advisories. Refused where a warp holds part of a row (the column split, swap-dkv: head dims 192, 256). The
// default at head dims 96 and 128 (measured faster there: bench/NOTES.md v48).
TEST(BackwardCodegen, Fa3DkvStagedStoresRowsByBulkCopies) {
  for (int hd : {64, 96, 128})
    for (const char *variant : {"causal"}) {
      StatusOr<jit::CompileResult> result =
          jit::compile(*variants::byName(variant), backwardOptions(ElementType::BF16, hd, "sm_90a", {{"dkv-staged", 1}}, "fa3"),
                       jit::Stage::Cubin);
      ASSERT_TRUE(result.ok()) << variant << " " << hd << ": " << result.status().message();
      EXPECT_FALSE(reportsSerializedWgmma(result->nvrtcLog)) << variant << " " << hd << ": " << result->nvrtcLog;
      const std::string &cuda = result->cuda;
      const std::string pitch = std::to_string(hd * 2 + 16);
      EXPECT_EQ(count(cuda, "every computing warp is past the walk: the tiles' buffers are free"), 1) << hd;
      EXPECT_EQ(count(cuda, "unsigned char *const sOut = sK + 0;  // dK's staged rows, " + pitch + " bytes apart"), 1);
      EXPECT_EQ(count(cuda, "unsigned char *const sOut = sK + kBlockN * " + pitch + ";  // dV's staged rows"), 1);
      EXPECT_EQ(count(cuda, "const bool staged = p.headsQ == p.headsKv && (reinterpret_cast<unsigned long long>(gOut) "
                            "| static_cast<unsigned long long>(p.dKRowStride) * 2u) % 16u == 0;"),
                1);
      EXPECT_EQ(count(cuda, "sm90::bulkStore(gOut + key * p.dKRowStride, sOut + local * " + pitch + ", " +
                                std::to_string(hd * 2) + "u);"),
                1);
      EXPECT_EQ(count(cuda, "sm90::bulkStore(gOut + key * p.dVRowStride, sOut + local * " + pitch + ", "), 1);
      EXPECT_EQ(count(cuda, "sm90::tma::storeWaitRead<0>();  // the staged rows read before the block exits"), 1);
      // the fallbacks: 4-byte stores of the fragments (unaligned), the fp32 adds (GQA/MQA)
      EXPECT_EQ(count(cuda, "else if (p.headsQ == p.headsKv) {"), 2);
      EXPECT_EQ(count(cuda, "sm90::redAdd2(dst, acc"), 2);
    }
  // the default: staged at 96 and 128 (the key split's 64-row tiles with the load warp), not at 64 (split-Q), not
  // with block-m 80 or without the load warp, and not where the knob says 0
  const auto staged = [](int hd, const schedule::Knobs &knobs) {
    StatusOr<jit::CompileResult> result = jit::compile(
        *variants::byName("none"), backwardOptions(ElementType::BF16, hd, "sm_90a", knobs, "fa3"), jit::Stage::Cuda);
    EXPECT_TRUE(result.ok()) << hd << ": " << result.status().message();
    return result.ok() && result->cuda.find("sOut") != std::string::npos;
  };
  EXPECT_TRUE(staged(128, {}));
  EXPECT_TRUE(staged(96, {}));
  EXPECT_FALSE(staged(64, {}));
  EXPECT_FALSE(staged(128, {{"dkv-staged", 0}}));
  EXPECT_FALSE(staged(128, {{"block-m", 80}}));
  EXPECT_FALSE(staged(128, {{"load-warp", 0}, {"dq-writer", 0}}));
  EXPECT_FALSE(staged(192, {}));
  expectFa3Refuses(192, {{"dkv-staged", 1}}, "dkv-staged", 1);
  expectFa3Refuses(128, {{"dkv-staged", 1}, {"load-warp", 0}}, "dkv-staged", 1);
  expectFa3Refuses(256, {{"dkv-staged", 1}}, "dkv-staged", 1);
}

// desc::offsetLow: one 64-bit add to a wgmma descriptor (FA4's form), except at head dim 192 under swap-dkv (192/192),
// whose Q-tile loops ptxas spills with it (15-27 local loads an iteration, measured 3-5% slower non-causal): there the
// add to the low word with the high word masked back in (bench/NOTES.md v48).
TEST(BackwardCodegen, Fa3DescriptorAddsMaskedOnlyWhereThe64BitAddSpills) {
  const std::string masked = "  return (d & 0xffffffff00000000ull) | (unsigned(d) + (bytes >> 4));";
  const std::string wide = "  return d + (bytes >> 4);";
  const auto cudaOf = [](int hd, int hdv, const schedule::Knobs &knobs) {
    jit::CompileOptions options = backwardOptions(ElementType::BF16, hd, "sm_90a", knobs, "fa3");
    options.headDimV = hdv;
    StatusOr<jit::CompileResult> result = jit::compile(*variants::byName("none"), options, jit::Stage::Cuda);
    EXPECT_TRUE(result.ok()) << hd << "/" << hdv << ": " << result.status().message();
    return result.ok() ? result->cuda : std::string();
  };
  const std::string hd192 = cudaOf(192, 192, {});
  EXPECT_EQ(count(hd192, masked), 1);
  EXPECT_EQ(count(hd192, wide), 0);
  for (const std::string &cuda : {cudaOf(128, 128, {}), cudaOf(64, 64, {}), cudaOf(96, 96, {}), cudaOf(256, 256, {}),
                                  cudaOf(192, 128, {}), cudaOf(192, 192, {{"swap-dkv", 0}})}) {
    EXPECT_EQ(count(cuda, wide), 1);
    EXPECT_EQ(count(cuda, masked), 0);
  }
}

// dq-last-wait 1: once the walk is over the dQ writer leaves without waiting for its last bulk adds to complete (each
// tile's reads of sDq were waited for in the loop; deterministic mode's turns wait for every add either way); the
// default keeps the wait. Refused without the writer (head dim 256).
TEST(BackwardCodegen, Fa3DqLastWaitLeavesOnceTheReadsAreDone) {
  const std::string wait = "sm90::tma::storeWait<0>();  // every add landed before the block ends";
  for (int hd : {64, 128}) {
    StatusOr<jit::CompileResult> off =
        jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, hd, "sm_90a", {}, "fa3"),
                     jit::Stage::Cuda);
    StatusOr<jit::CompileResult> on = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::BF16, hd, "sm_90a", {{"dq-last-wait", 1}}, "fa3"),
        hd == 64 ? jit::Stage::Cubin : jit::Stage::Cuda);
    ASSERT_TRUE(off.ok() && on.ok()) << hd;
    EXPECT_EQ(count(off->cuda, wait), 1) << hd;
    EXPECT_EQ(count(on->cuda, wait), 0) << hd;
    EXPECT_EQ(count(on->cuda, "dq-last-wait 1: each tile's adds read sDq before the loop went on"), 1) << hd;
    // deterministic mode's turns still wait for every add before they pass
    EXPECT_EQ(count(on->cuda, "sm90::tma::storeWait<0>();\n"), count(off->cuda, "sm90::tma::storeWait<0>();\n")) << hd;
  }
  expectFa3Refuses(256, {{"dq-last-wait", 1}}, "dq-last-wait", 1);
}

// dq-add-v4 1: where the computing warps add dQ themselves (head dim 256), each lane adds four consecutive floats of one
// row (red.global.add.v4, 16-byte aligned: the pair's first column a multiple of 4) after two shuffles an n8 tile,
// in place of every red.v2 of dQ; the default keeps the pairs. NVRTC compiles it. Refused where a writer warp adds dQ.
TEST(BackwardCodegen, Fa3DqAddV4AddsFourFloatsOfARowALane) {
  for (const char *variant : {"none", "causal"}) {
    StatusOr<jit::CompileResult> off = jit::compile(
        *variants::byName(variant), backwardOptions(ElementType::BF16, 256, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
    StatusOr<jit::CompileResult> on =
        jit::compile(*variants::byName(variant),
                     backwardOptions(ElementType::BF16, 256, "sm_90a", {{"dq-add-v4", 1}}, "fa3"), jit::Stage::Cubin);
    ASSERT_TRUE(off.ok() && on.ok()) << variant;
    const int pairs = count(off->cuda, "sm90::redAdd2(dst, dqPart[0][nt][2 * r], dqPart[0][nt][2 * r + 1]);");
    EXPECT_GT(pairs, 0) << variant;
    EXPECT_EQ(count(off->cuda, "sm90::redAdd4("), 0) << variant;
    EXPECT_EQ(count(on->cuda, "sm90::redAdd2(dst, dqPart"), 0) << variant;
    EXPECT_EQ(count(on->cuda, "sm90::redAdd4(gDqAccum + (long long)q * 256 + 128 * (warp / 4) + 8 * nt + (fragCol & ~3), "
                              "oddLane ? take0 : dqPart[0][nt][0]"),
              pairs)
        << variant;
    EXPECT_EQ(count(on->cuda, "const int q = warpRow0 + 16 * mt + fragRow + 8 * oddLane;"), pairs) << variant;
  }
  // with dQ in several rounds (dq-slices 2 at 256, the computing warps' own adds at 128): each round's adds in their
  // own scope; NVRTC compiles both
  for (auto [hd, knobs] : std::vector<std::pair<int, schedule::Knobs>>{
           {256, {{"dq-add-v4", 1}, {"dq-slices", 2}}}, {128, {{"dq-add-v4", 1}, {"dq-writer", 0}, {"load-warp", 0}}}}) {
    StatusOr<jit::CompileResult> both = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::BF16, hd, "sm_90a", knobs, "fa3"), jit::Stage::Cubin);
    ASSERT_TRUE(both.ok()) << hd << ": " << both.status().message();
    EXPECT_GT(count(both->cuda, "sm90::redAdd4(gDqAccum"), 0) << hd;
    EXPECT_EQ(count(both->cuda, "sm90::redAdd2(dst, dqPart"), 0) << hd;
  }
  expectFa3Refuses(128, {{"dq-add-v4", 1}}, "dq-add-v4", 1);
}

// dq-slices 2: under the column split at head dim 256, dQ's product in two rounds of 64 columns a warpgroup (columns
// 64·w and 64·(w + 2)), each added before the next is issued, instead of one of the warpgroup's 128 columns; refused
// elsewhere.
TEST(BackwardCodegen, Fa3DqSlicesSplitsTheColumnSplitsDqProduct) {
  StatusOr<jit::CompileResult> off = jit::compile(
      *variants::byName("none"), backwardOptions(ElementType::BF16, 256, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
  StatusOr<jit::CompileResult> on = jit::compile(
      *variants::byName("none"), backwardOptions(ElementType::BF16, 256, "sm_90a", {{"dq-slices", 2}}, "fa3"),
      jit::Stage::Cubin);
  ASSERT_TRUE(off.ok() && on.ok());
  const int products = count(off->cuda, "float dqPart[1][16][4];");
  EXPECT_GT(products, 0);
  EXPECT_EQ(count(on->cuda, "float dqPart[1][16][4];"), 0);
  EXPECT_EQ(count(on->cuda, "float dqPart[1][8][4];"), products);
  EXPECT_EQ(count(on->cuda, "// columns [64 * (warp / 4), +64) of K"), products);
  EXPECT_EQ(count(on->cuda, "// columns [64 * (warp / 4 + 2), +64) of K"), products);
  EXPECT_EQ(count(off->cuda, "// columns [128 * (warp / 4), +128) of K"), products);
  expectFa3Refuses(128, {{"dq-slices", 2}}, "dq-slices", 2);
  expectFa3Refuses(192, {{"dq-slices", 2}}, "dq-slices", 2);
}

// late-v 1: the load warp issues K alone on kvBar, and V on a barrier of its own (vBar, the role area's last 8 bytes)
// after the walk's first Q and dO tiles, in each load loop; the computing warps wait for K before the walk and for V
// before every dP GEMM (one phase: at once after the first), between S's GEMM and dP's. The default keeps K and V on
// kvBar's two arrivals. NVRTC compiles it; refused without the load warp.
TEST(BackwardCodegen, Fa3LateVLoadsVAfterTheFirstQTile) {
  for (int hd : {96, 128, 256}) {
    StatusOr<jit::CompileResult> off = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::BF16, hd, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
    StatusOr<jit::CompileResult> on =
        jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, hd, "sm_90a", {{"late-v", 1}}, "fa3"),
                     hd == 128 ? jit::Stage::Cubin : jit::Stage::Cuda);
    ASSERT_TRUE(off.ok() && on.ok()) << hd;
    EXPECT_EQ(count(off->cuda, "sm90::mbarrier::init(kvBar, 2);"), 1) << hd;
    EXPECT_EQ(count(off->cuda, "(vBar"), 0) << hd;
    EXPECT_EQ(count(on->cuda, "sm90::mbarrier::init(kvBar, 1);  // K's TMA"), 1) << hd;
    EXPECT_EQ(count(on->cuda, "sm90::mbarrier::init(vBar, 1);"), 1) << hd;
    EXPECT_EQ(count(on->cuda, "sm90::tma::load5d(sV, &maps.v, kvBar"), 0) << hd;
    const int loadLoops = count(on->cuda, "sm90::tma::load5d(stage ? sQ1 : sQ0, &maps.q");
    EXPECT_GT(loadLoops, 0) << hd;
    EXPECT_EQ(count(on->cuda, "sm90::tma::load5d(sV, &maps.v, vBar"), loadLoops) << hd;
    EXPECT_EQ(count(on->cuda, "if (loads == 0)"), loadLoops) << hd;
    // every dP GEMM (one a Q-tile loop) waits for V, after S's GEMM was issued
    const std::string wait = "sm90::mbarrier::wait(vBar, 0);";
    EXPECT_EQ(count(on->cuda, wait), count(on->cuda, "sm90::mbarrier::wait(&fullBars[stage]")) << hd;
    const size_t firstWait = on->cuda.find(wait), firstDp = on->cuda.find("// dp = ");
    ASSERT_NE(firstWait, std::string::npos);
    if (hd != 256) // (the column split names its dP GEMM differently)
      EXPECT_LT(firstWait, firstDp) << hd;
  }
  expectFa3Refuses(128, {{"late-v", 1}, {"load-warp", 0}, {"dq-writer", 0}}, "late-v", 1);
}

// lpt-group-blocks N: the main kernel's blocks take K/V tile index by tile index across groups of (batch, head) pairs
// of at least N blocks (the arithmetic of the forward's grouped order, Fa2GridOrder's model, with the tile index
// ascending: the first K/V tiles walk the most Q tiles under a causal mask), outside deterministic mode only; the
// preprocess and postprocess kernels and the default keep the grid's order; NVRTC compiles it.
TEST(BackwardCodegen, Fa3LptGroupBlocksOrdersTheMainKernelsBlocks) {
  StatusOr<jit::CompileResult> grouped =
      jit::compile(*variants::byName("causal"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"lpt-group-blocks", 256}}, "fa3"),
                   jit::Stage::Cubin);
  ASSERT_TRUE(grouped.ok()) << grouped.status().message();
  const std::string &cuda = grouped->cuda;
  EXPECT_EQ(count(cuda, "const int groupPairs = min(pairs, (256 + kvTiles - 1) / kvTiles);"), 1);
  EXPECT_EQ(count(cuda, "blockKvIndex = inGroup / groupSize;"), 1);
  EXPECT_EQ(count(cuda, "const int pair = groupFirst + inGroup % groupSize;"), 1);
  EXPECT_NE(cuda.find("if (!params.deterministic) {"), std::string::npos);
  EXPECT_NE(cuda.find("const int blockKvTile = p.deterministic ? gridDim.x - 1 - blockIdx.x : blockKvIndex;"),
            std::string::npos);
  EXPECT_EQ(count(cuda, "const int blockBatch = blockIdx.z, blockHead = blockIdx.y;"), 2); // preprocess, postprocess
  StatusOr<jit::CompileResult> plain = jit::compile(
      *variants::byName("causal"), backwardOptions(ElementType::BF16, 128, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->cuda.find("blockKvIndex"), std::string::npos);
  EXPECT_NE(plain->cuda.find("const int blockKvTile = p.deterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x;"),
            std::string::npos);
  StatusOr<jit::CompileResult> tooMany =
      jit::compile(*variants::byName("causal"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"lpt-group-blocks", 1 << 21}}, "fa3"),
                   jit::Stage::Cuda);
  ASSERT_FALSE(tooMany.ok());
  EXPECT_NE(tooMany.status().message().find("lpt-group-blocks = 2097152 is out of range; accepted: 0 to 1048576"),
            std::string::npos)
      << tooMany.status().message();
  jit::CompileOptions forwardCall = backwardOptions(ElementType::BF16, 128, "sm_90a", {{"lpt-group-blocks", 64}}, "fa3");
  forwardCall.kind = "forward";
  StatusOr<jit::CompileResult> forward = jit::compile(*variants::byName("causal"), forwardCall, jit::Stage::Cuda);
  ASSERT_FALSE(forward.ok());
  EXPECT_NE(forward.status().message().find("fa3: lpt-group-blocks shapes the backward's roles only"),
            std::string::npos)
      << forward.status().message();
}

// S's scale joins tile.probs' exp2 where only masks lie between them (causal, no score_mod): no separate multiply of
// S; with a score_mod between them (softcap) S is scaled on its own and the exp2 takes log2(e) alone.
TEST(BackwardCodegen, ScaleFoldsIntoTheProbabilitiesOnlyThroughMasks) {
  for (const char *variant : {"causal", "softcap_causal"}) {
    StatusOr<jit::CompileResult> result = jit::compile(
        *variants::byName(variant), backwardOptions(ElementType::BF16, 128, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
    ASSERT_TRUE(result.ok()) << result.status().message();
    const bool folded = std::string_view(variant) == "causal";
    // The load warp stages LSE·log2(e) (lse1 holds it), so the exp2 takes it as it is.
    EXPECT_EQ(count(result->cuda, "* p.scaleLog2 - lse1[mt][i / 2]"), folded ? 3 : 0) << variant;
    EXPECT_EQ(count(result->cuda, "* frag::kLog2e - lse1[mt][i / 2]"), folded ? 0 : 3) << variant;
    EXPECT_EQ(count(result->cuda, "lseLog2"), 0) << variant;
    EXPECT_EQ(count(result->cuda, "rows[row] = lse == frag::kNegInf ? frag::kPosInf : lse * frag::kLog2e;"), 3)
        << variant;
    EXPECT_EQ(result->cuda.find("s1[mt][nt][i] *= p.softmaxScale;") == std::string::npos, folded) << variant;
  }
}

TEST(BackwardCodegen, Fa3SwappedScoresNeedTheKeysSplit) {
  for (int headDim : {64, 192, 256}) {
    StatusOr<jit::CompileResult> result =
        jit::compile(*variants::byName("causal"),
                     backwardOptions(ElementType::BF16, headDim, "sm_90a", {{"swap-sdp", 1}}, "fa3"), jit::Stage::Cuda);
    ASSERT_FALSE(result.ok()) << headDim;
    EXPECT_NE(result.status().message().find("swap-sdp = 1 is not supported"), std::string::npos)
        << result.status().message();
  }
}

// intra-wg-overlap (default 1): S and dP issued back to back and S waited for with dP in flight; dQ's first column
// block issued before dV's and dK's GEMMs and waited for with those two in flight. 0: every GEMM waited on at issue.
TEST(BackwardCodegen, Fa3OverlapKeepsAQTilesGemmsInFlight) {
  for (int headDim : {64, 128}) {
    for (int overlap : {1, 0}) {
      StatusOr<jit::CompileResult> result =
          jit::compile(*variants::byName("softcap_causal"),
                       backwardOptions(ElementType::BF16, headDim, "sm_90a", {{"intra-wg-overlap", overlap}}, "fa3"),
                       overlap ? jit::Stage::Cuda : jit::Stage::Cubin); // Fa3BackwardCompiles compiles the default
      ASSERT_TRUE(result.ok()) << result.status().message();
      const std::string &cuda = result->cuda;
      const int segments = count(cuda, "---- tile.q_loop segment");
      ASSERT_EQ(segments, 3);
      const int commits = count(cuda, "sm90::warpgroup::commitGroup();");
      if (overlap) {
        EXPECT_EQ(count(cuda, "sm90::warpgroup::wait<1>();  // s"), segments) << headDim;
        EXPECT_EQ(count(cuda, "sm90::warpgroup::wait<2>();  // dqPart landed"), segments) << headDim;
        EXPECT_LT(count(cuda, "sm90::warpgroup::wait<0>();"), commits) << headDim;
      } else {
        EXPECT_EQ(count(cuda, "sm90::warpgroup::wait<0>();"), commits) << headDim;
        EXPECT_EQ(count(cuda, "sm90::warpgroup::wait<1>();"), 0) << headDim;
        EXPECT_EQ(cuda.find("overlap:"), std::string::npos) << headDim;
      }
    }
  }
}

// dq-writer (default 1 with two warpgroups): a producer warpgroup after the computing ones, whose first warp adds each
// Q tile's dQ from shared memory with one bulk reduce-add and takes the deterministic mode's turns; setmaxnreg moves
// registers to the computing warpgroups, which synchronize among themselves by a named barrier. 0: red.global.add
// from every thread, and no roles.
TEST(BackwardCodegen, Fa3DqWriterRoleAddsEachQTileWithOneBulkReduce) {
  for (int headDim : {64, 128}) {
    for (int writer : {1, 0}) {
      StatusOr<jit::CompileResult> result = jit::compile(
          *variants::byName("alibi_causal"),
          backwardOptions(ElementType::BF16, headDim, "sm_90a", writer ? schedule::Knobs{} : schedule::Knobs{{"dq-writer", 0}},
                          "fa3"),
          jit::Stage::Cubin);
      ASSERT_TRUE(result.ok()) << result.status().message();
      const std::string &cuda = result->cuda;
      const std::string main = cuda.substr(cuda.find(" flashtile_fa3_alibi_causal_bf16_d" + std::to_string(headDim) + "_bwd("));
      EXPECT_EQ(count(cuda, "__launch_bounds__(384, 1)"), writer) << headDim;
      EXPECT_EQ(count(main, "sm90::bulkReduceAddF32(gDqAccum"), writer) << headDim;
      EXPECT_EQ(count(main, "sm90::warpgroup::decreaseRegisters<24>();"), writer) << headDim;
      EXPECT_EQ(count(main, "sm90::warpgroup::increaseRegisters<240>();"), writer) << headDim;
      EXPECT_EQ(count(main, "sm90::redAdd2(dst, dqPart") > 0, !writer) << headDim;
      // Every barrier of the computing warps leaves the producer warpgroup out; the turns of dQ are the writer's.
      EXPECT_EQ(main.find("__syncthreads();  // tile qt landed") == std::string::npos, bool(writer)) << headDim;
      EXPECT_EQ(count(main, "sm90::namedBarrier::sync(1, kThreads);") > 0, bool(writer)) << headDim;
      EXPECT_EQ(count(main, "this block's turn on the tile's rows"), writer) << headDim;
      // The computing warps wait for turns only at the GQA stores of dK and dV (and at dQ's three segments without
      // the writer).
      EXPECT_EQ(count(main, "wait for this block's turn on these rows"), writer ? 2 : 5) << headDim;
      EXPECT_EQ(count(main, "float *const sDq = ") == 1, bool(writer)) << headDim;
      // The plan launches the main kernel with the producer warpgroup's threads.
      int mainThreads = 0;
      for (const PlanLaunch &launch : result->info.plan.launches)
        if (launch.entry == result->info.entry)
          mainThreads = launch.threads;
      EXPECT_EQ(mainThreads, writer ? 384 : 256) << headDim;
    }
  }
  // The forward has no dQ: the knob is refused there by name; with dq-writer = 0 the role registers are refused.
  jit::CompileOptions forward = backwardOptions(ElementType::BF16, 128, "sm_90a", {{"dq-writer", 1}}, "fa3");
  forward.kind = "forward";
  StatusOr<jit::CompileResult> refused = jit::compile(*variants::byName("none"), forward, jit::Stage::Scheduled);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fa3: dq-writer shapes the backward's roles only"), std::string::npos)
      << refused.status().message();
  refused = jit::compile(*variants::byName("none"),
                         backwardOptions(ElementType::BF16, 128, "sm_90a", {{"dq-writer", 0}, {"consumer-regs", 232}},
                                         "fa3"),
                         jit::Stage::Scheduled);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("with both 0 there is no producer warpgroup"), std::string::npos)
      << refused.status().message();
}

// load-warp (default 1 with dq-writer 1): the producer warpgroup's second warp loads K and V and each Q tile's Q and
// dO by TMA (the kernel takes four descriptors, the plan names them) and the LSE and D rows into a ring of two
// buffers; the computing warps copy nothing, they wait on the ring's full barriers and release its empty ones. The
// load warp walks the same Q tiles: one loop per segment of the walk.
TEST(BackwardCodegen, Fa3LoadWarpLoadsEachQTileByTma) {
  for (int headDim : {64, 128}) {
    for (int loader : {1, 0}) {
      StatusOr<jit::CompileResult> result = jit::compile(
          *variants::byName("causal"),
          backwardOptions(ElementType::BF16, headDim, "sm_90a", loader ? schedule::Knobs{} : schedule::Knobs{{"load-warp", 0}},
                          "fa3"),
          jit::Stage::Cubin);
      ASSERT_TRUE(result.ok()) << result.status().message();
      const std::string &cuda = result->cuda;
      const std::string main = cuda.substr(cuda.find(" flashtile_fa3_causal_bf16_d" + std::to_string(headDim) + "_bwd("));
      EXPECT_EQ(count(main, "const __grid_constant__ sm90::BackwardTensorMaps maps)"), loader) << headDim;
      EXPECT_EQ(count(main, "if (warp == kWarps + 1) {"), loader) << headDim;
      // Three segments (causal): the load warp's loops and the computing warps' loops.
      EXPECT_EQ(count(main, "sm90::tma::load5d(stage ? sQ1 : sQ0, &maps.q, &fullBars[stage]"), 3 * loader) << headDim;
      EXPECT_EQ(count(main, "sm90::tma::load5d(stage ? sDO1 : sDO0, &maps.dO, &fullBars[stage]"), 3 * loader) << headDim;
      EXPECT_EQ(count(main, "sm90::mbarrier::wait(&fullBars[stage], (tileUses >> 1) & 1);"), 3 * loader) << headDim;
      EXPECT_EQ(count(main, "sm90::mbarrier::arrive(&emptyBars[stage]);"), 3 * loader) << headDim;
      EXPECT_EQ(count(main, "sm90::mbarrier::wait(kvBar, 0);"), loader) << headDim;
      // The computing warps copy nothing with a load warp; without one they copy K, V, Q and dO (cp.async).
      EXPECT_EQ(count(main, "cpAsync16(") == 0, bool(loader)) << headDim;
      const PlanLaunch *launch = result->info.plan.launchOf(result->info.entry);
      ASSERT_NE(launch, nullptr);
      ASSERT_EQ(launch->tensorMaps.size(), loader ? 4u : 0u) << headDim;
      if (loader) {
        EXPECT_EQ(launch->tensorMaps[3].tensor, "do");
        EXPECT_EQ(launch->tensorMaps[0].boxRows, headDim == 64 ? 128 : 64);
        EXPECT_EQ(launch->tensorMaps[3].boxRows, launch->tensorMaps[0].boxRows);
        EXPECT_EQ(launch->tensorMaps[1].boxRows, 128);
      }
    }
  }
  // A load warp without the dQ writer: the producer warpgroup holds the load warp alone (warp kWarps has nothing to
  // do), and the computing warps add dQ themselves (FA3's form at head dim 256).
  StatusOr<jit::CompileResult> alone =
      jit::compile(*variants::byName("causal"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"dq-writer", 0}, {"load-warp", 1}}, "fa3"),
                   jit::Stage::Cubin);
  ASSERT_TRUE(alone.ok()) << alone.status().message();
  const std::string loadOnly = alone->cuda.substr(alone->cuda.find(" flashtile_fa3_causal_bf16_d128_bwd("));
  EXPECT_EQ(count(loadOnly, "if (warp == kWarps + 1) {"), 1);
  EXPECT_EQ(count(loadOnly, "if (warp == kWarps) {"), 0);
  EXPECT_EQ(count(loadOnly, "sm90::bulkReduceAddF32(gDqAccum"), 0);
  EXPECT_GT(count(loadOnly, "sm90::redAdd2(dst, dqPart"), 0);
  EXPECT_EQ(count(loadOnly, "float *const sDq = "), 0);
  EXPECT_EQ(count(loadOnly, "sm90::namedBarrier::sync(1, kThreads);") > 0, true);
  EXPECT_EQ(alone->info.plan.launchOf(alone->info.entry)->threads, 384);
  // The forward takes neither knob.
  jit::CompileOptions forward = backwardOptions(ElementType::BF16, 128, "sm_90a", {{"load-warp", 1}}, "fa3");
  forward.kind = "forward";
  StatusOr<jit::CompileResult> refused = jit::compile(*variants::byName("none"), forward, jit::Stage::Scheduled);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fa3: load-warp shapes the backward's roles only"), std::string::npos)
      << refused.status().message();
}

TEST(BackwardCodegen, Fa3RefusesTheHeadDimsItDoesNotServeAndFa2ServesThem) {
  for (auto [headDim, headDimV] : {std::pair{32, 32}, {160, 160}}) {
    for (ElementType dtype : {ElementType::BF16, ElementType::F16}) {
      jit::CompileOptions fa3 = backwardOptions(dtype, headDim, "sm_90a", {}, "fa3");
      fa3.headDimV = headDimV;
      StatusOr<jit::CompileResult> refused = jit::compile(*variants::byName("causal"), fa3, jit::Stage::Scheduled);
      ASSERT_FALSE(refused.ok()) << headDim;
      EXPECT_NE(refused.status().message().find("fa3 backward: head_dim = " + std::to_string(headDim) +
                                                " is not supported; accepted: 64, 96, 128, 192 or 256"),
                std::string::npos)
          << refused.status().message();
      jit::CompileOptions fa2 = fa3;
      fa2.schedule.schedule = "fa2";
      EXPECT_TRUE(jit::compile(*variants::byName("causal"), fa2, jit::Stage::Scheduled).ok()) << headDim;
    }
  }
  // Knobs: the ones it takes are named with their accepted values; the forward's role knobs are refused by name.
  for (auto [knob, value, message] :
       {std::tuple{"block-n", 96, "fa3 backward: block-n = 96 is not supported; accepted: 128 with 2 consumer "
                                  "warpgroup(s)"},
        {"block-m", 96, "fa3 backward: block-m = 96 is not supported; accepted: 128 (split-Q: a warpgroup's m64 query "
                        "rows) or 64 (the warpgroups split the keys), or 80 at head dim 128 (with swap-sdp 1: S, dP "
                        "and dQ transposed)"},
        {"consumer-warpgroups", 3, "fa3 backward: consumer-warpgroups = 3 is not supported; accepted: 1 or 2"},
        {"stages", 3, "fa3 backward: stages = 3 is not supported; accepted: 2"},
        {"persistent", 1, "the backward accepts block-m, block-n, stages, consumer-warpgroups, intra-wg-overlap, "
                          "dq-writer, dq-writer-warps, dq-swizzle, load-warp, swap-sdp, early-dv, swap-dkv, do-buffers, "
                          "rotated-walk, lpt-group-blocks, ring-rows, ds-buffers, dq-fragments, dkv-staged, dq-last-wait, "
                          "dq-add-v4, late-v, dq-slices, producer-regs and consumer-regs"},
        {"pingpong", 1, "fa3 backward: the knob pingpong shapes the forward's roles"},
        {"desc-advance", 1, "fa3 backward: the knob desc-advance shapes the forward's roles"}}) {
    StatusOr<jit::CompileResult> refused =
        jit::compile(*variants::byName("none"),
                     backwardOptions(ElementType::BF16, 128, "sm_90a", {{knob, value}}, "fa3"), jit::Stage::Scheduled);
    ASSERT_FALSE(refused.ok()) << knob;
    EXPECT_NE(refused.status().message().find(message), std::string::npos) << refused.status().message();
  }
  // One warpgroup over 64-key tiles (the first form) and the two layouts of two; a key split at head dim 64 gives
  // dQ's one 64-column block to the first warpgroup.
  for (auto [headDim, knobs, keyWarps] :
       {std::tuple{128, schedule::Knobs{{"consumer-warpgroups", 1}}, 0}, {64, schedule::Knobs{{"block-n", 64}}, 0},
        {128, schedule::Knobs{{"block-m", 64}}, 2}, {64, schedule::Knobs{{"block-m", 64}}, 2}}) {
    StatusOr<jit::CompileResult> result = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::BF16, headDim, "sm_90a", knobs, "fa3"),
        jit::Stage::Cuda);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->cuda.find("kKeyWarps = 2;") != std::string::npos, keyWarps == 2) << headDim;
  }
  // Split-Q over 128 keys at head dim 128: its buffers pass the shared-memory limit, refused naming both.
  StatusOr<jit::CompileResult> wide = jit::compile(
      *variants::byName("none"), backwardOptions(ElementType::BF16, 128, "sm_90a", {{"block-m", 128}}, "fa3"),
      jit::Stage::Cuda);
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("bytes of shared memory; sm_90a allows 232448"), std::string::npos)
      << wide.status().message();
  // Above head dim 128 the column split is the layout: 64-key tiles of two warpgroups.
  for (auto [knob, value, message] :
       {std::tuple{"block-n", 128, "fa3 backward: block-n = 128 is not supported; accepted: 64 at head dim 256"},
        {"consumer-warpgroups", 1, "fa3 backward: consumer-warpgroups = 1 is not supported; accepted: 2 at head dim "
                                   "256"}}) {
    StatusOr<jit::CompileResult> refusedWide = jit::compile(
        *variants::byName("none"), backwardOptions(ElementType::BF16, 256, "sm_90a", {{knob, value}}, "fa3"),
        jit::Stage::Scheduled);
    ASSERT_FALSE(refusedWide.ok()) << knob;
    EXPECT_NE(refusedWide.status().message().find(message), std::string::npos) << refusedWide.status().message();
  }
  // sm_80 has no wgmma: fa3 has no lowering there.
  StatusOr<jit::CompileResult> sm80 = jit::compile(
      *variants::byName("none"), backwardOptions(ElementType::BF16, 128, "sm_80", {}, "fa3"), jit::Stage::Scheduled);
  EXPECT_FALSE(sm80.ok());
}

// fa3 at every head dim from 64 to 256 (FA3's set): 96 in 64-byte swizzled tiles (32-column blocks) with dQ's first
// 64 columns on one warpgroup and the last 64 on the other, which keeps the 32 past the first's (one GEMM shape in
// both: no branch on the warpgroup around a wgmma); 192 and 256 with dK's and dV's columns split over the two
// warpgroups (64-key tiles; at 192 with swap-dkv 0, its default being the swapped layout: the next test), 192 in
// 64-byte tiles too (96-column parts), 256 without the dQ writer (its buffer does not fit) but with the load warp.
TEST(BackwardCodegen, Fa3ServesHeadDims96To256) {
  struct Case {
    int headDim, headDimV, swizzle, blockN;
    bool columns, writer;
    const char *dq;
  };
  for (const Case &c : {Case{96, 96, 64, 128, false, true, "columns [32 * (warp / 4), +64) of K"},
                        Case{192, 192, 64, 64, true, true, "columns [96 * (warp / 4), +96) of K"},
                        Case{192, 128, 64, 64, true, true, "columns [96 * (warp / 4), +96) of K"},
                        Case{256, 256, 128, 64, true, false, "columns [128 * (warp / 4), +128) of K"}}) {
    schedule::Knobs knobs;
    if (c.headDim == 192)
      knobs["swap-dkv"] = 0;
    jit::CompileOptions options = backwardOptions(ElementType::BF16, c.headDim, "sm_90a", knobs, "fa3");
    options.headDimV = c.headDimV;
    StatusOr<jit::CompileResult> result = jit::compile(*variants::byName("causal"), options, jit::Stage::Cubin);
    ASSERT_TRUE(result.ok()) << c.headDim << ": " << result.status().message();
    const std::string &cuda = result->cuda;
    const std::string main = cuda.substr(cuda.find("_bwd(const FlashtileFwdParams"));
    EXPECT_NE(main.find("constexpr int kBlockN = " + std::to_string(c.blockN) + ";"), std::string::npos) << c.headDim;
    EXPECT_EQ(main.find("kMajor<64>(") != std::string::npos, c.swizzle == 64) << c.headDim;
    EXPECT_EQ(main.find("const int kvRowGroup = warp % 4, kvColPart = warp / 4;") != std::string::npos, c.columns)
        << c.headDim;
    EXPECT_NE(main.find(c.dq), std::string::npos) << c.headDim;
    EXPECT_EQ(main.find("if (warp / 4 == 0)"), std::string::npos) << c.headDim;
    EXPECT_EQ(main.find("if (nt < 4 * (warp / 4))") != std::string::npos, c.headDim == 96) << c.headDim;
    EXPECT_EQ(count(main, "float *const sDq = "), c.writer ? 1 : 0) << c.headDim;
    EXPECT_EQ(count(main, "if (warp == kWarps + 1) {"), 1) << c.headDim;
    const PlanLaunch *launch = result->info.plan.launchOf(result->info.entry);
    ASSERT_NE(launch, nullptr);
    ASSERT_EQ(launch->tensorMaps.size(), 4u) << c.headDim;
    EXPECT_EQ(launch->tensorMaps[0].swizzleBytes, c.swizzle) << c.headDim;
  }
}

TEST(BackwardCodegen, CompilesHeadDims192And128) {
  jit::CompileOptions options = backwardOptions(ElementType::BF16, 192);
  options.headDimV = 128;
  StatusOr<jit::CompileResult> result = jit::compile(*variants::byName("causal"), options, jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_NE(result->cuda.find("constexpr int kKvColSplit = 2"), std::string::npos);
  // dK's accumulator holds 96 of 192 columns a warp, dV's 64 of 128.
  EXPECT_NE(result->cuda.find("this warp's key rows x 96 of 192 columns"), std::string::npos);
  EXPECT_NE(result->cuda.find("this warp's key rows x 64 of 128 columns"), std::string::npos);
}

TEST(BackwardCodegen, CompilesForSm80) {
  for (int headDim : {128, 256}) {
    StatusOr<jit::CompileResult> result = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::F16, headDim, "sm_80"), jit::Stage::Cubin);
    ASSERT_TRUE(result.ok()) << result.status().message();
    EXPECT_EQ(result->info.arch, "sm_80");
  }
}

TEST(BackwardCodegen, OneBufferAndEightWarpsCompile) {
  // The knobs the defaults do not take: one Q-tile buffer (each tile copied at its top), and 8 warps on 64-key tiles
  // at head dim 128 (two warps a key tile, 64 columns each).
  for (schedule::Knobs knobs :
       {schedule::Knobs{{"stages", 1}}, schedule::Knobs{{"block-m", 128}, {"block-n", 64}, {"warps", 8}}}) {
    StatusOr<jit::CompileResult> result = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::BF16, 128, "sm_90a", knobs), jit::Stage::Cubin);
    ASSERT_TRUE(result.ok()) << result.status().message();
  }
}

// key-warps (tile.key_warps): FlashAttention 2's 2 x 4 warp layout of a 64 x 128 tile, S and dP split by rows and by
// keys and dQ by rows and columns, for every built-in variant (their hooks see each warp's keys from warpCol0).
class KeyWarpsCompile : public testing::TestWithParam<Config> {};

TEST_P(KeyWarpsCompile, SplitsScoresByKeysAndCompiles) {
  auto [variant, dtype, headDim] = GetParam();
  StatusOr<jit::CompileResult> result = jit::compile(
      *variants::byName(variant),
      backwardOptions(dtype, headDim, "sm_90a", {{"block-m", 64}, {"block-n", 128}, {"warps", 8}, {"key-warps", 4}}),
      jit::Stage::Cubin);
  ASSERT_TRUE(result.ok()) << result.status().message();
  EXPECT_NE(result->scheduledIr.find("tile.key_warps = 4"), std::string::npos);
  const std::string &cuda = result->cuda;
  EXPECT_NE(cuda.find("constexpr int kKeyWarps = 4;"), std::string::npos);
  EXPECT_NE(cuda.find("kWarpRows = kBlockM * kKeyWarps / kWarps"), std::string::npos);
  EXPECT_NE(cuda.find("const int warpRow0 = qt * kBlockM + warpM * kWarpRows;"), std::string::npos);
  EXPECT_NE(cuda.find("float dqPart[kMTiles][kDqCols / 8][4] = {};"), std::string::npos);
  EXPECT_NE(cuda.find("const int kvTile = blockKvTile * kBlockN + warpCol0 + fragCol"), std::string::npos);
  EXPECT_EQ(cuda.find("float part[kMTiles][2][4]"), std::string::npos);
  for (const std::string &entry : plans::launchedEntries(result->info))
    EXPECT_NE(result->cubin.find(entry), std::string::npos) << entry;
}

INSTANTIATE_TEST_SUITE_P(Fa2, KeyWarpsCompile,
                         testing::Combine(testing::ValuesIn(variants::names()), testing::Values(ElementType::BF16),
                                          testing::Values(64, 128)),
                         configName);

TEST(BackwardCodegen, KeyWarpsIsRefusedWhereItCannotSplit) {
  for (auto [knobs, message] :
       {std::pair{schedule::Knobs{{"warps", 8}, {"block-n", 128}, {"key-warps", 3}},
                  "fa2 backward: key-warps = 3 is not supported; accepted: a divisor of warps (8)"},
        {schedule::Knobs{{"block-m", 64}, {"warps", 8}, {"block-n", 64}, {"key-warps", 8}},
         "fa2 backward: key-warps = 8 is not supported; accepted: 1, or a divisor of warps whose n16 parts split"},
        {schedule::Knobs{{"block-m", 32}, {"warps", 8}, {"block-n", 128}, {"key-warps", 2}},
         "fa2 backward: block-m = 32 is not supported; accepted: a multiple of 16 x warps / key-warps (64)"}}) {
    StatusOr<jit::CompileResult> refused = jit::compile(
        *variants::byName("causal"), backwardOptions(ElementType::BF16, 128, "sm_90a", knobs), jit::Stage::Scheduled);
    ASSERT_FALSE(refused.ok()) << message;
    EXPECT_NE(refused.status().message().find(message), std::string::npos) << refused.status().message();
  }
  // The forward has no use for it.
  jit::CompileOptions forward = backwardOptions(ElementType::BF16, 128, "sm_90a", {{"key-warps", 2}});
  forward.kind = "forward";
  StatusOr<jit::CompileResult> refused = jit::compile(*variants::byName("none"), forward, jit::Stage::Scheduled);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("fa2: key-warps shapes the backward's warps only"), std::string::npos)
      << refused.status().message();
}

TEST(BackwardCodegen, PlanHasTheWorkspacesOfTheBackward) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, 128), jit::Stage::Cuda);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const LaunchPlan &plan = result->info.plan;
  ASSERT_EQ(plan.workspaces.size(), 4u);
  EXPECT_EQ(plan.workspaces[0].bind.front().first, "delta");
  EXPECT_FALSE(plan.workspaces[0].zeroed);
  EXPECT_EQ(plan.workspaces[1].bind.front().first, "dqAccum");
  EXPECT_TRUE(plan.workspaces[1].zeroed);
  EXPECT_EQ(plan.workspaces[2].bind.front().first, "dkAccum");
  EXPECT_EQ(plan.workspaces[2].bind.back().first, "dvAccum");
  ASSERT_TRUE(plan.workspaces[2].when);
  EXPECT_EQ(plan.workspaces[2].when->text(), "heads_q > heads_kv");
  // Deterministic calls order their adds behind zeroed semaphores.
  EXPECT_EQ(plan.workspaces[3].bind.front().first, "semaphores");
  EXPECT_TRUE(plan.workspaces[3].zeroed);
  ASSERT_TRUE(plan.workspaces[3].when);
  EXPECT_EQ(plan.workspaces[3].when->text(), "deterministic");
  // One K/V tile of blockN keys a block: 64 by default.
  EXPECT_EQ(plan.launches[1].grid[0].text(), "max(1, cdiv(keys, 64))");
  EXPECT_GT(plan.launches[1].smemBytes, 0);
}

TEST(BackwardCodegen, InputGradientsAreReducedPerBlockThenSummedInOrder) {
  for (const char *variant : {"alibi_causal", "sinks"}) {
    SCOPED_TRACE(variant);
    StatusOr<jit::CompileResult> result =
        jit::compile(*variants::byName(variant), backwardOptions(ElementType::BF16, 64), jit::Stage::Cuda);
    ASSERT_TRUE(result.ok()) << result.status().message();
    const std::string &cuda = result->cuda;
    const bool alibi = std::string_view(variant) == "alibi_causal";
    // The terms, in the main kernel (tile.input_grad) or the preprocess (tile.sink_grad), each block's share
    // summed over its threads in a fixed order, and no float atomics for them.
    // alibi_causal's walk has three segments, each with its copy of the read: one share for the three.
    EXPECT_EQ(count(cuda, alibi ? "tile.input_grad \"slopes\"" : "tile.sink_grad \"sinks\""), alibi ? 3 : 1);
    EXPECT_EQ(count(cuda, "::blockSum<kWarps>(inputGradShare"), 1);
    EXPECT_NE(cuda.find("_input_grads(const FlashtileFwdParams params)"), std::string::npos);
    const LaunchPlan &plan = result->info.plan;
    ASSERT_EQ(plan.workspaces.size(), 5u);
    EXPECT_EQ(plan.workspaces[4].bind.front().first, "inputGradPartials");
    EXPECT_TRUE(plan.workspaces[4].zeroed);
    EXPECT_EQ(plan.launches.back().grid[0].text(), "1");
  }
}

TEST(BackwardCodegen, DeterministicModeTakesTurnsOnTheDqAndDkvRows) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, 64), jit::Stage::Cuda);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string &cuda = result->cuda;
  // dQ: a wait and a pass in each of the walk's three segments, K/V tiles descending; dK and dV (GQA): a wait and a
  // pass each; the Q tiles below the walk: an unordered pass each, by every thread in turn, before it; the Q tiles
  // past it: none (their blocks that add are all above this one).
  EXPECT_EQ(count(cuda, "::waitTurn(turnCounter, (p.seqlenK + kBlockN - 1) / kBlockN - 1 - blockKvTile);"), 3);
  EXPECT_EQ(count(cuda, "::passTurn(turnCounter);"), 3 + 2);
  EXPECT_EQ(count(cuda, "::waitTurn("), 3 + 2);
  EXPECT_EQ(count(cuda, "::passTurn(p.semaphores + ((long long)b * p.headsQ + h) * p.qTiles + qt);"), 1);
  const size_t skips = cuda.find("for (int qt = threadIdx.x; qt < ");
  ASSERT_NE(skips, std::string::npos);
  EXPECT_LT(skips, cuda.find("---- tile.q_loop segment"));
  EXPECT_NE(cuda.find("the Q tiles past this walk pass no turn"), std::string::npos);
  EXPECT_NE(cuda.find("const int blockKvTile = p.deterministic ? gridDim.x - 1 - blockIdx.x : blockIdx.x;"),
            std::string::npos);
}

// fa3 over a full walk (non-causal: every K/V tile's block walks every Q tile): in deterministic mode the walk may
// start at Q tile floor(n·Q / N) and wrap, in the computing warps and the load warp alike, and the dQ writer's turn
// follows the order the blocks reach a tile; a causal walk keeps the ascending walk and descending turns.
TEST(BackwardCodegen, Fa3DeterministicModeRotatesFullWalks) {
  StatusOr<jit::CompileResult> full =
      jit::compile(*variants::byName("none"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"rotated-walk", 1}}, "fa3"), jit::Stage::Cubin);
  ASSERT_TRUE(full.ok()) << full.status().message();
  const std::string &cuda = full->cuda;
  EXPECT_NE(cuda.find("const bool walkRotated = p.deterministic && frag::rotatedWalkFits(walkKvTiles);"),
            std::string::npos);
  EXPECT_NE(cuda.find("const int walkStart = walkRotated ? frag::rotatedWalkStart(blockKvTile, walkKvTiles, "
                      "walkQTiles) : 0;"),
            std::string::npos);
  // The three segments of the walk, in the computing warps and in the load warp.
  EXPECT_EQ(count(cuda, "for (int walkStep = "), 6);
  EXPECT_EQ(count(cuda, "const int qt = frag::rotatedWalkTile(walkStep, walkStart, "), 6);
  EXPECT_EQ(count(cuda, "; ++qt)"), 0);
  EXPECT_NE(cuda.find("frag::waitTurn(turnCounter, (walkRotated ? frag::rotatedTurn(tile, blockKvTile, walkKvTiles, "
                      "walkQTiles) : (p.seqlenK + kBlockN - 1) / kBlockN - 1 - blockKvTile));"),
            std::string::npos);

  StatusOr<jit::CompileResult> causal =
      jit::compile(*variants::byName("causal"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"rotated-walk", 1}}, "fa3"), jit::Stage::Cuda);
  ASSERT_TRUE(causal.ok()) << causal.status().message();
  EXPECT_EQ(causal->cuda.find("walkRotated"), std::string::npos);
  EXPECT_EQ(count(causal->cuda, "for (int walkStep = "), 0);
  EXPECT_NE(causal->cuda.find("frag::waitTurn(turnCounter, (p.seqlenK + kBlockN - 1) / kBlockN - 1 - blockKvTile);"),
            std::string::npos);

  // The knob is the default where the load warp is (the text is the same without it); rotated-walk 0 keeps every
  // walk ascending; without the load warp the knob is refused.
  StatusOr<jit::CompileResult> byDefault = jit::compile(
      *variants::byName("none"), backwardOptions(ElementType::BF16, 128, "sm_90a", {}, "fa3"), jit::Stage::Cuda);
  ASSERT_TRUE(byDefault.ok()) << byDefault.status().message();
  EXPECT_EQ(byDefault->cuda, cuda);
  StatusOr<jit::CompileResult> plain =
      jit::compile(*variants::byName("none"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"rotated-walk", 0}}, "fa3"), jit::Stage::Cuda);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  EXPECT_EQ(plain->cuda.find("walkRotated"), std::string::npos);
  StatusOr<jit::CompileResult> refused =
      jit::compile(*variants::byName("none"),
                   backwardOptions(ElementType::BF16, 128, "sm_90a", {{"rotated-walk", 1}, {"load-warp", 0}}, "fa3"),
                   jit::Stage::Cuda);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("rotated-walk"), std::string::npos) << refused.status().message();
}

// The measured defaults (bench/NOTES.md v42): swap-dkv at head dim 192 (96-key tiles, dK and dV transposed, one dO
// buffer and the dQ writer) for 192/192 and 192/128 alike, unless a knob names another layout; not at 256; and
// dq-swizzle at 64 with the writer, so that sDq is unpadded and added in one bulk reduce-add a tile.
TEST(BackwardCodegen, Fa3DefaultsOfTheMeasuredForms) {
  auto mainOf = [](int headDim, int headDimV, const schedule::Knobs &knobs) {
    jit::CompileOptions options = backwardOptions(ElementType::BF16, headDim, "sm_90a", knobs, "fa3");
    options.headDimV = headDimV;
    StatusOr<jit::CompileResult> result = jit::compile(*variants::byName("none"), options, jit::Stage::Cuda);
    EXPECT_TRUE(result.ok()) << headDim << ": " << result.status().message();
    return result.ok() ? result->cuda.substr(result->cuda.find("_bwd(const FlashtileFwdParams")) : std::string();
  };
  for (int headDimV : {192, 128}) {
    const std::string swapped = mainOf(192, headDimV, {});
    EXPECT_NE(swapped.find("constexpr int kBlockN = 96;"), std::string::npos) << headDimV;
    EXPECT_EQ(swapped, mainOf(192, headDimV, {{"swap-dkv", 1}})) << headDimV;
    EXPECT_EQ(count(swapped, "float *const sDq = "), 1) << headDimV;
  }
  // A knob that names the column split's layout keeps it.
  EXPECT_NE(mainOf(192, 192, {{"block-n", 64}}).find("constexpr int kBlockN = 64;"), std::string::npos);
  EXPECT_NE(mainOf(192, 192, {{"dq-writer", 0}}).find("constexpr int kBlockN = 64;"), std::string::npos);
  EXPECT_NE(mainOf(256, 256, {}).find("constexpr int kBlockN = 64;"), std::string::npos);
  EXPECT_EQ(mainOf(256, 256, {}), mainOf(256, 256, {{"swap-dkv", 0}}));
  EXPECT_EQ(mainOf(64, 64, {}), mainOf(64, 64, {{"dq-swizzle", 1}}));
  EXPECT_NE(mainOf(64, 64, {}), mainOf(64, 64, {{"dq-swizzle", 0}}));
  EXPECT_EQ(mainOf(128, 128, {}), mainOf(128, 128, {{"dq-swizzle", 0}}));
}

// The rotated walk's schedule (BackwardPrelude.h's rotatedWalkStart, rotatedWalkTile and rotatedTurn, transcribed):
// on every Q tile the turns of the N blocks are 0..N-1 once each, and blocks that all run at once, each a Q tile a
// round, finish without a wait where N <= Q (a tile's turns in the order the blocks reach it) and finish at all
// otherwise.
TEST(BackwardCodegen, RotatedWalkTurnsFollowTheBlocksArrivals) {
  auto start = [](int n, int kvTiles, int qTiles) { return static_cast<int>(1LL * n * qTiles / kvTiles); };
  auto turn = [](int t, int n, int kvTiles, int qTiles) {
    const int first = std::min(kvTiles - 1, static_cast<int>((1LL * (t + 1) * kvTiles + qTiles - 1) / qTiles) - 1);
    return (first - n + kvTiles) % kvTiles;
  };
  for (int kvTiles = 1; kvTiles <= 40; ++kvTiles) {
    for (int qTiles = 1; qTiles <= 90; qTiles += kvTiles % 3 + 1) {
      for (int t = 0; t < qTiles; ++t) {
        std::vector<int> seen(kvTiles, 0);
        for (int n = 0; n < kvTiles; ++n)
          ++seen[turn(t, n, kvTiles, qTiles)];
        ASSERT_EQ(std::count(seen.begin(), seen.end(), 1), kvTiles) << kvTiles << " x " << qTiles << ", tile " << t;
      }
      std::vector<int> counter(qTiles, 0), step(kvTiles, 0);
      int rounds = 0, done = 0;
      while (done < kvTiles) {
        ASSERT_LT(rounds, qTiles * kvTiles + 1) << "no progress: " << kvTiles << " x " << qTiles;
        std::vector<int> before = step;
        for (int n = 0; n < kvTiles; ++n) {
          if (before[n] == qTiles)
            continue;
          const int t = (before[n] + start(n, kvTiles, qTiles)) % qTiles;
          if (counter[t] != turn(t, n, kvTiles, qTiles))
            continue;
          ++step[n];
          done += step[n] == qTiles;
        }
        for (int n = 0; n < kvTiles; ++n)  // a turn taken this round is passed at its end
          if (step[n] != before[n])
            ++counter[(before[n] + start(n, kvTiles, qTiles)) % qTiles];
        ++rounds;
      }
      if (kvTiles <= qTiles) {
        EXPECT_EQ(rounds, qTiles) << kvTiles << " x " << qTiles;
      }
    }
  }
}

TEST(BackwardCodegen, SourceFollowsTheScheduledIr) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("softcap_causal"), backwardOptions(ElementType::BF16, 64), jit::Stage::Cuda);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string &cuda = result->cuda;
  // tile-bound-q-loop's three segments, each a loop over Q tiles; the interior one without the mask.
  EXPECT_EQ(count(cuda, "---- tile.q_loop segment"), 3);
  EXPECT_NE(cuda.find("segment head_boundary"), std::string::npos);
  EXPECT_NE(cuda.find("segment interior"), std::string::npos);
  EXPECT_NE(cuda.find("segment tail_boundary"), std::string::npos);
  EXPECT_EQ(count(cuda, "// mask: keys past seqlen_k"), 2);
  // The variant's hooks are the forward printer's functions, the derivative included.
  EXPECT_NE(cuda.find("float scoreMod("), std::string::npos);
  EXPECT_NE(cuda.find("float scoreGrad("), std::string::npos);
  EXPECT_NE(cuda.find("bool keep("), std::string::npos);
  // dQ's fp32 reductions (two columns at a time), and P and dS staged behind one barrier a Q tile: with the barrier
  // at the top of a tile (its copies landed), two per tile.q_loop segment.
  EXPECT_NE(cuda.find("redAdd2(dst, part"), std::string::npos);
  EXPECT_NE(cuda.find("red.global.add.v2.f32"), std::string::npos);
  EXPECT_NE(cuda.find("sStage1"), std::string::npos);
  EXPECT_EQ(count(cuda, "__syncthreads();  // every warp's rows staged"), 3);
  // Two Q-tile buffers (tile.q_buffers = 2): the next tile's Q, dO, LSE and D copied during this one.
  EXPECT_EQ(count(cuda, "if (qt + 1 < "), 3);
  EXPECT_NE(cuda.find("cpAsync4("), std::string::npos);
}

TEST(BackwardCodegen, ScheduledIrFixesTheBackwardsTiles) {
  StatusOr<jit::CompileResult> result =
      jit::compile(*variants::byName("causal"), backwardOptions(ElementType::BF16, 128, "sm_90a", {{"block-m", 128}}),
                   jit::Stage::Scheduled);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string &ir = result->scheduledIr;
  // Q tiles of blockM (128) rows, K/V tiles and the dK/dV accumulators of blockN (64) rows.
  EXPECT_NE(ir.find("tile.load q[%arg0] : tensor<128x128xbf16>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("tile.load k : tensor<64x128xbf16>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("tile.zero_acc : !tile.acc<64x128>"), std::string::npos) << ir;
  EXPECT_NE(ir.find("tile.load dq_accum : tensor<128x128xf32>"), std::string::npos) << ir;
  EXPECT_EQ(ir.find("tile.kv_range"), std::string::npos) << ir;
}

TEST(BackwardCodegen, RefusesWhatThePrinterDoesNotServe) {
  StatusOr<jit::CompileResult> odd =
      jit::compile(*variants::byName("none"), backwardOptions(ElementType::BF16, 72), jit::Stage::Scheduled);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("fa2 backward: head_dim = 72 is not supported"), std::string::npos)
      << odd.status().message();
  // Two warps a key tile need head dims in whole n16 tiles a warp: 32 x 2.
  StatusOr<jit::CompileResult> split =
      jit::compile(*variants::byName("none"),
                   backwardOptions(ElementType::BF16, 208, "sm_90a", {{"block-m", 64}, {"block-n", 32}, {"warps", 4}}),
                   jit::Stage::Scheduled);
  ASSERT_FALSE(split.ok());
  EXPECT_NE(split.status().message().find("head_dim = 208 is not supported; accepted: multiples of 32"),
            std::string::npos)
      << split.status().message();
  StatusOr<jit::CompileResult> rows =
      jit::compile(*variants::byName("none"), backwardOptions(ElementType::BF16, 64, "sm_90a", {{"block-m", 48}}),
                   jit::Stage::Scheduled);
  ASSERT_FALSE(rows.ok());
  EXPECT_NE(rows.status().message().find("block-m = 48 is not supported"), std::string::npos)
      << rows.status().message();
  jit::CompileOptions fa1 = backwardOptions(ElementType::BF16, 128);
  fa1.schedule.schedule = "fa1";
  StatusOr<jit::CompileResult> other = jit::compile(*variants::byName("none"), fa1, jit::Stage::Scheduled);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("schedule 'fa1' does not schedule backward programs"), std::string::npos)
      << other.status().message();
}

} // namespace
