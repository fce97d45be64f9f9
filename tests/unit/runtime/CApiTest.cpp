// CApiTest.cpp — the C ABI (libflashtile.so): bad calls return -1 with a message naming the argument, before any
// GPU work. Pointers are fake (never dereferenced).
#include "FakeCubin.h"
#include "flashtile/runtime/CApi.h"

#include <gmock/gmock.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>

using testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

template <typename T> T *fake(uintptr_t address) { return reinterpret_cast<T *>(address); }

/// flashtile_forward_varlen on three sequences (total_q 32, total_k 47, longest 27 and 40), 8/2 heads, head dim 128.
int forwardVarlen(flashtile_runtime *rt, const int *cuSeqlensQ, const int *cuSeqlensK, int maxSeqlenQ,
                  int headDim = 128, int headDimV = 0) {
  const long long qStride[3] = {8 * 128, 128, 1}, kvStride[3] = {2 * 128, 128, 1};
  return flashtile_forward_varlen(rt, fake<const void>(0x10000), fake<const void>(0x20000), fake<const void>(0x30000),
                                  fake<void>(0x40000), fake<float>(0x50000), cuSeqlensQ, cuSeqlensK, FLASHTILE_BF16,
                                  /*batch=*/3, /*total_q=*/32, /*total_k=*/47, maxSeqlenQ, /*max_seqlen_k=*/40,
                                  /*heads_q=*/8, /*heads_kv=*/2, headDim, headDimV, qStride, kvStride, kvStride,
                                  qStride, 0.f, "causal", nullptr);
}

TEST(CApi, VarlenRejectsBadArgumentsNamingThem) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  const int *cuQ = fake<const int>(0x60000), *cuK = fake<const int>(0x70000);

  EXPECT_EQ(forwardVarlen(rt, cuQ, nullptr, 27), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("cuSeqlensK is null but cuSeqlensQ is set"));
  EXPECT_EQ(forwardVarlen(rt, fake<const int>(0x60002), cuK, 27), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("4-byte aligned"));
  EXPECT_EQ(forwardVarlen(rt, cuQ, cuK, -1), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("maxSeqlenQ is -1"));
  EXPECT_EQ(forwardVarlen(rt, cuQ, cuK, 27, 128, 64), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("headDimV 64 with headDim 128 is not supported"));
  // Nothing to compute (every query sequence empty): a valid no-op that needs no GPU.
  EXPECT_EQ(forwardVarlen(rt, cuQ, cuK, 0), 0) << flashtile_last_error();
  flashtile_destroy(rt);
}

TEST(CApi, SetScheduleTakesAnIdAndNamesBadOnes) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_set_schedule(rt, "fa3"), 0) << flashtile_last_error();
  EXPECT_EQ(flashtile_set_schedule(rt, "fa2"), 0) << flashtile_last_error();
  EXPECT_EQ(flashtile_set_schedule(rt, "fa 3"), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("'fa 3' is not a schedule id"));
  EXPECT_EQ(flashtile_set_schedule(rt, nullptr), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("rt and schedule must not be NULL"));
  EXPECT_EQ(flashtile_set_schedule(nullptr, "fa3"), -1);
  flashtile_destroy(rt);
}

TEST(CApi, VarlenVariantArgumentsAreChecked) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  const long long qStride[3] = {8 * 128, 128, 1}, kvStride[3] = {2 * 128, 128, 1};
  const void *docStart = fake<const void>(0x80000);
  flashtile_variant_args bad{nullptr, 0, &docStart, -1};
  EXPECT_EQ(flashtile_forward_varlen_variant(rt, fake<const void>(0x10000), fake<const void>(0x20000),
                                             fake<const void>(0x30000), fake<void>(0x40000), fake<float>(0x50000),
                                             fake<const int>(0x60000), fake<const int>(0x70000), FLASHTILE_BF16, 3, 32,
                                             47, 27, 40, 8, 2, 128, 0, qStride, kvStride, kvStride, qStride, 0.f,
                                             "document_mask", &bad, nullptr),
            -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("variant_args: num_params (0) and num_inputs (-1) must be >= 0"));
  flashtile_destroy(rt);
}

