// ElfTest.cpp — the cubin reader: real NVRTC cubins for every target, the damaged files of a kernel library, and
// mutated images (the reader must answer every byte string without reading out of bounds).
#include "TestUtil.h"

#include "flashtile/runtime/Elf.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/Nvrtc.h"

#include <gmock/gmock.h>

#include <random>

using namespace flashtile;
using testing::HasSubstr;

namespace {

constexpr const char *kKernels = R"(
extern "C" __global__ void flashtile_probe(float *x) { x[threadIdx.x] *= 2.f; }
extern "C" __global__ void flashtile_other(float *x) { x[threadIdx.x] += 1.f; }
)";

TEST(Elf, SmVersionOfArch) {
  EXPECT_EQ(smVersionOfArch("sm_80"), 80);
  EXPECT_EQ(smVersionOfArch("sm_90a"), 90);
  EXPECT_EQ(smVersionOfArch("sm_100a"), 100);
  for (const char *bad : {"", "sm_", "sm_a", "90", "compute_90", "sm_9x", "sm_9", "sm_1000"})
    EXPECT_FALSE(smVersionOfArch(bad).has_value()) << bad;
}

TEST(Elf, ReadsNvrtcCubinsOfEveryTarget) {
  for (std::string_view arch : kSupportedArchs) {
    SCOPED_TRACE(arch);
    StatusOr<std::string> cubin = compileCuda(kKernels, "probe.cu", std::string(arch), NvrtcOutput::Cubin);
    ASSERT_TRUE(cubin.ok()) << cubin.status().message();
    StatusOr<CubinInfo> info = readCubin(*cubin);
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_EQ(info->smVersion, *smVersionOfArch(arch));
    EXPECT_THAT(info->functions, testing::UnorderedElementsAre("flashtile_probe", "flashtile_other"));
    EXPECT_TRUE(checkCubin(*cubin, arch, "flashtile_probe").ok());
    Status missing = checkCubin(*cubin, arch, "flashtile_fwd");
    ASSERT_FALSE(missing.ok());
    EXPECT_THAT(missing.message(), HasSubstr("defines no kernel 'flashtile_fwd'"));
  }
  StatusOr<std::string> sm80 = compileCuda(kKernels, "probe.cu", "sm_80", NvrtcOutput::Cubin);
  ASSERT_TRUE(sm80.ok());
  Status wrongArch = checkCubin(*sm80, "sm_90a", "flashtile_probe");
  ASSERT_FALSE(wrongArch.ok());
  EXPECT_THAT(wrongArch.message(), HasSubstr("compiled for sm_80 (ELF e_flags), but its manifest says sm_90a"));
}

TEST(Elf, ReadsBothCudaElfAbiVersions) {
  for (bool abiV1 : {false, true}) {
    StatusOr<CubinInfo> info = readCubin(test::fakeCubin(86, {"k"}, abiV1));
    ASSERT_TRUE(info.ok()) << info.status().message();
    EXPECT_EQ(info->smVersion, 86);
    EXPECT_THAT(info->functions, testing::ElementsAre("k"));
  }
}

TEST(Elf, DamagedImagesSayWhatIsWrong) {
  const std::string good = test::fakeCubin(90, {"flashtile_fwd_a"});
  auto withByte = [&](size_t offset, char value) {
    std::string bytes = good;
    bytes[offset] = value;
    return bytes;
  };
  struct Case {
    std::string name, bytes, expected;
  };
  const std::vector<Case> cases = {
      {"empty", "", "not an ELF image"},
      {"PTX text", ".version 8.0\n.target sm_90a\n", "not an ELF image"},
      {"magic and garbage",
       std::string("\x7f"
                   "ELF") +
           std::string(200, 'g'),
       "not a 64-bit little-endian"},
      {"magic only",
       "\x7f"
       "ELF",
       "truncated"},
      {"cut in its last bytes (the program headers)", good.substr(0, good.size() - 10),
       "truncated: the program header table"},
      {"section table past the end", withByte(44, 1), "truncated: the section table"},
      {"segment past the end", withByte(good.size() - 56 + 32 + 3, 0x7f), "truncated: segment 1"},
      {"no program headers", withByte(56, 0), "no program headers"},
      {"extended program header count",
       [&] {
         std::string bytes = withByte(56, static_cast<char>(0xff));
         bytes[57] = static_cast<char>(0xff);
         return bytes;
       }(),
       "extended program header count"},
      {"short program headers", withByte(54, 40), "program headers of 40 bytes"},
      {"32-bit", withByte(4, 1), "not a 64-bit little-endian"},
      {"big endian", withByte(5, 2), "not a 64-bit little-endian"},
      {"x86 image", withByte(18, 62), "machine 62, not a cubin"},
      {"no sections", withByte(60, 0), "no section table"},
      {"short section headers", withByte(58, 40), "section headers of 40 bytes"},
      {"section names past the section table", withByte(62, 9), "e_shstrndx 9 is past the section table's 4 sections"},
      {"section names in the symbol table", withByte(62, 2),
       "e_shstrndx 2 names section 2 of type 2, not a string table"},
      {"section names in the null section", withByte(62, 0), "e_shstrndx 0 names section 0 of type 0"},
      {"extended section name index",
       [&] {
         std::string bytes = withByte(62, static_cast<char>(0xff));
         bytes[63] = static_cast<char>(0xff);
         return bytes;
       }(),
       "extended section name index"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    Status status = checkCubin(c.bytes, "sm_90a", "flashtile_fwd_a");
    ASSERT_FALSE(status.ok());
    EXPECT_THAT(status.message(), HasSubstr(c.expected));
  }
  EXPECT_TRUE(checkCubin(good, "sm_90a", "flashtile_fwd_a").ok());
}

TEST(Elf, CubinsCutAnywhereAreRejected) {
  // NVRTC ends a cubin with its program headers (336 bytes for this one): the section table alone does not notice
  // a cut there.
  StatusOr<std::string> cubin = compileCuda(kKernels, "probe.cu", "sm_90a", NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
  ASSERT_TRUE(checkCubin(*cubin, "sm_90a", "flashtile_probe").ok());
  for (size_t size = 0; size < cubin->size(); ++size) {
    std::string cut = cubin->substr(0, size);
    ASSERT_FALSE(checkCubin(cut, "sm_90a", "flashtile_probe").ok()) << "cut to " << size << " of " << cubin->size();
  }
}

TEST(Elf, MutatedImagesNeverReadOutOfBounds) {
  // Run under AddressSanitizer by scripts/sanitize.sh: any out-of-bounds read fails there.
  const std::string good = test::fakeCubin(90, {"flashtile_fwd_a", "flashtile_fwd_b"});
  std::mt19937 random(20261201);
  int rejected = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = good;
    int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = random() % bytes.size();
      switch (random() % 3) {
      case 0:
        bytes[at] = static_cast<char>(random());
        break;
      case 1:
        bytes[at] = static_cast<char>(0xff);
        break;
      default:
        bytes.resize(at);
        break;
      }
      if (bytes.empty())
        break;
    }
    std::string copy(bytes); // an exact-size heap buffer, so that ASan sees reads past its end
    rejected += checkCubin(copy, "sm_90a", "flashtile_fwd_a").ok() ? 0 : 1;
  }
  EXPECT_GT(rejected, 0);
}

} // namespace
