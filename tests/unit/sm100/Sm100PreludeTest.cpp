// Sm100PreludeTest.cpp — the sm100 device prelude (codegen/sm100/PreludeSm100.h) compiled by NVRTC for sm_100a, ptxas
// included (a cubin, so inline-PTX operand errors surface). No SM100 GPU exists here: these tests compile the
// primitives and read their SASS; none of them runs tcgen05 code. The exercise translation unit has one small
// `extern "C" __global__` kernel per primitive group (tensor-memory allocation, tensor-memory access, MMA issue and
// commit, TMA and mbarriers, the software exp2) — not an attention kernel. Its descriptors are the host encoders'
// values (DescriptorsSm100.h) printed as literals, as a lowering prints them. When nvdisasm is available
// (FLASHTILE_NVDISASM, PATH, or the pip wheel scripts/sm100-sass.sh unpacks) the SASS is checked for the tcgen05
// opcodes; otherwise that test skips.
#include "codegen/sm100/DescriptorsSm100.h"
#include "codegen/sm100/PreludeSm100.h"
#include "flashtile/runtime/Nvrtc.h"

#include <gmock/gmock.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

using namespace flashtile;
namespace sm100 = flashtile::codegen::sm100;
using testing::HasSubstr;

namespace {

/// The tensor-memory widths the exercise kernels use (an S row chunk of 32 columns, P packed into 16, O in 8s).
constexpr std::array<int, 3> kExerciseWidths = {8, 16, 32};

std::string hexLiteral(uint64_t value, const char *suffix) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llxu%s", static_cast<unsigned long long>(value), suffix);
  return text;
}

/// The descriptor constants of one head-dim-128 tile pair, from the host encoders: Q and K K-major with 128-byte
/// swizzle, V MN-major (two 64-column blocks of 128 key rows), S = Q·Kᵀ and O = P·V as bf16 x bf16 -> f32,
/// M = N = 128.
std::string descriptorConstants() {
  constexpr uint32_t kTileRows = 128, kBlockBytes = kTileRows * sm100::kSwizzleBytes;
  const sm100::MmaF16Shape qk{}; // bf16 x bf16 -> f32, 128 x 128, both K-major
  sm100::MmaF16Shape pv = qk;
  pv.bMajor = sm100::MmaMajor::MN;
  pv.aInTensorMemory = true;
  std::string text;
  text += "constexpr unsigned long long kKMajorFields = " +
          hexLiteral(sm100::encode(sm100::kMajorDescriptor(sm100::SwizzlingMode::Swizzle128B)), "ll") + ";\n";
  text += "constexpr unsigned long long kMnMajorFields = " +
          hexLiteral(sm100::encode(sm100::mnMajorDescriptor(sm100::SwizzlingMode::Swizzle128B, kBlockBytes)), "ll") +
          ";\n";
  text += "constexpr unsigned kIdescQK = " + hexLiteral(sm100::encode(sm100::instructionDescriptor(qk)), "") + ";\n";
  text += "constexpr unsigned kIdescPV = " + hexLiteral(sm100::encode(sm100::instructionDescriptor(pv)), "") + ";\n";
  return text;
}

constexpr const char *kExerciseKernels = R"cuda(
constexpr unsigned kTileBytes = 128 * 128 * 2;    // a 128 x 128 bf16 tile: two 64-column blocks
constexpr unsigned kBlockBytes = 128 * 128;       // one column block of 128 rows x 128 bytes
constexpr unsigned kSColumn = 0, kPColumn = 0, kOColumn = 256;

