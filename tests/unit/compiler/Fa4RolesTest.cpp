//===- Fa4RolesTest.cpp - FA4's own roles and the memory layer's protocol --===//
//
// The IR of `fa4 roles = 1` (schedules/fa4/Fa4RolesPass.cpp) in the CPU interpreter: the intact program matches the
// reference and passes the memory protocol (interpreter/MemoryProtocol.h); each planted hazard (a wait or an order
// removed from it) is caught with its message, and with the checker off the same program runs to the end, so the
// checker is what catches it. No SM100 GPU exists here and this IR is not printed: the interpreter is all that runs it.
//===----------------------------------------------------------------------===//
#include "AttentionReference.h"
#include "TestSupport.h"

#include "Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/AsyncCopies.h"
#include "interpreter/Interpreter.h"
#include "interpreter/Rounding.h"
#include "passes/IR/TileDialect.h"
#include "passes/IR/TileMemory.h"
#include "schedules/fa4/Fa4Config.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

using namespace flashtile;

namespace {

using flashtile::testing::DiagnosticCapture;
using flashtile::testing::funcOf;

/// Switches the protocol checkers off for a scope.
struct CheckerOff {
  CheckerOff() { interp::AsyncCopies::enabled() = false; }
  ~CheckerOff() { interp::AsyncCopies::enabled() = true; }
};

/// Causal attention under fa4's roles: two Q tiles of 128 rows, 64-key tiles, several of them, a masked tail.
struct Fa4Roles : ::testing::Test {
  mlir::MLIRContext context;
  DiagnosticCapture diags{context};
  interp::Problem p = flashtile::testing::problem(1, 300, 300, 2, 2, 64);
  test::Inputs in = test::randomInputs(p, flashtile::testing::seedFor("fa4 roles planted"));
  mlir::FailureOr<mlir::OwningOpRef<mlir::ModuleOp>> program = buildAttentionProgram(
      context, *variants::byName("causal"), ProgramOptions{ElementType::BF16, 64, 64});
  mlir::OwningOpRef<mlir::ModuleOp> sched =
      succeeded(program) ? flashtile::testing::scheduledFa4(**program, {{fa4::kRoles, 1}}) : nullptr;

