// Sm90PrimitivesTest.cpp — the sm90 device prelude (codegen/sm90/PreludeSm90.h) and the runtime's TMA descriptors
// (runtime TensorMap.h) on a real sm_90 GPU, through small hand-written kernels compiled with NVRTC:
//   TmaTile     a tile of a BSHD tensor (64x64, 128x128, partial head dim, padded strides, rows past the end; 128-,
//               64- and 32-byte swizzle) TMA-loaded into shared memory under an mbarrier with expect_tx, read back
//               through the prelude's swizzleOffset and as the raw shared-memory image (against the README's formula),
//               then TMA-stored to a second tensor; all exact (one case re-points an encoded map at its tensor
//               with cuTensorMapReplaceAddress).
//   WgmmaChain  S = Q·Kᵀ with SS wgmmas (both operands K-major in shared memory), P = S rounded to bf16/f16 in
//               registers (the accumulator as an RS A operand), O = P·V with RS wgmmas (V MN-major), O stored through
//               stmatrix + TMA; against a CPU reference — exact on small-integer inputs, within fp32 accumulation
//               error on normal ones; head dims 64-256 with 128-byte swizzle, 96 and 32 with 64-byte, 64 with 32-byte.
//   Ring        a producer warp (its warpgroup at 24 registers) TMA-loads tiles into a 2- or 3-slot ring guarded by
//               full/empty mbarriers; two consumer warpgroups (setmaxnreg to 240) sum their halves of every tile;
//               checked exactly, with slow consumers so the producer must wait on the empty barriers.
//   PipelinedGemms  the ring feeding wgmma: K and V tiles per slot, two consumer warpgroups computing
//               O = Σ_t round(Q·K_tᵀ)·V_t straight from the slots (release after the retiring wgmma wait),
//               optionally taking turns through named barriers (ping-pong); exact on small-integer inputs.
// Every mbarrier wait in the kernels is bounded: a barrier that never completes sets a flag the test reports. Named
// barriers cannot be bounded; a watchdog ends the process if a kernel still hangs (FLASHTILE_TEST_CASE_TIMEOUT
// seconds, default 60). Without a GPU, Sm90Kernels compiles every test kernel for sm_90a and the rest skips.
//
// Environment: FLASHTILE_REQUIRE_GPU=1 makes a missing sm_90 GPU a failure instead of a skip;
// FLASHTILE_SM90_CUBIN_DIR=DIR writes every test kernel's cubin there (bench/device/run-sm90-tests.sh dumps their
// SASS); FLASHTILE_TEST_SEED replays the random inputs.
#include "GpuReference.h"
#include "GpuTestSupport.h"

#include "codegen/sm90/PreludeSm90.h"
#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Nvrtc.h"
#include "flashtile/runtime/TensorMap.h"

#include <gtest/gtest.h>

#include <ostream>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

using namespace flashtile;
using namespace flashtile::gpu_test;
namespace prelude = flashtile::codegen::sm90;

namespace {

// ---------------------------------------------------------------------------------------------------------------
// Host functions.

/// Round to nearest even of an fp32 value to bf16 / f16 bits (finite inputs).
uint16_t floatToBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
uint16_t floatToF16(float value) {
  // Through the exact decode: try the two neighbours of a truncation and keep the nearer (ties to even).
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const float magnitude = std::fabs(value);
  if (magnitude >= 65520.0f) // rounds past the largest f16, 65504
    return uint16_t(sign | 0x7c00u);
  uint16_t best = 0;
  double bestError = INFINITY;
  // f16 magnitudes are monotonic in their bit patterns: binary search for the largest not above |value|.
  uint32_t lo = 0, hi = 0x7c00u;
  while (lo + 1 < hi) {
    const uint32_t mid = (lo + hi) / 2;
    if (reference::f16ToFloat(uint16_t(mid)) <= magnitude)
      lo = mid;
    else
      hi = mid;
  }
  for (uint32_t candidate : {lo, lo + 1}) {
    if (candidate > 0x7bffu)
      continue;
    const double error = std::fabs(double(reference::f16ToFloat(uint16_t(candidate))) - magnitude);
    if (error < bestError || (error == bestError && (candidate & 1u) == 0)) {
      bestError = error;
      best = uint16_t(candidate);
    }
  }
  return uint16_t(best | sign);
}
uint16_t toBits(float value, DType dtype) { return dtype == DType::BF16 ? floatToBf16(value) : floatToF16(value); }

// ---------------------------------------------------------------------------------------------------------------
// The GPU, found once.

/// How long one case may run before the watchdog ends the process (FLASHTILE_TEST_CASE_TIMEOUT overrides it).
constexpr double kCaseTimeoutSeconds = 60;

/// The GPU; cases skip on any but an sm_90 one.
const GpuState &gpu() {
  static const GpuState instance = [] {
    GpuState g;
    if (!findGpu(g, /*withReference=*/false))
      return g;
    if (g.arch != "sm_90a")
      g.noGpuReason = "the sm90 primitives need a compute capability 9.0 GPU (sm_90a); this one runs " + g.arch;
    std::string nvrtc = nvrtcVersion().ok() ? *nvrtcVersion() : "?";
    std::printf("[flashtile-sm90] arch %s, NVRTC %s, base seed %llu (FLASHTILE_TEST_SEED replays it)\n", g.arch.c_str(),
                nvrtc.c_str(), static_cast<unsigned long long>(baseSeed()));
    return g;
  }();
  return instance;
}

Status check(CUresult result, const std::string &call) { return gpu().driver->check(result, call); }

/// Device memory holding a host vector's bytes.
template <class T> StatusOr<reference::DeviceBuffer> upload(const std::vector<T> &host) {
  reference::DeviceBuffer buffer;
  if (Status s = buffer.allocate(host.size() * sizeof(T)); !s.ok())
    return s;
  if (!host.empty())
    if (Status s = check(gpu().driver->cuMemcpyHtoD_v2(buffer.address(), host.data(), host.size() * sizeof(T)),
                         "cuMemcpyHtoD");
        !s.ok())
      return s;
  return StatusOr<reference::DeviceBuffer>(std::move(buffer));
}

/// A compiled test kernel, unloaded on destruction.
class Kernel {
public:
  Kernel() = default;
  Kernel(const Kernel &) = delete;
  Kernel &operator=(const Kernel &) = delete;
  ~Kernel() {
    if (module)
      gpu().driver->cuModuleUnload(module);
  }

  /// Compiles `source` for sm_90a and loads `entry` from it; with FLASHTILE_SM90_CUBIN_DIR the cubin is kept as
  /// <label>.cubin there.
  Status load(const std::string &source, const std::string &entry, const std::string &label) {
    StatusOr<std::string> cubin = compileCuda(source, label + ".cu", "sm_90a", NvrtcOutput::Cubin);
    if (!cubin.ok())
      return cubin.status();
    if (const char *dir = std::getenv("FLASHTILE_SM90_CUBIN_DIR"); dir && *dir) {
      std::filesystem::create_directories(dir);
      std::ofstream(std::filesystem::path(dir) / (label + ".cubin"), std::ios::binary)
          .write(cubin->data(), std::streamsize(cubin->size()));
    }
    if (Status s = check(gpu().driver->cuModuleLoadData(&module, cubin->data()), "cuModuleLoadData(" + label + ")");
        !s.ok())
      return s;
    return check(gpu().driver->cuModuleGetFunction(&function, module, entry.c_str()),
                 "cuModuleGetFunction(" + entry + ")");
  }