// Tensor-memory allocation: two warps allocate (256 + 32 of the 512 columns), publish their bases through shared
// memory with the tcgen05 fences around the barrier, the CTA gives up its permit to allocate (after the last alloc),
// and each warp frees what it allocated at the end.
extern "C" __global__ void tmemAllocation(unsigned *out) {
  __shared__ unsigned base[2];
  const unsigned warp = threadIdx.x / 32;
  if (warp == 0)
    sm100::tmem::alloc<256>(&base[0]);
  else if (warp == 1)
    sm100::tmem::alloc<32>(&base[1]);
  sm100::fence::beforeThreadSync();
  __syncthreads();
  sm100::fence::afterThreadSync();
  if (warp == 0)
    sm100::tmem::relinquishAllocPermit();
  out[threadIdx.x] = sm100::tmem::address(base[0], threadIdx.x % sm100::tmem::kLanes, kOColumn / 2) ^ base[1];
  sm100::fence::beforeThreadSync();
  __syncthreads();
  sm100::fence::afterThreadSync();
  if (warp == 0)
    sm100::tmem::dealloc<256>(base[0]);
  else if (warp == 1)
    sm100::tmem::dealloc<32>(base[1]);
}

// Tensor-memory access by a warpgroup: each warp loads 32 fp32 scores of its 32 lanes, packs them to bf16 P and
// stores P over S, then reads 8 columns of O.
extern "C" __global__ void tmemAccess(unsigned base, float *out) {
  unsigned s[32];
  sm100::tmem::Access32x32b<32>::load(sm100::tmem::warpAddress(base, kSColumn), s);
  sm100::tmem::waitLoad();
  sm100::tmem::fenceRegisters(s);
  unsigned p[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    p[i] = i % 2 ? sm100::pack::f16x2(__uint_as_float(s[2 * i]), __uint_as_float(s[2 * i + 1]))
                 : sm100::pack::bf16x2(__uint_as_float(s[2 * i]), __uint_as_float(s[2 * i + 1]));
  sm100::tmem::Access32x32b<16>::store(sm100::tmem::warpAddress(base, kPColumn), p);
  sm100::tmem::waitStore();
  unsigned o[8];
  sm100::tmem::Access32x32b<8>::load(sm100::tmem::warpAddress(base, kOColumn), o);
  sm100::tmem::waitLoad();
  sm100::tmem::fenceRegisters(o);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    sum += __uint_as_float(o[i]);
  out[threadIdx.x] = sum;
}

// Register tiles in fragment layouts: each warp of a warpgroup loads its 32 rows of 128 fp32 scores as two 16-row
// accesses of 16 C fragments (tcgen05.ld.16x256b), packs them into 8 A fragments of bf16 P per 16 rows and stores
// them over S (tcgen05.st.16x128b): the layouts of the common register-tile math (FragmentTiles.h).
extern "C" __global__ void fragmentAccess(unsigned base, float *out) {
  float sum = 0.0f;
#pragma unroll
  for (unsigned half = 0; half < 2; ++half) {
    float c[16][4];
    sm100::tmem::Fragments<16>::loadC(sm100::tmem::warpHalfAddress(base, half, kSColumn), c);
    sm100::tmem::waitLoad();
    sm100::tmem::Fragments<16>::fenceC(c);
    unsigned a[8][4];
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[k][i] = sm100::pack::bf16x2(c[2 * k + i / 2][2 * (i % 2)], c[2 * k + i / 2][2 * (i % 2) + 1]);
        sum += c[2 * k + i / 2][2 * (i % 2)];
      }
    sm100::tmem::Fragments<16>::storeA(sm100::tmem::warpHalfAddress(base, half, kPColumn), a);
  }
  sm100::tmem::waitStore();
  out[threadIdx.x] = sum;
}

