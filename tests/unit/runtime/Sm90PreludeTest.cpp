// Sm90PreludeTest.cpp — the sm90 device prelude (codegen/sm90/PreludeSm90.h) compiled by NVRTC for sm_90a, no GPU:
// a translation unit that calls every primitive, ptxas included (a cubin, so inline-PTX operand errors surface);
// every wgmma width the prelude can print; the fragment prelude (FragmentPrelude.h) next to it in one unit and
// alone; the arch guard. When nvdisasm is available (FLASHTILE_NVDISASM, PATH, or the pip wheel unpacked by
// scripts/sm90-sass.sh), the SASS is checked for HGMMA, UTMALDG/UTMASTG, SYNCS and USETMAXREG; otherwise that test
// skips.
#include "codegen/ptx/FragmentPrelude.h"
#include "codegen/sm90/PreludeSm90.h"
#include "flashtile/runtime/Nvrtc.h"

#include <gmock/gmock.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace flashtile;
namespace sm90 = flashtile::codegen::sm90;
using testing::HasSubstr;

namespace {

/// The accumulator widths FA3's tiles use at head dims 64-256 (Q·Kᵀ over 64-192 keys, P·V over the head dim).
constexpr std::array<int, 7> kFa3Widths = {64, 80, 96, 128, 176, 192, 256};

/// Kernels that call every primitive the way a warp-specialized attention kernel does: a TMA producer warp and a
/// consumer warpgroup around a two-slot ring (setmaxnreg, full/empty mbarriers, elect), SS and RS wgmma chains
/// through both descriptor kinds, and an epilogue through stmatrix, proxy fence and a TMA store.
constexpr const char *kUsesEveryPrimitive = R"cuda(
extern "C" __global__ void __launch_bounds__(384, 1)
everyPrimitive(const __grid_constant__ sm90::TensorMap qMap, const __grid_constant__ sm90::TensorMap kMap,
               const __grid_constant__ sm90::TensorMap vMap, const __grid_constant__ sm90::TensorMap oMap, float *out,
               int tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ sm90::Mbarrier qFull, full[2], empty[2];
  unsigned char *q = smem, *k = smem + 16384, *v = smem + 16384 + 2 * 16384;
  if (threadIdx.x == 0) {
    sm90::mbarrier::init(&qFull, 1);
    for (int i = 0; i < 2; ++i) {
      sm90::mbarrier::init(&full[i], 1);
      sm90::mbarrier::init(&empty[i], 8);
    }
    sm90::mbarrier::initFence();
  }
  __syncthreads();
  if (sm90::warpgroupIndex() == 0) {
    sm90::warpgroup::decreaseRegisters<24>();
    if (threadIdx.x / 32 == 0 && sm90::warp::elect()) {
      sm90::tma::prefetchDescriptor(&kMap);
      sm90::mbarrier::arriveExpectTx(&qFull, 16384);
      sm90::tma::load5d(q, &qMap, &qFull, 0, blockIdx.x * 64, 0, 0, 0);
      for (int t = 0; t < tiles; ++t) {
        const int slot = t % 2;
        if (t >= 2)
          sm90::mbarrier::wait(&empty[slot], ((t / 2) - 1) & 1);
        sm90::mbarrier::arriveExpectTx(&full[slot], 8192);
        sm90::mbarrier::expectTx(&full[slot], 8192);
        sm90::tma::load4d(k + slot * 16384, &kMap, &full[slot], 0, t * 64, 0, 0);
        sm90::tma::load3d(v + slot * 16384, &vMap, &full[slot], 0, t * 64, 0);
      }
    }
    return;
  }
  sm90::warpgroup::increaseRegisters<240>();
  float o[64];
  for (int i = 0; i < 64; ++i)
    o[i] = 0.0f;
  sm90::mbarrier::wait(&qFull, 0);
  for (int t = 0; t < tiles; ++t) {
    const int slot = t % 2;
    while (!sm90::mbarrier::tryWait(&full[slot], (t / 2) & 1)) {
    }
    float s[32];
    sm90::warpgroup::fenceOperands(s);
    sm90::warpgroup::arrive();
    const unsigned long long qDesc = sm90::desc::kMajor(sm90::smemAddress(q));
    const unsigned long long kDesc = sm90::desc::kMajor(sm90::smemAddress(k + slot * 16384));
#pragma unroll
    for (int step = 0; step < 8; ++step) {
      const unsigned offset = (step / 4) * 8192 + (step % 4) * 32;
      sm90::warpgroup::Wgmma<64>::bf16SS<sm90::warpgroup::kKMajor>(s, sm90::desc::advance(qDesc, offset),
                                                                   sm90::desc::advance(kDesc, offset), step > 0);
    }
    sm90::warpgroup::commitGroup();
    sm90::warpgroup::wait<0>();
    sm90::warpgroup::fenceOperands(s);
    unsigned p[16];
    sm90::warpgroup::accumulatorToOperandBf16<64>(s, p);
    unsigned pf[16];
    sm90::warpgroup::accumulatorToOperandF16<64>(s, pf);
    p[0] ^= pf[0] & 1u;
    sm90::warpgroup::fenceOperands(p);
    sm90::warpgroup::fenceOperands(o);
    sm90::warpgroup::arrive();
#pragma unroll
    for (int step = 0; step < 4; ++step) {
      const unsigned a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
      sm90::warpgroup::Wgmma<128>::bf16RS<sm90::warpgroup::kMNMajor>(
          o, a, sm90::desc::mnMajor(sm90::smemAddress(v + slot * 16384) + step * 2048, 8192), 1);
    }
    sm90::warpgroup::commitGroup();
    sm90::warpgroup::wait<0>();
    sm90::warpgroup::fenceOperands(o);
    __syncwarp();
    if (sm90::warp::elect())
      sm90::mbarrier::arrive(&empty[slot]);
  }
  // Epilogue: O's fragments to shared memory (over Q's tile), then one TMA store.
  sm90::namedBarrier::sync(1, 256);
  const int row = (threadIdx.x - 128) % 64, warpRow = (threadIdx.x / 32) % 4;
  for (int j = 0; j < 8; ++j) {
    const unsigned r[4] = {sm90::warpgroup::packBf16x2(o[8 * j], o[8 * j + 1]),
                           sm90::warpgroup::packBf16x2(o[8 * j + 2], o[8 * j + 3]),
                           sm90::warpgroup::packF16x2(o[8 * j + 4], o[8 * j + 5]),
                           sm90::warpgroup::packF16x2(o[8 * j + 6], o[8 * j + 7])};
    const unsigned addr = sm90::smemAddress(q) + sm90::swizzle128Offset(16 * warpRow + row % 16, 16 * j, 64);
    if (j % 2 == 0)
      sm90::warp::stmatrixX4(addr, r);
    else
      sm90::warp::stmatrixX4Trans(addr, r);
  }
  sm90::fence::proxyAsync();
  sm90::namedBarrier::arrive(2, 256);
  sm90::namedBarrier::sync(2, 256);
  if (threadIdx.x == 128 && sm90::warp::isLane0()) {
    sm90::tma::store5d(&oMap, q, 0, blockIdx.x * 64, 0, 0, 0);
    sm90::tma::store4d(&oMap, q, 0, blockIdx.x * 64, 0, 0);
    sm90::tma::store3d(&oMap, q, 0, blockIdx.x * 64, 0);
    sm90::tma::store2d(&oMap, q, 0, blockIdx.x * 64);
    sm90::tma::storeCommit();
    sm90::tma::storeWaitRead<0>();
    sm90::tma::storeWait<0>();
  }
  if (threadIdx.x == 129) {
    sm90::tma::load2d(k, &kMap, &full[0], 0, 0);
    sm90::tma::load1d(k, &kMap, &full[0], 0);
    sm90::mbarrier::wait(&full[0], 0);
    sm90::mbarrier::invalidate(&full[0]);
  }
  for (int i = 0; i < 64; ++i)
    out[(threadIdx.x - 128) * 64 + i] = o[i];
  // The narrower swizzle spans (head dims 96 and 32): offsets and descriptors.
  const unsigned base = sm90::smemAddress(k);
  out[0] += float(sm90::swizzleOffset<64>(threadIdx.x, 5, 64) + sm90::swizzleOffset<32>(threadIdx.x, 9, 64)) +
            float(unsigned(sm90::desc::kMajorStep<64>(base, tiles, 64) ^ sm90::desc::mnMajorStep<32>(base, tiles, 64) ^
                           sm90::desc::kMajorStep<32>(base, tiles, 64) ^ sm90::desc::mnMajorStep<64>(base, tiles, 64)));
}
)cuda";