  /// Launches one block of `threads` with `smemBytes` of dynamic shared memory and waits for it.
  Status run(int threads, int smemBytes, std::vector<void *> args) const {
    const CudaDriver &d = *gpu().driver;
    if (Status s = check(d.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smemBytes),
                         "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
        !s.ok())
      return s;
    if (Status s = check(d.cuLaunchKernel(function, 1, 1, 1, threads, 1, 1, smemBytes, nullptr, args.data(), nullptr),
                         "cuLaunchKernel");
        !s.ok())
      return s;
    return reference::synchronize("the test kernel");
  }

private:
  CUmodule module = nullptr;
  CUfunction function = nullptr;
};

/// Device code shared by the test kernels: 1024-byte alignment of dynamic shared memory (128-byte swizzle needs
/// it) and waits that give up after ~seconds and raise a flag instead of hanging the GPU.
constexpr const char *kTestSupport = R"cuda(
__device__ __forceinline__ unsigned char *alignSwizzleAtom(unsigned char *smem) {
  const unsigned address = sm90::smemAddress(smem);
  return smem + ((sm90::kSwizzleAtomBytes - address % sm90::kSwizzleAtomBytes) % sm90::kSwizzleAtomBytes);
}
__device__ __forceinline__ void boundedWait(sm90::Mbarrier *bar, unsigned parity, unsigned *flag, unsigned code) {
  for (long long i = 0; i < (1ll << 22); ++i)
    if (sm90::mbarrier::tryWait(bar, parity))
      return;
  atomicOr(flag, code);
}
)cuda";

/// The README's swizzle, written independently of the prelude: byte offset of element (row, col) of a `rows`-row
/// tile of 16-bit elements stored as column blocks of `span`-byte rows (span 128, 64 or 32).
size_t swizzledByteOffset(int row, int col, int rows, int span) {
  const int columns = span / 2, block = col / columns, byteInRow = (col % columns) * 2;
  const int chunk = (byteInRow / 16) ^ ((row * span / 128) % (span / 16));
  return (size_t(block) * rows + row) * span + size_t(chunk) * 16 + byteInRow % 16;
}

/// A BSHD tensor on the host, with its strides (elements), filled with random 16-bit values.
struct HostTensor {
  int batch = 1, seqlen = 1, heads = 1, headDim = 64;
  std::array<long long, 4> strides{};
  std::vector<uint16_t> bits;

  size_t index(int b, int s, int h, int d) const {
    return size_t(b * strides[0] + s * strides[1] + h * strides[2] + d);
  }
  size_t elements() const { return size_t(batch * strides[0]); }
};

HostTensor makeTensor(int batch, int seqlen, int heads, int headDim, int headPad, DType dtype, std::mt19937_64 &rng,
                      bool integers) {
  HostTensor t;
  t.batch = batch;
  t.seqlen = seqlen;
  t.heads = heads;
  t.headDim = headDim;
  const long long headStride = headDim + headPad;
  t.strides = {seqlen * heads * headStride, heads * headStride, headStride, 1};
  t.bits.assign(t.elements(), 0);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> small(-3, 3);
  for (uint16_t &bits : t.bits)
    bits = toBits(integers ? float(small(rng)) : normal(rng), dtype);
  return t;
}

AttentionTileSpec tileSpec(const char *name, DType dtype, const HostTensor &t, const reference::DeviceBuffer &data,
                           int boxRows, int boxHeadDim = 0, TmaSwizzle swizzle = TmaSwizzle::Bytes128) {
  AttentionTileSpec spec;
  spec.name = name;
  spec.dtype = dtype;
  spec.data = data.as<void>();
  spec.batch = t.batch;
  spec.seqlen = t.seqlen;
  spec.heads = t.heads;
  spec.headDim = t.headDim;
  spec.strides = t.strides;
  spec.boxRows = boxRows;
  spec.boxHeadDim = boxHeadDim;
  spec.swizzle = swizzle;
  return spec;
}

std::string flagText(unsigned flag) {
  return flag == 0 ? "none" : "a bounded wait gave up (flag " + std::to_string(flag) + "): a barrier never completed";
}

// ---------------------------------------------------------------------------------------------------------------
// TMA tile round trip.

constexpr const char *kTmaTileKernel = R"cuda(
extern "C" __global__ void __launch_bounds__(128, 1)
tmaTile(const __grid_constant__ sm90::TensorMap in, const __grid_constant__ sm90::TensorMap out,
        unsigned short *image, unsigned short *tile, int rows, int cols, int row0, int block0, int head, int batch,
        unsigned *flag) {
  extern __shared__ unsigned char smemRaw[];
  unsigned char *smem = alignSwizzleAtom(smemRaw);
  __shared__ sm90::Mbarrier loaded;
  const unsigned bytes = unsigned(rows) * unsigned(cols) * 2u;
  if (threadIdx.x == 0) {
    sm90::mbarrier::init(&loaded, 1);
    sm90::mbarrier::initFence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == 0 && sm90::warp::elect()) {
    sm90::tma::prefetchDescriptor(&in);
    sm90::mbarrier::arriveExpectTx(&loaded, bytes);
    sm90::tma::load5d(smem, &in, &loaded, 0, row0, block0, head, batch);
  }
  boundedWait(&loaded, 0, flag, 1u);
  const unsigned short *elements = reinterpret_cast<const unsigned short *>(smem);
  for (unsigned i = threadIdx.x; i < bytes / 2u; i += blockDim.x)
    image[i] = elements[i];
  for (int i = threadIdx.x; i < rows * cols; i += blockDim.x)
    tile[i] = elements[sm90::swizzleOffset<kSwizzle>(i / cols, i % cols, rows) / 2u];
  __syncthreads();
  if (threadIdx.x == 0) {
    sm90::tma::store5d(&out, smem, 0, row0, block0, head, batch);
    sm90::tma::storeCommit();
    sm90::tma::storeWait<0>();
  }
}
)cuda";

std::string tmaTileSource(TmaSwizzle swizzle) {
  std::string source = prelude::prelude({}) + kTestSupport;
  source.append("constexpr int kSwizzle = ").append(std::to_string(tmaSwizzleBytes(swizzle))).append(";\n");
  return source.append(kTmaTileKernel);
}

struct TmaCase {
  const char *name;
  DType dtype;
  int batch, seqlen, heads, headDim, headPad;
  int boxRows, boxHeadDim; // boxHeadDim 0: all of it
  int row0, block0, head, b;
  bool replaceAddress = false; // encode the input's map on another buffer, then point it at the input
  TmaSwizzle swizzle = TmaSwizzle::Bytes128;
};

