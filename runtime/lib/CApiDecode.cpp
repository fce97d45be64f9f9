// CApiDecode.cpp — the C ABI of decode (CApiDecode.h): no exception or C++ type crosses it.
#include "flashtile/runtime/CApiDecode.h"
#include "CApiInternal.h"
#include "flashtile/runtime/SplitKv.h"

#include <cstdint>
#include <exception>
#include <string>

namespace {

int report(const flashtile::Status &status) {
  if (status.ok())
    return 0;
  flashtile::capi::setLastError(status.message());
  return -1;
}

template <typename Fn> int guarded(Fn &&fn) {
  try {
    return fn();
  } catch (const std::exception &e) {
    flashtile::capi::setLastError(std::string("internal error: ") + e.what());
  } catch (...) {
    flashtile::capi::setLastError("internal error");
  }
  return -1;
}

} // namespace

extern "C" {

int flashtile_set_decode_schedule(flashtile_runtime *rt, const char *schedule) {
  return guarded([&] {
    if (!rt)
      return report(flashtile::Status::error("flashtile_set_decode_schedule: rt must not be NULL"));
    rt->runtime.setDecodeSchedule(schedule ? schedule : "");
    return 0;
  });
}

int flashtile_forward_decode(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                             int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                             int head_dim_v, const long long *q_stride, const long long *k_stride,
                             const long long *v_stride, const long long *o_stride, float softmax_scale,
                             const char *variant, const flashtile_variant_args *variant_args, int num_splits,
                             void *workspace, size_t workspace_bytes, void *stream) {
  return guarded([&] {
    if (!rt || !q_stride || !k_stride || !v_stride || !o_stride)
      return report(
          flashtile::Status::error("flashtile_forward_decode: rt and the four stride arrays must not be NULL"));
    if (flashtile::Status s = flashtile::capi::checkDecodeDtypeCode(dtype); !s.ok())
      return report(s);
    if (variant_args && (variant_args->num_params < 0 || variant_args->num_inputs < 0 ||
                         (variant_args->num_params > 0 && !variant_args->params) ||
                         (variant_args->num_inputs > 0 && !variant_args->inputs)))
      return report(flashtile::Status::error("variant_args: num_params and num_inputs must be >= 0, with non-NULL "
                                             "params/inputs arrays when positive"));
    flashtile::AttentionArgs args = flashtile::AttentionArgs::contiguous(
        flashtile::capi::dtypeOfCode(dtype), q, k, v, o, lse, batch, seqlen_q,
        seqlen_k, heads_q, heads_kv, head_dim, head_dim_v);
    for (int i = 0; i < 4; ++i) {
      args.qStride[i] = q_stride[i];
      args.kStride[i] = k_stride[i];
      args.vStride[i] = v_stride[i];
      args.oStride[i] = o_stride[i];
    }
    args.softmaxScale = softmax_scale;
    args.variant = variant ? variant : "none";
    if (variant_args) {
      args.variantParams.assign(variant_args->params, variant_args->params + variant_args->num_params);
      args.inputs.assign(variant_args->inputs, variant_args->inputs + variant_args->num_inputs);
    }
    args.numSplits = num_splits;
    args.workspace = workspace;
    args.workspaceBytes = workspace_bytes;
    return report(rt->runtime.forward(args, static_cast<CUstream>(stream)));
  });
}

int flashtile_split_kv_workspace_bytes(long long lse_rows, int head_dim_v, int num_splits, size_t *bytes) {
  return guarded([&] {
    if (!bytes)
      return report(flashtile::Status::error("flashtile_split_kv_workspace_bytes: bytes must not be NULL"));
    if (lse_rows < 0 || head_dim_v < 1 || num_splits < 0 || num_splits > flashtile::kMaxSplits)
      return report(flashtile::Status::error(
          "flashtile_split_kv_workspace_bytes: lse_rows (" + std::to_string(lse_rows) + ") must be >= 0, head_dim_v (" +
          std::to_string(head_dim_v) + ") >= 1 and num_splits (" + std::to_string(num_splits) + ") in [0, " +
          std::to_string(flashtile::kMaxSplits) + "]"));
    size_t needed = flashtile::splitKvWorkspaceBytes(lse_rows, head_dim_v, num_splits);
    if (needed == SIZE_MAX)
      return report(flashtile::Status::error("flashtile_split_kv_workspace_bytes: " + std::to_string(num_splits) +
                                             " splits of " + std::to_string(lse_rows) + " LSE rows at head_dim_v " +
                                             std::to_string(head_dim_v) + " need more bytes than a size_t holds"));
    *bytes = needed;
    return 0;
  });
}

} // extern "C"
