//===- MemoryProtocolTest.cpp - the memory layer's protocol, rule by rule --===//
//
// interpreter/MemoryProtocol.h on hand-written event sequences (no IR): what a role may rely on is what reached it
// through channel phases and commits. Fa4RolesTest.cpp plants the same hazards in fa4's roles.
//===----------------------------------------------------------------------===//
#include "interpreter/MemoryProtocol.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

using flashtile::interp::MemoryProtocol;

namespace {

constexpr int kMma = 1, kSoftmax = 2, kCorrection = 3;

/// Tensor memory of 256 columns allocated by the MMA role: S at 0 (64 columns), P over it (32), O at 128 (64);
/// a channel the MMA role commits to; the allocation announced to the other roles through a channel.
struct MemoryProtocolRules : ::testing::Test {
  MemoryProtocol m;
  int tmem = m.addTmem(256);
  int s = m.addTmemBuffer(tmem, 0, 64, "S"), p = m.addTmemBuffer(tmem, 0, 32, "P"),
      o = m.addTmemBuffer(tmem, 128, 64, "O");
  int allocated = m.addChannel("tmem", 1, 2), sReady = m.addChannel("s", 1, 1), oReady = m.addChannel("o", 1, 1);

  void SetUp() override {
    ASSERT_FALSE(m.alloc(tmem, kMma));
    ASSERT_FALSE(m.arrive(allocated, 0, kMma));
    for (int role : {kSoftmax, kCorrection})
      ASSERT_TRUE(m.ready(allocated, 0, role));
  }
  static std::string text(const std::optional<std::string> &hazard) { return hazard ? *hazard : "(none)"; }
};

TEST_F(MemoryProtocolRules, AReadOfSNeedsTheCommitThatCoversItsMma) {
  ASSERT_FALSE(m.mma({}, s, kMma, "tile.mma_qk"));
  // Not committed yet.
  EXPECT_NE(text(m.threadAccess(s, false, kSoftmax, "tile.mem_load")).find("which no tile.mma_commit covers yet"),
            std::string::npos);
  ASSERT_FALSE(m.commit(kMma, sReady, 0));
  // Committed, but the softmax has not waited on the phase.
  EXPECT_NE(text(m.threadAccess(s, false, kSoftmax, "tile.mem_load")).find("whose commit has not reached this role"),
            std::string::npos);
  ASSERT_TRUE(m.ready(sReady, 0, kSoftmax));
  EXPECT_FALSE(m.threadAccess(s, false, kSoftmax, "tile.mem_load"));
}

TEST_F(MemoryProtocolRules, OneIssuersMmasIntoOneAccumulatorAreOrderedButNotAcrossOperands) {
  // P·V after P·V into O: the tensor core's pipeline orders them.
  ASSERT_FALSE(m.threadAccess(p, true, kMma, "tile.mem_store"));
  ASSERT_FALSE(m.mma({p}, o, kMma, "tile.mma_pv"));
  EXPECT_FALSE(m.mma({p}, o, kMma, "tile.mma_pv"));
  // Q·Kᵀ into S, where the P·V still reads P: not ordered until a commit covering the P·V reached the issuer.
  EXPECT_NE(text(m.mma({}, s, kMma, "tile.mma_qk")).find("while tile.mma_pv reading P"), std::string::npos);
  ASSERT_FALSE(m.commit(kMma, oReady, 0));
  ASSERT_TRUE(m.ready(oReady, 0, kMma));
  EXPECT_FALSE(m.mma({}, s, kMma, "tile.mma_qk"));
}

TEST_F(MemoryProtocolRules, KnowledgeTravelsThroughOtherRoles) {
  // The correction learns that P·V landed from the softmax, which learned it from the MMA role's commit.
  ASSERT_FALSE(m.mma({}, o, kMma, "tile.mma_pv"));
  ASSERT_FALSE(m.commit(kMma, sReady, 0));
  int handOff = m.addChannel("alpha", 1, 1);
  ASSERT_TRUE(m.ready(sReady, 0, kSoftmax));
  ASSERT_FALSE(m.arrive(handOff, 0, kSoftmax));
  EXPECT_FALSE(m.ready(handOff, 1, kCorrection)); // phase 1 has not completed
  ASSERT_TRUE(m.ready(handOff, 0, kCorrection));
  EXPECT_FALSE(m.threadAccess(o, true, kCorrection, "tile.mem_store"));
}

TEST_F(MemoryProtocolRules, ThreadWritesMustReachTheMmaThatReadsThem) {
  ASSERT_FALSE(m.threadAccess(p, true, kSoftmax, "tile.mem_store"));
  EXPECT_NE(text(m.mma({p}, o, kMma, "tile.mma_pv")).find("while tile.mem_store writing P (tensor memory columns [0, 32)) by role 2"),
            std::string::npos);
}

TEST_F(MemoryProtocolRules, AllocationAndFree) {
  MemoryProtocol fresh;
  int t = fresh.addTmem(128), b = fresh.addTmemBuffer(t, 0, 64, "S");
  EXPECT_NE(text(fresh.threadAccess(b, false, kSoftmax, "tile.mem_load")).find("before tile.tmem_alloc"),
            std::string::npos);
  ASSERT_FALSE(fresh.alloc(t, kMma));
  EXPECT_NE(text(fresh.threadAccess(b, true, kSoftmax, "tile.mem_store")).find("before the allocation"),
            std::string::npos);
  EXPECT_NE(text(fresh.free(t, kSoftmax)).find("the allocating warp frees"), std::string::npos);
  ASSERT_FALSE(fresh.free(t, kMma));
  EXPECT_NE(text(fresh.threadAccess(b, false, kMma, "tile.mem_load")).find("after tile.tmem_free"), std::string::npos);
  EXPECT_NE(text(fresh.free(t, kMma)).find("not allocated"), std::string::npos);
}

TEST_F(MemoryProtocolRules, ArrivalsCountForTheCurrentPhaseOnly) {
  EXPECT_NE(text(m.arrive(sReady, 1, kSoftmax)).find("while phase 0 is the current one"), std::string::npos);
  ASSERT_FALSE(m.arrive(allocated + 1, 0, kSoftmax)); // the tmem channel's empty barrier: two arrivals a phase
  EXPECT_NE(text(m.arrive(allocated + 1, 0, kSoftmax)).find("arrives twice"), std::string::npos);
  EXPECT_FALSE(m.ready(allocated + 1, 1, kMma));
  ASSERT_FALSE(m.arrive(allocated + 1, 0, kCorrection));
  EXPECT_TRUE(m.ready(allocated + 1, 1, kMma));
}

TEST_F(MemoryProtocolRules, ARegistersBufferBelongsToOneRole) {
  int stats = m.addBuffer(/*registers=*/true, "stats");
  ASSERT_FALSE(m.threadAccess(stats, true, kSoftmax, "tile.mem_store"));
  EXPECT_NE(text(m.threadAccess(stats, false, kCorrection, "tile.mem_load")).find("a registers buffer of role 2"),
            std::string::npos);
}

} // namespace