// gtest prints a parameter in its test's name: the case's own name, not its bytes.
void PrintTo(const TmaCase &c, std::ostream *out) { *out << c.name; }

class TmaTile : public testing::TestWithParam<TmaCase> {};

TEST_P(TmaTile, LoadsSwizzledAndStoresBack) {
  REQUIRE_GPU();
  const TmaCase &c = GetParam();
  Watchdog watchdog("flashtile-sm90", std::string("TmaTile.") + c.name, kCaseTimeoutSeconds);
  std::mt19937_64 rng(baseSeed() ^ 0x1234);
  const HostTensor in = makeTensor(c.batch, c.seqlen, c.heads, c.headDim, c.headPad, c.dtype, rng, false);
  const int cols = c.boxHeadDim ? c.boxHeadDim : c.headDim;
  constexpr uint16_t kSentinel = 0x7fc1; // a NaN pattern neither dtype's random values produce
  std::vector<uint16_t> outInit(in.elements(), kSentinel);

  StatusOr<reference::DeviceBuffer> inDev = upload(in.bits), outDev = upload(outInit);
  ASSERT_TRUE(inDev.ok()) << inDev.status().message();
  ASSERT_TRUE(outDev.ok()) << outDev.status().message();
  reference::DeviceBuffer image, tile, flag;
  ASSERT_OK(image.allocate(size_t(c.boxRows) * cols * 2));
  ASSERT_OK(tile.allocate(size_t(c.boxRows) * cols * 2));
  ASSERT_OK(flag.allocate(4));
  ASSERT_OK(flag.fill(0));

  StatusOr<CUtensorMap> inMap = encodeAttentionTileMap(
      tileSpec("in", c.dtype, in, c.replaceAddress ? *outDev : *inDev, c.boxRows, c.boxHeadDim, c.swizzle));
  if (c.replaceAddress && inMap.ok())
    ASSERT_OK(replaceTensorMapAddress(*inMap, inDev->as<void>()));
  StatusOr<CUtensorMap> outMap =
      encodeAttentionTileMap(tileSpec("out", c.dtype, in, *outDev, c.boxRows, c.boxHeadDim, c.swizzle));
  ASSERT_TRUE(inMap.ok()) << inMap.status().message();
  ASSERT_TRUE(outMap.ok()) << outMap.status().message();

  Kernel kernel;
  ASSERT_OK(kernel.load(tmaTileSource(c.swizzle), "tmaTile", std::string("sm90_tma_tile_") + c.name));
  CUdeviceptr imagePtr = image.address(), tilePtr = tile.address(), flagPtr = flag.address();
  int rows = c.boxRows, colsArg = cols, row0 = c.row0, block0 = c.block0, head = c.head, b = c.b;
  ASSERT_OK(kernel.run(128, c.boxRows * cols * 2 + 1024,
                       {&*inMap, &*outMap, &imagePtr, &tilePtr, &rows, &colsArg, &row0, &block0, &head, &b, &flagPtr}));

  std::vector<unsigned> flagHost;
  ASSERT_OK(flag.download(flagHost));
  ASSERT_EQ(flagHost[0], 0u) << flagText(flagHost[0]);
  std::vector<uint16_t> imageHost, tileHost, outHost;
  ASSERT_OK(image.download(imageHost));
  ASSERT_OK(tile.download(tileHost));
  ASSERT_OK(outDev->download(outHost));

  const int span = tmaSwizzleBytes(c.swizzle), firstCol = c.block0 * span / 2; // block0 counts column blocks
  auto expected = [&](int r, int col) -> uint16_t {
    const int row = c.row0 + r;
    return row < c.seqlen ? in.bits[in.index(c.b, row, c.head, firstCol + col)] : uint16_t(0); // zero fill
  };
  long long tileWrong = 0, imageWrong = 0;
  for (int r = 0; r < c.boxRows; ++r)
    for (int col = 0; col < cols; ++col) {
      tileWrong += tileHost[size_t(r) * cols + col] != expected(r, col);
      imageWrong += imageHost[swizzledByteOffset(r, col, c.boxRows, span) / 2] != expected(r, col);
    }
  EXPECT_EQ(tileWrong, 0) << "elements read through sm90::swizzleOffset<" << span << "> that differ from the tensor";
  EXPECT_EQ(imageWrong, 0) << "shared-memory bytes not where the README's " << span << "-byte swizzle puts them";

  // The store wrote exactly the tile's in-range rows and columns; everything else keeps the sentinel.
  long long outWrong = 0;
  for (int bb = 0; bb < in.batch; ++bb)
    for (int s = 0; s < in.seqlen; ++s)
      for (int h = 0; h < in.heads; ++h)
        for (int d = 0; d < in.headDim; ++d) {
          const bool inTile =
              bb == c.b && h == c.head && s >= c.row0 && s < c.row0 + c.boxRows && d >= firstCol && d < firstCol + cols;
          const size_t i = in.index(bb, s, h, d);
          outWrong += outHost[i] != (inTile ? in.bits[i] : kSentinel);
        }
  for (size_t i = 0; i < outHost.size(); ++i) // padding between heads stays untouched too
    if (c.headPad && (i % size_t(in.strides[2])) >= size_t(in.headDim))
      outWrong += outHost[i] != kSentinel;
  EXPECT_EQ(outWrong, 0) << "elements of the stored tensor that differ from the tile or were written outside it";
  std::printf("[flashtile-sm90] TmaTile %s: tile %lld, image %lld, store %lld wrong %s\n", c.name, tileWrong,
              imageWrong, outWrong, tileWrong + imageWrong + outWrong == 0 ? "PASS" : "FAIL");
}