std::string everyPrimitiveSource() { return sm90::prelude(std::vector<int>{64, 128}) + kUsesEveryPrimitive; }

/// A kernel that issues all four forms (bf16/f16 x SS/RS) at every width in `widths`.
std::string everyWidthSource(const std::vector<int> &widths) {
  std::string text = sm90::prelude(widths);
  text += R"cuda(
template <int kN>
__device__ void allForms(float *out, unsigned long long descA, unsigned long long descB, const unsigned (&a)[4]) {
  float d[kN / 2];
  for (int i = 0; i < kN / 2; ++i)
    d[i] = out[i];
  sm90::warpgroup::arrive();
  sm90::warpgroup::Wgmma<kN>::template bf16SS<sm90::warpgroup::kKMajor>(d, descA, descB, 1);
  sm90::warpgroup::Wgmma<kN>::template f16SS<sm90::warpgroup::kMNMajor>(d, descA, descB, 0);
  sm90::warpgroup::Wgmma<kN>::template bf16RS<sm90::warpgroup::kMNMajor>(d, a, descB, 1);
  sm90::warpgroup::Wgmma<kN>::template f16RS<sm90::warpgroup::kKMajor>(d, a, descB, 1);
  sm90::warpgroup::commitGroup();
  sm90::warpgroup::wait<0>();
  for (int i = 0; i < kN / 2; ++i)
    out[i] = d[i];
}
template <int... kNs>
__device__ void everyWidth(float *out, unsigned long long descA, unsigned long long descB, const unsigned (&a)[4]) {
  (allForms<kNs>(out, descA, descB, a), ...);
}
extern "C" __global__ void widths(float *out, unsigned long long descA, unsigned long long descB) {
  const unsigned a[4] = {threadIdx.x, 2u, 3u, 4u};
  everyWidth<)cuda";
  for (size_t i = 0; i < widths.size(); ++i)
    text += (i ? ", " : "") + std::to_string(widths[i]);
  text += ">(out, descA, descB, a);\n}\n";
  return text;
}