// MMA issue: one elected thread of the MMA warp issues S = Q·Kᵀ (SS, 8 k16 steps over a 128-column head dim) and
// commits it to an mbarrier, then O += P·V (TS, P in tensor memory, 8 k16 steps over 128 keys) and commits again.
extern "C" __global__ void mmaIssue(unsigned tmemBase, unsigned *out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ sm100::Mbarrier sReady, oReady;
  unsigned char *q = smem, *k = smem + kTileBytes, *v = smem + 2 * kTileBytes;
  if (threadIdx.x == 0) {
    sm100::mbarrier::init(&sReady, 1);
    sm100::mbarrier::init(&oReady, 1);
    sm100::mbarrier::initFence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == 0) {
    if (sm100::warp::elect()) {
      const unsigned long long qDesc = sm100::desc::make(kKMajorFields, sm100::smemAddress(q));
      const unsigned long long kDesc = sm100::desc::make(kKMajorFields, sm100::smemAddress(k));
#pragma unroll
      for (unsigned step = 0; step < 8; ++step) {
        const unsigned offset = (step / 4) * kBlockBytes + (step % 4) * 32;
        sm100::mma::f16SS(tmemBase + kSColumn, sm100::desc::advance(qDesc, offset), sm100::desc::advance(kDesc, offset),
                          kIdescQK, step);
      }
      sm100::mma::commit(&sReady);
#pragma unroll
      for (unsigned step = 0; step < 8; ++step)
        sm100::mma::f16TS(tmemBase + kOColumn, tmemBase + kPColumn + 8 * step,
                          sm100::desc::make(kMnMajorFields, sm100::smemAddress(v) + step * 2048), kIdescPV, 1);
      sm100::mma::commit(&oReady);
    }
    __syncwarp();
  }
  sm100::mbarrier::wait(&sReady, 0);
  sm100::fence::afterThreadSync();
  while (!sm100::mbarrier::tryWait(&oReady, 0)) {
  }
  sm100::fence::afterThreadSync();
  unsigned o[8];
  sm100::tmem::Access32x32b<8>::load(sm100::tmem::warpAddress(tmemBase, kOColumn), o);
  sm100::tmem::waitLoad();
  sm100::tmem::fenceRegisters(o);
  out[threadIdx.x] = o[0] ^ o[7];
}

// TMA and mbarriers: a producer warp fills a two-slot ring of K tiles (two column blocks each) on full barriers;
// the consumer warps release slots on empty barriers; then one thread stores a tile back.
extern "C" __global__ void tmaLoads(const __grid_constant__ sm100::TensorMap kMap,
                                    const __grid_constant__ sm100::TensorMap oMap, int tiles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  __shared__ sm100::Mbarrier full[2], empty[2];
  constexpr unsigned kConsumerWarps = 3;
  if (threadIdx.x == 0) {
    for (int slot = 0; slot < 2; ++slot) {
      sm100::mbarrier::init(&full[slot], 1);
      sm100::mbarrier::init(&empty[slot], kConsumerWarps);
    }
    sm100::mbarrier::initFence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == 0) {
    if (sm100::warp::elect()) {
      sm100::tma::prefetchDescriptor(&kMap);
      for (int t = 0; t < tiles; ++t) {
        const int slot = t % 2;
        if (t >= 2)
          sm100::mbarrier::wait(&empty[slot], ((t / 2) - 1) & 1);
        sm100::mbarrier::arriveExpectTx(&full[slot], kTileBytes);
        for (int block = 0; block < 2; ++block)
          sm100::tma::load5d(smem + slot * kTileBytes + block * kBlockBytes, &kMap, &full[slot], 0, t * 128, block, 0,
                             blockIdx.x);
      }
    }
  } else {
    for (int t = 0; t < tiles; ++t) {
      const int slot = t % 2;
      sm100::mbarrier::wait(&full[slot], (t / 2) & 1);
      __syncwarp();
      if (sm100::warp::elect())
        sm100::mbarrier::arrive(&empty[slot]);
    }
  }
  sm100::fence::proxyAsync();
  __syncthreads();
  if (threadIdx.x == 0) {
    sm100::tma::store5d(&oMap, smem, 0, 0, 0, 0, blockIdx.x);
    sm100::tma::storeCommit();
    sm100::tma::storeWaitRead<0>();
  }
}

// The software exp2, scalar and packed.
extern "C" __global__ void softwareExp2(float *x, int n) {
  const int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 1 < n) {
    float a = x[i], b = x[i + 1];
    sm100::math::exp2Poly3x2(a, b);
    x[i] = a;
    x[i + 1] = b;
  } else if (i < n) {
    x[i] = sm100::math::exp2Poly3(x[i]);
  }
}
)cuda";