INSTANTIATE_TEST_SUITE_P(
    Sm90, TmaTile,
    testing::Values(
        TmaCase{"bf16_64x64", DType::BF16, 2, 256, 3, 64, 0, 64, 0, 64, 0, 2, 1},
        TmaCase{"bf16_128x128", DType::BF16, 1, 128, 2, 128, 0, 128, 0, 0, 0, 1, 0},
        TmaCase{"bf16_128x128_replaced_address", DType::BF16, 1, 256, 2, 128, 0, 128, 0, 128, 0, 0, 0, true},
        TmaCase{"f16_128x128_padded", DType::F16, 2, 300, 2, 128, 8, 128, 0, 128, 0, 0, 1},
        TmaCase{"bf16_rows_past_the_end", DType::BF16, 1, 100, 1, 128, 0, 64, 0, 64, 0, 0, 0},
        TmaCase{"bf16_hd256_second_block", DType::BF16, 1, 64, 1, 256, 0, 64, 64, 0, 1, 0, 0},
        TmaCase{"bf16_hd96_64B", DType::BF16, 2, 128, 2, 96, 0, 64, 0, 64, 0, 1, 1, false, TmaSwizzle::Bytes64},
        TmaCase{"f16_hd32_64B", DType::F16, 1, 96, 3, 32, 8, 64, 0, 0, 0, 2, 0, false, TmaSwizzle::Bytes64},
        TmaCase{"bf16_hd64_32B_third_block", DType::BF16, 1, 128, 1, 64, 0, 128, 16, 0, 2, 0, 0, false,
                TmaSwizzle::Bytes32}),
    [](const testing::TestParamInfo<TmaCase> &info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------------------------
// wgmma chain: S = Q·Kᵀ (SS), O = P·V (RS), O through stmatrix and a TMA store.

constexpr const char *kWgmmaChainKernel = R"cuda(
// kKeys, kHeadDim, kF16 and kSwizzle (the span in bytes) are defined ahead of this text.
extern "C" __global__ void __launch_bounds__(128, 1)
wgmmaChain(const __grid_constant__ sm90::TensorMap qMap, const __grid_constant__ sm90::TensorMap kMap,
           const __grid_constant__ sm90::TensorMap vMap, const __grid_constant__ sm90::TensorMap oMap, float *sOut,
           float *oOut, unsigned *flag) {
  extern __shared__ unsigned char smemRaw[];
  unsigned char *q = alignSwizzleAtom(smemRaw);
  unsigned char *k = q + 64 * kHeadDim * 2;
  unsigned char *v = k + kKeys * kHeadDim * 2;
  __shared__ sm90::Mbarrier loaded;
  if (threadIdx.x == 0) {
    sm90::mbarrier::init(&loaded, 1);
    sm90::mbarrier::initFence();
  }
  __syncthreads();
  if (threadIdx.x / 32 == 0 && sm90::warp::elect()) {
    sm90::mbarrier::arriveExpectTx(&loaded, (64 + 2 * kKeys) * kHeadDim * 2);
    sm90::tma::load5d(q, &qMap, &loaded, 0, 0, 0, 0, 0);
    sm90::tma::load5d(k, &kMap, &loaded, 0, 0, 0, 0, 0);
    sm90::tma::load5d(v, &vMap, &loaded, 0, 0, 0, 0, 0);
  }
  boundedWait(&loaded, 0, flag, 1u);

  // S = Q·Kᵀ: k16 step s reads 32 bytes into column block s / (kSwizzle / 32) of both K-major tiles.
  float s[kKeys / 2];
  sm90::warpgroup::fenceOperands(s);
  sm90::warpgroup::arrive();
#pragma unroll
  for (int step = 0; step < kHeadDim / 16; ++step) {
    const unsigned long long qDesc = sm90::desc::kMajorStep<kSwizzle>(sm90::smemAddress(q), step, 64);
    const unsigned long long kDesc = sm90::desc::kMajorStep<kSwizzle>(sm90::smemAddress(k), step, kKeys);
    if (kF16)
      sm90::warpgroup::Wgmma<kKeys>::f16SS<sm90::warpgroup::kKMajor>(s, qDesc, kDesc, step > 0);
    else
      sm90::warpgroup::Wgmma<kKeys>::bf16SS<sm90::warpgroup::kKMajor>(s, qDesc, kDesc, step > 0);
  }
  sm90::warpgroup::commitGroup();
  sm90::warpgroup::wait<0>();
  sm90::warpgroup::fenceOperands(s);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // d[4j + 2h + c] = D(16 * warp + lane / 4 + 8h, 8j + 2 * (lane % 4) + c)
  for (int i = 0; i < kKeys / 2; ++i) {
    const int j = i / 4, h = (i / 2) % 2, c = i % 2;
    sOut[(16 * warp + lane / 4 + 8 * h) * kKeys + 8 * j + 2 * (lane % 4) + c] = s[i];
  }

  // O = P·V: P is S rounded in registers; k16 step s reads key rows [16s, 16s + 16) of the MN-major V tile, whose
  // column blocks are kKeys * kSwizzle bytes apart (LBO).
  unsigned p[kKeys / 4];
  if (kF16)
    sm90::warpgroup::accumulatorToOperandF16<kKeys>(s, p);
  else
    sm90::warpgroup::accumulatorToOperandBf16<kKeys>(s, p);
  float o[kHeadDim / 2];
  sm90::warpgroup::fenceOperands(p);
  sm90::warpgroup::fenceOperands(o);
  sm90::warpgroup::arrive();
#pragma unroll
  for (int step = 0; step < kKeys / 16; ++step) {
    const unsigned a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
    const unsigned long long vDesc = sm90::desc::mnMajorStep<kSwizzle>(sm90::smemAddress(v), step, kKeys);
    if (kF16)
      sm90::warpgroup::Wgmma<kHeadDim>::f16RS<sm90::warpgroup::kMNMajor>(o, a, vDesc, step > 0);
    else
      sm90::warpgroup::Wgmma<kHeadDim>::bf16RS<sm90::warpgroup::kMNMajor>(o, a, vDesc, step > 0);
  }
  sm90::warpgroup::commitGroup();
  sm90::warpgroup::wait<0>();
  sm90::warpgroup::fenceOperands(o);
  for (int i = 0; i < kHeadDim / 2; ++i) {
    const int j = i / 4, h = (i / 2) % 2, c = i % 2;
    oOut[(16 * warp + lane / 4 + 8 * h) * kHeadDim + 8 * j + 2 * (lane % 4) + c] = o[i];
  }

  // Epilogue: O rounded into Q's tile (free now) with stmatrix, in the TMA layout, then one TMA store. Lane l gives
  // the address of row l % 8 of matrix l / 8: rows 16 * warp + 8 * ((l / 8) % 2) + l % 8, columns 16j + 8 * (l / 16).
  unsigned packed[kHeadDim / 4];
  if (kF16)
    sm90::warpgroup::accumulatorToOperandF16<kHeadDim>(o, packed);
  else
    sm90::warpgroup::accumulatorToOperandBf16<kHeadDim>(o, packed);
  __syncthreads(); // every warpgroup's wgmmas finished reading Q
  const int row = 16 * warp + 8 * ((lane / 8) % 2) + lane % 8;
#pragma unroll
  for (int j = 0; j < kHeadDim / 16; ++j) {
    const unsigned r[4] = {packed[4 * j], packed[4 * j + 1], packed[4 * j + 2], packed[4 * j + 3]};
    sm90::warp::stmatrixX4(sm90::smemAddress(q) + sm90::swizzleOffset<kSwizzle>(row, 16 * j + 8 * (lane / 16), 64), r);
  }
  sm90::fence::proxyAsync();
  sm90::namedBarrier::sync(1, 128);
  if (threadIdx.x == 0) {
    sm90::tma::store5d(&oMap, q, 0, 0, 0, 0, 0);
    sm90::tma::storeCommit();
    sm90::tma::storeWait<0>();
  }
}
)cuda";

struct WgmmaCase {
  DType dtype;
  int keys, headDim;
  bool integers; // small-integer inputs: every product and sum is exact in fp32
  TmaSwizzle swizzle = TmaSwizzle::Bytes128;
};

std::string wgmmaChainSource(const WgmmaCase &c) {
  std::string source = prelude::prelude(std::vector<int>{c.keys, c.headDim}) + kTestSupport;
  source.append("constexpr int kKeys = ").append(std::to_string(c.keys)).append(", kHeadDim = ");
  source.append(std::to_string(c.headDim)).append(", kSwizzle = ").append(std::to_string(tmaSwizzleBytes(c.swizzle)));
  source.append(";\nconstexpr bool kF16 = ");
  return source.append(c.dtype == DType::F16 ? "true" : "false").append(";\n").append(kWgmmaChainKernel);
}

std::string wgmmaCaseName(const testing::TestParamInfo<WgmmaCase> &info) {
  const WgmmaCase &c = info.param;
  std::string name(dtypeName(c.dtype));
  name.append("_keys").append(std::to_string(c.keys)).append("_hd").append(std::to_string(c.headDim));
  if (const int span = tmaSwizzleBytes(c.swizzle); span != 128)
    name.append("_").append(std::to_string(span)).append("B");
  return name.append(c.integers ? "_integers" : "_normal");
}

void PrintTo(const WgmmaCase &c, std::ostream *out) { *out << wgmmaCaseName({c, 0}); }

class WgmmaChain : public testing::TestWithParam<WgmmaCase> {};

TEST_P(WgmmaChain, MatchesCpuReference) {
  REQUIRE_GPU();
  const WgmmaCase &c = GetParam();
  const std::string name = wgmmaCaseName({c, 0});
  Watchdog watchdog("flashtile-sm90", "WgmmaChain." + name, kCaseTimeoutSeconds);
  std::mt19937_64 rng(baseSeed() ^ (uint64_t(c.keys) << 20) ^ (uint64_t(c.headDim) << 8) ^ uint64_t(c.integers));
  const HostTensor q = makeTensor(1, 64, 1, c.headDim, 0, c.dtype, rng, c.integers);
  const HostTensor k = makeTensor(1, c.keys, 1, c.headDim, 0, c.dtype, rng, c.integers);
  const HostTensor v = makeTensor(1, c.keys, 1, c.headDim, 0, c.dtype, rng, c.integers);
  std::vector<uint16_t> oInit(size_t(64) * c.headDim, 0x7fc1);
  StatusOr<reference::DeviceBuffer> qDev = upload(q.bits), kDev = upload(k.bits), vDev = upload(v.bits),
                                    oDev = upload(oInit);
  for (auto *buffer : {&qDev, &kDev, &vDev, &oDev})
    ASSERT_TRUE(buffer->ok()) << buffer->status().message();
  StatusOr<CUtensorMap> qMap = encodeAttentionTileMap(tileSpec("q", c.dtype, q, *qDev, 64, 0, c.swizzle));
  StatusOr<CUtensorMap> kMap = encodeAttentionTileMap(tileSpec("k", c.dtype, k, *kDev, c.keys, 0, c.swizzle));
  StatusOr<CUtensorMap> vMap = encodeAttentionTileMap(tileSpec("v", c.dtype, v, *vDev, c.keys, 0, c.swizzle));
  StatusOr<CUtensorMap> oMap = encodeAttentionTileMap(tileSpec("o", c.dtype, q, *oDev, 64, 0, c.swizzle));
  for (auto *map : {&qMap, &kMap, &vMap, &oMap})
    ASSERT_TRUE(map->ok()) << map->status().message();
  reference::DeviceBuffer sOut, oOut, flag;
  ASSERT_OK(sOut.allocate(size_t(64) * c.keys * 4));
  ASSERT_OK(oOut.allocate(size_t(64) * c.headDim * 4));
  ASSERT_OK(flag.allocate(4));
  ASSERT_OK(flag.fill(0));

  Kernel kernel;
  ASSERT_OK(kernel.load(wgmmaChainSource(c), "wgmmaChain", "sm90_wgmma_" + name));
  CUdeviceptr sPtr = sOut.address(), oPtr = oOut.address(), flagPtr = flag.address();
  const int smemBytes = (64 + 2 * c.keys) * c.headDim * 2 + 1024;
  ASSERT_OK(kernel.run(128, smemBytes, {&*qMap, &*kMap, &*vMap, &*oMap, &sPtr, &oPtr, &flagPtr}));
  std::vector<unsigned> flagHost;
  ASSERT_OK(flag.download(flagHost));
  ASSERT_EQ(flagHost[0], 0u) << flagText(flagHost[0]);
  std::vector<float> sHost, oHost;
  std::vector<uint16_t> oStored;
  ASSERT_OK(sOut.download(sHost));
  ASSERT_OK(oOut.download(oHost));
  ASSERT_OK(oDev->download(oStored));

  auto value = [&](const HostTensor &t, int row, int d) {
    return reference::lowToFloat(t.bits[t.index(0, row, 0, d)], c.dtype);
  };
  // Normal inputs: products are exact in fp32, the sums round; K · 2^-23 of the sum of |products| bounds even an
  // accumulator that truncates (K <= 256 here: 3e-5), so 1e-4 is safe while a layout mistake is off by O(1).
  auto tolerance = [&](double sumAbs) { return c.integers ? 0.0 : 1e-4 * sumAbs + 1e-6; };
  double sWorst = 0, oWorst = 0;
  long long sBad = 0, oBad = 0, storedBad = 0;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < c.keys; ++j) {
      double exact = 0, sumAbs = 0;
      for (int d = 0; d < c.headDim; ++d) {
        const double product = double(value(q, i, d)) * value(k, j, d);
        exact += product;
        sumAbs += std::fabs(product);
      }
      const double err = std::fabs(sHost[size_t(i) * c.keys + j] - exact);
      sWorst = std::max(sWorst, err);
      sBad += err > tolerance(sumAbs);
    }
  // P is the kernel's own S rounded to the dtype, as the RS operand holds it.
  for (int i = 0; i < 64; ++i)
    for (int d = 0; d < c.headDim; ++d) {
      double exact = 0, sumAbs = 0;
      for (int j = 0; j < c.keys; ++j) {
        const float p = reference::lowToFloat(toBits(sHost[size_t(i) * c.keys + j], c.dtype), c.dtype);
        const double product = double(p) * value(v, j, d);
        exact += product;
        sumAbs += std::fabs(product);
      }
      const float got = oHost[size_t(i) * c.headDim + d];
      const double err = std::fabs(got - exact);
      oWorst = std::max(oWorst, err);
      oBad += err > tolerance(sumAbs);
      storedBad += oStored[size_t(i) * c.headDim + d] != toBits(got, c.dtype);
    }
  EXPECT_EQ(sBad, 0) << "S = Q·Kᵀ elements off the reference (worst error " << sWorst << ")";
  EXPECT_EQ(oBad, 0) << "O = P·V elements off the reference (worst error " << oWorst << ")";
  EXPECT_EQ(storedBad, 0) << "O elements stored through stmatrix + TMA that differ from the rounded accumulator";
  std::printf("[flashtile-sm90] WgmmaChain %s: S worst %.3g (%lld bad), O worst %.3g (%lld bad), stored %lld bad %s\n",
              name.c_str(), sWorst, sBad, oWorst, oBad, storedBad, sBad + oBad + storedBad == 0 ? "PASS" : "FAIL");
}