/// flashtile_forward on B=2, Sq=Sk=64, 8/2 heads, head dims (headDim, headDimV), packed strides.
int forwardDense(flashtile_runtime *rt, int headDim, int headDimV, int seqlenQ = 64) {
  int dv = headDimV == 0 ? headDim : headDimV;
  const long long qStride[4] = {64LL * 8 * headDim, 8LL * headDim, headDim, 1};
  const long long kStride[4] = {64LL * 2 * headDim, 2LL * headDim, headDim, 1};
  const long long vStride[4] = {64LL * 2 * dv, 2LL * dv, dv, 1};
  const long long oStride[4] = {64LL * 8 * dv, 8LL * dv, dv, 1};
  return flashtile_forward(rt, fake<const void>(0x10000), fake<const void>(0x20000), fake<const void>(0x30000),
                           fake<void>(0x40000), fake<float>(0x50000), FLASHTILE_BF16, 2, seqlenQ, 64, 8, 2, headDim,
                           headDimV, qStride, kStride, vStride, oStride, 0.f, "causal", nullptr);
}

TEST(CApi, DenseTakesTheVHeadDim) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(forwardDense(rt, 128, 64), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("headDimV 64 with headDim 128 is not supported"));
  EXPECT_EQ(forwardDense(rt, 192, 96), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("headDimV 96 with headDim 192"));
  // Supported pairs (192/128, and 0 = head_dim) pass the checks: with no query rows the call is a no-op.
  EXPECT_EQ(forwardDense(rt, 192, 128, /*seqlenQ=*/0), 0) << flashtile_last_error();
  EXPECT_EQ(forwardDense(rt, 128, 0, /*seqlenQ=*/0), 0) << flashtile_last_error();
  flashtile_destroy(rt);
}

/// A kernel library in a fresh temp directory, removed at the end of the test.
class AotDir {
public:
  AotDir() {
    std::string pattern = (fs::temp_directory_path() / "flashtile-capi-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      ADD_FAILURE() << "mkdtemp failed";
    root = pattern;
  }
  ~AotDir() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
  /// Writes `<name>.manifest` (as `flashtile aot` does, by this library's compiler version) and a cubin for sm_90a
  /// defining its entry.
  void addKernel(const std::string &name, const std::string &variant, const std::string &params,
                 const std::string &rules) {
    std::string entry = "flashtile_fa2_" + name;
    std::ofstream(root / (name + ".manifest"))
        << "format=2\nkind=forward\nentry=" << entry
        << "\narch=sm_90a\ndtype=bf16\nheadDim=128\nheadDimV=128\nvariant=" << variant
        << "\nschedule=fa2\nshapeClass=default\nblockM=128\nblockN=64\nparamNames=" << params
        << "\ninputNames=\nparamRules=" << rules << "\ncompilerVersion=" << flashtile_version()
        << "\ndefaultFor=all\nlaunch.0.entry=" << entry
        << "\nlaunch.0.grid=cdiv(rows, 128);heads_q;batch\nlaunch.0.threads=128\nlaunch.0.smemBytes=65536\n";
    std::ofstream(root / (name + ".cubin"), std::ios::binary) << flashtile::test::fakeCubin(90, {entry});
  }
  const fs::path &path() const { return root; }

private:
  fs::path root;
};

TEST(CApi, AheadOfTimeErrorsNameTheFileAndTheReason) {
  AotDir dir;
  dir.addKernel("k", "causal", "", "");
  fs::remove(dir.path() / "k.cubin");
  fs::create_directory(dir.path() / "k.cubin");
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_load_aot(rt, dir.path().c_str()), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("k.cubin: is a directory, not a regular file"));
  EXPECT_THAT(flashtile_last_error(), testing::Not(HasSubstr("internal error")));
  flashtile_destroy(rt);
}

