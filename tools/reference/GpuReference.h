// GpuReference.h — the attention forward that flashtile's kernels are checked against, and the check itself.
//
// The reference is a small CUDA kernel compiled with NVRTC for the GPU at hand (ReferenceKernels.cpp): one thread
// block per (batch, head, query row) scores every key in fp32, takes the softmax in fp32 and multiplies by V. It
// runs in two precisions, as FlashAttention's tests do:
//   Fp32 — the bf16/f16 inputs upcast, everything in fp32 (ref_fp32);
//   Lowp — a framework running in the low precision: S rounded to the dtype after scaling, the normalized P
//          rounded before P·V, O rounded (ref_lowp).
// compare() applies FlashAttention's rule: max|out − ref_fp32| ≤ 2·max|ref_lowp − ref_fp32| + 1e-5, LSE within
// 1e-3 (−inf on fully masked rows, whose O must be exactly 0), nothing NaN, O's padding untouched.
//
// Used by the GPU tests and by `flashtile run`; needs only flashtile_runtime (no MLIR, no gtest).
#ifndef FLASHTILE_TOOLS_REFERENCE_GPUREFERENCE_H
#define FLASHTILE_TOOLS_REFERENCE_GPUREFERENCE_H

#include "flashtile/runtime/CudaDriver.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Status.h"

#include <cuda.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flashtile::reference {

// ---------------------------------------------------------------------------------------------------------------
// Host conversions (exact).

float bf16ToFloat(uint16_t bits);
float f16ToFloat(uint16_t bits);
float lowToFloat(uint16_t bits, DType dtype);

// ---------------------------------------------------------------------------------------------------------------
// Device memory.

/// Device memory from the dlopen'd driver, freed on destruction. Move-only.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();

  /// Frees any previous allocation. At least 256 bytes are allocated, so that an empty tensor still has a valid,
  /// aligned address.
  Status allocate(size_t bytes);
  /// Sets every allocated byte (cuMemsetD8, synchronous with respect to the legacy stream).
  Status fill(unsigned char byte) const;
  /// Copies the whole buffer to `out`, resized to bytes() / sizeof(T).
  template <class T> Status download(std::vector<T> &out) const { return download(out, 0, size / sizeof(T)); }
  /// Copies `count` elements of type T starting `byteOffset` bytes in to `out` (resized to `count`).
  template <class T> Status download(std::vector<T> &out, size_t byteOffset, size_t count) const {
    out.resize(count);
    return downloadBytes(out.data(), byteOffset, count * sizeof(T));
  }
  /// The address as a typed pointer, `byteOffset` bytes in.
  template <class T> T *as(size_t byteOffset = 0) const {
    return reinterpret_cast<T *>(static_cast<uintptr_t>(ptr + byteOffset));
  }
  CUdeviceptr address() const { return ptr; }
  size_t bytes() const { return size; }

private:
  Status downloadBytes(void *out, size_t byteOffset, size_t count) const;
  void release();

  CUdeviceptr ptr = 0;
  size_t size = 0;
};

/// cuCtxSynchronize; an error says the context is now unusable.
Status synchronize(const std::string &after);

// ---------------------------------------------------------------------------------------------------------------
// The reference.

enum class Precision { Fp32, Lowp };

/// The reference's outputs on the host: O packed fp32 B x Sq x Hq x Dv, LSE fp32 B x Hq x Sq (natural log).
struct ReferenceOutputs {
  std::vector<float> o;
  std::vector<float> lse;
};

/// The reference kernels, compiled and loaded into the current context. Move-only; unloads on destruction.
class GpuReference {
public:
  /// Needs a GPU: makes sure this thread has a context (CudaDriver::currentDevice), compiles the kernels with NVRTC
  /// for its arch and loads them. Errors name the step that failed.
  static StatusOr<GpuReference> create();
  /// Compiles the reference source for `arch` (sm_80, sm_90a, ...) without loading it; needs NVRTC, no GPU.
  static StatusOr<std::string> compileCubin(const std::string &arch);

  GpuReference(GpuReference &&other) noexcept;
  GpuReference &operator=(GpuReference &&other) noexcept;
  GpuReference(const GpuReference &) = delete;
  GpuReference &operator=(const GpuReference &) = delete;
  ~GpuReference();

