//===- Interpreter.h - executes tile programs on the CPU ------------------===//
//
// The oracle for every variant and every schedule: runs a `tile.func` (unscheduled, or after any schedule's
// passes) once per (batch, head, Q tile), op by op, in fp32 with the program's bf16/f16 roundings where the
// GPU stores 16-bit values (inputs, P before P·V, O). Pipelined programs are also checked against their
// asynchronous-copy protocol: a load from a buffer its copy has not filled is an error, not a wrong number.
//===----------------------------------------------------------------------===//
#ifndef FLASHTILE_INTERPRETER_INTERPRETER_H
#define FLASHTILE_INTERPRETER_INTERPRETER_H

#include "mlir/Support/LogicalResult.h"

#include <vector>

namespace flashtile::tile {
class FuncOp;
} // namespace flashtile::tile

namespace flashtile::interp {

/// The sizes and numbers of one attention-forward call.
struct Problem {
  int batch = 1, seqlenQ = 0, seqlenK = 0, headsQ = 1, headsKv = 1, headDim = 0, headDimV = 0;
  float softmaxScale = 1.0f;
  std::vector<float> params; ///< the variant's numbers, in the order of the tile.func's `params`
};

/// Runs `func` on packed row-major (BSHD) tensors: Q is batch x seqlenQ x headsQ x headDim, K is
/// batch x seqlenK x headsKv x headDim, V is batch x seqlenK x headsKv x headDimV. Fills O
/// (batch x seqlenQ x headsQ x headDimV, values of the program's dtype) and LSE (batch x headsQ x seqlenQ, fp32,
/// natural log). Query head h reads K/V head h / (headsQ / headsKv). Inputs are rounded to the program's dtype
/// first. Errors (bad sizes, an op the interpreter does not know, a pipeline hazard, ...) are emitted as MLIR
/// diagnostics on the offending op, with a note naming the program instance.
mlir::LogicalResult run(tile::FuncOp func, const Problem &problem, const std::vector<float> &q,
                        const std::vector<float> &k, const std::vector<float> &v, std::vector<float> &o,
                        std::vector<float> &lse);

} // namespace flashtile::interp

#endif // FLASHTILE_INTERPRETER_INTERPRETER_H
