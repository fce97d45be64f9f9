// VariantArgsTest.cpp — a variant's numbers and input arrays in the runtime: the manifest lists the inputs, and a
// call's inputs are checked against the kernel (count, null, alignment) and against the variant (the check the
// compiler installs) before anything touches the GPU. Pointers are fake, never dereferenced.
#include "TestUtil.h"

#include "flashtile/runtime/KernelAbi.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Runtime.h"

#include <gmock/gmock.h>

using namespace flashtile;
using testing::HasSubstr;

namespace {

AttentionArgs alibiArgs() {
  AttentionArgs args = AttentionArgs::contiguous(
      DType::BF16, reinterpret_cast<const void *>(0x10000), reinterpret_cast<const void *>(0x20000),
      reinterpret_cast<const void *>(0x30000), reinterpret_cast<void *>(0x40000), reinterpret_cast<float *>(0x50000), 2,
      128, 128, 8, 8, 128);
  args.variant = "alibi";
  args.inputs = {reinterpret_cast<const void *>(0x60000)};
  return args;
}

KernelInfo alibiKernel() {
  KernelInfo info = test::fakeKernel().info;
  info.variant = "alibi";
  info.inputNames = {"slopes"};
  return info;
}

TEST(VariantInputs, ManifestRoundTripsInputNames) {
  KernelInfo info = alibiKernel();
  info.inputNames = {"slopes", "doc_start"};
  std::string text = info.serialize();
  EXPECT_THAT(text, HasSubstr("inputNames=slopes,doc_start\n"));
  StatusOr<KernelInfo> parsed = KernelInfo::parse(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->inputNames, info.inputNames);

  info.inputNames = {"a", "b", "c", "d", "e"};
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'inputNames': 5 names; at most 4"));
  info.inputNames = {"slopes", "slopes"};
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'inputNames': 'slopes' appears twice"));
  info.inputNames = {"2x"};
  EXPECT_THAT(info.verify().message(), HasSubstr("field 'inputNames': '2x' is not an identifier"));
}

TEST(VariantInputs, ValidateForChecksInputsAgainstTheKernel) {
  EXPECT_TRUE(Runtime::validateFor(alibiArgs(), alibiKernel()).ok());

  AttentionArgs args = alibiArgs();
  args.inputs.clear();
  EXPECT_EQ(Runtime::validateFor(args, alibiKernel()).message(),
            "inputs has 0 pointers but variant 'alibi' takes 1 (slopes)");
  args.inputs = {nullptr};
  EXPECT_EQ(Runtime::validateFor(args, alibiKernel()).message(),
            "inputs[0] ('slopes') is null; variant 'alibi' reads it");
  args.inputs = {reinterpret_cast<const void *>(0x60002)};
  EXPECT_THAT(Runtime::validateFor(args, alibiKernel()).message(),
              HasSubstr("inputs[0] ('slopes') (0x60002) is not 4-byte aligned"));
  args = alibiArgs();
  args.variantParams = {1.f};
  EXPECT_EQ(Runtime::validateFor(args, alibiKernel()).message(),
            "variantParams has 1 values but variant 'alibi' takes 0 (none)");
}

TEST(VariantInputs, ValidateForRejectsGridsOf2To31BlocksOrMore) {
  AttentionArgs args = alibiArgs();
  args.batch = 65535;
  args.headsQ = args.headsKv = 65535;
  args.seqlenQ = 128; // one 128-row block per (batch, head): 65535^2 > 2^31 - 1
  EXPECT_EQ(Runtime::validateFor(args, alibiKernel()).message(),
            "the launch grid would have 4294836225 thread blocks (ceil(seqlenQ / " +
                std::to_string(alibiKernel().blockM) +
                ") x headsQ x batch); at most 2147483647 are supported: split the batch into several calls");
  args.batch = 32767; // 65535 * 32767 < 2^31
  EXPECT_TRUE(Runtime::validateFor(args, alibiKernel()).ok());
}

TEST(VariantInputs, ValidateLimitsTheNumberOfInputs) {
  AttentionArgs args = alibiArgs();
  args.inputs.assign(FLASHTILE_MAX_VARIANT_INPUTS, reinterpret_cast<const void *>(0x60000));
  EXPECT_TRUE(Runtime::validate(args).ok()) << Runtime::validate(args).message();
  args.inputs.push_back(reinterpret_cast<const void *>(0x60000));
  EXPECT_THAT(Runtime::validate(args).message(),
              HasSubstr("inputs has 5 pointers; at most 4 (FLASHTILE_MAX_VARIANT_INPUTS) are supported"));
}

TEST(VariantInputs, TheInstalledVariantCheckRunsBeforeTheGpu) {
  Runtime runtime(test::cacheOptions("", false));
  int calls = 0;
  runtime.setVariantCheck([&](const AttentionArgs &args) {
    ++calls;
    return args.variantParams.empty() ? Status() : Status::error("variantParams: window left is -2");
  });
  AttentionArgs args = alibiArgs();
  args.variantParams = {-2.f};
  Status status = runtime.forward(args);
  EXPECT_EQ(status.message(), "variantParams: window left is -2");
  EXPECT_EQ(calls, 1);
}

} // namespace
