// Sm100DescriptorsTest.cpp — the tcgen05 descriptor encoders (codegen/sm100/DescriptorsSm100.h) against the PTX ISA's
// tables, bit by bit: every field of the shared-memory descriptor (section 9.7.16.4.1, Table 40) and of the .kind::f16
// instruction descriptor (section 9.7.16.4.2, Table 42) at the bits the table gives it, the tables' fields covering
// each descriptor exactly once, the fixed values, and the worked example bf16 x bf16 -> f32, M = N = 128, both
// operands K-major. CPU only: no SM100 GPU exists here, so no tensor core has read these values.
#include "codegen/sm100/DescriptorsSm100.h"

#include <gmock/gmock.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace sm100 = flashtile::codegen::sm100;
using testing::HasSubstr;

namespace {

/// One row of a PTX descriptor table: the field's first bit and width, and how our struct reads and writes it.
template <class Descriptor> struct TableRow {
  const char *field;
  int lowBit;
  int width;
  std::function<void(Descriptor &, uint64_t)> set;
  std::function<uint64_t(const Descriptor &)> get;
};

#define FLASHTILE_ROW(Descriptor, field, lowBit, width)                                                                \
  TableRow<Descriptor> {                                                                                               \
#field, lowBit, width,                                                                                             \
        [](Descriptor & d,                                                                                             \
           uint64_t v) { d.field = v; }, [](const Descriptor &d) { return static_cast<uint64_t>(d.field); }            \
  }

/// PTX ISA Table 40, "Shared memory descriptor layout".
std::vector<TableRow<sm100::SharedMemoryDescriptor>> table40() {
  using D = sm100::SharedMemoryDescriptor;
  return {FLASHTILE_ROW(D, matrixStartAddress, 0, 14),
          FLASHTILE_ROW(D, reserved14, 14, 2),
          FLASHTILE_ROW(D, leadingDimensionByteOffset, 16, 14),
          FLASHTILE_ROW(D, reserved30, 30, 2),
          FLASHTILE_ROW(D, strideDimensionByteOffset, 32, 14),
          FLASHTILE_ROW(D, version, 46, 3),
          FLASHTILE_ROW(D, matrixBaseOffset, 49, 3),
          FLASHTILE_ROW(D, leadingDimensionStrideMode, 52, 1),
          FLASHTILE_ROW(D, fixedConstant53, 53, 8),
          FLASHTILE_ROW(D, swizzlingMode, 61, 3)};
}

/// PTX ISA Table 42, "Instruction descriptor format for .kind::tf32, .kind::f16, .kind::f8f6f4 and .kind::i8".
std::vector<TableRow<sm100::InstructionDescriptor>> table42() {
  using D = sm100::InstructionDescriptor;
  return {FLASHTILE_ROW(D, sparsitySelector, 0, 2), FLASHTILE_ROW(D, sparsity, 2, 1),
          FLASHTILE_ROW(D, saturate, 3, 1),         FLASHTILE_ROW(D, dtype, 4, 2),
          FLASHTILE_ROW(D, reserved6, 6, 1),        FLASHTILE_ROW(D, atype, 7, 3),
          FLASHTILE_ROW(D, btype, 10, 3),           FLASHTILE_ROW(D, negateA, 13, 1),
          FLASHTILE_ROW(D, negateB, 14, 1),         FLASHTILE_ROW(D, transposeA, 15, 1),
          FLASHTILE_ROW(D, transposeB, 16, 1),      FLASHTILE_ROW(D, n, 17, 6),
          FLASHTILE_ROW(D, reserved23, 23, 1),      FLASHTILE_ROW(D, m, 24, 5),
          FLASHTILE_ROW(D, reserved29, 29, 1),      FLASHTILE_ROW(D, maxShift, 30, 2)};
}

#undef FLASHTILE_ROW

uint64_t ones(int width) { return width == 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1; }

/// A descriptor with every field 0, the fixed ones included (the defaults set the version to 0b001).
template <class Descriptor> Descriptor allZero(const std::vector<TableRow<Descriptor>> &table) {
  Descriptor d;
  for (const TableRow<Descriptor> &row : table)
    row.set(d, 0);
  return d;
}

/// Each field alone, at its lowest and highest value, lands on the table's bits and reads back; the rows cover the
/// descriptor's bits exactly once.
template <class Descriptor> void expectLayout(const std::vector<TableRow<Descriptor>> &table, int bits) {
  uint64_t covered = 0;
  for (const TableRow<Descriptor> &row : table) {
    SCOPED_TRACE(row.field);
    const uint64_t mask = ones(row.width) << row.lowBit;
    EXPECT_EQ(covered & mask, 0u) << "overlaps an earlier row";
    covered |= mask;
    Descriptor d = allZero(table);
    row.set(d, 1);
    EXPECT_EQ(sm100::encode(d), uint64_t{1} << row.lowBit);
    row.set(d, ones(row.width));
    EXPECT_EQ(sm100::encode(d), mask);
    EXPECT_EQ(row.get(d), ones(row.width));
  }
  EXPECT_EQ(covered, ones(bits)) << "the table's rows must cover every bit";
}

// ---- shared-memory descriptor ----

TEST(Sm100SharedMemoryDescriptor, EveryFieldSitsWhereTable40PutsIt) { expectLayout(table40(), 64); }

TEST(Sm100SharedMemoryDescriptor, DecodeReadsEveryField) {
  const auto table = table40();
  for (const auto &row : table) {
    SCOPED_TRACE(row.field);
    const sm100::SharedMemoryDescriptor d = sm100::decodeSharedMemoryDescriptor(ones(row.width) << row.lowBit);
    for (const auto &other : table)
      EXPECT_EQ(other.get(d), &other == &row ? ones(row.width) : 0u) << other.field;
  }
}

TEST(Sm100SharedMemoryDescriptor, DefaultsAreTheFixedConstants) {
  // Bits 46-48: "fixed constant value of 0b001"; bits 53-60: "fixed constant value of 0"; all else 0.
  EXPECT_EQ(sm100::encode(sm100::SharedMemoryDescriptor{}), uint64_t{0b001} << 46);
}

TEST(Sm100SharedMemoryDescriptor, MatrixDescriptorEncode) {
  // matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4.
  EXPECT_EQ(sm100::matrixDescriptorEncode(0x400), 0x40u);
  EXPECT_EQ(sm100::matrixDescriptorEncode(0x3FFF0), 0x3FFFu);
  EXPECT_EQ(sm100::matrixDescriptorEncode(0x3FFFF), 0x3FFFu); // the four low bits are dropped
  EXPECT_EQ(sm100::matrixDescriptorEncode(0x40010), 0x1u);    // so is bit 18 and above
}

TEST(Sm100SharedMemoryDescriptor, SwizzlingModesAndRepeats) {
  // Bits 61-63: 0 none, 1 128-byte with 32-byte atomic, 2 128-byte, 4 64-byte, 6 32-byte; Table 41's repeats.
  EXPECT_EQ(static_cast<int>(sm100::SwizzlingMode::None), 0);
  EXPECT_EQ(static_cast<int>(sm100::SwizzlingMode::Swizzle128BWith32BAtom), 1);
  EXPECT_EQ(static_cast<int>(sm100::SwizzlingMode::Swizzle128B), 2);
  EXPECT_EQ(static_cast<int>(sm100::SwizzlingMode::Swizzle64B), 4);
  EXPECT_EQ(static_cast<int>(sm100::SwizzlingMode::Swizzle32B), 6);
  EXPECT_EQ(sm100::swizzleRepeatBytes(sm100::SwizzlingMode::Swizzle128B), 1024u);
  EXPECT_EQ(sm100::swizzleRepeatBytes(sm100::SwizzlingMode::Swizzle64B), 512u);
  EXPECT_EQ(sm100::swizzleRepeatBytes(sm100::SwizzlingMode::Swizzle32B), 256u);
  EXPECT_EQ(sm100::swizzlingModeForSpan(128), sm100::SwizzlingMode::Swizzle128B);
  EXPECT_EQ(sm100::swizzlingModeForSpan(64), sm100::SwizzlingMode::Swizzle64B);
  EXPECT_EQ(sm100::swizzlingModeForSpan(32), sm100::SwizzlingMode::Swizzle32B);
  EXPECT_EQ(sm100::swizzlingModeForSpan(96), std::nullopt);
  // The enum's values fit the field.
  sm100::SharedMemoryDescriptor d;
  d.swizzlingMode = static_cast<uint64_t>(sm100::SwizzlingMode::Swizzle32B);
  EXPECT_EQ(sm100::encode(d) >> 61, 6u);
}

TEST(Sm100SharedMemoryDescriptor, BaseOffsetOfAPatternOffItsBoundary) {
  // 0 when the pattern starts on its repeat boundary, else (pattern start address >> 7) & 7.
  EXPECT_EQ(sm100::matrixBaseOffset(sm100::SwizzlingMode::Swizzle128B, 0x2400), 0u);
  EXPECT_EQ(sm100::matrixBaseOffset(sm100::SwizzlingMode::Swizzle128B, 0x2580), (0x2580u >> 7) & 7u);
  EXPECT_EQ(sm100::matrixBaseOffset(sm100::SwizzlingMode::Swizzle64B, 0x2200), 0u);
  EXPECT_EQ(sm100::matrixBaseOffset(sm100::SwizzlingMode::Swizzle64B, 0x2280), 5u);
  EXPECT_EQ(sm100::matrixBaseOffset(sm100::SwizzlingMode::None, 0x2280), 0u);
}

TEST(Sm100SharedMemoryDescriptor, KMajorWorkedExample) {
  // Q (or K) of Q·Kᵀ, 128-byte swizzle, at shared address 0x400 (1024-aligned: base offset 0). LBO is unused by
  // swizzled K-major layouts ("assumed 1"), SBO = 8 rows x 128 bytes.
  const sm100::SharedMemoryDescriptor d = sm100::kMajorDescriptor(sm100::SwizzlingMode::Swizzle128B, 0x400);
  EXPECT_EQ(d.matrixStartAddress, 0x400u >> 4);
  EXPECT_EQ(d.leadingDimensionByteOffset, 1u);
  EXPECT_EQ(d.strideDimensionByteOffset, 1024u >> 4);
  EXPECT_EQ(d.version, 0b001u);
  EXPECT_EQ(d.matrixBaseOffset, 0u);
  EXPECT_EQ(d.leadingDimensionStrideMode, 0u);
  EXPECT_EQ(d.swizzlingMode, 2u);
  const uint64_t expected = (uint64_t{2} << 61) | (uint64_t{1} << 46) | (uint64_t{1024 >> 4} << 32) |
                            (uint64_t{1} << 16) | uint64_t{0x400 >> 4};
  EXPECT_EQ(expected, 0x4000404000010040u);
  EXPECT_EQ(sm100::encode(d), expected);
}

TEST(Sm100SharedMemoryDescriptor, MnMajorOperandOfPV) {
  // V of P·V, head dim 128: two 64-column blocks of 128 key rows, 16 KB apart (LBO); SBO = 8 k rows x 128 bytes.
  constexpr uint32_t kBlockBytes = 128 * 128;
  const sm100::SharedMemoryDescriptor d =
      sm100::mnMajorDescriptor(sm100::SwizzlingMode::Swizzle128B, kBlockBytes, 0x8000);
  EXPECT_EQ(d.matrixStartAddress, 0x8000u >> 4);
  EXPECT_EQ(d.leadingDimensionByteOffset, kBlockBytes >> 4);
  EXPECT_EQ(d.strideDimensionByteOffset, 1024u >> 4);
  EXPECT_EQ(sm100::encode(d), (uint64_t{2} << 61) | (uint64_t{1} << 46) | (uint64_t{64} << 32) |
                                  (uint64_t{kBlockBytes >> 4} << 16) | uint64_t{0x8000 >> 4});
}

TEST(Sm100SharedMemoryDescriptor, MnMajorHalfOfVInACtaPair) {
  // A CTA pair (fa4 two-cta = 1), block-n 64: each CTA's V slot holds two boxes of 32 keys, so its column blocks are
  // 32 rows x 128 bytes apart (LBO 4 KB); SBO stays 8 k rows x 128 bytes.
  constexpr uint32_t kBlockBytes = 32 * 128;
  const sm100::SharedMemoryDescriptor d = sm100::mnMajorDescriptor(sm100::SwizzlingMode::Swizzle128B, kBlockBytes);
  EXPECT_EQ(d.leadingDimensionByteOffset, 256u);
  EXPECT_EQ(d.strideDimensionByteOffset, 64u);
  EXPECT_EQ(sm100::encode(d), 0x4000404001000000u);
  EXPECT_EQ(sm100::encode(d), (uint64_t{2} << 61) | (uint64_t{1} << 46) | (uint64_t{64} << 32) | (uint64_t{256} << 16));
}

TEST(Sm100SharedMemoryDescriptor, KernelAddsTheStartAddressToTheHostFields) {
  // sm100::desc::make(fixed, addr) = fixed | ((addr & 0x3FFFF) >> 4): the host's descriptor without an address plus
  // the kernel's address is the host's descriptor with it.
  const uint64_t fixed = sm100::encode(sm100::kMajorDescriptor(sm100::SwizzlingMode::Swizzle128B));
  EXPECT_EQ(fixed & ones(14), 0u); // the start address field is left empty
  for (uint32_t address = 0; address < 232448; address += 1024)
    EXPECT_EQ(fixed | sm100::matrixDescriptorEncode(address),
              sm100::encode(sm100::kMajorDescriptor(sm100::SwizzlingMode::Swizzle128B, address)));
}

// ---- instruction descriptor ----

TEST(Sm100InstructionDescriptor, EveryFieldSitsWhereTable42PutsIt) { expectLayout(table42(), 32); }

TEST(Sm100InstructionDescriptor, WorkedExampleBf16M128N128KMajor) {
  const sm100::MmaF16Shape shape{}; // bf16 x bf16 -> f32, M = N = 128, A and B K-major
  ASSERT_EQ(sm100::checkMmaF16Shape(shape), std::nullopt);
  const sm100::InstructionDescriptor d = sm100::instructionDescriptor(shape);
  EXPECT_EQ(d.sparsitySelector, 0u);
  EXPECT_EQ(d.sparsity, 0u); // dense
  EXPECT_EQ(d.saturate, 0u);
  EXPECT_EQ(d.dtype, 1u); // F32
  EXPECT_EQ(d.atype, 1u); // BF16
  EXPECT_EQ(d.btype, 1u); // BF16
  EXPECT_EQ(d.negateA, 0u);
  EXPECT_EQ(d.negateB, 0u);
  EXPECT_EQ(d.transposeA, 0u); // K-major
  EXPECT_EQ(d.transposeB, 0u); // K-major
  EXPECT_EQ(d.n, 128u >> 3);
  EXPECT_EQ(d.m, 128u >> 4);
  EXPECT_EQ(d.maxShift, 0u);
  // Table 42, term by term: dtype F32 = 1 at bit 4, atype/btype BF16 = 1 at bits 7 and 10, N >> 3 at 17, M >> 4 at 24.
  const uint32_t expected = (1u << 4) | (1u << 7) | (1u << 10) | ((128u >> 3) << 17) | ((128u >> 4) << 24);
  EXPECT_EQ(expected, 0x08200490u);
  EXPECT_EQ(sm100::encode(d), expected);
}

TEST(Sm100InstructionDescriptor, PVReadsVMnMajor) {
  sm100::MmaF16Shape shape;
  shape.bMajor = sm100::MmaMajor::MN;
  shape.aInTensorMemory = true;
  ASSERT_EQ(sm100::checkMmaF16Shape(shape), std::nullopt);
  EXPECT_EQ(sm100::encode(sm100::instructionDescriptor(shape)), 0x08200490u | (1u << 16));
}

TEST(Sm100InstructionDescriptor, F16AccumulatorAndSmallShapes) {
  sm100::MmaF16Shape shape;
  shape.a = shape.b = sm100::MmaInputType::F16;
  shape.d = sm100::MmaDtype::F16;
  shape.m = 64;
  shape.n = 8;
  shape.aMajor = sm100::MmaMajor::MN;
  ASSERT_EQ(sm100::checkMmaF16Shape(shape), std::nullopt);
  EXPECT_EQ(sm100::encode(sm100::instructionDescriptor(shape)), (1u << 15) | ((8u >> 3) << 17) | ((64u >> 4) << 24));
}

// cta_group::2 (a CTA pair, M = 256): the instruction descriptor holds the pair's M and N; M >> 4 = 16 sets bit 28, the
// top bit of Table 42's M field (bits 24-28), which no cta_group::1 shape reaches. Worked examples of fa4 two-cta = 1,
// bf16: S = Q·Kᵀ with N = 64 (both K-major), O += P·V with N = 128 (V MN-major, bit 16).
TEST(Sm100InstructionDescriptor, CtaPairM256) {
  sm100::MmaF16Shape qk;
  qk.m = 256;
  qk.n = 64;
  qk.ctaGroup = 2;
  ASSERT_EQ(sm100::checkMmaF16Shape(qk), std::nullopt);
  const sm100::InstructionDescriptor d = sm100::instructionDescriptor(qk);
  EXPECT_EQ(d.m, 16u);
  EXPECT_EQ(d.n, 8u);
  const uint32_t expected = (1u << 4) | (1u << 7) | (1u << 10) | ((64u >> 3) << 17) | ((256u >> 4) << 24);
  EXPECT_EQ(expected, 0x10100490u);
  EXPECT_EQ(sm100::encode(d), expected);
  EXPECT_EQ(sm100::encode(d) >> 24 & 0x1Fu, 16u);
  EXPECT_EQ(sm100::encode(d) & (1u << 28), 1u << 28);
  sm100::MmaF16Shape pv = qk;
  pv.n = 128;
  pv.bMajor = sm100::MmaMajor::MN;
  pv.aInTensorMemory = true;
  ASSERT_EQ(sm100::checkMmaF16Shape(pv), std::nullopt);
  EXPECT_EQ(sm100::encode(sm100::instructionDescriptor(pv)), 0x10210490u);
  // Every valid N of M = 256 round-trips.
  for (int n = 16; n <= sm100::kMmaMaxN; n += 16) {
    qk.n = n;
    ASSERT_EQ(sm100::checkMmaF16Shape(qk), std::nullopt) << n;
    const sm100::InstructionDescriptor back =
        sm100::decodeInstructionDescriptor(sm100::encode(sm100::instructionDescriptor(qk)));
    EXPECT_EQ(int(back.m) << sm100::kInstructionMShift, 256);
    EXPECT_EQ(int(back.n) << sm100::kInstructionNShift, n);
  }
}

TEST(Sm100InstructionDescriptor, EveryValidShapeRoundTrips) {
  for (int m : {64, 128})
    for (int n = sm100::kMmaMinN; n <= sm100::kMmaMaxN; n += sm100::kMmaNStep) {
      sm100::MmaF16Shape shape;
      shape.m = m;
      shape.n = n;
      ASSERT_EQ(sm100::checkMmaF16Shape(shape), std::nullopt) << m << "x" << n;
      const sm100::InstructionDescriptor back =
          sm100::decodeInstructionDescriptor(sm100::encode(sm100::instructionDescriptor(shape)));
      EXPECT_EQ(int(back.m) << sm100::kInstructionMShift, m);
      EXPECT_EQ(int(back.n) << sm100::kInstructionNShift, n);
    }
}

TEST(Sm100InstructionDescriptor, RejectsWhatTable39Does) {
  const auto message = [](auto change) {
    sm100::MmaF16Shape shape;
    change(shape);
    return sm100::checkMmaF16Shape(shape).value_or("");
  };
  EXPECT_THAT(message([](auto &s) { s.m = 256; }), HasSubstr("M = 256 is not 64 or 128"));
  EXPECT_THAT(message([](auto &s) { s.n = 12; }), HasSubstr("N = 12 is not a multiple of 8 in [8, 256]"));
  EXPECT_THAT(message([](auto &s) { s.n = 264; }), HasSubstr("N = 264"));
  EXPECT_THAT(message([](auto &s) { s.n = 0; }), HasSubstr("N = 0"));
  EXPECT_THAT(message([](auto &s) { s.a = sm100::MmaInputType::F16; }), HasSubstr("the same type"));
  // cta_group::2: M = 256 only, N in steps of 16.
  EXPECT_THAT(message([](auto &s) { s.ctaGroup = 2; }),
              HasSubstr("tcgen05.mma.cta_group::2.kind::f16: M = 128 is not 256 (128 rows a CTA)"));
  EXPECT_THAT(message([](auto &s) {
                s.ctaGroup = 2;
                s.m = 256;
                s.n = 24;
              }),
              HasSubstr("tcgen05.mma.cta_group::2.kind::f16: N = 24 is not a multiple of 16 in [16, 256]"));
  EXPECT_THAT(message([](auto &s) { s.ctaGroup = 3; }), HasSubstr("cta_group::3 is not 1 or 2"));
  EXPECT_THAT(message([](auto &s) { s.d = sm100::MmaDtype::F16; }), HasSubstr("an f16 accumulator needs f16 inputs"));
  EXPECT_THAT(message([](auto &s) {
                s.aInTensorMemory = true;
                s.aMajor = sm100::MmaMajor::MN;
              }),
              HasSubstr("tensor memory is read K-major"));
}

} // namespace