std::vector<WgmmaCase> wgmmaCases() {
  std::vector<WgmmaCase> cases;
  for (DType dtype : {DType::BF16, DType::F16})
    for (auto [keys, headDim] :
         std::vector<std::pair<int, int>>{{64, 64}, {64, 128}, {128, 64}, {128, 128}, {64, 256}, {192, 64}})
      for (bool integers : {true, false})
        cases.push_back({dtype, keys, headDim, integers});
  // Head dims that are not multiples of 64 columns: narrower swizzle spans.
  for (DType dtype : {DType::BF16, DType::F16})
    for (bool integers : {true, false}) {
      cases.push_back({dtype, 64, 96, integers, TmaSwizzle::Bytes64});
      cases.push_back({dtype, 128, 32, integers, TmaSwizzle::Bytes64});
      cases.push_back({dtype, 64, 64, integers, TmaSwizzle::Bytes32});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Sm90, WgmmaChain, testing::ValuesIn(wgmmaCases()), wgmmaCaseName);

// ---------------------------------------------------------------------------------------------------------------
// Producer/consumer ring.

constexpr const char *kRingKernel = R"cuda(
// kStages is defined ahead of this text. Warpgroup 0: the producer (one elected thread of warp 0 issues TMA);
// warpgroups 1 and 2: consumers, each summing 32 rows of every 64 x 64 tile.
extern "C" __global__ void __launch_bounds__(384, 1)
ring(const __grid_constant__ sm90::TensorMap tilesMap, float *out, int tiles, int slowNs, unsigned *flag) {
  extern __shared__ unsigned char smemRaw[];
  unsigned char *slots = alignSwizzleAtom(smemRaw);
  constexpr unsigned kTileBytes = 64 * 64 * 2;
  constexpr unsigned kConsumerWarps = 8;
  __shared__ sm90::Mbarrier full[kStages], empty[kStages];
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      sm90::mbarrier::init(&full[i], 1);
      sm90::mbarrier::init(&empty[i], kConsumerWarps);
    }
    sm90::mbarrier::initFence();
  }
  __syncthreads();
  const int warpgroup = sm90::warpgroupIndex();
  if (warpgroup == 0) {
    sm90::warpgroup::decreaseRegisters<24>();
    if (threadIdx.x / 32 == 0 && sm90::warp::elect()) {
      for (int t = 0; t < tiles; ++t) {
        const int slot = t % kStages, lap = t / kStages;
        if (lap > 0) // the consumers released this slot's previous tile
          boundedWait(&empty[slot], (lap - 1) & 1, flag, 1u);
        sm90::mbarrier::arriveExpectTx(&full[slot], kTileBytes);
        sm90::tma::load5d(slots + slot * kTileBytes, &tilesMap, &full[slot], 0, t * 64, 0, 0, 0);
      }
    }
    return;
  }
  sm90::warpgroup::increaseRegisters<240>();
  const int thread = threadIdx.x % 128, firstRow = 32 * (warpgroup - 1);
  float sum[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    sum[i] = 0.0f;
  for (int t = 0; t < tiles; ++t) {
    const int slot = t % kStages, lap = t / kStages;
    boundedWait(&full[slot], lap & 1, flag, 2u);
    if (slowNs > 0 && thread == 0) // a slow consumer: the producer must wait for the slot, not overwrite it
      __nanosleep(slowNs);
    __syncwarp();
    const unsigned char *tile = slots + slot * kTileBytes;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int e = thread + 128 * i, row = firstRow + e / 64, col = e % 64;
      const unsigned offset = sm90::swizzle128Offset(row, col, 64);
      const unsigned short bits = *reinterpret_cast<const unsigned short *>(tile + offset);
      sum[i] += __uint_as_float(unsigned(bits) << 16);
    }
    __syncwarp();
    if (sm90::warp::elect())
      sm90::mbarrier::arrive(&empty[slot]);
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int e = thread + 128 * i;
    out[(firstRow + e / 64) * 64 + e % 64] = sum[i];
  }
}
)cuda";

