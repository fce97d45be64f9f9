// KvErrors.cpp — the KV cache's device error records: allocation, call numbers, read-back and reports.
#include "KvErrors.h"
#include "flashtile/runtime/Runtime.h"

#include <climits>
#include <cstdio>

using namespace flashtile;
using namespace flashtile::detail;

namespace {

constexpr size_t kRecordWords = sizeof(FlashtileKvError) / sizeof(int);

std::string str(long long value) { return std::to_string(value); }

std::string pointerText(const void *pointer) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", pointer);
  return text;
}

} // namespace

KvCallInfo KvCallInfo::of(const AttentionArgs &args, std::shared_ptr<const CachedKernel> kernel, CUstream stream) {
  KvCallInfo call;
  call.kernel = std::move(kernel);
  call.stream = stream;
  call.batch = args.batch;
  call.seqlenQ = args.seqlenQ;
  call.capacity = args.seqlenK;
  call.seqlenNew = args.kvCache.seqlenNew;
  call.paged = args.kvCache.layout == KvCacheLayout::Paged;
  call.rows = call.paged ? args.kvCache.numPages : args.kvCache.cacheBatch;
  return call;
}

std::string flashtile::detail::describeKvError(const FlashtileKvError &record, const KvCallInfo *call) {
  const std::string row = str(record.row), value = str(record.value), last = str(record.last);
  std::string read;
  switch (record.argument) {
  case FLASHTILE_KV_ERROR_CACHE_SEQLENS:
    read = "cache_seqlens[" + row + "] = " + value + "; accepted: 0 to seqlen_k - seqlen_new = " + last +
           " (the keys of the sequence's cache before the call's new ones)";
    break;
  case FLASHTILE_KV_ERROR_CACHE_BATCH_IDX:
    read = "cache_batch_idx[" + row + "] = " + value + "; accepted: a cache row from 0 to cache_batch - 1 = " + last;
    break;
  case FLASHTILE_KV_ERROR_BLOCK_TABLE:
    read = "block_table[" + row + "][" + str(record.column) + "] = " + value +
           "; accepted: a page index from 0 to num_pages - 1 = " + last;
    break;
  default:
    read = "a value of an argument this runtime does not know (code " + str(record.argument) + ", batch entry " + row +
           ", value " + value + ")";
    break;
  }
  std::string kernel = record.kernel == FLASHTILE_KV_ERROR_IN_APPEND      ? "append kernel"
                       : record.kernel == FLASHTILE_KV_ERROR_IN_ATTENTION ? "attention kernel"
                                                                          : "kernel";
  std::string text = "KV-cache call #" + str(record.call);
  if (call) {
    text += " (" + (call->kernel ? "kernel " + call->kernel->info.entry + ", " : std::string()) + "batch " +
            str(call->batch) + ", seqlen_q " + str(call->seqlenQ) + ", " +
            (call->paged ? "a paged cache of " + str(call->rows) + " pages"
                         : "a contiguous cache of " + str(call->rows) + " rows") +
            ", " + str(call->capacity) + " keys a sequence, " + str(call->seqlenNew) + " appended, stream " +
            pointerText(call->stream) + ")";
  } else {
    text += " (no longer remembered: the runtime names its last " + str(KvErrorRecords::kRememberedCalls) + " calls)";
  }
  text += ": its " + kernel + " read " + read +
          ". The kernels clamped it into range (nothing outside the caches was read or written), so that call's "
          "output" +
          (call && call->seqlenNew > 0 ? " and the keys it appended are" : " is") + " wrong";
  return text;
}

