// Sm100FragmentsTest.cpp — tensor memory to and from register tiles in mma.sync's fragment layouts, the layouts of the
// common register-tile math (codegen/common/FragmentTiles.h): S read by tcgen05.ld.16x256b lands in C fragments, P
// packed into A fragments and written by tcgen05.st.16x128b lands where the TMEM-A form of tcgen05.mma reads P·V's A
// (row r in lane r, the 16-bit pair of K elements 2c and 2c + 1 in column c). The layouts are the PTX ISA's tables
// (InstructionsSm100.h), checked here against the fragment conventions on the CPU; the wrappers are compiled by NVRTC
// and ptxas for sm_100a. No SM100 GPU exists here: nothing has read or written tensor memory through them.
#include "codegen/sm100/InstructionsSm100.h"
#include "codegen/sm100/PreludeSm100.h"
#include "flashtile/runtime/Nvrtc.h"

#include <gmock/gmock.h>

#include <set>
#include <string>
#include <utility>

using namespace flashtile;
namespace sm100 = flashtile::codegen::sm100;
using testing::HasSubstr;

namespace {

constexpr int kWarpLanes = 32;

/// mma.sync's m16n8 C fragment as FragmentTiles walks it: element [nt][i] of lane l is row l/4 + 8 (i/2) (its
/// threadRow("(i / 2)")), column 8 nt + 2 (l % 4) + i % 2 (its kvTile + kvStep, relative to the tile).
sm100::TmemCell cFragmentCell(int lane, int nt, int i) {
  return {lane / 4 + 8 * (i / 2), 8 * nt + 2 * (lane % 4) + i % 2};
}

TEST(Sm100Fragments, A16x256bLoadIsTheCFragmentLayout) {
  for (int tiles : sm100::kFragmentAccessTiles) {
    std::set<std::pair<int, int>> cells;
    for (int lane = 0; lane < kWarpLanes; ++lane)
      for (int nt = 0; nt < tiles; ++nt)
        for (int i = 0; i < 4; ++i) {
          const sm100::TmemCell cell = sm100::cell16x256b(lane, 4 * nt + i);
          ASSERT_EQ(cell, cFragmentCell(lane, nt, i)) << "lane " << lane << " tile " << nt << " element " << i;
          cells.insert({cell.row, cell.column});
        }
    // Every cell of the 16 rows x 8 tiles columns once.
    EXPECT_EQ(cells.size(), size_t(sm100::kFragmentAccessRows) * 8 * tiles);
    EXPECT_EQ(cells.rbegin()->first, sm100::kFragmentAccessRows - 1);
    EXPECT_EQ(cells.rbegin()->second, 8 * tiles - 1);
  }
}

TEST(Sm100Fragments, A16x128bStoreOfPackedPLandsOverItsScoresAtHalfTheColumn) {
  // FragmentTiles::packProbabilities: a[k][i] = pack(s[2k + i/2][2 (i % 2)], s[2k + i/2][2 (i % 2) + 1]), two
  // adjacent scores of one row. P's 16-bit pair of K elements 2c, 2c + 1 must land in column c of the score's row.
  for (int tiles : sm100::kFragmentAccessTiles) {
    std::set<std::pair<int, int>> cells;
    for (int lane = 0; lane < kWarpLanes; ++lane)
      for (int k = 0; k < tiles / 2; ++k)
        for (int i = 0; i < 4; ++i) {
          const sm100::TmemCell low = cFragmentCell(lane, 2 * k + i / 2, 2 * (i % 2));
          const sm100::TmemCell high = cFragmentCell(lane, 2 * k + i / 2, 2 * (i % 2) + 1);
          ASSERT_EQ(high.row, low.row);
          ASSERT_EQ(high.column, low.column + 1);
          ASSERT_EQ(low.column % 2, 0);
          const sm100::TmemCell stored = sm100::cell16x128b(lane, 4 * k + i);
          ASSERT_EQ(stored, (sm100::TmemCell{low.row, low.column / 2})) << "lane " << lane << " step " << k << " " << i;
          cells.insert({stored.row, stored.column});
        }
    // P of 8 tiles columns of scores fills 4 tiles columns, every cell once: written over the first half of S.
    EXPECT_EQ(cells.size(), size_t(sm100::kFragmentAccessRows) * 4 * tiles);
  }
}

TEST(Sm100Fragments, The32x32bAccessIsOneRowALane) {
  for (int lane = 0; lane < kWarpLanes; ++lane)
    for (int reg = 0; reg < 4; ++reg)
      EXPECT_EQ(sm100::cell32x32b(lane, reg), (sm100::TmemCell{lane, reg}));
}

TEST(Sm100Fragments, EveryTileCountCompilesForSm100a) {
  std::string source = sm100::prelude(std::vector<int>{}, sm100::kFragmentAccessTiles) + R"cuda(
template <int kTiles>
__device__ float roundTrip(unsigned base, unsigned half) {
  float c[kTiles][4];
  sm100::tmem::Fragments<kTiles>::loadC(sm100::tmem::warpHalfAddress(base, half, 0), c);
  sm100::tmem::waitLoad();
  sm100::tmem::Fragments<kTiles>::fenceC(c);
  unsigned a[kTiles / 2][4];
  float sum = 0.0f;
  for (int k = 0; k < kTiles / 2; ++k)
    for (int i = 0; i < 4; ++i) {
      a[k][i] = sm100::pack::f16x2(c[2 * k + i / 2][2 * (i % 2)], c[2 * k + i / 2][2 * (i % 2) + 1]);
      sum += c[2 * k][i];
    }
  sm100::tmem::Fragments<kTiles>::storeA(sm100::tmem::warpHalfAddress(base, half, 0), a);
  sm100::tmem::waitStore();
  return sum;
}
extern "C" __global__ void fragments(unsigned base, float *out) {
  float sum = 0.0f;
)cuda";
  for (int tiles : sm100::kFragmentAccessTiles)
    source += "  sum += roundTrip<" + std::to_string(tiles) + ">(base, threadIdx.x / 128);\n";
  source += "  out[threadIdx.x] = sum;\n}\n";
  StatusOr<std::string> ptx = compileCuda(source, "sm100_fragments.cu", sm100::kArch, NvrtcOutput::Ptx);
  ASSERT_TRUE(ptx.ok()) << ptx.status().message();
  for (int tiles : sm100::kFragmentAccessTiles) {
    EXPECT_THAT(*ptx, HasSubstr(std::string(sm100::kTmemFragmentLoadInst) + ".x" + std::to_string(tiles) + ".b32"));
    EXPECT_THAT(*ptx, HasSubstr(std::string(sm100::kTmemFragmentStoreInst) + ".x" + std::to_string(tiles) + ".b32"));
  }
  StatusOr<std::string> cubin = compileCuda(source, "sm100_fragments.cu", sm100::kArch, NvrtcOutput::Cubin);
  ASSERT_TRUE(cubin.ok()) << cubin.status().message();
}

TEST(Sm100Fragments, ACountNotPrintedOrNotSupportedFailsWithItsName) {
  for (int bad : {1, 3, 64}) {
    SCOPED_TRACE(bad);
    EXPECT_THAT(sm100::fragmentAccessText(bad), HasSubstr("#error \"tcgen05 16x256b/16x128b fragments: " +
                                                          std::to_string(bad) + " n8 tiles is not one of"));
  }
  const std::string text = sm100::prelude(std::vector<int>{}, std::vector<int>{8, 8});
  EXPECT_EQ(text.find("struct Fragments<8>"), text.rfind("struct Fragments<8>")) << "each count printed once";
  StatusOr<std::string> ptx = compileCuda(text + R"cuda(
extern "C" __global__ void notPrinted(unsigned base, float *out) {
  float c[4][4];
  sm100::tmem::Fragments<4>::loadC(base, c);
  out[0] = c[0][0];
}
)cuda",
                                          "sm100_not_printed.cu", sm100::kArch, NvrtcOutput::Ptx);
  ASSERT_FALSE(ptx.ok());
  EXPECT_THAT(ptx.status().message(), HasSubstr("this tcgen05 16x256b/16x128b tile count was not printed"));
}

} // namespace