std::vector<int> allWidths() {
  std::vector<int> widths;
  for (int n = sm90::kWgmmaNStep; n <= sm90::kWgmmaMaxN; n += sm90::kWgmmaNStep)
    widths.push_back(n);
  return widths;
}

TEST(Sm90Prelude, EveryPrimitiveCompilesToACubinForSm90a) {
  StatusOr<std::string> cubin = compileCuda(everyPrimitiveSource(), "sm90_primitives.cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  EXPECT_TRUE(std::string_view(*cubin).starts_with("\x7f"
                                                   "ELF"));
}

TEST(Sm90Prelude, PtxHasTheSm90Instructions) {
  StatusOr<std::string> ptx = compileCuda(everyPrimitiveSource(), "sm90_primitives.cu", "sm_90a", NvrtcOutput::Ptx);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  for (const char *instruction : {"wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                                  "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                                  "wgmma.fence.sync.aligned",
                                  "wgmma.commit_group.sync.aligned",
                                  "wgmma.wait_group.sync.aligned",
                                  "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes",
                                  "cp.async.bulk.tensor.1d.shared::cluster.global",
                                  "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
                                  "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group",
                                  "cp.async.bulk.commit_group",
                                  "cp.async.bulk.wait_group.read",
                                  "prefetch.tensormap",
                                  "mbarrier.init.shared::cta.b64",
                                  "fence.mbarrier_init.release.cluster",
                                  "mbarrier.arrive.expect_tx.shared::cta.b64",
                                  "mbarrier.expect_tx.relaxed.cta.shared::cta.b64",
                                  "mbarrier.arrive.shared::cta.b64",
                                  "mbarrier.try_wait.parity.shared::cta.b64",
                                  "mbarrier.inval.shared::cta.b64",
                                  "fence.proxy.async.shared::cta",
                                  "setmaxnreg.dec.sync.aligned.u32 24",
                                  "setmaxnreg.inc.sync.aligned.u32 240",
                                  "elect.sync",
                                  "stmatrix.sync.aligned.m8n8.x4.shared.b16",
                                  "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                                  "bar.sync",
                                  "bar.arrive",
                                  "cvt.rn.bf16x2.f32",
                                  "cvt.rn.f16x2.f32"})
    EXPECT_THAT(*ptx, HasSubstr(instruction));
}

