//===- DescriptorsSm100.h - the descriptors tcgen05.mma reads -------------===//
//
// The shared-memory matrix descriptor (64 bits) and the instruction descriptor (32 bits) of tcgen05.mma, as bitfield
// structs whose fields are named and placed as in the PTX ISA: section 9.7.16.4.1 "Shared Memory Descriptor" (Table
// 40) and section 9.7.16.4.2 "Instruction Descriptor" (Table 42, the .kind::f16 column). Host code: a lowering fills
// every field that does not depend on where a tile lands in shared memory and prints the encoded value as a literal;
// the kernel adds the tile's address (sm100::desc::make, PreludeSm100.h). The bit placement is the compiler's
// bit-field layout (least significant bit first, on the little-endian hosts we build on); the unit tests check every
// field's bits against the PTX tables, so a layout that differs fails there. No SM100 GPU exists here: no descriptor
// made by this file has been read by a tensor core; they are checked against the PTX ISA's tables only.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_CODEGEN_SM100_DESCRIPTORSSM100_H
#define FLASHTILE_CODEGEN_SM100_DESCRIPTORSSM100_H

#include "codegen/sm100/InstructionsSm100.h"

#include <bit>
#include <cstdint>
#include <optional>
#include <string>

namespace flashtile::codegen::sm100 {

static_assert(std::endian::native == std::endian::little,
              "descriptor bit-fields are laid out from the least significant bit on little-endian hosts only");

// ---- the shared-memory matrix descriptor (PTX ISA Table 40) ----

/// Swizzling modes, bits 61-63 (the values 3, 5 and 7 are invalid). Not wgmma's codes: tcgen05 widened the field to
/// three bits and renumbered it.
enum class SwizzlingMode : uint8_t {
  None = 0,
  Swizzle128BWith32BAtom = 1, ///< 128-byte swizzling with 32-byte atomicity (MN-major layouts only)
  Swizzle128B = 2,
  Swizzle64B = 4,
  Swizzle32B = 6,
};
/// Leading dimension stride mode, bit 52: the leading-dimension field holds a byte offset relative to the start
/// address, or (sm_103a only) the absolute address of the matrix's second chunk.
enum class LeadingDimensionStrideMode : uint8_t { ByteOffsetRelative = 0, ByteAddressAbsolute = 1 };

/// Bits 46-48 hold the fixed constant 0b001: what marks the descriptor as tcgen05's (CUTLASS calls it the version).
inline constexpr uint64_t kSharedMemoryDescriptorVersion = 1;
/// matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4: addresses and strides are 18-bit byte quantities, 16-byte
/// aligned, stored without their four low bits.
inline constexpr uint32_t kMatrixDescriptorAddressMask = 0x3FFFF;
inline constexpr uint32_t kMatrixDescriptorGranuleShift = 4;
inline constexpr uint32_t kMatrixDescriptorGranuleBytes = 1u << kMatrixDescriptorGranuleShift;
/// A swizzle pattern repeats every 8 rows of its span (Table 41: 1024, 512, 256 bytes); a pattern that starts off
/// that boundary needs the base offset (pattern start address >> 7) & 7.
inline constexpr int kSwizzlePatternRows = 8;
inline constexpr uint32_t kBaseOffsetShift = 7, kBaseOffsetMask = 0x7;

/// One field per row of Table 40, named after its description there; reserved bits are named too (they must be 0).
struct SharedMemoryDescriptor {
  uint64_t matrixStartAddress : 14 = 0;                  ///< bits 0-13: matrix-descriptor-encode(matrix start address)
  uint64_t reserved14 : 2 = 0;                           ///< bits 14-15
  uint64_t leadingDimensionByteOffset : 14 = 0;          ///< bits 16-29: matrix-descriptor-encode(LBO), relative mode
  uint64_t reserved30 : 2 = 0;                           ///< bits 30-31
  uint64_t strideDimensionByteOffset : 14 = 0;           ///< bits 32-45: matrix-descriptor-encode(SBO)
  uint64_t version : 3 = kSharedMemoryDescriptorVersion; ///< bits 46-48: fixed constant 0b001
  uint64_t matrixBaseOffset : 3 = 0;                     ///< bits 49-51
  uint64_t leadingDimensionStrideMode : 1 = 0;           ///< bit 52: LeadingDimensionStrideMode
  uint64_t fixedConstant53 : 8 = 0;                      ///< bits 53-60: fixed constant 0
  uint64_t swizzlingMode : 3 = 0;                        ///< bits 61-63: SwizzlingMode
};
static_assert(sizeof(SharedMemoryDescriptor) == sizeof(uint64_t), "the shared-memory descriptor is 64 bits");

constexpr uint64_t matrixDescriptorEncode(uint32_t bytes) {
  return (bytes & kMatrixDescriptorAddressMask) >> kMatrixDescriptorGranuleShift;
}

/// The bytes of one row of a swizzle atom (the span), 0 for no swizzling.
constexpr uint32_t swizzleSpanBytes(SwizzlingMode mode) {
  switch (mode) {
  case SwizzlingMode::Swizzle128B:
  case SwizzlingMode::Swizzle128BWith32BAtom:
    return 128;
  case SwizzlingMode::Swizzle64B:
    return 64;
  case SwizzlingMode::Swizzle32B:
    return 32;
  case SwizzlingMode::None:
    return 0;
  }
  return 0;
}
/// The swizzling mode of a TMA span (CU_TENSOR_MAP_SWIZZLE_{128,64,32}B), nothing for other spans.
constexpr std::optional<SwizzlingMode> swizzlingModeForSpan(uint32_t spanBytes) {
  switch (spanBytes) {
  case 128:
    return SwizzlingMode::Swizzle128B;
  case 64:
    return SwizzlingMode::Swizzle64B;
  case 32:
    return SwizzlingMode::Swizzle32B;
  default:
    return std::nullopt;
  }
}
/// Where a swizzle pattern repeats (Table 41): 8 rows of its span.
constexpr uint32_t swizzleRepeatBytes(SwizzlingMode mode) { return kSwizzlePatternRows * swizzleSpanBytes(mode); }
/// The matrix base offset of a pattern that starts at `patternStartAddress`: 0 on the repeat boundary, else
/// (address >> 7) & 7 (section 9.7.16.4.1).
constexpr uint64_t matrixBaseOffset(SwizzlingMode mode, uint32_t patternStartAddress) {
  const uint32_t repeat = swizzleRepeatBytes(mode);
  if (repeat == 0 || patternStartAddress % repeat == 0)
    return 0;
  return (patternStartAddress >> kBaseOffsetShift) & kBaseOffsetMask;
}

/// A tile in the column-block layout TMA's swizzle leaves (README.md): rows of `span` bytes, 8-row groups 8·span
/// apart (SBO, both majors), the leading dimension's stride `leadingBytes` (LBO). `startAddress` 0 leaves the start
/// address for the kernel to fill.
constexpr SharedMemoryDescriptor swizzledDescriptor(SwizzlingMode mode, uint32_t leadingBytes, uint32_t startAddress) {
  SharedMemoryDescriptor d;
  d.matrixStartAddress = matrixDescriptorEncode(startAddress);
  d.leadingDimensionByteOffset = matrixDescriptorEncode(leadingBytes);
  d.strideDimensionByteOffset = matrixDescriptorEncode(swizzleRepeatBytes(mode));
  d.swizzlingMode = static_cast<uint64_t>(mode);
  return d;
}
/// A K-major operand (A = Q, B = K of Q·Kᵀ: the reduction dimension is contiguous). The PTX ISA leaves LBO unused for
/// swizzled K-major layouts ("assumed 1"): it is set to 1 (16 bytes).
constexpr SharedMemoryDescriptor kMajorDescriptor(SwizzlingMode mode, uint32_t startAddress = 0) {
  return swizzledDescriptor(mode, kMatrixDescriptorGranuleBytes, startAddress);
}
/// An MN-major operand (B = V of P·V: the output dimension N is contiguous): k rows of `span` bytes of N, and the next
/// `span`-byte block of N `blockBytes` away (LBO: rows x span in the column-block layout, where a block holds every k
/// row of its N columns).
constexpr SharedMemoryDescriptor mnMajorDescriptor(SwizzlingMode mode, uint32_t blockBytes, uint32_t startAddress = 0) {
  return swizzledDescriptor(mode, blockBytes, startAddress);
}

/// The 64-bit value tcgen05.mma takes. (Not constexpr: GCC 12 cannot constant-evaluate a bit_cast of bit-fields.)
inline uint64_t encode(const SharedMemoryDescriptor &d) { return std::bit_cast<uint64_t>(d); }
inline SharedMemoryDescriptor decodeSharedMemoryDescriptor(uint64_t bits) {
  return std::bit_cast<SharedMemoryDescriptor>(bits);
}

// ---- the instruction descriptor of .kind::f16 (PTX ISA Table 42) ----

/// dtype, bits 4-5: the accumulator D's type.
enum class MmaDtype : uint8_t { F16 = 0, F32 = 1 };
/// atype and btype, bits 7-9 and 10-12, for .kind::f16.
enum class MmaInputType : uint8_t { F16 = 0, Bf16 = 1 };
/// Transpose A / B, bits 15 and 16: 0 reads the operand K-major, 1 MN-major.
enum class MmaMajor : uint8_t { K = 0, MN = 1 };

/// N and M are stored without their low bits: N >> 3 in bits 17-22, M >> 4 in bits 24-28.
inline constexpr int kInstructionNShift = 3, kInstructionMShift = 4;

/// One field per row of Table 42, named after its description there; reserved bits are named too (they must be 0).
struct InstructionDescriptor {
  uint32_t sparsitySelector : 2 = 0; ///< bits 0-1: which metadata of a sparse MMA (0 when dense)
  uint32_t sparsity : 1 = 0;         ///< bit 2: dense 0, sparse 1
  uint32_t saturate : 1 = 0;         ///< bit 3: integer kinds only (0 for .kind::f16)
  uint32_t dtype : 2 = 0;            ///< bits 4-5: MmaDtype
  uint32_t reserved6 : 1 = 0;        ///< bit 6
  uint32_t atype : 3 = 0;            ///< bits 7-9: MmaInputType of A
  uint32_t btype : 3 = 0;            ///< bits 10-12: MmaInputType of B
  uint32_t negateA : 1 = 0;          ///< bit 13
  uint32_t negateB : 1 = 0;          ///< bit 14
  uint32_t transposeA : 1 = 0;       ///< bit 15: MmaMajor of A
  uint32_t transposeB : 1 = 0;       ///< bit 16: MmaMajor of B
  uint32_t n : 6 = 0;                ///< bits 17-22: N >> 3
  uint32_t reserved23 : 1 = 0;       ///< bit 23
  uint32_t m : 5 = 0;                ///< bits 24-28: M >> 4
  uint32_t reserved29 : 1 = 0;       ///< bit 29
  uint32_t maxShift : 2 = 0;         ///< bits 30-31: B-reuse shift of .ws MMAs only (0: no shift)
};
static_assert(sizeof(InstructionDescriptor) == sizeof(uint32_t), "the instruction descriptor is 32 bits");

/// What one tcgen05.mma.cta_group::{1,2}.kind::f16 computes: D (M x N, dtype) += A (M x 16) · B (16 x N). With
/// cta_group::2 the MMA spans the two CTAs of a cluster pair: M = 256, each CTA holds 128 rows of A and of D and
/// N / 2 columns of B; the instruction descriptor's M and N are the pair's.
struct MmaF16Shape {
  MmaInputType a = MmaInputType::Bf16, b = MmaInputType::Bf16;
  MmaDtype d = MmaDtype::F32;
  int m = kMmaM, n = kMmaM;
  MmaMajor aMajor = MmaMajor::K, bMajor = MmaMajor::K;
  bool aInTensorMemory = false; ///< the TS form (P·V: A = P in TMEM), which reads A K-major only
  int ctaGroup = 1;             ///< 1: one CTA; 2: a CTA pair (M = 256)
};

/// Why `shape` is not a dense tcgen05.mma.cta_group::{1,2}.kind::f16 (PTX ISA Table 39), or nothing when it is.
/// cta_group::1: M 64 or 128, N a multiple of 8 in [8, 256]. cta_group::2: M = 256 (the pair's 128 + 128 rows), N a
/// multiple of 16 in [16, 256] (the table's M = 128 row of cta_group::2 is not used here and refused).
inline std::optional<std::string> checkMmaF16Shape(const MmaF16Shape &shape) {
  if (shape.ctaGroup != 1 && shape.ctaGroup != 2)
    return "tcgen05.mma.kind::f16: cta_group::" + std::to_string(shape.ctaGroup) + " is not 1 or 2";
  if (shape.ctaGroup == 2) {
    if (shape.m != kMmaMPair)
      return "tcgen05.mma.cta_group::2.kind::f16: M = " + std::to_string(shape.m) + " is not 256 (128 rows a CTA)";
    if (shape.n < kMmaPairNStep || shape.n > kMmaMaxN || shape.n % kMmaPairNStep != 0)
      return "tcgen05.mma.cta_group::2.kind::f16: N = " + std::to_string(shape.n) +
             " is not a multiple of 16 in [16, 256]";
  } else if (shape.m != kMmaM && shape.m != kMmaMSmall) {
    return "tcgen05.mma.cta_group::1.kind::f16: M = " + std::to_string(shape.m) + " is not 64 or 128";
  } else if (shape.n < kMmaMinN || shape.n > kMmaMaxN || shape.n % kMmaNStep != 0) {
    return "tcgen05.mma.cta_group::1.kind::f16: N = " + std::to_string(shape.n) + " is not a multiple of 8 in [8, 256]";
  }
  if (shape.a != shape.b)
    return "tcgen05.mma.kind::f16: A and B must have the same type (f16 x f16 or bf16 x bf16)";
  if (shape.d == MmaDtype::F16 && shape.a != MmaInputType::F16)
    return "tcgen05.mma.kind::f16: an f16 accumulator needs f16 inputs (bf16 accumulates in f32)";
  if (shape.aInTensorMemory && shape.aMajor != MmaMajor::K)
    return "tcgen05.mma.kind::f16: an A operand in tensor memory is read K-major";
  return std::nullopt;
}

/// The instruction descriptor of a dense, unnegated `shape` (checkMmaF16Shape(shape) must have passed).
constexpr InstructionDescriptor instructionDescriptor(const MmaF16Shape &shape) {
  InstructionDescriptor d;
  d.dtype = static_cast<uint32_t>(shape.d);
  d.atype = static_cast<uint32_t>(shape.a);
  d.btype = static_cast<uint32_t>(shape.b);
  d.transposeA = static_cast<uint32_t>(shape.aMajor);
  d.transposeB = static_cast<uint32_t>(shape.bMajor);
  d.n = static_cast<uint32_t>(shape.n) >> kInstructionNShift;
  d.m = static_cast<uint32_t>(shape.m) >> kInstructionMShift;
  return d;
}

inline uint32_t encode(const InstructionDescriptor &d) { return std::bit_cast<uint32_t>(d); }
inline InstructionDescriptor decodeInstructionDescriptor(uint32_t bits) {
  return std::bit_cast<InstructionDescriptor>(bits);
}

} // namespace flashtile::codegen::sm100

#endif // FLASHTILE_CODEGEN_SM100_DESCRIPTORSSM100_H
