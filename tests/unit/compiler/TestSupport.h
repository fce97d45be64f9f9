// TestSupport.h — helpers the compiler tests share: diagnostics capture and per-case seeds.
#ifndef FLASHTILE_TESTS_UNIT_COMPILER_TESTSUPPORT_H
#define FLASHTILE_TESTS_UNIT_COMPILER_TESTSUPPORT_H

#include "schedules/fa2/Fa2Pipeline.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace flashtile::testing {

/// Collects every diagnostic (with its notes) emitted in a context while alive.
class DiagnosticCapture {
public:
  explicit DiagnosticCapture(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &d) {
          text += d.str() + "\n";
          for (mlir::Diagnostic &note : d.getNotes())
            text += "  note: " + note.str() + "\n";
          return mlir::success();
        }) {}
  std::string text;

private:
  mlir::ScopedDiagnosticHandler handler;
};

/// A seed per test case: FNV-1a over the case name on top of FLASHTILE_TEST_SEED (default 0x5eed), so cases get
/// different inputs and a failure replays with the same environment.
inline uint64_t seedFor(const std::string &name) {
  uint64_t base = 0x5eed;
  if (const char *env = std::getenv("FLASHTILE_TEST_SEED"))
    base = std::strtoull(env, nullptr, 0);
  uint64_t h = 1469598103934665603ull ^ base;
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

/// A copy of `module` after the FA2 schedule's passes, or null (the diagnostics say why).
inline mlir::OwningOpRef<mlir::ModuleOp> scheduled(mlir::ModuleOp module, const fa2::Fa2Options &options) {
  mlir::OwningOpRef<mlir::ModuleOp> copy = module.clone();
  mlir::PassManager pm(module.getContext());
  fa2::buildPipeline(pm, options);
  if (mlir::failed(pm.run(*copy)))
    return {};
  return copy;
}

/// What the interpreter writes: O and LSE.
struct Outputs {
  std::vector<float> o, lse;
};

} // namespace flashtile::testing

#endif // FLASHTILE_TESTS_UNIT_COMPILER_TESTSUPPORT_H
