// PrinterErrorsTest.cpp — a tile op the target's family does not print is an MLIR diagnostic naming the op, the
// schedule and the family, never an #error in the generated CUDA: each op a family refuses, on IR a schedule lowered
// and then changed so that it reaches that family (the sm90 family), or on a family registered here that prints only
// what every family must (the defaults of TileTarget).
#include "TestSupport.h"
#include "codegen/common/CudaEmitter.h"
#include "codegen/common/TargetRegistry.h"
#include "flashtile/dsl/Program.h"
#include "passes/Transforms/ScheduleRegistry.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

using namespace flashtile;

namespace {

/// A printer of nothing that keeps every default of TileTarget (no work queue, P in the registers of the iteration
/// that computed it); `splits`: it stores split-KV partials but prints no combine kernel.
class SilentTarget final : public codegen::TileTarget {
public:
  explicit SilentTarget(bool splits) : splits(splits) {}
  std::string_view prelude() const override { return {}; }
  std::string_view preludeNamespace() const override { return "silent"; }
  std::vector<std::string> reservedNames() const override { return {}; }
  void setup(codegen::CudaWriter &, const std::vector<codegen::Operand> &) override {}
  bool copyAsync(codegen::CudaWriter &, codegen::Operand, const std::string &, const std::string &) override {
    return true;
  }
  bool wait(codegen::CudaWriter &, const std::vector<codegen::Operand> &, int64_t) override { return true; }
  void load(codegen::CudaWriter &, codegen::Operand, const std::string &) override {}
  void initState(codegen::CudaWriter &, const codegen::StateNames &) override {}
  void qk(codegen::CudaWriter &, const std::string &, const std::string &) override {}
  void carryScores(codegen::CudaWriter &, const std::string &, const std::string &) override {}
  void scale(codegen::CudaWriter &, const std::string &) override {}
  void scoreMod(codegen::CudaWriter &, const std::string &, const std::string &, const std::string &,
                codegen::KeyArg) override {}
  void mask(codegen::CudaWriter &, const std::string &, const std::string &, const std::string &, codegen::KeyArg,
            bool) override {}
  void softmaxUpdate(codegen::CudaWriter &, const codegen::StateNames &, const std::string &, const std::string &, bool,
                     int) override {}
  void rescale(codegen::CudaWriter &, const codegen::StateNames &, bool) override {}
  void pv(codegen::CudaWriter &, const codegen::StateNames &, const std::string &, const std::string &) override {}
  void finalize(codegen::CudaWriter &, const codegen::StateNames &, const std::string &) override {}
  void storeO(codegen::CudaWriter &, const codegen::StateNames &, bool) override {}
  void storeLse(codegen::CudaWriter &) override {}
  bool storeSplit(codegen::CudaWriter &, const codegen::StateNames &, const std::string &, bool) override {
    return splits;
  }
  bool combineRow(codegen::CudaWriter &, const std::string &) override { return false; }

private:
  bool splits;
};

/// A family that accepts every shape on sm_90a and prints with SilentTarget.
class SilentFamily final : public codegen::TargetFamily {
public:
  SilentFamily(std::string name, bool async) : familyName(std::move(name)), async(async) {}
  std::string_view name() const override { return familyName; }
  std::string_view summary() const override { return "prints nothing (tests)"; }
  const std::vector<codegen::ArchLimits> &archs() const override {
    static const std::vector<codegen::ArchLimits> limits = {{"sm_90a", 227 * 1024, true}};
    return limits;
  }
  codegen::MmaShape mmaShape() const override { return {16, 8, 16}; }
  std::optional<std::string> checkShape(const codegen::KernelShape &) const override { return std::nullopt; }
  int64_t smemBytes(const codegen::KernelShape &) const override { return 0; }
  bool asyncProtocol() const override { return async; }
  std::unique_ptr<codegen::TileTarget> createPrinter(const codegen::KernelShape &) const override {
    return std::make_unique<SilentTarget>(/*splits=*/true);
  }

private:
  std::string familyName;
  bool async;
};

/// A causal bf16 program (head dim 128) after a schedule's whole pipeline for sm_90a, changed by the test, and
/// emitCuda's diagnostics on it. While it lives the silent families are registered: "silent_async" runs the
/// asynchronous protocol, "silent" does not.
class Printer {
public:
  Printer() : capture(context) {
    codegen::registerTarget(std::make_unique<SilentFamily>("silent_async", true));
    codegen::registerTarget(std::make_unique<SilentFamily>("silent", false));
    context.printOpOnDiagnostic(false); // the diagnostic alone, without the op printed under it
  }
  ~Printer() {
    module = {}; // its #tile.target may name a silent family
    codegen::unregisterTarget("silent_async");
    codegen::unregisterTarget("silent");
  }