StatusOr<std::pair<FlashtileKvError *, int>> KvErrorRecords::bind(const CudaDriver &driver, CUcontext context,
                                                                  CUstream stream, KvCallInfo call) {
  std::lock_guard<std::mutex> lock(guard);
  const int number = nextCall;
  nextCall = nextCall == INT_MAX ? 1 : nextCall + 1;
  call.number = number;
  calls[static_cast<size_t>(number) % kRememberedCalls] = std::move(call);
  auto known = records.find(context);
  if (known != records.end())
    return std::pair{reinterpret_cast<FlashtileKvError *>(known->second), number};
  // Under CUDA graph capture nothing may be allocated or synchronized: this call runs without a record.
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (Status s = driver.check(driver.cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"); !s.ok())
    return s;
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE)
    return std::pair{static_cast<FlashtileKvError *>(nullptr), number};
  CUdeviceptr record = 0;
  if (Status s = driver.check(driver.cuMemAlloc_v2(&record, sizeof(FlashtileKvError)),
                              "cuMemAlloc (the KV cache's error record)");
      !s.ok())
    return s;
  // Zeroed before any kernel of any stream can see it: a read on another stream must never find garbage there.
  Status zeroed = driver.check(driver.cuMemsetD32Async(record, 0, kRecordWords, stream),
                               "cuMemsetD32Async (the KV cache's error record)");
  if (zeroed.ok())
    zeroed = driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize (the KV cache's error record)");
  if (!zeroed.ok()) {
    driver.cuMemFree_v2(record);
    return zeroed;
  }
  records.emplace(context, record);
  return std::pair{reinterpret_cast<FlashtileKvError *>(record), number};
}

Status KvErrorRecords::take(const CudaDriver &driver, CUdeviceptr address, bool synchronized, CUstream stream) {
  FlashtileKvError record{};
  if (Status s = driver.check(driver.cuMemcpyDtoH_v2(&record, address, sizeof(record)),
                              "cuMemcpyDtoH (the KV cache's error record)");
      !s.ok())
    return s;
  if (record.argument == 0)
    return Status();
  // Claimed but not published: a kernel on a stream the caller did not wait for is writing it. After a whole
  // context's synchronization nothing is: its writer stopped half way (a context that faulted).
  if (record.argument == FLASHTILE_KV_ERROR_CLAIMED && !synchronized)
    return Status();
  Status report = record.argument == FLASHTILE_KV_ERROR_CLAIMED
                      ? Status::error("the KV cache's error record was claimed by a kernel that did not finish "
                                      "writing it (the context faulted?)")
                      : [&] {
                          const KvCallInfo &known = calls[static_cast<size_t>(record.call) % kRememberedCalls];
                          const bool remembered = record.call > 0 && known.number == record.call;
                          return Status::error(describeKvError(record, remembered ? &known : nullptr));
                        }();
  // Zeroed for the next bad value, and waited for, so that no kernel launched after this finds the old one.
  if (Status s = driver.check(driver.cuMemsetD32Async(address, 0, kRecordWords, stream),
                              "cuMemsetD32Async (the KV cache's error record)");
      !s.ok())
    return s;
  if (Status s = driver.check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize (the KV cache's error record)");
      !s.ok())
    return s;
  return report;
}

Status KvErrorRecords::readAfterSync(const CudaDriver &driver, CUcontext context, CUstream stream) {
  std::lock_guard<std::mutex> lock(guard);
  auto known = records.find(context);
  if (known == records.end())
    return Status();
  Status s = take(driver, known->second, /*synchronized=*/false, stream);
  if (s.ok())
    return s;
  return Status::error(s.message() +
                       " (found by a later call, which launched nothing; Runtime::checkErrors, flashtile_check_errors "
                       "and flashtile.check_errors() read the record without launching)");
}

Status KvErrorRecords::checkAll(const CudaDriver &driver) {
  std::lock_guard<std::mutex> lock(guard);
  if (records.empty())
    return Status();
  CUcontext caller = nullptr;
  if (Status s = driver.check(driver.cuCtxGetCurrent(&caller), "cuCtxGetCurrent"); !s.ok())
    return s;
  std::string errors;
  for (const auto &[context, address] : records) {
    Status s = driver.check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    if (s.ok())
      s = driver.check(driver.cuCtxSynchronize(), "cuCtxSynchronize");
    if (s.ok())
      s = take(driver, address, /*synchronized=*/true, nullptr);
    if (!s.ok())
      errors += (errors.empty() ? "" : "; ") + s.message();
  }
  driver.cuCtxSetCurrent(caller);
  return errors.empty() ? Status() : Status::error(errors);
}

void KvErrorRecords::release(const CudaDriver &driver) {
  std::lock_guard<std::mutex> lock(guard);
  CUcontext caller = nullptr;
  driver.cuCtxGetCurrent(&caller);
  for (const auto &[context, address] : records)
    if (driver.cuCtxSetCurrent(context) == CUDA_SUCCESS)
      driver.cuMemFree_v2(address);
  records.clear();
  driver.cuCtxSetCurrent(caller);
}