/// flashtile_forward_variant on B=1, Sq=Sk=128, 8 heads, head dim 128 with `params`; O is a host buffer the call
/// must leave untouched (no pointer is dereferenced on this machine).
int forwardWithParams(flashtile_runtime *rt, const char *variant, std::vector<float> params, std::vector<char> &o) {
  const long long stride[4] = {128LL * 8 * 128, 8 * 128, 128, 1};
  flashtile_variant_args args{params.data(), static_cast<int>(params.size()), nullptr, 0};
  return flashtile_forward_variant(rt, fake<const void>(0x10000), fake<const void>(0x20000),
                                   fake<const void>(0x30000), o.data(), fake<float>(0x50000), FLASHTILE_BF16, 1, 128,
                                   128, 8, 8, 128, 0, stride, stride, stride, stride, 0.f, variant, &args, nullptr);
}

TEST(CApi, AheadOfTimeKernelsCheckVariantNumbersByTheirRules) {
  AotDir dir;
  dir.addKernel("window", "sliding_window", "left,right",
                "isinteger(left) && left >= -1 && left <= 16777216 \"a whole number from -1 (unbounded) to "
                "16777216\"; isinteger(right) && right >= -1 && right <= 16777216 \"a whole number from -1 "
                "(unbounded) to 16777216\"");
  dir.addKernel("softcap", "softcap", "cap", "cap > 0 && isfinite(cap) \"a positive, finite number\"");
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  ASSERT_EQ(flashtile_load_aot(rt, dir.path().c_str()), 0) << flashtile_last_error();

  std::vector<char> o(4096, '\x5a');
  const std::vector<char> untouched = o;
  for (float left : {-5.f, 2.5f}) {
    EXPECT_EQ(forwardWithParams(rt, "sliding_window", {left, 0.f}, o), -1);
    EXPECT_THAT(flashtile_last_error(), HasSubstr("variant 'sliding_window': left = "));
    EXPECT_THAT(flashtile_last_error(), HasSubstr("accepted: a whole number from -1 (unbounded) to 16777216"));
  }
  for (float cap : {0.f, std::nanf("")}) {
    EXPECT_EQ(forwardWithParams(rt, "softcap", {cap}, o), -1);
    EXPECT_THAT(flashtile_last_error(), HasSubstr("variant 'softcap': cap = "));
    EXPECT_THAT(flashtile_last_error(), HasSubstr("accepted: a positive, finite number"));
  }
  EXPECT_EQ(forwardWithParams(rt, "softcap", {1.f, 2.f}, o), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("variantParams has 2 values but variant 'softcap' takes 1 (cap)"));
  EXPECT_EQ(o, untouched);
  flashtile_destroy(rt);
}

TEST(CApi, VarlenWithEverySequenceEmptyAcceptsNullTensors) {
  // PyTorch hands empty tensors (total_q = 0) over as null data pointers; cu_seqlens stay real.
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  const long long stride[3] = {8 * 128, 128, 1};
  for (int totalK : {0, 47}) {
    EXPECT_EQ(flashtile_forward_varlen(rt, nullptr, totalK ? fake<const void>(0x20000) : nullptr,
                                       totalK ? fake<const void>(0x30000) : nullptr, nullptr, nullptr,
                                       fake<const int>(0x60000), fake<const int>(0x70000), FLASHTILE_BF16, 3, 0,
                                       totalK, 0, totalK ? 40 : 0, 8, 8, 128, 0, stride, stride, stride, stride, 0.f,
                                       "causal", nullptr),
              0)
        << flashtile_last_error();
  }
  // With query rows, a null tensor is still an error.
  EXPECT_EQ(flashtile_forward_varlen(rt, nullptr, fake<const void>(0x20000), fake<const void>(0x30000),
                                     fake<void>(0x40000), fake<float>(0x50000), fake<const int>(0x60000),
                                     fake<const int>(0x70000), FLASHTILE_BF16, 3, 32, 47, 27, 40, 8, 8, 128, 0, stride,
                                     stride, stride, stride, 0.f, "causal", nullptr),
            -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("q is null"));
  flashtile_destroy(rt);
}

} // namespace

