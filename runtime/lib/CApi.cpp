// CApi.cpp — the C ABI over flashtile::Runtime: no exception or C++ type crosses it.
#include "flashtile/runtime/CApi.h"

#include "CApiInternal.h"
#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/Runtime.h"
#include "flashtile/runtime/Version.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

static_assert(FLASHTILE_CALL_MAX_PARAMS == FLASHTILE_MAX_VARIANT_PARAMS &&
                  FLASHTILE_CALL_MAX_INPUTS == FLASHTILE_MAX_VARIANT_INPUTS,
              "flashtile_call carries as many numbers and inputs as a kernel takes");

namespace {
thread_local std::string lastError;

int report(const flashtile::Status &status) {
  if (status.ok())
    return 0;
  lastError = status.message();
  return -1;
}

/// The arguments of this thread's calls, reset field by field for each: the variant string and the vectors keep
/// their capacity, so that a call allocates nothing once warm.
flashtile::AttentionArgs &scratchArgs() {
  thread_local flashtile::AttentionArgs args;
  return args;
}

/// Resets every field of `args` to an AttentionArgs{}'s value, keeping the buffers.
void resetArgs(flashtile::AttentionArgs &args) {
  std::string variant = std::move(args.variant);
  std::vector<float> params = std::move(args.variantParams);
  std::vector<const void *> inputs = std::move(args.inputs);
  std::string schedule = std::move(args.schedule);
  args = flashtile::AttentionArgs();
  args.variant = std::move(variant);
  args.schedule = std::move(schedule);
  args.schedule.clear();
  args.variantParams = std::move(params);
  args.inputs = std::move(inputs);
  args.variantParams.clear();
  args.inputs.clear();
}

/// Copies a C caller's variant numbers and inputs into `args` (NULL: none).
flashtile::Status applyVariantArgs(const flashtile_variant_args *in, flashtile::AttentionArgs &args) {
  if (!in)
    return flashtile::Status();
  if (in->num_params < 0 || in->num_inputs < 0 || (in->num_params > 0 && !in->params) ||
      (in->num_inputs > 0 && !in->inputs))
    return flashtile::Status::error("variant_args: num_params (" + std::to_string(in->num_params) +
                                    ") and num_inputs (" + std::to_string(in->num_inputs) +
                                    ") must be >= 0, with non-NULL params/inputs arrays when positive");
  args.variantParams.assign(in->params, in->params + in->num_params);
  args.inputs.assign(in->inputs, in->inputs + in->num_inputs);
  return flashtile::Status();
}

/// Checks `call`'s struct-level fields and fills `args` (reset first) from it: flashtile_forward_call's and
/// flashtile_explain's arguments.
flashtile::Status argsFromCall(const flashtile_call *call, flashtile::AttentionArgs &args) {
  if (call->size != sizeof(flashtile_call))
    return flashtile::Status::error("flashtile_forward_call: call->size is " + std::to_string(call->size) +
                                    "; expected sizeof(flashtile_call) = " + std::to_string(sizeof(flashtile_call)) +
                                    " (a caller built for another version of CApi.h)");
  if (flashtile::Status s = flashtile::capi::checkDtypeCode(call->dtype); !s.ok())
    return s;
  if (call->num_params < 0 || call->num_params > FLASHTILE_CALL_MAX_PARAMS || call->num_inputs < 0 ||
      call->num_inputs > FLASHTILE_CALL_MAX_INPUTS)
    return flashtile::Status::error("num_params (" + std::to_string(call->num_params) + ") and num_inputs (" +
                                    std::to_string(call->num_inputs) + ") must be in [0, " +
                                    std::to_string(FLASHTILE_CALL_MAX_PARAMS) + "] and [0, " +
                                    std::to_string(FLASHTILE_CALL_MAX_INPUTS) + "]");
  resetArgs(args);
  args.q = call->q;
  args.k = call->k;
  args.v = call->v;
  args.o = call->o;
  args.lse = call->lse;
  args.cuSeqlensQ = call->cu_seqlens_q;
  args.cuSeqlensK = call->cu_seqlens_k;
  args.dtype = flashtile::capi::dtypeOfCode(call->dtype);
  args.batch = call->batch;
  args.seqlenQ = call->seqlen_q;
  args.seqlenK = call->seqlen_k;
  args.headsQ = call->heads_q;
  args.headsKv = call->heads_kv;
  args.headDim = call->head_dim;
  args.headDimV = call->head_dim_v == 0 ? call->head_dim : call->head_dim_v;
  const bool varlen = call->cu_seqlens_q || call->cu_seqlens_k;
  if (varlen) {
    args.maxSeqlenQ = call->max_seqlen_q;
    args.maxSeqlenK = call->max_seqlen_k;
  }
  for (int i = 0; i < 4; ++i) {
    // Varlen ignores the batch strides; 0 as AttentionArgs::varlen sets them.
    bool ignored = varlen && i == 0;
    args.qStride[i] = ignored ? 0 : call->q_stride[i];
    args.kStride[i] = ignored ? 0 : call->k_stride[i];
    args.vStride[i] = ignored ? 0 : call->v_stride[i];
    args.oStride[i] = ignored ? 0 : call->o_stride[i];
  }
  args.softmaxScale = call->softmax_scale;
  args.variant.assign(call->variant ? call->variant : "none");
  args.variantParams.assign(call->params, call->params + call->num_params);
  args.inputs.assign(call->inputs, call->inputs + call->num_inputs);
  args.schedule.assign(call->schedule ? call->schedule : "");
  args.strictSchedule = call->strict_schedule != 0;
  args.qDescale = call->q_descale;
  args.kDescale = call->k_descale;
  args.vDescale = call->v_descale;
  args.workspace = call->workspace;
  args.workspaceBytes = static_cast<size_t>(call->workspace_bytes);
  if (const flashtile_positions *p = call->positions) {
    flashtile::BlockPositions &positions = args.positions.emplace();
    positions.qOffset = p->q_offset;
    positions.kOffset = p->k_offset;
    positions.seqlenQGlobal = p->seqlen_q_global;
    positions.seqlenKGlobal = p->seqlen_k_global;
    positions.qOffsets = p->q_offsets;
    positions.kOffsets = p->k_offsets;
    positions.cuSeqlensQGlobal = p->cu_seqlens_q_global;
    positions.cuSeqlensKGlobal = p->cu_seqlens_k_global;
    positions.headOffset = p->head_offset;
    positions.headsQGlobal = p->heads_q_global;
    positions.headsKvGlobal = p->heads_kv_global;
  }
  return flashtile::Status();
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

void flashtile::capi::setLastError(std::string message) { lastError = std::move(message); }

extern "C" {

flashtile_runtime *flashtile_create(void) {
  try {
    return new flashtile_runtime();
  } catch (const std::exception &e) {
    lastError = std::string("cannot create the runtime: ") + e.what();
  } catch (...) {
    lastError = "cannot create the runtime: a non-standard exception";
  }
  return nullptr;
}

void flashtile_destroy(flashtile_runtime *rt) {
  // The destructor unloads modules through the driver; nothing it meets may unwind into C.
  try {
    delete rt;
  } catch (...) {
  }
}

int flashtile_load_aot(flashtile_runtime *rt, const char *dir) {
  return guarded([&] {
    if (!rt || !dir)
      return report(flashtile::Status::error("flashtile_load_aot: rt and dir must not be NULL"));
    return report(rt->runtime.loadAotDirectory(dir));
  });
}

int flashtile_set_schedule(flashtile_runtime *rt, const char *schedule) {
  return guarded([&] {
    if (!rt || !schedule)
      return report(flashtile::Status::error("flashtile_set_schedule: rt and schedule must not be NULL"));
    if (*schedule && !flashtile::isValidId(schedule))
      return report(flashtile::Status::error(std::string("flashtile_set_schedule: '") + schedule +
                                             "' is not a schedule id of characters [A-Za-z0-9_.:#-], or \"\" (the "
                                             "dispatch rules' choice)"));
    rt->runtime.setSchedule(schedule);
    return 0;
  });
}

int flashtile_set_strict_schedule(flashtile_runtime *rt, int strict) {
  return guarded([&] {
    if (!rt)
      return report(flashtile::Status::error("flashtile_set_strict_schedule: rt must not be NULL"));
    rt->runtime.setStrictSchedule(strict != 0);
    return 0;
  });
}

int flashtile_forward(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                      int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                      int head_dim_v, const long long *q_stride, const long long *k_stride, const long long *v_stride,
                      const long long *o_stride, float softmax_scale, const char *variant, void *stream) {
  return flashtile_forward_variant(rt, q, k, v, o, lse, dtype, batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim,
                                   head_dim_v, q_stride, k_stride, v_stride, o_stride, softmax_scale, variant, nullptr,
                                   stream);
}

int flashtile_forward_variant(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                              int dtype, int batch, int seqlen_q, int seqlen_k, int heads_q, int heads_kv, int head_dim,
                              int head_dim_v, const long long *q_stride, const long long *k_stride,
                              const long long *v_stride, const long long *o_stride, float softmax_scale,
                              const char *variant, const flashtile_variant_args *variant_args, void *stream) {
  return guarded([&] {
    if (!rt || !q_stride || !k_stride || !v_stride || !o_stride)
      return report(flashtile::Status::error("flashtile_forward: rt and the four stride arrays must not be NULL"));
    if (flashtile::Status s = flashtile::capi::checkDtypeCode(dtype); !s.ok())
      return report(s);
    flashtile::AttentionArgs &args = scratchArgs();
    resetArgs(args);
    args.q = q;
    args.k = k;
    args.v = v;
    args.o = o;
    args.lse = lse;
    args.dtype = flashtile::capi::dtypeOfCode(dtype);
    args.batch = batch;
    args.seqlenQ = seqlen_q;
    args.seqlenK = seqlen_k;
    args.headsQ = heads_q;
    args.headsKv = heads_kv;
    args.headDim = head_dim;
    args.headDimV = head_dim_v == 0 ? head_dim : head_dim_v;
    for (int i = 0; i < 4; ++i) {
      args.qStride[i] = q_stride[i];
      args.kStride[i] = k_stride[i];
      args.vStride[i] = v_stride[i];
      args.oStride[i] = o_stride[i];
    }
    args.softmaxScale = softmax_scale;
    args.variant.assign(variant ? variant : "none");
    if (flashtile::Status s = applyVariantArgs(variant_args, args); !s.ok())
      return report(s);
    return report(rt->runtime.forward(args, static_cast<CUstream>(stream)));
  });
}

int flashtile_forward_varlen_variant(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o,
                                     float *lse, const int *cu_seqlens_q, const int *cu_seqlens_k, int dtype, int batch,
                                     int total_q, int total_k, int max_seqlen_q, int max_seqlen_k, int heads_q,
                                     int heads_kv, int head_dim, int head_dim_v, const long long *q_stride,
                                     const long long *k_stride, const long long *v_stride, const long long *o_stride,
                                     float softmax_scale, const char *variant,
                                     const flashtile_variant_args *variant_args, void *stream) {
  return guarded([&] {
    if (!rt || !q_stride || !k_stride || !v_stride || !o_stride)
      return report(
          flashtile::Status::error("flashtile_forward_varlen: rt and the four stride arrays must not be NULL"));
    if (flashtile::Status s = flashtile::capi::checkDtypeCode(dtype); !s.ok())
      return report(s);
    flashtile::AttentionArgs &args = scratchArgs();
    resetArgs(args);
    // AttentionArgs::varlen's fields, set in place: the scratch's buffers are kept.
    args.dtype = flashtile::capi::dtypeOfCode(dtype);
    args.q = q;
    args.k = k;
    args.v = v;
    args.o = o;
    args.lse = lse;
    args.cuSeqlensQ = cu_seqlens_q;
    args.cuSeqlensK = cu_seqlens_k;
    args.batch = batch;
    args.seqlenQ = total_q;
    args.seqlenK = total_k;
    args.maxSeqlenQ = max_seqlen_q;
    args.maxSeqlenK = max_seqlen_k;
    args.headsQ = heads_q;
    args.headsKv = heads_kv;
    args.headDim = head_dim;
    args.headDimV = head_dim_v == 0 ? head_dim : head_dim_v;
    for (int i = 0; i < 3; ++i) {
      args.qStride[i + 1] = q_stride[i];
      args.kStride[i + 1] = k_stride[i];
      args.vStride[i + 1] = v_stride[i];
      args.oStride[i + 1] = o_stride[i];
    }
    args.softmaxScale = softmax_scale;
    args.variant.assign(variant ? variant : "none");
    if (flashtile::Status s = applyVariantArgs(variant_args, args); !s.ok())
      return report(s);
    return report(rt->runtime.forward(args, static_cast<CUstream>(stream)));
  });
}

int flashtile_forward_call(flashtile_runtime *rt, const flashtile_call *call) {
  return guarded([&] {
    if (!rt || !call)
      return report(flashtile::Status::error("flashtile_forward_call: rt and call must not be NULL"));
    flashtile::AttentionArgs &args = scratchArgs();
    if (flashtile::Status s = argsFromCall(call, args); !s.ok())
      return report(s);
    return report(rt->runtime.forward(args, static_cast<CUstream>(call->stream)));
  });
}

/// The BackwardArgs of a C backward call (`what` names the entry point in errors).
static flashtile::Status backwardArgsFromCall(const flashtile_bwd_call *call, flashtile::BackwardArgs &args,
                                              const char *what) {
  if (call->size != sizeof(flashtile_bwd_call))
    return flashtile::Status::error(std::string(what) + ": call->size is " + std::to_string(call->size) +
                                    "; expected sizeof(flashtile_bwd_call) = " +
                                    std::to_string(sizeof(flashtile_bwd_call)) +
                                    " (a caller built for another version of CApi.h)");
  if (flashtile::Status s = argsFromCall(&call->forward, args.forward); !s.ok())
    return s.withContext("forward");
  args.forward.workspace = nullptr; // the backward's is call->workspace
  args.forward.workspaceBytes = 0;
  const bool varlen = call->forward.cu_seqlens_q || call->forward.cu_seqlens_k;
  args.dO = call->d_o;
  args.dQ = call->d_q;
  args.dK = call->d_k;
  args.dV = call->d_v;
  for (int i = 0; i < 4; ++i) {
    const bool ignored = varlen && i == 0; // as the forward's strides
    args.dOStride[i] = ignored ? 0 : call->d_o_stride[i];
    args.dQStride[i] = ignored ? 0 : call->d_q_stride[i];
    args.dKStride[i] = ignored ? 0 : call->d_k_stride[i];
    args.dVStride[i] = ignored ? 0 : call->d_v_stride[i];
  }
  args.inputGrads.clear();
  const int inputs = call->forward.num_inputs;
  if (std::any_of(call->input_grads, call->input_grads + inputs, [](float *g) { return g != nullptr; }))
    args.inputGrads.assign(call->input_grads, call->input_grads + inputs);
  args.deterministic = call->deterministic != 0;
  args.workspace = call->workspace;
  args.workspaceBytes = static_cast<size_t>(call->workspace_bytes);
  return flashtile::Status();
}

int flashtile_backward_call(flashtile_runtime *rt, const flashtile_bwd_call *call) {
  return guarded([&] {
    if (!rt || !call)
      return report(flashtile::Status::error("flashtile_backward_call: rt and call must not be NULL"));
    thread_local flashtile::BackwardArgs args;
    if (flashtile::Status s = backwardArgsFromCall(call, args, "flashtile_backward_call"); !s.ok())
      return report(s);
    return report(rt->runtime.backward(args, static_cast<CUstream>(call->forward.stream)));
  });
}

int flashtile_forward_workspace_size(flashtile_runtime *rt, const flashtile_call *call, unsigned long long *bytes) {
  return guarded([&] {
    if (!rt || !call || !bytes)
      return report(flashtile::Status::error("flashtile_forward_workspace_size: rt, call and bytes must not be NULL"));
    flashtile::AttentionArgs &args = scratchArgs();
    if (flashtile::Status s = argsFromCall(call, args); !s.ok())
      return report(s);
    flashtile::StatusOr<size_t> needed = rt->runtime.forwardWorkspaceBytes(args);
    if (!needed.ok())
      return report(needed.status());
    *bytes = *needed;
    return 0;
  });
}

int flashtile_backward_workspace_size(flashtile_runtime *rt, const flashtile_bwd_call *call,
                                      unsigned long long *bytes) {
  return guarded([&] {
    if (!rt || !call || !bytes)
      return report(
          flashtile::Status::error("flashtile_backward_workspace_size: rt, call and bytes must not be NULL"));
    thread_local flashtile::BackwardArgs args;
    if (flashtile::Status s = backwardArgsFromCall(call, args, "flashtile_backward_workspace_size"); !s.ok())
      return report(s);
    flashtile::StatusOr<size_t> needed = rt->runtime.backwardWorkspaceBytes(args);
    if (!needed.ok())
      return report(needed.status());
    *bytes = *needed;
    return 0;
  });
}

int flashtile_explain(flashtile_runtime *rt, const flashtile_call *call, const char *arch, char *buffer,
                      unsigned long long size) {
  return guarded([&] {
    if (!rt || !call || !buffer)
      return report(flashtile::Status::error("flashtile_explain: rt, call and buffer must not be NULL"));
    flashtile::AttentionArgs args;
    if (flashtile::Status s = argsFromCall(call, args); !s.ok())
      return report(s);
    flashtile::StatusOr<flashtile::ScheduleChoice> choice =
        arch ? rt->runtime.explain(args, arch) : rt->runtime.explain(args);
    if (!choice.ok())
      return report(choice.status());
    const std::string text = choice->text();
    if (text.size() >= size)
      return report(flashtile::Status::error("flashtile_explain: the explanation needs " +
                                             std::to_string(text.size() + 1) + " bytes; buffer has " +
                                             std::to_string(size)));
    std::memcpy(buffer, text.c_str(), text.size() + 1);
    return 0;
  });
}

int flashtile_forward_varlen(flashtile_runtime *rt, const void *q, const void *k, const void *v, void *o, float *lse,
                             const int *cu_seqlens_q, const int *cu_seqlens_k, int dtype, int batch, int total_q,
                             int total_k, int max_seqlen_q, int max_seqlen_k, int heads_q, int heads_kv, int head_dim,
                             int head_dim_v, const long long *q_stride, const long long *k_stride,
                             const long long *v_stride, const long long *o_stride, float softmax_scale,
                             const char *variant, void *stream) {
  return flashtile_forward_varlen_variant(rt, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, dtype, batch, total_q,
                                          total_k, max_seqlen_q, max_seqlen_k, heads_q, heads_kv, head_dim, head_dim_v,
                                          q_stride, k_stride, v_stride, o_stride, softmax_scale, variant, nullptr,
                                          stream);
}

int flashtile_check_errors(flashtile_runtime *rt) {
  return guarded([&] {
    if (!rt)
      return report(flashtile::Status::error("flashtile_check_errors: rt must not be NULL"));
    return report(rt->runtime.checkErrors());
  });
}

const char *flashtile_last_error(void) { return lastError.c_str(); }

const char *flashtile_version(void) {
  static const std::string version(flashtile::compilerVersion());
  return version.c_str();
}

} // extern "C"