  /// The role named `name`.
  tile::RoleOp role(llvm::StringRef name) {
    tile::RoleOp found;
    funcOf(*sched).walk([&](tile::RoleOp r) {
      if (r.getName() == name)
        found = r;
    });
    return found;
  }
  /// The channel barrier `barrier` belongs to, and whether it is the full one.
  static std::pair<llvm::StringRef, bool> channelOf(mlir::Value barrier) {
    auto channel = barrier.getDefiningOp<tile::ChannelOp>();
    if (!channel)
      return {"", false};
    return {channel.getName(), barrier == channel.getFull()};
  }
  /// Erases the first wait of role `roleName` on the full (or empty) barrier of channel `channel`; false if none.
  bool eraseWait(llvm::StringRef roleName, llvm::StringRef channel, bool full) {
    tile::BarrierWaitOp wait;
    role(roleName).walk([&](tile::BarrierWaitOp w) {
      if (!wait && channelOf(w.getBarrier()) == std::pair{channel, full})
        wait = w;
    });
    if (!wait)
      return false;
    wait.erase();
    return true;
  }
  std::string run(bool expectSuccess) {
    diags.text.clear();
    std::vector<float> o, lse;
    bool ok = succeeded(interp::run(funcOf(*sched), p, in.q, in.k, in.v, o, lse));
    EXPECT_EQ(ok, expectSuccess) << diags.text;
    return diags.text;
  }
  /// The planted program fails with `message` and runs to the end with the checkers off.
  void expectCaught(const std::string &message) {
    std::string text = run(false);
    EXPECT_NE(text.find(message), std::string::npos) << text;
    CheckerOff off;
    run(true);
  }
};

TEST_F(Fa4Roles, IntactProgramMatchesTheReferenceAndHasFa4sRoles) {
  ASSERT_TRUE(sched) << diags.text;
  for (const char *name : {"load", "mma", "softmax0", "softmax1", "correction"})
    EXPECT_TRUE(role(name)) << name;
  // The correction stores each Q tile's O and LSE, naming the tile's rows.
  std::vector<std::vector<int64_t>> stored;
  role("correction").walk([&](tile::StoreOp store) {
    auto rows = store->getAttrOfType<mlir::DenseI64ArrayAttr>(tile::kRoleQueryRowsAttr);
    ASSERT_TRUE(rows);
    stored.emplace_back(rows.asArrayRef().begin(), rows.asArrayRef().end());
  });
  EXPECT_EQ(stored, (std::vector<std::vector<int64_t>>{{0, 128}, {0, 128}, {128, 128}, {128, 128}}));
  // One warp issues every MMA of both Q tiles; no other role issues one.
  int qk = 0, pv = 0;
  funcOf(*sched).walk([&](mlir::Operation *op) {
    if (!mlir::isa<tile::MmaQkOp, tile::MmaPvOp>(op))
      return;
    EXPECT_EQ(op->getParentOfType<tile::RoleOp>().getName(), "mma");
    ++(mlir::isa<tile::MmaQkOp>(op) ? qk : pv);
  });
  EXPECT_EQ(qk, 2);
  EXPECT_EQ(pv, 2);
  test::Reference ref = test::referenceAttention(p, in, test::Mask::Causal, interp::roundToBf16);
  std::vector<float> o, lse;
  ASSERT_TRUE(succeeded(interp::run(funcOf(*sched), p, in.q, in.k, in.v, o, lse))) << diags.text;
  EXPECT_LE(test::maxAbsDiff(o, ref.o), test::errorBound(ref));
}

TEST_F(Fa4Roles, UseBeforeTheAllocationIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The MMA warp allocates only at its end: its first Q·Kᵀ writes unallocated tensor memory.
  tile::RoleOp mma = role("mma");
  tile::TmemAllocOp alloc = *mma.getBody().getOps<tile::TmemAllocOp>().begin();
  alloc->moveBefore((*mma.getBody().getOps<tile::TmemFreeOp>().begin()).getOperation());
  expectCaught("before tile.tmem_alloc allocated its tensor memory");
}

TEST_F(Fa4Roles, UseBeforeTheAllocationReachedTheRoleIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  ASSERT_TRUE(eraseWait("correction", "tmem", /*full=*/true));
  expectCaught("before the allocation of its tensor memory reached this role");
}

TEST_F(Fa4Roles, UseAfterTheFreeIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The MMA warp frees tensor memory right after allocating it: the correction's zeros for O go to freed memory.
  tile::RoleOp mma = role("mma");
  tile::TmemAllocOp alloc = *mma.getBody().getOps<tile::TmemAllocOp>().begin();
  (*mma.getBody().getOps<tile::TmemFreeOp>().begin())->moveAfter(alloc);
  expectCaught("after tile.tmem_free freed its tensor memory");
}

TEST_F(Fa4Roles, ReleasingTensorMemoryBeforeTheLastReadIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The correction says it is done with tensor memory before its epilogue reads O: the MMA warp may free it first.
  tile::RoleOp correction = role("correction");
  tile::BarrierArriveOp done;
  correction.walk([&](tile::BarrierArriveOp arrive) {
    if (channelOf(arrive.getBarrier()) == std::pair{llvm::StringRef("tmem"), false})
      done = arrive;
  });
  ASSERT_TRUE(done);
  tile::MemLoadOp firstFinal;
  for (tile::MemLoadOp load : correction.getBody().getOps<tile::MemLoadOp>())
    if (!firstFinal && mlir::isa<tile::StatsType>(load.getType()))
      firstFinal = load;
  ASSERT_TRUE(firstFinal);
  done->moveBefore(firstFinal);
  // The MMA warp, released, frees tensor memory before the correction's epilogue reads O_0 (the roles' order here).
  expectCaught("memory hazard: tile.mem_load uses tensor-memory buffer at column 128 (!tile.mbuf<tensor<128x64xf32>, "
               "tensor>) after tile.tmem_free freed its tensor memory");
}

TEST_F(Fa4Roles, FreeingUnderAnMmaInFlightIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The MMA warp frees tensor memory without waiting for its users, its last P·V not known to have landed.
  ASSERT_TRUE(eraseWait("mma", "tmem", /*full=*/false));
  expectCaught("memory hazard: tile.tmem_free frees tensor memory while tile.mma_pv");
}

TEST_F(Fa4Roles, ReadingSBeforeItsCommitLandedIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The MMA warp commits to S_0's barrier before it issues Q·K_jᵀ into S_0: softmax 0 passes its wait and reads S_0
  // though the commit it learned of does not cover that MMA.
  tile::MmaQkOp qk;
  role("mma").walk([&](tile::MmaQkOp op) {
    if (!qk)
      qk = op;
  });
  ASSERT_TRUE(qk);
  auto commit = mlir::dyn_cast<tile::MmaCommitOp>(qk->getNextNode());
  ASSERT_TRUE(commit && (channelOf(commit.getBarrier()) == std::pair{llvm::StringRef("s0"), true}));
  commit->moveBefore(qk);
  expectCaught("memory hazard: tile.mem_load reads tensor-memory buffer at column 0 (!tile.mbuf<tensor<128x64xf32>, "
               "tensor>) while tile.mma_qk writing tensor-memory buffer at column 0 (!tile.mbuf<tensor<128x64xf32>, "
               "tensor>) (tensor memory columns [0, 64)) issued by role 2");
}

TEST_F(Fa4Roles, OverwritingSWhilePvReadsPIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The MMA warp issues the next Q·Kᵀ into S_0 without waiting for the P·V that reads P_0 over it.
  ASSERT_TRUE(eraseWait("mma", "o0", /*full=*/true));
  expectCaught("memory hazard: tile.mma_qk writes tensor-memory buffer at column 0 (!tile.mbuf<tensor<128x64xf32>, "
               "tensor>) while tile.mma_pv reading tensor-memory buffer at column 0 (!tile.mbuf<tensor<128x64xbf16>, "
               "tensor>)");
}

TEST_F(Fa4Roles, RescalingOUnderAnMmaInFlightIsCaught) {
  ASSERT_TRUE(sched) << diags.text;
  // The MMA warp issues P_1·V without waiting for the correction's rescale of O_1: the correction then rescales O_1
  // under that P·V.
  ASSERT_TRUE(eraseWait("mma", "o1", /*full=*/false));
  expectCaught("memory hazard: tile.mem_load reads tensor-memory buffer at column 192 (!tile.mbuf<tensor<128x64xf32>, "
               "tensor>) while tile.mma_pv writing");
}

} // namespace