namespace {

/// A dense flashtile_call of B=1, Sq=Sk=128, 8 heads, head dim 128, fake pointers.
flashtile_call denseCall() {
  flashtile_call call{};
  call.size = sizeof(flashtile_call);
  call.q = fake<const void>(0x10000);
  call.k = fake<const void>(0x20000);
  call.v = fake<const void>(0x30000);
  call.o = fake<void>(0x40000);
  call.lse = fake<float>(0x50000);
  call.dtype = FLASHTILE_BF16;
  call.batch = 1;
  call.seqlen_q = call.seqlen_k = 128;
  call.heads_q = call.heads_kv = 8;
  call.head_dim = 128;
  for (long long *stride : {call.q_stride, call.k_stride, call.v_stride, call.o_stride}) {
    stride[0] = 128LL * 8 * 128;
    stride[1] = 8 * 128;
    stride[2] = 128;
    stride[3] = 1;
  }
  return call;
}

// flashtile_explain hands the call's schedule and strictness to the runtime and reports its errors; without a kernel
// library or the JIT (libflashtile.so) no schedule has a kernel.
TEST(CApi, ExplainTakesTheCallsScheduleAndStrictness) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  flashtile_call call = denseCall();
  char text[512];
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("no schedule for this call on sm_90a: none is named"));
  call.schedule = "fa3";
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("no kernel for arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;"
                                                "variant=none;schedule=fa3;shapeClass=short"));
  call.strict_schedule = 1;
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("schedule 'fa3' (named by the call) has no kernel for"));
  EXPECT_THAT(flashtile_last_error(), HasSubstr("strict schedule mode"));
  call.schedule = "fa 3";
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("schedule 'fa 3' (named by the call) is not a schedule id"));
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_75", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("arch 'sm_75' is not supported"));
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", nullptr, 0), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("rt, call and buffer must not be NULL"));
  call.size = 8;
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("expected sizeof(flashtile_call)"));
  flashtile_destroy(rt);
}

TEST(CApi, StrictScheduleModeAndScheduleResetAreAccepted) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_set_strict_schedule(rt, 1), 0) << flashtile_last_error();
  EXPECT_EQ(flashtile_set_schedule(rt, "fa3"), 0) << flashtile_last_error();
  flashtile_call call = denseCall();
  char text[512];
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("schedule 'fa3' (named by setSchedule) has no kernel"));
  EXPECT_EQ(flashtile_set_schedule(rt, ""), 0) << flashtile_last_error(); // back to the dispatch rules
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("none is named"));
  EXPECT_EQ(flashtile_set_strict_schedule(nullptr, 1), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_set_strict_schedule: rt must not be NULL"));
  flashtile_destroy(rt);
}

// flashtile_check_errors: a runtime that ran no KV-cache call has no record to read (no GPU touched); a NULL runtime is
// an error. What a record reports is KvErrorsTest.cpp's and the GPU tests'.
TEST(CApi, CheckErrorsWithoutAnyCallIsOk) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  EXPECT_EQ(flashtile_check_errors(rt), 0) << flashtile_last_error();
  EXPECT_EQ(flashtile_check_errors(nullptr), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_check_errors: rt must not be NULL"));
  flashtile_destroy(rt);
}

// flash-attn's varlen call without keys (total_k = 0): null K and V pass the checks (O = 0 and LSE = -inf on a GPU).
TEST(CApi, VarlenWithoutKeysAcceptsNullKAndV) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  flashtile_call call = denseCall();
  call.k = call.v = nullptr;
  call.cu_seqlens_q = fake<const int>(0x60000);
  call.cu_seqlens_k = fake<const int>(0x70000);
  call.batch = 2;
  call.seqlen_k = call.max_seqlen_k = 0;
  call.max_seqlen_q = 64;
  call.schedule = "fa2";
  char text[512];
  // The checks pass: what fails is the kernel lookup (no library, no JIT here), not "k is null".
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("no kernel for arch=sm_90a"));
  EXPECT_THAT(flashtile_last_error(), testing::Not(HasSubstr("is null")));
  call.seqlen_k = 47;
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("k is null"));
  flashtile_destroy(rt);
}