std::string ringSource(int stages) {
  std::string source = prelude::prelude({}) + kTestSupport;
  return source.append("constexpr int kStages = ").append(std::to_string(stages)).append(";\n").append(kRingKernel);
}

struct RingCase {
  int stages, tiles, slowNs;
};

void PrintTo(const RingCase &c, std::ostream *out) {
  *out << c.stages << " stages, " << c.tiles << " tiles, " << c.slowNs << " ns";
}

class Ring : public testing::TestWithParam<RingCase> {};

TEST_P(Ring, ConsumersSumEveryTileExactly) {
  REQUIRE_GPU();
  const RingCase &c = GetParam();
  const std::string name =
      "stages" + std::to_string(c.stages) + "_tiles" + std::to_string(c.tiles) + (c.slowNs ? "_slow" : "");
  Watchdog watchdog("flashtile-sm90", "Ring." + name, kCaseTimeoutSeconds);
  std::mt19937_64 rng(baseSeed() ^ (uint64_t(c.stages) << 32) ^ uint64_t(c.tiles));
  const HostTensor tiles = makeTensor(1, 64 * c.tiles, 1, 64, 0, DType::BF16, rng, true);
  StatusOr<reference::DeviceBuffer> tilesDev = upload(tiles.bits);
  ASSERT_TRUE(tilesDev.ok()) << tilesDev.status().message();
  StatusOr<CUtensorMap> map = encodeAttentionTileMap(tileSpec("tiles", DType::BF16, tiles, *tilesDev, 64));
  ASSERT_TRUE(map.ok()) << map.status().message();
  reference::DeviceBuffer out, flag;
  ASSERT_OK(out.allocate(64 * 64 * 4));
  ASSERT_OK(out.fill(0xff));
  ASSERT_OK(flag.allocate(4));
  ASSERT_OK(flag.fill(0));

  Kernel kernel;
  ASSERT_OK(kernel.load(ringSource(c.stages), "ring", "sm90_ring_" + name));
  CUdeviceptr outPtr = out.address(), flagPtr = flag.address();
  int tileCount = c.tiles, slowNs = c.slowNs;
  ASSERT_OK(kernel.run(384, c.stages * 64 * 64 * 2 + 1024, {&*map, &outPtr, &tileCount, &slowNs, &flagPtr}));
  std::vector<unsigned> flagHost;
  ASSERT_OK(flag.download(flagHost));
  ASSERT_EQ(flagHost[0], 0u) << flagText(flagHost[0]);
  std::vector<float> outHost;
  ASSERT_OK(out.download(outHost));
  long long wrong = 0;
  for (int r = 0; r < 64; ++r)
    for (int col = 0; col < 64; ++col) {
      float expected = 0; // small integers: exact in any order
      for (int t = 0; t < c.tiles; ++t)
        expected += reference::bf16ToFloat(tiles.bits[tiles.index(0, 64 * t + r, 0, col)]);
      wrong += outHost[size_t(r) * 64 + col] != expected;
    }
  EXPECT_EQ(wrong, 0) << "sums that differ from the tiles' (a slot read before it was full or after it was refilled)";
  std::printf("[flashtile-sm90] Ring %s: %lld wrong %s\n", name.c_str(), wrong, wrong == 0 ? "PASS" : "FAIL");
}

