// CApi.cpp — the C ABI over flashtile::Runtime: no exception or C++ type crosses it.
#include "flashtile/runtime/CApi.h"

#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Version.h"

#include <exception>
#include <string>

struct flashtile_runtime {
  flashtile::Runtime runtime;
};

namespace {
thread_local std::string lastError;

int report(const flashtile::Status &status) {
  if (status.ok())
    return 0;
  lastError = status.message();
  return -1;
}

template <typename Fn> int guarded(Fn &&fn) {
  try {
    return fn();
  } catch (const std::exception &e) {
    lastError = std::string("internal error: ") + e.what();
  } catch (...) {
    lastError = "internal error";
  }
  return -1;
}
} // namespace

extern "C" {

flashtile_runtime *flashtile_create(void) {
  try {
    return new flashtile_runtime();
  } catch (const std::exception &e) {
    lastError = std::string("cannot create the runtime: ") + e.what();
    return nullptr;
  }
}

void flashtile_destroy(flashtile_runtime *rt) { delete rt; }

int flashtile_load_aot(flashtile_runtime *rt, const char *dir) {
  return guarded([&] {
    if (!rt || !dir)
      return report(flashtile::Status::error("flashtile_load_aot: rt and dir must not be NULL"));
    return report(rt->runtime.loadAotDirectory(dir));
  });
}

int flashtile_forward(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                      int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                      const long long *q_stride, const long long *k_stride, const long long *v_stride,
                      const long long *o_stride, float softmax_scale, const char *variant, void *stream) {
  return guarded([&] {
    if (!rt || !q_stride || !k_stride || !v_stride || !o_stride)
      return report(flashtile::Status::error("flashtile_forward: rt and the four stride arrays must not be NULL"));
    if (dtype != FLASHTILE_F16 && dtype != FLASHTILE_BF16)
      return report(flashtile::Status::error("dtype: " + std::to_string(dtype) +
                                             " is not FLASHTILE_F16 (0) or FLASHTILE_BF16 (1)"));
    flashtile::AttentionArgs args;
    args.q = q;
    args.k = k;
    args.v = v;
    args.o = o;
    args.lse = lse;
    args.dtype = dtype == FLASHTILE_BF16 ? flashtile::DType::BF16 : flashtile::DType::F16;
    args.batch = batch;
    args.seqlenQ = seqlen_q;
    args.seqlenK = seqlen_k;
    args.headsQ = heads_q;
    args.headsKv = heads_kv;
    args.headDim = args.headDimV = head_dim;
    for (int i = 0; i < 4; ++i) {
      args.qStride[i] = q_stride[i];
      args.kStride[i] = k_stride[i];
      args.vStride[i] = v_stride[i];
      args.oStride[i] = o_stride[i];
    }
    args.softmaxScale = softmax_scale;
    args.variant = variant ? variant : "none";
    return report(rt->runtime.forward(args, static_cast<CUstream>(stream)));
  });
}

const char *flashtile_last_error(void) { return lastError.c_str(); }

const char *flashtile_version(void) {
  static const std::string version(flashtile::compilerVersion());
  return version.c_str();
}

} // extern "C"