// FLASHTILE_E4M3 calls: descales only with it (flashtile_call's q/k/v_descale), no backward, and codes past it named.
TEST(CApi, E4m3CallsAreCheckedNamingTheArgument) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  char text[512];
  flashtile_call bf16 = denseCall();
  bf16.k_descale = fake<const float>(0x80000);
  EXPECT_EQ(flashtile_explain(rt, &bf16, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("kDescale is set but dtype is bf16; descales apply to e4m3 tensors only"));
  flashtile_call unknown = denseCall();
  unknown.dtype = 3;
  EXPECT_EQ(flashtile_explain(rt, &unknown, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(),
              HasSubstr("dtype: 3 is not FLASHTILE_F16 (0), FLASHTILE_BF16 (1) or FLASHTILE_E4M3 (2)"));
  flashtile_call e4m3 = denseCall();
  e4m3.dtype = FLASHTILE_E4M3;
  e4m3.q_descale = e4m3.k_descale = e4m3.v_descale = fake<const float>(0x80000);
  flashtile_bwd_call backward{};
  backward.size = sizeof backward;
  backward.forward = e4m3;
  backward.d_o = fake<const void>(0x90000);
  backward.d_q = fake<void>(0xa0000);
  backward.d_k = fake<void>(0xb0000);
  backward.d_v = fake<void>(0xc0000);
  for (int i = 0; i < 4; ++i) {
    backward.d_o_stride[i] = backward.d_q_stride[i] = e4m3.q_stride[i];
    backward.d_k_stride[i] = backward.d_v_stride[i] = e4m3.k_stride[i];
  }
  EXPECT_EQ(flashtile_backward_call(rt, &backward), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("forward.dtype is e4m3: FP8 calls have no backward"));
  flashtile_destroy(rt);
}

} // namespace