INSTANTIATE_TEST_SUITE_P(Sm90, Ring,
                         testing::Values(RingCase{2, 1, 0}, RingCase{2, 2, 0}, RingCase{2, 7, 0}, RingCase{3, 16, 0},
                                         RingCase{2, 9, 20000}, RingCase{3, 10, 20000}),
                         [](const testing::TestParamInfo<RingCase> &info) {
                           return "stages" + std::to_string(info.param.stages) + "_tiles" +
                                  std::to_string(info.param.tiles) + (info.param.slowNs ? "_slow" : "");
                         });

// ---------------------------------------------------------------------------------------------------------------
// Pipelined GEMMs: the ring feeding wgmma. The producer warp loads K and V tiles into each slot under one full
// barrier; two consumer warpgroups, 64 Q rows each, compute S = Q·Kᵀ (SS) and O += P·V (RS) straight from the slot and
// release it after the wgmma wait that retires its reads — optionally taking turns to issue through two named
// barriers (FA3's ping-pong). No softmax: O = Σ_t round(Q·K_tᵀ)·V_t, exact on small-integer inputs.

constexpr const char *kPipelineKernel = R"cuda(
// kKeys, kHeadDim, kStages and kPingPong are defined ahead of this text.
extern "C" __global__ void __launch_bounds__(384, 1)
pipeline(const __grid_constant__ sm90::TensorMap qMap, const __grid_constant__ sm90::TensorMap kMap,
         const __grid_constant__ sm90::TensorMap vMap, float *oOut, int tiles, unsigned *flag) {
  extern __shared__ unsigned char smemRaw[];
  unsigned char *q = alignSwizzleAtom(smemRaw);
  constexpr unsigned kTileBytes = kKeys * kHeadDim * 2;
  unsigned char *slots = q + 128 * kHeadDim * 2; // slot i: K at slots + 2i * kTileBytes, V right after
  constexpr unsigned kConsumerWarps = 8;
  __shared__ sm90::Mbarrier qFull, full[kStages], empty[kStages];
  if (threadIdx.x == 0) {
    sm90::mbarrier::init(&qFull, 1);
    for (int i = 0; i < kStages; ++i) {
      sm90::mbarrier::init(&full[i], 1);
      sm90::mbarrier::init(&empty[i], kConsumerWarps);
    }
    sm90::mbarrier::initFence();
  }
  __syncthreads();
  const int warpgroup = sm90::warpgroupIndex();
  if (warpgroup == 0) {
    sm90::warpgroup::decreaseRegisters<24>();
    if (threadIdx.x / 32 == 0 && sm90::warp::elect()) {
      sm90::mbarrier::arriveExpectTx(&qFull, 128 * kHeadDim * 2);
      sm90::tma::load5d(q, &qMap, &qFull, 0, 0, 0, 0, 0);
      for (int t = 0; t < tiles; ++t) {
        const int slot = t % kStages, lap = t / kStages;
        if (lap > 0)
          boundedWait(&empty[slot], (lap - 1) & 1, flag, 1u);
        sm90::mbarrier::arriveExpectTx(&full[slot], 2 * kTileBytes);
        sm90::tma::load5d(slots + 2 * slot * kTileBytes, &kMap, &full[slot], 0, t * kKeys, 0, 0, 0);
        sm90::tma::load5d(slots + (2 * slot + 1) * kTileBytes, &vMap, &full[slot], 0, t * kKeys, 0, 0, 0);
      }
    }
    return;
  }
  sm90::warpgroup::increaseRegisters<240>();
  const int consumer = warpgroup - 1; // rows [64 * consumer, 64 * consumer + 64) of Q and O
  // Named barriers 1 and 2: warpgroup 1's and warpgroup 2's turn to issue (each waits on its own, arrives on the
  // other's); warpgroup 1 goes first.
  const unsigned myTurn = 1 + consumer, otherTurn = 2 - consumer;
  if (kPingPong && consumer == 1)
    sm90::namedBarrier::arrive(otherTurn, 256);
  boundedWait(&qFull, 0, flag, 2u);
  float o[kHeadDim / 2];
  for (int t = 0; t < tiles; ++t) {
    const int slot = t % kStages, lap = t / kStages;
    boundedWait(&full[slot], lap & 1, flag, 4u);
    const unsigned kBase = sm90::smemAddress(slots + 2 * slot * kTileBytes), vBase = kBase + kTileBytes;
    if (kPingPong)
      sm90::namedBarrier::sync(myTurn, 256);
    float s[kKeys / 2];
    sm90::warpgroup::fenceOperands(s);
    sm90::warpgroup::arrive();
#pragma unroll
    for (int step = 0; step < kHeadDim / 16; ++step) {
      // Q's 128-row box: column blocks of 128 rows; this warpgroup's 64 rows start 64 * 128 bytes into each.
      sm90::warpgroup::Wgmma<kKeys>::bf16SS<sm90::warpgroup::kKMajor>(
          s, sm90::desc::kMajorStep(sm90::smemAddress(q) + consumer * 64 * 128, step, 128),
          sm90::desc::kMajorStep(kBase, step, kKeys), step > 0);
    }
    sm90::warpgroup::commitGroup();
    if (kPingPong && !(consumer == 1 && t == tiles - 1)) // the other warpgroup's turn (balanced: see the host)
      sm90::namedBarrier::arrive(otherTurn, 256);
    sm90::warpgroup::wait<0>();
    sm90::warpgroup::fenceOperands(s);
    unsigned p[kKeys / 4];
    sm90::warpgroup::accumulatorToOperandBf16<kKeys>(s, p);
    sm90::warpgroup::fenceOperands(p);
    sm90::warpgroup::fenceOperands(o);
    sm90::warpgroup::arrive();
#pragma unroll
    for (int step = 0; step < kKeys / 16; ++step) {
      const unsigned a[4] = {p[4 * step], p[4 * step + 1], p[4 * step + 2], p[4 * step + 3]};
      sm90::warpgroup::Wgmma<kHeadDim>::bf16RS<sm90::warpgroup::kMNMajor>(
          o, a, sm90::desc::mnMajorStep(vBase, step, kKeys), t > 0 || step > 0);
    }
    sm90::warpgroup::commitGroup();
    sm90::warpgroup::wait<0>(); // the slot's last reader has finished: release it
    sm90::warpgroup::fenceOperands(o);
    __syncwarp();
    if (sm90::warp::elect())
      sm90::mbarrier::arrive(&empty[slot]);
  }
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  for (int i = 0; i < kHeadDim / 2; ++i) {
    const int j = i / 4, h = (i / 2) % 2, c = i % 2;
    oOut[(64 * consumer + 16 * warp + lane / 4 + 8 * h) * kHeadDim + 8 * j + 2 * (lane % 4) + c] = o[i];
  }
}
)cuda";

struct PipelineCase {
  int keys, headDim, stages, tiles;
  bool pingPong;
};