  tile::FuncOp lower(const std::string &schedule, const schedule::Knobs &knobs = {}) {
    auto built = buildAttentionProgram(context, variants::causal(), ProgramOptions{ElementType::BF16, 128, 128});
    EXPECT_TRUE(mlir::succeeded(built)) << capture.text;
    if (mlir::failed(built))
      return {};
    module = std::move(*built);
    mlir::PassManager pm(&context);
    std::string error;
    EXPECT_TRUE(
        mlir::succeeded(schedule::buildPipeline(pm, schedule::Request{schedule, "sm_90a", "default", knobs}, error)))
        << error;
    EXPECT_TRUE(mlir::succeeded(pm.run(*module))) << capture.text;
    return flashtile::testing::funcOf(*module);
  }

  /// emitCuda's diagnostics; the kernel must not be printed.
  std::string emit(tile::FuncOp func) {
    capture.text.clear();
    EXPECT_TRUE(mlir::failed(codegen::emitCuda(func))) << "printed a kernel";
    return capture.text;
  }

  /// `func`'s #tile.target with the family `isa` (on sm_90a).
  void retarget(tile::FuncOp func, const std::string &isa) {
    func.setTargetAttr(tile::TargetAttr::get(&context, "sm_90a", isa));
  }

  /// emitCuda's diagnostics on `schedule`'s program lowered with `knobs`, then retargeted to the family `isa`.
  std::string emitAs(const std::string &isa, const std::string &schedule, const schedule::Knobs &knobs = {}) {
    tile::FuncOp func = lower(schedule, knobs);
    if (!func)
      return "not lowered: " + capture.text;
    retarget(func, isa);
    return emit(func);
  }