namespace {

// flashtile_backward_call checks its struct and the gradients' arguments before any GPU work, naming them.
TEST(CApi, BackwardCallRejectsBadArgumentsNamingThem) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  flashtile_bwd_call call{};
  call.size = sizeof call;
  call.forward = denseCall();
  call.d_o = fake<const void>(0x90000);
  call.d_q = fake<void>(0xa0000);
  call.d_k = fake<void>(0xb0000);
  call.d_v = fake<void>(0xc0000);
  for (int i = 0; i < 4; ++i) {
    call.d_o_stride[i] = call.d_q_stride[i] = call.forward.q_stride[i];
    call.d_k_stride[i] = call.d_v_stride[i] = call.forward.k_stride[i];
  }
  EXPECT_EQ(flashtile_backward_call(nullptr, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_backward_call: rt and call must not be NULL"));
  flashtile_bwd_call wrongSize = call;
  wrongSize.size = 8;
  EXPECT_EQ(flashtile_backward_call(rt, &wrongSize), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("expected sizeof(flashtile_bwd_call)"));
  flashtile_bwd_call badForward = call;
  badForward.forward.dtype = 7;
  EXPECT_EQ(flashtile_backward_call(rt, &badForward), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("forward: dtype: 7 is not FLASHTILE_F16 (0), FLASHTILE_BF16 (1) or FLASHTILE_E4M3 (2)"));
  flashtile_bwd_call noGrad = call;
  noGrad.d_k = nullptr;
  EXPECT_EQ(flashtile_backward_call(rt, &noGrad), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dK is null"));
  flashtile_bwd_call badStride = call;
  badStride.d_v_stride[1] = 3;
  EXPECT_EQ(flashtile_backward_call(rt, &badStride), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dVStride[1]"));
  flashtile_bwd_call farStride = call; // 2^62 elements x 127 rows x 2 bytes: past a 64-bit byte offset
  farStride.d_q_stride[1] = 1ll << 62;
  EXPECT_EQ(flashtile_backward_call(rt, &farStride), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dQStride[1] (seq stride) is 4611686018427387904 over 128 entries"));
  flashtile_call farForward = call.forward;
  farForward.batch = 2;
  farForward.q_stride[0] = 1ll << 62;
  EXPECT_EQ(flashtile_forward_call(rt, &farForward), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("qStride[0] (batch stride) is 4611686018427387904 over 2 entries"));
  // Valid arguments reach the kernel lookup: with no library and no JIT here, no schedule is known.
  EXPECT_EQ(flashtile_backward_call(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), testing::Not(HasSubstr("is null")));
  // The workspace size query checks the same arguments and finds the kernel as the call would.
  unsigned long long bytes = 1;
  EXPECT_EQ(flashtile_backward_workspace_size(rt, &call, nullptr), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_backward_workspace_size: rt, call and bytes"));
  EXPECT_EQ(flashtile_backward_workspace_size(rt, &wrongSize, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_backward_workspace_size: call->size is 8"));
  EXPECT_EQ(flashtile_backward_workspace_size(rt, &noGrad, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("dK is null"));
  EXPECT_EQ(flashtile_backward_workspace_size(rt, &call, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), testing::Not(HasSubstr("is null")));
  EXPECT_EQ(bytes, 1u) << "left alone on failure";
  // The forward's: the same checks as flashtile_forward_call, then the kernel lookup.
  flashtile_call forward = call.forward;
  EXPECT_EQ(flashtile_forward_workspace_size(rt, &forward, nullptr), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("flashtile_forward_workspace_size: rt, call and bytes"));
  EXPECT_EQ(flashtile_forward_workspace_size(rt, &farForward, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("qStride[0] (batch stride)"));
  EXPECT_EQ(flashtile_forward_workspace_size(rt, &forward, &bytes), -1);
  EXPECT_THAT(flashtile_last_error(), testing::Not(HasSubstr("is null")));
  EXPECT_EQ(bytes, 1u) << "left alone on failure";
  flashtile_destroy(rt);
}

} // namespace

namespace {

// flashtile_call's positions (flashtile_positions) reach the runtime: a block asks for the module with position
// offsets (its key ends in ";positions=1"), a plain call for the one it asked for before, and bad positions are
// refused naming the field, forward and backward (forward.positions).
TEST(CApi, PositionsMakeACallABlockOfALargerProblem) {
  flashtile_runtime *rt = flashtile_create();
  ASSERT_NE(rt, nullptr) << flashtile_last_error();
  char text[512];
  flashtile_call call = denseCall();
  call.schedule = "fa3";
  call.heads_kv = 2;
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("no kernel for arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;"
                                                "variant=none;schedule=fa3;shapeClass=short (no ahead"));
  flashtile_positions positions{};
  positions.q_offset = 128;
  positions.k_offset = 0;
  positions.seqlen_q_global = positions.seqlen_k_global = 512;
  positions.head_offset = 8;
  positions.heads_q_global = 16;
  positions.heads_kv_global = 4;
  call.positions = &positions;
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("schedule=fa3;shapeClass=short;positions=1 (no ahead"));

  positions.q_offset = 400; // 400 + 128 rows > 512
  EXPECT_EQ(flashtile_explain(rt, &call, "sm_90a", text, sizeof text), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("positions: qOffset + seqlenQ = 400 + 128 is past the larger "
                                                "problem's seqlenQGlobal = 512"));
  positions.q_offset = 128;
  positions.head_offset = 2;
  EXPECT_EQ(flashtile_forward_call(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("positions: headOffset (2), headsQGlobal (16) and headsKvGlobal (4)"));
  positions.head_offset = 8;
  positions.q_offsets = fake<const int>(0x80000);
  EXPECT_EQ(flashtile_forward_call(rt, &call), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("positions: qOffsets is set on a dense call"));
  positions.q_offsets = nullptr;

  flashtile_bwd_call backward{};
  backward.size = sizeof backward;
  backward.forward = call;
  backward.d_o = fake<const void>(0x90000);
  backward.d_q = fake<void>(0xa0000);
  backward.d_k = fake<void>(0xb0000);
  backward.d_v = fake<void>(0xc0000);
  for (int i = 0; i < 4; ++i) {
    backward.d_o_stride[i] = backward.d_q_stride[i] = call.q_stride[i];
    backward.d_k_stride[i] = backward.d_v_stride[i] = call.k_stride[i];
  }
  positions.k_offset = -2;
  EXPECT_EQ(flashtile_backward_call(rt, &backward), -1);
  EXPECT_THAT(flashtile_last_error(), HasSubstr("forward: positions: kOffset is -2; it must be >= 0"));
  // Valid positions pass the checks (what fails then is the lookup, here without a GPU or a kernel library).
  positions.k_offset = 0;
  EXPECT_EQ(flashtile_backward_call(rt, &backward), -1);
  EXPECT_THAT(flashtile_last_error(), testing::Not(HasSubstr("positions:")));
  flashtile_destroy(rt);
}

} // namespace