std::string pipelineCaseName(const testing::TestParamInfo<PipelineCase> &info) {
  const PipelineCase &c = info.param;
  return "keys" + std::to_string(c.keys) + "_hd" + std::to_string(c.headDim) + "_stages" + std::to_string(c.stages) +
         "_tiles" + std::to_string(c.tiles) + (c.pingPong ? "_pingpong" : "");
}

std::string pipelineSource(const PipelineCase &c) {
  std::string source = prelude::prelude(std::vector<int>{c.keys, c.headDim}) + kTestSupport;
  source.append("constexpr int kKeys = ").append(std::to_string(c.keys)).append(", kHeadDim = ");
  source.append(std::to_string(c.headDim)).append(", kStages = ").append(std::to_string(c.stages));
  source.append(";\nconstexpr bool kPingPong = ").append(c.pingPong ? "true" : "false").append(";\n");
  return source.append(kPipelineKernel);
}

void PrintTo(const PipelineCase &c, std::ostream *out) { *out << pipelineCaseName({c, 0}); }

class PipelinedGemms : public testing::TestWithParam<PipelineCase> {};

TEST_P(PipelinedGemms, MatchTheSumOverTiles) {
  REQUIRE_GPU();
  const PipelineCase &c = GetParam();
  const std::string name = pipelineCaseName({c, 0});
  Watchdog watchdog("flashtile-sm90", "PipelinedGemms." + name, kCaseTimeoutSeconds);
  std::mt19937_64 rng(baseSeed() ^ (uint64_t(c.keys) << 24) ^ (uint64_t(c.headDim) << 12) ^ uint64_t(c.tiles));
  const HostTensor q = makeTensor(1, 128, 1, c.headDim, 0, DType::BF16, rng, true);
  const HostTensor k = makeTensor(1, c.keys * c.tiles, 1, c.headDim, 0, DType::BF16, rng, true);
  const HostTensor v = makeTensor(1, c.keys * c.tiles, 1, c.headDim, 0, DType::BF16, rng, true);
  StatusOr<reference::DeviceBuffer> qDev = upload(q.bits), kDev = upload(k.bits), vDev = upload(v.bits);
  for (auto *buffer : {&qDev, &kDev, &vDev})
    ASSERT_TRUE(buffer->ok()) << buffer->status().message();
  StatusOr<CUtensorMap> qMap = encodeAttentionTileMap(tileSpec("q", DType::BF16, q, *qDev, 128));
  StatusOr<CUtensorMap> kMap = encodeAttentionTileMap(tileSpec("k", DType::BF16, k, *kDev, c.keys));
  StatusOr<CUtensorMap> vMap = encodeAttentionTileMap(tileSpec("v", DType::BF16, v, *vDev, c.keys));
  for (auto *map : {&qMap, &kMap, &vMap})
    ASSERT_TRUE(map->ok()) << map->status().message();
  reference::DeviceBuffer oOut, flag;
  ASSERT_OK(oOut.allocate(size_t(128) * c.headDim * 4));
  ASSERT_OK(oOut.fill(0xff));
  ASSERT_OK(flag.allocate(4));
  ASSERT_OK(flag.fill(0));

  Kernel kernel;
  ASSERT_OK(kernel.load(pipelineSource(c), "pipeline", "sm90_pipeline_" + name));
  CUdeviceptr oPtr = oOut.address(), flagPtr = flag.address();
  int tiles = c.tiles;
  const int smemBytes = (128 + 2 * c.stages * c.keys) * c.headDim * 2 + 1024;
  ASSERT_OK(kernel.run(384, smemBytes, {&*qMap, &*kMap, &*vMap, &oPtr, &tiles, &flagPtr}));
  std::vector<unsigned> flagHost;
  ASSERT_OK(flag.download(flagHost));
  ASSERT_EQ(flagHost[0], 0u) << flagText(flagHost[0]);
  std::vector<float> oHost;
  ASSERT_OK(oOut.download(oHost));

  // Small integers: S is exact, its bf16 rounding is the host's, and every sum of O stays an exactly representable
  // integer, so the comparison is exact.
  auto value = [](const HostTensor &t, int row, int d) {
    return reference::bf16ToFloat(t.bits[t.index(0, row, 0, d)]);
  };
  std::vector<double> expected(size_t(128) * c.headDim, 0.0);
  for (int i = 0; i < 128; ++i)
    for (int key = 0; key < c.keys * c.tiles; ++key) {
      float score = 0;
      for (int d = 0; d < c.headDim; ++d)
        score += value(q, i, d) * value(k, key, d);
      const float p = reference::bf16ToFloat(floatToBf16(score));
      for (int d = 0; d < c.headDim; ++d)
        expected[size_t(i) * c.headDim + d] += double(p) * value(v, key, d);
    }
  long long wrong = 0;
  double worst = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    worst = std::max(worst, std::fabs(oHost[i] - expected[i]));
    wrong += double(oHost[i]) != expected[i];
  }
  EXPECT_EQ(wrong, 0) << "O elements off Σ_t round(Q·K_tᵀ)·V_t (worst error " << worst << ")";
  std::printf("[flashtile-sm90] PipelinedGemms %s: %lld wrong (worst %.3g) %s\n", name.c_str(), wrong, worst,
              wrong == 0 ? "PASS" : "FAIL");
}

std::vector<PipelineCase> pipelineCases() {
  return {{64, 64, 2, 1, false},   {64, 64, 2, 5, false}, {64, 128, 2, 8, false},
          {128, 128, 2, 6, false}, {64, 64, 3, 9, true},  {128, 64, 2, 7, true}};
}

INSTANTIATE_TEST_SUITE_P(Sm90, PipelinedGemms, testing::ValuesIn(pipelineCases()), pipelineCaseName);

// ---------------------------------------------------------------------------------------------------------------
// Without a GPU: every test kernel above compiles for sm_90a (NVRTC and ptxas), so a mistake in them shows up in CI
// rather than on the GPU machine.

TEST(Sm90Kernels, CompileForSm90aWithoutAGpu) {
  std::vector<std::pair<std::string, std::string>> sources = {{"tma_tile_128B", tmaTileSource(TmaSwizzle::Bytes128)},
                                                              {"tma_tile_64B", tmaTileSource(TmaSwizzle::Bytes64)},
                                                              {"tma_tile_32B", tmaTileSource(TmaSwizzle::Bytes32)},
                                                              {"ring2", ringSource(2)},
                                                              {"ring3", ringSource(3)}};
  for (const PipelineCase &c : pipelineCases())
    sources.push_back({pipelineCaseName({c, 0}), pipelineSource(c)});
  for (const WgmmaCase &c : wgmmaCases())
    if (c.integers) // the source does not depend on the inputs
      sources.push_back({wgmmaCaseName({c, 0}), wgmmaChainSource(c)});
  for (const auto &[name, source] : sources) {
    SCOPED_TRACE(name);
    StatusOr<std::string> cubin = compileCuda(source, name + ".cu", "sm_90a", NvrtcOutput::Cubin);
    EXPECT_TRUE(cubin.ok()) << cubin.status().message();
  }
}

} // namespace