TEST(Sm90Prelude, EveryWgmmaWidthCompiles) {
  // All 32 widths x {bf16, f16} x {SS, RS} x both B majors, through ptxas.
  StatusOr<std::string> cubin =
      compileCuda(everyWidthSource(allWidths()), "sm90_widths.cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
}

TEST(Sm90Prelude, PrintsEachWidthOnceAndRejectsBadWidths) {
  const std::string text = sm90::prelude(std::vector<int>{64, 128, 64});
  size_t count = 0;
  for (size_t at = text.find("struct Wgmma<64>"); at != std::string::npos; at = text.find("struct Wgmma<64>", at + 1))
    ++count;
  EXPECT_EQ(count, 1u);
  EXPECT_THAT(text, HasSubstr("struct Wgmma<128>"));
  for (int bad : {0, 12, 264}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(sm90::wgmmaText(bad), HasSubstr("#error \"wgmma m64nNk16: N = " + std::to_string(bad) +
                                                " is not a multiple of 8 in [8, 256]\""));
  }
  StatusOr<std::string> cubin =
      compileCuda(sm90::prelude(std::vector<int>{64, 12}), "bad_width.cu", "sm_90a", NvrtcOutput::Ptx);
  ASSERT_FALSE(cubin.ok());
  EXPECT_THAT(cubin.status().message(), HasSubstr("N = 12 is not a multiple of 8"));
}

TEST(Sm90Prelude, AWidthNotPrintedFailsWithItsName) {
  const std::string source = sm90::prelude(std::vector<int>{64}) + R"cuda(
extern "C" __global__ void k(float *out) {
  float d[48];
  sm90::warpgroup::Wgmma<96>::bf16SS<0>(d, 0, 0, 0);
  out[0] = d[0];
}
)cuda";
  StatusOr<std::string> ptx = compileCuda(source, "missing_width.cu", "sm_90a", NvrtcOutput::Ptx);
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("this wgmma width was not printed into the prelude"));
}

TEST(Sm90Prelude, NeedsSm90a) {
  for (const char *arch : {"sm_80", "sm_100a"}) {
    SCOPED_TRACE(arch);
    StatusOr<std::string> ptx = compileCuda(everyPrimitiveSource(), "sm90_primitives.cu", arch, NvrtcOutput::Ptx);
    ASSERT_FALSE(ptx.ok());
    EXPECT_THAT(ptx.status().message(), HasSubstr("the sm90 prelude (wgmma, TMA, setmaxnreg) needs "
                                                  "--gpu-architecture=sm_90a"));
  }
}

/// The fragment prelude's own smoke kernel (in namespace sm80, as the sm80 and sm90 families print it): one mma.sync
/// and one cp.async, enough to run ptxas over its wrappers.
constexpr const char *kUsesSm80 = R"cuda(
extern "C" __global__ void sm80Kernel(const unsigned short *in, float *out) {
  __shared__ __align__(16) unsigned short tile[64 * 8];
  sm80::cpAsync16(sm80::smemAddress(tile + threadIdx.x * 8), in + threadIdx.x * 8, true);
  sm80::cpAsyncCommit();
  sm80::cpAsyncWait<0>();
  __syncwarp();
  unsigned a[4];
  sm80::ldmatrixX4(a, sm80::smemAddress(tile) + sm80::swizzle<8>(threadIdx.x % 8, threadIdx.x / 8));
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  sm80::mmaBf16(d, a, a[0], a[1]);
  out[threadIdx.x] = sm80::exp2(d[0]) + tileTanh(d[1]) + sm80::quadMax(d[2]) + sm80::quadSum(d[3]);
}
)cuda";

