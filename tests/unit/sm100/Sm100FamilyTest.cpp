// Sm100FamilyTest.cpp — the sm100 family as registered (codegen/sm100/TileOpsSm100.cpp): what it serves, the shapes it
// refuses with their messages, its shared-memory budget, and the descriptors its printer writes into a kernel,
// compared with the host encoders the descriptor tests check bit by bit. CPU only; no kernel runs (no SM100 GPU).
#include "codegen/Registry.h"
#include "codegen/common/TargetRegistry.h"
#include "codegen/sm100/DescriptorsSm100.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

using namespace flashtile::codegen;
using ::testing::HasSubstr;

namespace {

const TargetFamily &family() {
  registerBuiltinTargets();
  const TargetFamily *f = lookupTarget("sm100");
  EXPECT_NE(f, nullptr);
  return *f;
}

/// fa4's first form at head dim 128 (roles = 0): two computing warpgroups of 128 rows, 64-key tiles, two slots.
KernelShape fa4Shape() {
  KernelShape s;
  s.dtype = "bf16";
  s.headDim = s.headDimV = 128;
  s.blockM = 256;
  s.blockN = 64;
  s.warps = 12;
  s.stages = 2;
  s.warpRows = 32;
  return s;
}

std::string refusal(KernelShape s) {
  std::optional<std::string> why = family().checkShape(s);
  return why ? *why : std::string("(accepted)");
}

TEST(Sm100Family, ServesSm100aWithTcgen05Shapes) {
  const TargetFamily &f = family();
  ASSERT_EQ(f.archs().size(), 1u);
  EXPECT_EQ(f.archs()[0].arch, "sm_100a");
  EXPECT_EQ(f.archs()[0].maxSmemBytes, 227 * 1024);
  EXPECT_TRUE(f.asyncProtocol());
  EXPECT_EQ(f.mmaShape().m, 128);
  EXPECT_FALSE(f.checkShape(fa4Shape()));
  // Q (256 x 128) and two slots of K and V (64 x 128 each), 16-bit, plus the alignment and barrier reserve.
  EXPECT_EQ(f.smemBytes(fa4Shape()), 2 * (256 * 128 + 2 * 64 * (128 + 128)) + 2048);
}

TEST(Sm100Family, LaysOutTheMemoryLayersRoles) {
  // fa4's default (FA4's own roles): the two softmax warpgroups, the correction warpgroup and a warpgroup of one-warp
  // roles, 16 warps; its shared memory holds the channels' barriers and each Q tile's alpha, m and l past the ring's.
  const TargetFamily &f = family();
  KernelShape s = fa4Shape();
  s.warps = 16;
  EXPECT_FALSE(f.checkShape(s));
  EXPECT_EQ(f.smemBytes(s), 2 * (256 * 128 + 2 * 64 * (128 + 128)) + 2048 + 2048 + 2 * 128 * 12);
  s.warps = 20;
  EXPECT_THAT(refusal(s), HasSubstr("or (the memory layer's roles) those warpgroups, a correction warpgroup"));
}

TEST(Sm100Family, RefusesWhatItDoesNotPrint) {
  KernelShape s = fa4Shape();
  s.headDim = 96;
  EXPECT_EQ(refusal(s), "sm100: head_dim (96) must be a multiple of 64 up to 256 (whole 128-byte swizzled column "
                        "blocks)");
  s = fa4Shape();
  s.blockN = 96;
  EXPECT_THAT(refusal(s), HasSubstr("sm100: block-n (96) must be a power of two in [16, 256]"));
  s = fa4Shape();
  s.blockM = 384;
  s.warps = 16;
  EXPECT_THAT(refusal(s), HasSubstr("one producer warpgroup plus one or two computing warpgroups of 128 rows"));
  s = fa4Shape();
  s.warpRows = 16;
  EXPECT_THAT(refusal(s), HasSubstr("sm100: split_q warpRows (16) must be 32"));
  s = fa4Shape();
  s.headDimV = 256;
  EXPECT_EQ(refusal(s), "sm100: 2 warpgroup(s) x (block-n 64 + head_dim_v 256) columns of S and O exceed tensor "
                        "memory's 512 columns");
  s = fa4Shape();
  s.exp2PolyShare = 9;
  EXPECT_THAT(refusal(s), HasSubstr("sm100: exp2 poly share (9) must be 0 to 8"));
  s = fa4Shape();
  s.dtype = "f32";
  EXPECT_THAT(refusal(s), HasSubstr("bf16 or f16"));
}

/// The hexadecimal literal the printer writes for a 64-bit descriptor.
std::string literal64(uint64_t value) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%016llxull", static_cast<unsigned long long>(value));
  return text;
}

TEST(Sm100Family, PrintsTheHostEncodedDescriptors) {
  using namespace flashtile::codegen::sm100;
  std::unique_ptr<TileTarget> printer = family().createPrinter(fa4Shape());
  CudaWriter w;
  printer->setup(w, {Operand::Q, Operand::K, Operand::V});
  const std::string kernel = w.str();
  const std::string kMajor = literal64(encode(kMajorDescriptor(SwizzlingMode::Swizzle128B)));
  EXPECT_THAT(kernel, HasSubstr("kQDesc = " + kMajor + ", kKDesc = " + kMajor));
  // V MN-major: the next 64 columns of the head dim are a 64-row column block (64 x 128 bytes) on.
  EXPECT_THAT(kernel, HasSubstr("kVDesc = " + literal64(encode(mnMajorDescriptor(SwizzlingMode::Swizzle128B,
                                                                                    64 * 128)))));
  // bf16 x bf16 -> f32, M = 128: N = 64 both K-major for S, N = 128 with V MN-major for O.
  EXPECT_THAT(kernel, HasSubstr("kQkIdesc = 0x08100490u"));
  EXPECT_THAT(kernel, HasSubstr("kPvIdesc = 0x08210490u"));
  EXPECT_THAT(std::string(printer->prelude()), HasSubstr("tcgen05.st.sync.aligned.16x256b.x8.b32"));
}

} // namespace