/// The fragment accesses the exercise kernels use: 16 n8 tiles (128 score columns, 8 k16 steps of P).
constexpr std::array<int, 1> kExerciseFragmentTiles = {16};

std::string exerciseSource() {
  return sm100::prelude(kExerciseWidths, kExerciseFragmentTiles) + descriptorConstants() + kExerciseKernels;
}

TEST(Sm100Prelude, EveryPrimitiveCompilesToACubinForSm100a) {
  StatusOr<std::string> cubin = compileCuda(exerciseSource(), "sm100_exercise.cu", sm100::kArch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  EXPECT_TRUE(std::string_view(*cubin).starts_with("\x7f"
                                                   "ELF"));
}

TEST(Sm100Prelude, PtxHasTheSm100Instructions) {
  StatusOr<std::string> ptx = compileCuda(exerciseSource(), "sm100_exercise.cu", sm100::kArch, NvrtcOutput::Ptx);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  for (const char *instruction : {"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32",
                                  "tcgen05.dealloc.cta_group::1.sync.aligned.b32",
                                  "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned",
                                  "tcgen05.fence::before_thread_sync",
                                  "tcgen05.fence::after_thread_sync",
                                  "tcgen05.ld.sync.aligned.32x32b.x32.b32",
                                  "tcgen05.ld.sync.aligned.32x32b.x8.b32",
                                  "tcgen05.ld.sync.aligned.16x256b.x16.b32",
                                  "tcgen05.st.sync.aligned.16x128b.x16.b32",
                                  "tcgen05.st.sync.aligned.32x32b.x16.b32",
                                  "tcgen05.wait::ld.sync.aligned",
                                  "tcgen05.wait::st.sync.aligned",
                                  "tcgen05.mma.cta_group::1.kind::f16",
                                  "tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64",
                                  "mbarrier.init.shared::cta.b64",
                                  "fence.mbarrier_init.release.cluster",
                                  "mbarrier.arrive.shared::cta.b64",
                                  "mbarrier.arrive.expect_tx.shared::cta.b64",
                                  "mbarrier.try_wait.parity.shared::cta.b64",
                                  "cp.async.bulk.tensor.5d.shared::cluster.global.mbarrier::complete_tx::bytes",
                                  "cp.async.bulk.tensor.5d.global.shared::cta.bulk_group",
                                  "cp.async.bulk.commit_group",
                                  "cp.async.bulk.wait_group.read",
                                  "prefetch.tensormap",
                                  "fence.proxy.async.shared::cta",
                                  "elect.sync",
                                  "cvt.rn.bf16x2.f32",
                                  "cvt.rn.f16x2.f32",
                                  "add.rm.f32x2",
                                  "fma.rn.f32x2"})
    EXPECT_THAT(*ptx, HasSubstr(instruction));
  // Both MMA forms: descriptors for A (SS) and a tensor-memory address for A (TS).
  EXPECT_THAT(*ptx, testing::ContainsRegex("tcgen05\\.mma\\.cta_group::1\\.kind::f16 \\[%r[0-9]+\\], %rd[0-9]+"));
  EXPECT_THAT(*ptx, testing::ContainsRegex("tcgen05\\.mma\\.cta_group::1\\.kind::f16 \\[%r[0-9]+\\], \\[%r[0-9]+\\]"));
}

TEST(Sm100Prelude, EveryTmemWidthCompiles) {
  // Each width's load and store, through ptxas.
  std::string source = sm100::prelude(sm100::kTmemAccessWidths) + R"cuda(
template <int kWidth>
__device__ void roundTrip(unsigned base, unsigned *out) {
  unsigned r[kWidth];
  sm100::tmem::Access32x32b<kWidth>::load(sm100::tmem::warpAddress(base, 0), r);
  sm100::tmem::waitLoad();
  sm100::tmem::fenceRegisters(r);
  for (int i = 0; i < kWidth; ++i)
    r[i] += out[i];
  sm100::tmem::Access32x32b<kWidth>::store(sm100::tmem::warpAddress(base, kWidth), r);
  sm100::tmem::waitStore();
}
extern "C" __global__ void widths(unsigned base, unsigned *out) {
)cuda";
  for (int width : sm100::kTmemAccessWidths)
    source += "  roundTrip<" + std::to_string(width) + ">(base, out);\n";
  source += "}\n";
  StatusOr<std::string> cubin = compileCuda(source, "sm100_widths.cu", sm100::kArch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
}

TEST(Sm100Prelude, PrintsEachWidthOnceAndRejectsBadWidths) {
  const std::string text = sm100::prelude(std::vector<int>{16, 32, 16});
  size_t count = 0;
  for (size_t at = text.find("struct Access32x32b<16>"); at != std::string::npos;
       at = text.find("struct Access32x32b<16>", at + 1))
    ++count;
  EXPECT_EQ(count, 1u);
  EXPECT_THAT(text, HasSubstr("struct Access32x32b<32>"));
  for (int bad : {0, 3, 256}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(sm100::tmemAccessText(bad), HasSubstr("#error \"tcgen05.ld/st .32x32b.xN: N = " + std::to_string(bad) +
                                                      " is not a power of two in [1, 128]\""));
  }
  StatusOr<std::string> ptx =
      compileCuda(sm100::prelude(std::vector<int>{8, 24}), "bad_width.cu", sm100::kArch, NvrtcOutput::Ptx);
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("N = 24 is not a power of two"));
}

TEST(Sm100Prelude, AWidthNotPrintedFailsWithItsName) {
  const std::string source = sm100::prelude(std::vector<int>{8}) + R"cuda(
extern "C" __global__ void k(unsigned base, unsigned *out) {
  unsigned r[4];
  sm100::tmem::Access32x32b<4>::load(base, r);
  out[0] = r[0];
}
)cuda";
  StatusOr<std::string> ptx = compileCuda(source, "missing_width.cu", sm100::kArch, NvrtcOutput::Ptx);
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("this tcgen05 32x32b width was not printed into the prelude"));
}