  /// Writes N(0, 1) values, rounded to `dtype`, into the logical elements of the B x S x H x D tensor at `dst`
  /// (strides in elements: batch, seq, head, dim; dim must be 1); padding is not written. The values depend only
  /// on `seed` and the element's logical index. Asynchronous on `stream`.
  Status fill(void *dst, DType dtype, int batch, int seqlen, int heads, int dim, const std::array<long long, 4> &stride,
              uint64_t seed, CUstream stream = nullptr) const;

  /// The reference forward of `args` (Q/K/V pointers and strides, dtype, shape, softmaxScale with 0 meaning
  /// 1/sqrt(headDim); args.o, args.lse and args.variant are not used) with bottom-right causal masking when
  /// `causal` (query i sees keys j <= i + Sk - Sq). Writes O to `oOut` (device, packed fp32 B x Sq x Hq x Dv) and
  /// LSE to `lseOut` (device, fp32 B x Hq x Sq); fully masked rows get O = 0 and LSE = -inf. Asynchronous. Dense
  /// arguments only: a varlen call is checked sequence by sequence, each as a dense call on sub-pointers.
  Status run(const AttentionArgs &args, bool causal, Precision precision, float *oOut, float *lseOut,
             CUstream stream = nullptr) const;

  /// run() into fresh buffers, synchronized and copied to the host.
  StatusOr<ReferenceOutputs> runToHost(const AttentionArgs &args, bool causal, Precision precision) const;

  const std::string &arch() const { return targetArch; }

private:
  GpuReference() = default;
  void unload();

  const CudaDriver *driver = nullptr;
  CUcontext context = nullptr;
  CUmodule module = nullptr;
  CUfunction attention = nullptr;
  CUfunction fillNormal = nullptr;
  int maxSharedBytes = 0; // dynamic shared memory one block may opt in to
  std::string targetArch;
};

// ---------------------------------------------------------------------------------------------------------------
// FlashAttention's acceptance rule.

/// max|out − ref_fp32| may be at most kLowpErrorFactor · max|ref_lowp − ref_fp32| + kAbsoluteSlack.
inline constexpr double kLowpErrorFactor = 2.0;
inline constexpr double kAbsoluteSlack = 1e-5;
/// |lse − lse_ref| bound (natural log).
inline constexpr double kLseTolerance = 1e-3;
/// The byte O and LSE are poisoned with before a forward: 0xFF.. is NaN in bf16, f16 and f32, so an element
/// the kernel did not write reads as NaN, and untouched padding still reads as this pattern.
inline constexpr unsigned char kPoisonByte = 0xFF;

struct Comparison {
  double errOurs = 0;          // max|out − ref_fp32| over O's non-NaN elements
  double errLowp = 0;          // max|ref_lowp − ref_fp32|
  double tolerance = 0;        // kLowpErrorFactor · errLowp + kAbsoluteSlack
  double errLse = 0;           // max|lse − lse_ref| over rows where both are finite
  long long nanCount = 0;      // NaN elements of O (unwritten elements read as NaN)
  long long maskedNonzero = 0; // nonzero O elements on fully masked rows
  long long paddingWrites = 0; // elements of O's allocation outside its logical elements that lost the poison
  long long lseBad = 0;        // LSE values off by more than kLseTolerance, or not -inf on fully masked rows
  long long referenceNans = 0; // NaN in the references: a bug in the reference, not in the kernel checked
  // Where each problem first occurs ("b=… q=… h=… d=…"); worst is the element with the largest error.
  std::string worst = "-", firstNan, firstMasked, firstLseBad;

  bool pass() const;
  /// errOurs / errLowp as "%.3f", or "0" / "inf" when errLowp is 0.
  std::string ratioText() const;
  /// "err_ours=1.234e-03 err_lowp=2.345e-03 ratio=0.526 lse_err=1.00e-06 PASS".
  std::string summary() const;
  /// One line per failed check, saying what and where; empty when pass().
  std::vector<std::string> failures() const;
};

/// Compares a forward's outputs with both references. `oRaw` is O's whole allocation as dtype bits, laid out by
/// args.oStride (elements outside the logical B x Sq x Hq x Dv must hold the poison); `lse` is B x Hq x Sq.
/// Errors only when the sizes do not fit `args`.
StatusOr<Comparison> compare(const AttentionArgs &args, const std::vector<uint16_t> &oRaw,
                             const std::vector<float> &lse, const ReferenceOutputs &fp32, const ReferenceOutputs &lowp);

} // namespace flashtile::reference

#endif // FLASHTILE_TOOLS_REFERENCE_GPUREFERENCE_H