TEST(Sm90Prelude, Sm80PreludeIsUnaffected) {
  const std::string sm80Alone = codegen::fragmentPrelude("sm80") + kUsesSm80;
  for (std::string_view arch : {"sm_80", "sm_90a", "sm_100a"}) {
    SCOPED_TRACE(arch);
    StatusOr<std::string> cubin = compileCuda(sm80Alone, "sm80.cu", std::string(arch), NvrtcOutput::Cubin);
    EXPECT_TRUE(cubin.ok()) << cubin.status().message();
  }
  // Both preludes in one unit (what an FA3 kernel includes): no name collides, both kernels build for sm_90a.
  const std::string both = codegen::fragmentPrelude("sm80") + everyPrimitiveSource() + kUsesSm80;
  StatusOr<std::string> cubin = compileCuda(both, "sm80_and_sm90.cu", "sm_90a", NvrtcOutput::Cubin);
  EXPECT_TRUE(cubin.ok()) << cubin.status().message();
}

/// nvdisasm from FLASHTILE_NVDISASM, then PATH, then the pip wheel unpacked under .whl/ by scripts/sm90-sass.sh.
std::string findNvdisasm() {
  if (const char *path = std::getenv("FLASHTILE_NVDISASM"); path && *path)
    return path;
  if (std::system("command -v nvdisasm >/dev/null 2>&1") == 0)
    return "nvdisasm";
#ifdef FLASHTILE_NVDISASM_WHEEL_DIR
  std::error_code error;
  for (auto it = std::filesystem::recursive_directory_iterator(FLASHTILE_NVDISASM_WHEEL_DIR, error);
       !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error))
    if (it->path().filename() == "nvdisasm" && it->is_regular_file())
      return it->path().string();
#endif
  return "";
}

TEST(Sm90Prelude, SassHasHopperInstructions) {
  const std::string nvdisasm = findNvdisasm();
  if (nvdisasm.empty())
    GTEST_SKIP() << "nvdisasm not found (set FLASHTILE_NVDISASM, or run scripts/sm90-sass.sh to unpack the pip "
                    "wheel); the SASS check is optional";
  StatusOr<std::string> cubin = compileCuda(everyPrimitiveSource(), "sm90_primitives.cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("flashtile-sm90-" + std::to_string(getpid()) + ".cubin");
  {
    std::ofstream out(file, std::ios::binary);
    out.write(cubin->data(), std::streamsize(cubin->size()));
  }
  std::string sass;
  if (FILE *pipe = popen(("'" + nvdisasm + "' -c '" + file.string() + "' 2>&1").c_str(), "r")) {
    std::array<char, 4096> buffer;
    while (size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe))
      sass.append(buffer.data(), n);
    EXPECT_EQ(pclose(pipe), 0) << sass;
  }
  std::filesystem::remove(file);
  std::string missing;
  for (const char *instruction :
       {"HGMMA.64x64x16.F32.BF16", "HGMMA.64x128x16.F32.BF16", "tnspB", "UTMALDG.5D", "UTMALDG.1D", "UTMASTG.5D",
        "UTMACCTL.PF", "SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "USETMAXREG.DEALLOC",
        "USETMAXREG.TRY_ALLOC", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "ELECT", "STSM", "FENCE.VIEW.ASYNC.S"})
    if (sass.find(instruction) == std::string::npos)
      missing += std::string(missing.empty() ? "" : ", ") + instruction;
  EXPECT_TRUE(missing.empty()) << "not in the SASS (" << sass.size() << " characters from " << nvdisasm
                               << "): " << missing;
}

} // namespace