  mlir::MLIRContext context;
  flashtile::testing::DiagnosticCapture capture;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

// ---- the sm90 family (TileOpsSm90.cpp) ----

TEST(PrinterErrors, Sm90RefusesCopyGroups) {
  // fa2's pipeline (cp.async groups: copies that arrive on no barrier) on tiles the sm90 family accepts: 64 rows, 16 a
  // computing warp, one producer warpgroup beside them.
  Printer printer;
  tile::FuncOp func = printer.lower("fa2", {{"block-m", 64}, {"warps", 4}});
  ASSERT_TRUE(func);
  tile::ScheduleAttr s = func.getScheduleAttr();
  func.setScheduleAttr(tile::ScheduleAttr::get(
      &printer.context, s.getName(), s.getBlockM(), s.getBlockN(), 8, s.getWarpLayout(), s.getWarpRows(), s.getStages(),
      s.getRescaleThreshold(), s.getMinBlocksPerSm(), s.getLptGroupBlocks(), s.getShapeClass()));
  printer.retarget(func, "sm90");
  EXPECT_EQ(printer.emit(func), "'tile.copy_async' op copies its tile without arriving on a barrier (a cp.async "
                                "group); the 'sm90' instruction family that schedule 'fa2' is lowered to does not "
                                "print it\n");
}

TEST(PrinterErrors, Sm90RefusesCopyGroupWaits) {
  // fa3's IR with a block-wide wait on the first copy's token (cp.async groups), right after that copy.
  Printer printer;
  tile::FuncOp func = printer.lower("fa3");
  ASSERT_TRUE(func);
  tile::CopyAsyncOp copy;
  func.walk([&](tile::CopyAsyncOp c) {
    if (!copy)
      copy = c;
  });
  ASSERT_TRUE(copy);
  mlir::OpBuilder b(copy);
  b.setInsertionPointAfter(copy);
  tile::WaitOp::create(b, copy.getLoc(), mlir::ValueRange{copy.getToken()});
  EXPECT_EQ(printer.emit(func), "'tile.wait' op waits for copy groups (cp.async); the 'sm90' instruction family that "
                                "schedule 'fa3' is lowered to does not print it\n");
}

TEST(PrinterErrors, Sm90RefusesSplitKvStores) {
  // fa3's IR storing O and LSE as one split of the key range.
  Printer printer;
  tile::FuncOp func = printer.lower("fa3");
  ASSERT_TRUE(func);
  llvm::SmallVector<tile::StoreOp> stores;
  func.walk([&](tile::StoreOp store) { stores.push_back(store); });
  ASSERT_EQ(stores.size(), 2u);
  mlir::OpBuilder b(stores.back());
  mlir::Value o = stores.front().getValue(), lse = stores.back().getValue();
  if (stores.front().getOperand() != tile::Output::O)
    std::swap(o, lse);
  tile::StoreSplitOp::create(b, stores.back().getLoc(), o, lse, /*staging=*/mlir::Value());
  for (tile::StoreOp store : stores)
    store.erase();
  EXPECT_EQ(printer.emit(func),
            "'tile.store_split' op stores a split of the key range (split-KV partials for a combine kernel); the "
            "'sm90' instruction family that schedule 'fa3' is lowered to does not print it\n");
}

TEST(PrinterErrors, Sm90LaysRolesOutAsWholeWarpgroups) {
  Printer printer;
  tile::FuncOp func = printer.lower("fa3");
  ASSERT_TRUE(func);
  tile::RoleOp producer = *func.getBody().getOps<tile::RoleOp>().begin();
  producer.setWarps(6);
  EXPECT_EQ(printer.emit(func), "'tile.role' op has 6 warps; the 'sm90' instruction family that schedule 'fa3' is "
                                "lowered to lays roles out as whole warpgroups (setmaxnreg)\n");
}

TEST(PrinterErrors, Sm90NeedsOneComputingRoleOfTheConsumerWarps) {
  // fa3's defaults: 128 rows, 16 a consumer warp, so 8 consumer warps; the consumer role here has 4.
  Printer printer;
  tile::FuncOp func = printer.lower("fa3");
  ASSERT_TRUE(func);
  tile::RoleOp consumer = *std::next(func.getBody().getOps<tile::RoleOp>().begin());
  consumer.setWarps(4);
  EXPECT_EQ(printer.emit(func), "'tile.func' op has a computing role of 4 warps; the 'sm90' instruction family that "
                                "schedule 'fa3' is lowered to needs one computing role of 8 warps (16 query rows a "
                                "warp)\n");
}

// ---- what a family that keeps TileTarget's defaults does not print ----

TEST(PrinterErrors, NoWorkQueueByDefault) {
  Printer printer;
  EXPECT_EQ(printer.emitAs("silent_async", "fa3", {{"persistent", 1}, {"scheduler", 1}}),
            "'tile.work_loop' op takes its work tiles from a work queue (the dynamic scheduler); "
            "the 'silent_async' instruction family that schedule 'fa3' is lowered to does not "
            "print it\n");
}

TEST(PrinterErrors, NoCarriedProbabilitiesByDefault) {
  // fa3's intra-warpgroup overlap carries P from one K/V iteration to the next one's P·V.
  Printer printer;
  EXPECT_EQ(printer.emitAs("silent_async", "fa3"),
            "'arith.constant' op is the initial P a K/V loop carries to the next iteration's "
            "P·V; the 'silent_async' instruction family that schedule 'fa3' is lowered to does "
            "not print it\n");
}

TEST(PrinterErrors, NoCombineKernelWithoutOne) {
  // decode's split-KV program on a family that stores the partials but prints no combine kernel.
  Printer printer;
  EXPECT_EQ(printer.emitAs("silent", "decode"),
            "'tile.store_split' op splits the key range, whose partials a combine kernel merges; "
            "the 'silent' instruction family that schedule 'decode' is lowered to does not print "
            "it\n");
}

} // namespace
