// GpuReference.cpp — device buffers, and compiling, loading and launching the reference kernels.
#include "GpuReference.h"
#include "ReferenceKernels.h"

#include "flashtile/runtime/Nvrtc.h"

#include <algorithm>
#include <cmath>
#include <utility>

using namespace flashtile;
using namespace flashtile::reference;

namespace {

/// Dynamic shared memory a kernel may use without opting in to more (cuFuncSetAttribute).
constexpr size_t kDefaultSharedBytes = 48 * 1024;
/// The smallest allocation, so that an empty tensor still has a valid, aligned address.
constexpr size_t kMinAllocationBytes = 256;
/// CUDA's limit on gridDim.y and gridDim.z (query heads and batch for attention_reference).
constexpr int kMaxGridYZ = 65535;

} // namespace

// ---------------------------------------------------------------------------------------------------------------
// DeviceBuffer

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : ptr(std::exchange(other.ptr, 0)), size(std::exchange(other.size, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    release();
    ptr = std::exchange(other.ptr, 0);
    size = std::exchange(other.size, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (!ptr)
    return;
  if (StatusOr<const CudaDriver *> driver = CudaDriver::get(); driver.ok())
    (*driver)->cuMemFree_v2(ptr);
  ptr = 0;
  size = 0;
}

Status DeviceBuffer::allocate(size_t bytes) {
  release();
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  if (Status s = d.check(d.cuMemAlloc_v2(&ptr, std::max(bytes, kMinAllocationBytes)),
                         "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
      !s.ok()) {
    ptr = 0;
    return s;
  }
  size = bytes;
  return Status();
}

Status DeviceBuffer::fill(unsigned char byte) const {
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  return d.check(d.cuMemsetD8_v2(ptr, byte, std::max(size, kMinAllocationBytes)), "cuMemsetD8");
}

Status DeviceBuffer::downloadBytes(void *out, size_t byteOffset, size_t count) const {
  if (count == 0)
    return Status();
  if (byteOffset > size || count > size - byteOffset)
    return Status::error("download of " + std::to_string(count) + " bytes at offset " + std::to_string(byteOffset) +
                         " from a buffer of " + std::to_string(size));
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  return d.check(d.cuMemcpyDtoH_v2(out, ptr + byteOffset, count), "cuMemcpyDtoH");
}

Status reference::synchronize(const std::string &after) {
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  return d.check(d.cuCtxSynchronize(), "cuCtxSynchronize after " + after)
      .withContext("the GPU reported an error (the context is now unusable; later work will fail too)");
}

// ---------------------------------------------------------------------------------------------------------------
// GpuReference

StatusOr<std::string> GpuReference::compileCubin(const std::string &arch) {
  return compileCuda(detail::referenceSource(), detail::kProgramName, arch, NvrtcOutput::Cubin);
}

StatusOr<GpuReference> GpuReference::create() {
  StatusOr<const CudaDriver *> driver = CudaDriver::get();
  if (!driver.ok())
    return driver.status();
  const CudaDriver &d = **driver;
  StatusOr<CUdevice> device = d.currentDevice();
  if (!device.ok())
    return device.status();
  StatusOr<std::string> arch = d.detectArch();
  if (!arch.ok())
    return arch.status();
  StatusOr<std::string> cubin = compileCubin(*arch);
  if (!cubin.ok())
    return cubin.status().withContext("compiling the reference kernels with NVRTC");

  GpuReference ref;
  ref.driver = &d;
  ref.targetArch = *arch;
  if (Status s = d.check(d.cuCtxGetCurrent(&ref.context), "cuCtxGetCurrent"); !s.ok())
    return s;
  if (Status s = d.check(d.cuModuleLoadData(&ref.module, cubin->data()), "cuModuleLoadData(reference)"); !s.ok())
    return s;
  for (auto [function, name] :
       {std::pair{&ref.attention, detail::kAttentionEntry}, {&ref.fillNormal, detail::kFillEntry}})
    if (Status s = d.check(d.cuModuleGetFunction(function, ref.module, name), name); !s.ok())
      return s;
  if (Status s = d.check(
          d.cuDeviceGetAttribute(&ref.maxSharedBytes, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, *device),
          "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
      !s.ok())
    return s;
  return ref;
}

GpuReference::GpuReference(GpuReference &&other) noexcept { *this = std::move(other); }

GpuReference &GpuReference::operator=(GpuReference &&other) noexcept {
  if (this != &other) {
    unload();
    driver = std::exchange(other.driver, nullptr);
    context = std::exchange(other.context, nullptr);
    module = std::exchange(other.module, nullptr);
    attention = std::exchange(other.attention, nullptr);
    fillNormal = std::exchange(other.fillNormal, nullptr);
    maxSharedBytes = std::exchange(other.maxSharedBytes, 0);
    targetArch = std::move(other.targetArch);
  }
  return *this;
}

GpuReference::~GpuReference() { unload(); }

void GpuReference::unload() {
  if (!module)
    return;
  // cuModuleUnload acts on the current context: make the module's own current for it, then restore the caller's.
  // Errors are ignored: a context destroyed by its owner took the module along.
  CUcontext caller = nullptr;
  driver->cuCtxGetCurrent(&caller);
  if (driver->cuCtxSetCurrent(context) == CUDA_SUCCESS)
    driver->cuModuleUnload(module);
  driver->cuCtxSetCurrent(caller);
  module = nullptr;
}

Status GpuReference::fill(void *dst, DType dtype, int batch, int seqlen, int heads, int dim,
                          const std::array<long long, 4> &stride, uint64_t seed, CUstream stream) const {
  if (stride[3] != 1)
    return Status::error("fill: the dim stride must be 1, got " + std::to_string(stride[3]));
  if (batch < 0 || seqlen < 0 || heads < 0 || dim < 0)
    return Status::error("fill: negative tensor size");
  detail::FillParams params{};
  params.dst = static_cast<unsigned short *>(dst);
  std::copy(stride.begin(), stride.begin() + 3, params.stride);
  params.batch = batch;
  params.seqlen = seqlen;
  params.heads = heads;
  params.headDim = dim;
  params.seed = seed;
  params.isBf16 = dtype == DType::BF16;
  const long long n = (long long)batch * seqlen * heads * dim;
  if (n == 0)
    return Status();
  const unsigned blocks =
      unsigned(std::min<long long>((n + detail::kFillThreads - 1) / detail::kFillThreads, detail::kFillMaxBlocks));
  void *args[] = {&params};
  return driver->check(
      driver->cuLaunchKernel(fillNormal, blocks, 1, 1, detail::kFillThreads, 1, 1, 0, stream, args, nullptr),
      "cuLaunchKernel(fill_normal)");
}

Status GpuReference::run(const AttentionArgs &args, bool causal, Precision precision, float *oOut, float *lseOut,
                         CUstream stream) const {
  if (args.isVarlen())
    return Status::error("reference: varlen arguments; run the reference per sequence (dense sub-tensors)");
  if (args.batch < 0 || args.seqlenQ < 0 || args.seqlenK < 0 || args.headDim <= 0 || args.headDimV <= 0)
    return Status::error("reference: batch and sequence lengths must be >= 0 and headDim, headDimV > 0");
  if (args.headsKv <= 0 || args.headsQ <= 0 || args.headsQ % args.headsKv != 0)
    return Status::error("reference: headsQ (" + std::to_string(args.headsQ) +
                         ") must be a positive multiple of "
                         "headsKv (" +
                         std::to_string(args.headsKv) + ")");
  if (args.headsQ > kMaxGridYZ || args.batch > kMaxGridYZ)
    return Status::error("reference: batch and headsQ must be at most " + std::to_string(kMaxGridYZ));
  for (const auto *stride : {&args.qStride, &args.kStride, &args.vStride})
    if ((*stride)[3] != 1)
      return Status::error("reference: the dim stride of Q, K and V must be 1");
  if (!std::isfinite(args.softmaxScale))
    return Status::error("reference: softmaxScale must be finite");

  detail::RefParams params{};
  params.q = static_cast<const unsigned short *>(args.q);
  params.k = static_cast<const unsigned short *>(args.k);
  params.v = static_cast<const unsigned short *>(args.v);
  params.o = oOut;
  params.lse = lseOut;
  std::copy(args.qStride.begin(), args.qStride.begin() + 3, params.qStride);
  std::copy(args.kStride.begin(), args.kStride.begin() + 3, params.kStride);
  std::copy(args.vStride.begin(), args.vStride.begin() + 3, params.vStride);
  params.batch = args.batch;
  params.headsQ = args.headsQ;
  params.headsKv = args.headsKv;
  params.seqlenQ = args.seqlenQ;
  params.seqlenK = args.seqlenK;
  params.headDim = args.headDim;
  params.headDimV = args.headDimV;
  params.scale = args.effectiveScale();
  params.causal = causal;
  params.lowp = precision == Precision::Lowp;
  params.isBf16 = args.dtype == DType::BF16;

  const size_t smem = detail::attentionSharedBytes(args.headDim, args.seqlenK);
  const size_t smemLimit = std::max(size_t(maxSharedBytes), kDefaultSharedBytes);
  if (smem > smemLimit)
    return Status::error("the reference kernel keeps a row of scores in shared memory; seqlenK " +
                         std::to_string(args.seqlenK) + " needs " + std::to_string(smem) +
                         " bytes of it, more than the " + std::to_string(smemLimit) + " this GPU allows");
  if (smem > kDefaultSharedBytes)
    if (Status s = driver->check(
            driver->cuFuncSetAttribute(attention, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(smem)),
            "cuFuncSetAttribute(attention_reference, MAX_DYNAMIC_SHARED_SIZE_BYTES)");
        !s.ok())
      return s;
  const size_t rows = size_t(args.batch) * args.headsQ * args.seqlenQ;
  if (rows == 0)
    return Status();
  void *kernelArgs[] = {&params};
  return driver->check(driver->cuLaunchKernel(attention, unsigned(args.seqlenQ), unsigned(args.headsQ),
                                              unsigned(args.batch), detail::kAttentionThreads, 1, 1, unsigned(smem),
                                              stream, kernelArgs, nullptr),
                       "cuLaunchKernel(attention_reference)");
}

StatusOr<ReferenceOutputs> GpuReference::runToHost(const AttentionArgs &args, bool causal, Precision precision) const {
  DeviceBuffer o, lse;
  const size_t rows = size_t(std::max(args.batch, 0)) * std::max(args.headsQ, 0) * std::max(args.seqlenQ, 0);
  if (Status s = o.allocate(rows * std::max(args.headDimV, 0) * sizeof(float)); !s.ok())
    return s;
  if (Status s = lse.allocate(rows * sizeof(float)); !s.ok())
    return s;
  for (const DeviceBuffer *buffer : {&o, &lse})
    if (Status s = buffer->fill(kPoisonByte); !s.ok())
      return s;
  if (Status s = run(args, causal, precision, o.as<float>(), lse.as<float>()); !s.ok())
    return s;
  if (Status s = synchronize(detail::kAttentionEntry); !s.ok())
    return s;
  ReferenceOutputs out;
  if (Status s = o.download(out.o); !s.ok())
    return s;
  if (Status s = lse.download(out.lse); !s.ok())
    return s;
  return out;
}