TEST(Sm100Prelude, AllocationSizesAreChecked) {
  const std::string source = sm100::prelude(std::vector<int>{}) + R"cuda(
extern "C" __global__ void k() {
  __shared__ unsigned base;
  sm100::tmem::alloc<48>(&base);
}
)cuda";
  StatusOr<std::string> ptx = compileCuda(source, "bad_alloc.cu", sm100::kArch, NvrtcOutput::Ptx);
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("tcgen05.alloc: a power of two of columns in [32, 512]"));
}

TEST(Sm100Prelude, NeedsSm100a) {
  for (const char *arch : {"sm_80", "sm_90a", "sm_100"}) {
    SCOPED_TRACE(arch);
    StatusOr<std::string> ptx = compileCuda(exerciseSource(), "sm100_exercise.cu", arch, NvrtcOutput::Ptx);
    ASSERT_FALSE(ptx.ok());
    EXPECT_THAT(ptx.status().message(),
                HasSubstr("the sm100 prelude (tcgen05, tensor memory) needs --gpu-architecture=sm_100a"));
  }
}

TEST(Sm100Prelude, Exp2CoefficientsAreTheHostTwins) {
  // The device constants are printed from the host's: each literal reads back as the same float.
  const std::string text = sm100::exp2PolyText();
  for (float value : {sm100::kExp2PolyC0, sm100::kExp2PolyC1, sm100::kExp2PolyC2, sm100::kExp2PolyC3,
                      sm100::kExp2PolyMinInput, sm100::kExp2PolyRoundingShift}) {
    const std::string literal = sm100::hexFloatLiteral(value);
    SCOPED_TRACE(literal);
    EXPECT_THAT(text, HasSubstr(" = " + literal + ";"));
    EXPECT_EQ(std::strtof(literal.c_str(), nullptr), value);
  }
}

