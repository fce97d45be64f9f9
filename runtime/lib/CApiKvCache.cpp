// CApiKvCache.cpp — the C ABI of KV-cache calls (CApiKvCache.h): no exception or C++ type crosses it.
#include "flashtile/runtime/CApiKvCache.h"
#include "CApiInternal.h"

#include <cstring>
#include <exception>
#include <string>

namespace {

using flashtile::AttentionArgs;
using flashtile::KvCacheLayout;
using flashtile::Status;

int report(const Status &status) {
  if (status.ok())
    return 0;
  flashtile::capi::setLastError(status.message());
  return -1;
}

/// `given`, or the packed strides of a (.., seqlen, heads, dim) tensor when `given` is four zeros.
std::array<long long, 4> stridesOr(const long long *given, long long seqlen, long long heads, long long dim) {
  if (given[0] == 0 && given[1] == 0 && given[2] == 0 && given[3] == 0)
    return {seqlen * heads * dim, heads * dim, dim, 1};
  return {given[0], given[1], given[2], given[3]};
}

/// The AttentionArgs of `call` (flashtile_forward_kvcache's and flashtile_explain_kvcache's).
Status argsFromKvCall(const flashtile_kvcache_call *call, AttentionArgs &args) {
  if (call->size != sizeof(flashtile_kvcache_call))
    return Status::error("flashtile_kvcache_call.size is " + std::to_string(call->size) + "; expected sizeof(" +
                         "flashtile_kvcache_call) = " + std::to_string(sizeof(flashtile_kvcache_call)) +
                         " (a header of another flashtile version?)");
  if (Status s = flashtile::capi::checkDecodeDtypeCode(call->dtype); !s.ok())
    return s;
  if (call->num_params < 0 || call->num_params > FLASHTILE_CALL_MAX_PARAMS || call->num_inputs < 0 ||
      call->num_inputs > FLASHTILE_CALL_MAX_INPUTS)
    return Status::error("num_params (" + std::to_string(call->num_params) + ") and num_inputs (" +
                         std::to_string(call->num_inputs) + ") must be in [0, " +
                         std::to_string(FLASHTILE_CALL_MAX_PARAMS) + "] and [0, " +
                         std::to_string(FLASHTILE_CALL_MAX_INPUTS) + "]");
  // cache_dtype: 0 or dtype's code (the caches hold dtype), or FLASHTILE_E4M3 (an e4m3 cache).
  if (call->cache_dtype != 0 && call->cache_dtype != call->dtype && call->cache_dtype != FLASHTILE_E4M3)
    return Status::error("cache_dtype: " + std::to_string(call->cache_dtype) +
                         " is not accepted; accepted: 0 or the call's dtype (" + std::to_string(call->dtype) +
                         ": the caches hold q's type), FLASHTILE_E4M3 (2: an e4m3 cache, with k_descale/v_descale)");
  const bool paged = call->block_table != nullptr;
  const flashtile::DType dtype = flashtile::capi::dtypeOfCode(call->dtype);
  const int headDimV = call->head_dim_v ? call->head_dim_v : call->head_dim;
  args = paged ? AttentionArgs::pagedCache(dtype, call->q, call->k_cache, call->v_cache, call->o, call->lse,
                                           call->batch, call->seqlen_q, call->num_pages, call->page_size,
                                           call->block_table, call->max_pages_per_seq, call->heads_q, call->heads_kv,
                                           call->head_dim, call->cache_seqlens, headDimV)
               : AttentionArgs::contiguousCache(dtype, call->q, call->k_cache, call->v_cache, call->o, call->lse,
                                                call->batch, call->seqlen_q, call->cache_batch, call->cache_seqlen,
                                                call->heads_q, call->heads_kv, call->head_dim, call->cache_seqlens,
                                                headDimV);
  flashtile::KvCacheArgs &cache = args.kvCache;
  if (paged) {
    cache.blockTableStride = call->block_table_stride;
    cache.blockTableHost = call->block_table_host;
  } else {
    // Paged-only fields stay visible to the checks, which name them.
    cache.numPages = call->num_pages;
    cache.pageSize = call->page_size;
    cache.maxPagesPerSeq = call->max_pages_per_seq;
    cache.blockTableStride = call->block_table_stride;
    cache.blockTableHost = call->block_table_host;
  }
  cache.cacheBatchIdx = call->cache_batch_idx;
  cache.cacheBatchIdxHost = call->cache_batch_idx_host;
  cache.cacheSeqlensHost = call->cache_seqlens_host;
  if (paged && call->cache_batch)
    cache.cacheBatch = call->cache_batch;
  const long long pageOrSeq = paged ? call->page_size : call->cache_seqlen;
  args.qStride = stridesOr(call->q_stride, call->seqlen_q, call->heads_q, call->head_dim);
  args.oStride = stridesOr(call->o_stride, call->seqlen_q, call->heads_q, headDimV);
  args.kStride = stridesOr(call->k_cache_stride, pageOrSeq, call->heads_kv, call->head_dim);
  args.vStride = stridesOr(call->v_cache_stride, pageOrSeq, call->heads_kv, headDimV);
  if (call->k_new || call->v_new || call->seqlen_new) {
    cache.kNew = call->k_new;
    cache.vNew = call->v_new;
    cache.seqlenNew = call->seqlen_new;
    cache.kNewStride = stridesOr(call->k_new_stride, call->seqlen_new, call->heads_kv, call->head_dim);
    cache.vNewStride = stridesOr(call->v_new_stride, call->seqlen_new, call->heads_kv, headDimV);
  }
  if (call->rotary_interleaved != 0 && call->rotary_interleaved != 1)
    return Status::error("rotary_interleaved is " + std::to_string(call->rotary_interleaved) + "; accepted: 0 or 1");
  cache.rotary(call->rotary_cos, call->rotary_sin, call->seqlen_ro, call->rotary_dim, call->rotary_interleaved == 1);
  args.softmaxScale = call->softmax_scale;
  args.variant = call->variant ? call->variant : "none";
  args.schedule = call->schedule ? call->schedule : "";
  args.strictSchedule = call->strict_schedule != 0;
  args.variantParams.assign(call->params, call->params + call->num_params);
  args.inputs.assign(call->inputs, call->inputs + call->num_inputs);
  args.numSplits = call->num_splits;
  args.workspace = call->workspace;
  args.workspaceBytes = call->workspace_bytes;
  if (call->cache_dtype == FLASHTILE_E4M3 && call->dtype != FLASHTILE_E4M3)
    cache.dtype = flashtile::KvCacheDtype::E4M3;
  args.kDescale = call->k_descale;
  args.vDescale = call->v_descale;
  return Status();
}

Status forwardKvCache(flashtile_runtime *rt, const flashtile_kvcache_call *call) {
  if (!rt || !call)
    return Status::error("flashtile_forward_kvcache: rt and call must not be NULL");
  AttentionArgs args;
  if (Status s = argsFromKvCall(call, args); !s.ok())
    return s;
  return rt->runtime.forward(args, static_cast<CUstream>(call->stream));
}

Status explainKvCache(flashtile_runtime *rt, const flashtile_kvcache_call *call, const char *arch, char *buffer,
                      unsigned long long size) {
  if (!rt || !call || !buffer)
    return Status::error("flashtile_explain_kvcache: rt, call and buffer must not be NULL");
  AttentionArgs args;
  if (Status s = argsFromKvCall(call, args); !s.ok())
    return s;
  flashtile::StatusOr<flashtile::ScheduleChoice> choice =
      arch ? rt->runtime.explain(args, arch) : rt->runtime.explain(args);
  if (!choice.ok())
    return choice.status();
  const std::string text = choice->text();
  if (text.size() >= size)
    return Status::error("flashtile_explain_kvcache: the explanation needs " + std::to_string(text.size() + 1) +
                         " bytes; buffer has " + std::to_string(size));
  std::memcpy(buffer, text.c_str(), text.size() + 1);
  return Status();
}

} // namespace

extern "C" int flashtile_explain_kvcache(flashtile_runtime *rt, const flashtile_kvcache_call *call, const char *arch,
                                         char *buffer, unsigned long long size) {
  try {
    return report(explainKvCache(rt, call, arch, buffer, size));
  } catch (const std::exception &e) {
    flashtile::capi::setLastError(std::string("internal error: ") + e.what());
  } catch (...) {
    flashtile::capi::setLastError("internal error");
  }
  return -1;
}

extern "C" int flashtile_forward_kvcache(flashtile_runtime *rt, const flashtile_kvcache_call *call) {
  try {
    return report(forwardKvCache(rt, call));
  } catch (const std::exception &e) {
    flashtile::capi::setLastError(std::string("internal error: ") + e.what());
  } catch (...) {
    flashtile::capi::setLastError("internal error");
  }
  return -1;
}