/// nvdisasm: FLASHTILE_NVDISASM, else PATH, else the pip wheel scripts/sm100-sass.sh unpacks under .whl/nvdisasm.
std::string nvdisasmPath() {
  const char *fromEnvironment = std::getenv("FLASHTILE_NVDISASM");
  if (fromEnvironment != nullptr && *fromEnvironment != '\0')
    return fromEnvironment;
  if (std::system("command -v nvdisasm >/dev/null 2>&1") == 0)
    return "nvdisasm";
  const std::filesystem::path wheel = std::filesystem::path(FLASHTILE_SOURCE_DIR) / ".whl/nvdisasm/nvidia";
  std::error_code error;
  for (const auto &entry : std::filesystem::recursive_directory_iterator(wheel, error))
    if (entry.path().filename() == "nvdisasm" && entry.is_regular_file())
      return entry.path().string();
  return {};
}

/// Runs `command` and returns what it printed, or nothing when it failed.
std::optional<std::string> capture(const std::string &command) {
  FILE *pipe = popen(command.c_str(), "r");
  if (pipe == nullptr)
    return std::nullopt;
  std::string output;
  std::array<char, 4096> chunk;
  while (size_t n = std::fread(chunk.data(), 1, chunk.size(), pipe))
    output.append(chunk.data(), n);
  if (pclose(pipe) != 0)
    return std::nullopt;
  return output;
}

TEST(Sm100Prelude, SassHasTcgen05Instructions) {
  const std::string nvdisasm = nvdisasmPath();
  if (nvdisasm.empty())
    GTEST_SKIP() << "nvdisasm not found (set FLASHTILE_NVDISASM, or run scripts/sm100-sass.sh to unpack the pip "
                    "wheel); the SASS check is optional";
  StatusOr<std::string> cubin = compileCuda(exerciseSource(), "sm100_exercise.cu", sm100::kArch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  // scripts/sm100-sass.sh asks for the cubin (FLASHTILE_SM100_CUBIN) to report the opcodes itself.
  const char *keep = std::getenv("FLASHTILE_SM100_CUBIN");
  const std::filesystem::path file =
      keep != nullptr && *keep != '\0'
          ? std::filesystem::path(keep)
          : std::filesystem::temp_directory_path() / ("flashtile-sm100-" + std::to_string(getpid()) + ".cubin");
  std::ofstream(file, std::ios::binary).write(cubin->data(), std::streamsize(cubin->size()));
  const std::optional<std::string> sass = capture("'" + nvdisasm + "' -c '" + file.string() + "' 2>&1");
  if (keep == nullptr || *keep == '\0')
    std::filesystem::remove(file);
  ASSERT_TRUE(sass.has_value()) << nvdisasm << " failed on the sm_100a cubin";
  // The opcodes ptxas 13 emits for sm_100a: UTCHMMA (tcgen05.mma kind::f16, both forms), UTCBAR (tcgen05.commit),
  // LDTM/STTM (tcgen05.ld/st), UTCATOMSWS (tcgen05.alloc's column search), FFMA2/FADD2 (the packed exp2).
  std::string missing;
  for (const char *opcode : {"UTCHMMA", "UTCBAR", "LDTM", "STTM", "UTCATOMSWS", "FFMA2", "FADD2.RM", "UTMALDG.5D",
                             "UTMASTG.5D", "UTMACCTL.PF", "SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64",
                             "SYNCS.PHASECHK.TRANS64", "ELECT", "FENCE.VIEW.ASYNC.S"})
    if (sass->find(opcode) == std::string::npos)
      missing += std::string(missing.empty() ? "" : ", ") + opcode;
  EXPECT_TRUE(missing.empty()) << "not in the SASS (" << sass->size() << " characters from " << nvdisasm
                               << "): " << missing;
  // No local-memory traffic: the wrappers keep every operand in registers.
  EXPECT_THAT(*sass, testing::Not(testing::ContainsRegex("[[:space:]](LDL|STL)[. ]")));
}

} // namespace
