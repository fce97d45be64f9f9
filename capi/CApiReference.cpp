// CApiReference.cpp — flashtile_reference_attention (CApiJit.h): a variant's attention and its gradients in fp64 on
// the CPU, by the backward's oracle (interpreter/ReferenceBackward.h), whose hook derivatives are the compiler's
// derivative IR. The Python package's flashtile.reference_attention (torch.autograd.gradcheck) calls it.
#include "flashtile/runtime/CApiJit.h"

#include "capi/VariantDescription.h"
#include "examples/variants/Variants.h"
#include "flashtile/dsl/Program.h"
#include "interpreter/ReferenceBackward.h"
#include "passes/IR/TileDialect.h"
#include "runtime/lib/CApiInternal.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

using namespace flashtile;

namespace {

using ReferenceProblemPlacement = interp::ReferenceProblem::Placement;

/// `value` (a whole number) in decimal, however large: converting a double past 2^63 to an integer is undefined.
std::string decimal(double value) {
  char text[400]; // DBL_MAX has 309 digits
  std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}

Status checkReferenceCall(const flashtile_reference_call &c) {
  auto positive = [](const char *name, int value) -> Status {
    if (value < 1)
      return Status::error(std::string(name) + ": must be at least 1, got " + std::to_string(value));
    return Status();
  };
  for (auto [name, value] : {std::pair{"batch", c.batch}, {"seqlen_q", c.seqlen_q}, {"seqlen_k", c.seqlen_k},
                             {"heads_q", c.heads_q}, {"heads_kv", c.heads_kv}, {"head_dim", c.head_dim},
                             {"head_dim_v", c.head_dim_v}})
    if (Status s = positive(name, value); !s.ok())
      return s;
  if (c.heads_q % c.heads_kv != 0)
    return Status::error("heads_q: " + std::to_string(c.heads_q) + " is not a multiple of heads_kv " +
                         std::to_string(c.heads_kv));
  if ((c.cu_seqlens_q == nullptr) != (c.cu_seqlens_k == nullptr))
    return Status::error("cu_seqlens_q and cu_seqlens_k: pass both (varlen) or neither (dense)");
  // Varlen: seqlen_q and seqlen_k are the packed totals, which bound every sequence's work.
  const double entries = c.cu_seqlens_q ? 1.0 : double(c.batch);
  double work = entries * c.heads_q * c.seqlen_q * c.seqlen_k * (double(c.head_dim) + c.head_dim_v);
  if (work > double(FLASHTILE_REFERENCE_MAX_WORK)) {
    const char *product =
        c.cu_seqlens_q ? "heads_q * seqlen_q * seqlen_k (packed totals)" : "batch * heads_q * seqlen_q * seqlen_k";
    return Status::error(std::string("sizes: ") + product + " * (head_dim + head_dim_v) = " + decimal(work) +
                         " exceeds FLASHTILE_REFERENCE_MAX_WORK (" + std::to_string(FLASHTILE_REFERENCE_MAX_WORK) +
                         "): the fp64 reference is for small problems (gradcheck)");
  }
  if (!c.q || !c.k || !c.v || !c.o || !c.lse)
    return Status::error("q, k, v, o and lse must not be NULL");
  if (c.d_o && (!c.d_q || !c.d_k || !c.d_v))
    return Status::error("d_q, d_k and d_v must not be NULL when d_o is given");
  if ((c.fwd_o == nullptr) != (c.fwd_lse == nullptr) || (c.fwd_o && !c.d_o))
    return Status::error("fwd_o and fwd_lse: pass both, and only with d_o (a block's backward), or neither");
  if (c.cu_seqlens_q) {
    for (auto [name, cu, total] : {std::tuple{"cu_seqlens_q", c.cu_seqlens_q, c.seqlen_q},
                                   std::tuple{"cu_seqlens_k", c.cu_seqlens_k, c.seqlen_k}})
      for (int b = 0; b <= c.batch; ++b)
        if (cu[b] < (b ? cu[b - 1] : 0) || cu[0] != 0 || (b == c.batch && cu[b] != total))
          return Status::error(std::string(name) + ": must be batch + 1 non-decreasing offsets from 0 to " +
                               std::to_string(total) + " (the packed rows); entry " + std::to_string(b) + " is " +
                               std::to_string(cu[b]));
  } else if (c.q_offsets || c.k_offsets || c.cu_seqlens_q_global || c.cu_seqlens_k_global) {
    return Status::error("q_offsets, k_offsets, cu_seqlens_q_global and cu_seqlens_k_global are for varlen calls "
                         "(with cu_seqlens_q and cu_seqlens_k); dense calls use q_offset, k_offset, "
                         "seqlen_q_global and seqlen_k_global");
  }
  if (!(std::isfinite(c.softmax_scale) && c.softmax_scale >= 0))
    return Status::error("softmax_scale: must be finite and >= 0 (0: 1/sqrt(head_dim)), got " +
                         std::to_string(c.softmax_scale));
  return Status();
}

/// The variant's numbers and inputs from the call, checked against its declaration.
StatusOr<interp::ReferenceProblem> problemOf(const flashtile_reference_call &c, const Variant &variant) {
  interp::ReferenceProblem p;
  p.batch = c.batch, p.seqlenQ = c.seqlen_q, p.seqlenK = c.seqlen_k, p.headsQ = c.heads_q, p.headsKv = c.heads_kv;
  p.headDim = c.head_dim, p.headDimV = c.head_dim_v;
  p.softmaxScale = c.softmax_scale == 0 ? 1.0 / std::sqrt(double(c.head_dim)) : c.softmax_scale;
  auto values = [](const int *from, int n) {
    return from ? std::vector<int32_t>(from, from + n) : std::vector<int32_t>();
  };
  p.cuSeqlensQ = values(c.cu_seqlens_q, c.batch + 1), p.cuSeqlensK = values(c.cu_seqlens_k, c.batch + 1);
  ReferenceProblemPlacement &g = p.placement;
  g.qOffset = c.q_offset, g.kOffset = c.k_offset, g.seqlenQ = c.seqlen_q_global, g.seqlenK = c.seqlen_k_global;
  g.headOffset = c.head_offset, g.headsQ = c.heads_q_global, g.headsKv = c.heads_kv_global;
  g.qOffsets = values(c.q_offsets, c.batch), g.kOffsets = values(c.k_offsets, c.batch);
  g.cuSeqlensQ = values(c.cu_seqlens_q_global, c.batch + 1);
  g.cuSeqlensK = values(c.cu_seqlens_k_global, c.batch + 1);
  size_t params = variant.params().size(), inputs = variant.inputs().size();
  if (c.num_params != int(params))
    return Status::error("num_params: variant '" + variant.name() + "' takes " + std::to_string(params) +
                         " numbers, got " + std::to_string(c.num_params));
  if (c.num_inputs != int(inputs))
    return Status::error("num_inputs: variant '" + variant.name() + "' takes " + std::to_string(inputs) +
                         " input arrays, got " + std::to_string(c.num_inputs));
  std::vector<float> asFloat;
  for (size_t i = 0; i < params; ++i) {
    if (!std::isfinite(c.params[i]))
      return Status::error("params[" + std::to_string(i) + "] (" + variant.params()[i].first + "): must be finite");
    p.params.push_back(c.params[i]);
    asFloat.push_back(float(c.params[i]));
  }
  if (std::string error = variant.checkParams(asFloat); !error.empty())
    return Status::error("params: " + error);
  for (size_t i = 0; i < inputs; ++i) {
    const auto &[name, kind] = variant.inputs()[i];
    std::string what = "inputs[" + std::to_string(i) + "] (" + name + ")";
    long long n = c.input_lengths[i];
    if (n < 1 || n > FLASHTILE_REFERENCE_MAX_WORK || !c.inputs[i])
      return Status::error(what + ": needs a host array of 1 to " + std::to_string(FLASHTILE_REFERENCE_MAX_WORK) +
                           " values (input_lengths[" + std::to_string(i) + "] = " + std::to_string(n) + ")");
    if (kind == dsl::ElementKind::F32) {
      const double *values = static_cast<const double *>(c.inputs[i]);
      p.inputs.emplace_back(std::vector<double>(values, values + n));
    } else {
      if (c.input_grads[i])
        return Status::error("input_grads[" + std::to_string(i) + "] (" + name +
                             "): an i32 input has no gradient; pass NULL");
      const int *values = static_cast<const int *>(c.inputs[i]);
      p.inputs.emplace_back(std::vector<int32_t>(values, values + n));
    }
  }
  return p;
}

StatusOr<Variant> variantOf(const char *text) {
  std::string_view name = text ? text : "none";
  size_t first = name.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && name[first] == '{')
    return parseVariantDescription(name);
  if (std::optional<Variant> builtin = variants::byName(std::string(name)))
    return *builtin;
  return Status::error("variant: unknown built-in '" + std::string(name) + "' (or pass a variant description)");
}

Status runReference(const flashtile_reference_call &c) {
  if (Status s = checkReferenceCall(c); !s.ok())
    return s;
  StatusOr<Variant> variant = variantOf(c.variant);
  if (!variant.ok())
    return variant.status();
  StatusOr<interp::ReferenceProblem> problem = problemOf(c, *variant);
  if (!problem.ok())
    return problem.status();

  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    llvm::raw_string_ostream os(diagnostics);
    os << d << "\n";
    return mlir::success();
  });
  // The program's own head dims only type its tiles; the oracle reads the call's.
  auto module = buildAttentionProgram(context, *variant, ProgramOptions{ElementType::BF16, 128, 128});
  if (mlir::failed(module))
    return Status::error("variant '" + variant->name() + "' does not build a program:\n" + diagnostics);
  tile::FuncOp func = *(*module)->getOps<tile::FuncOp>().begin();

  const size_t entries = c.cu_seqlens_q ? 1 : size_t(c.batch);
  size_t qn = entries * c.seqlen_q * c.heads_q, kn = entries * c.seqlen_k * c.heads_kv;
  std::vector<double> q(c.q, c.q + qn * c.head_dim), k(c.k, c.k + kn * c.head_dim),
      v(c.v, c.v + kn * c.head_dim_v);
  auto copyOut = [](const std::vector<double> &from, double *to) { std::memcpy(to, from.data(), from.size() * 8); };
  if (!c.d_o) {
    auto forward = interp::referenceForward(func, *problem, q, k, v);
    if (mlir::failed(forward))
      return Status::error("the reference forward failed:\n" + diagnostics);
    copyOut(forward->o, c.o);
    copyOut(forward->lse, c.lse);
    return Status();
  }
  std::vector<double> dO(c.d_o, c.d_o + qn * c.head_dim_v), fwdO, fwdLse;
  if (c.fwd_o) {
    fwdO.assign(c.fwd_o, c.fwd_o + qn * c.head_dim_v);
    fwdLse.assign(c.fwd_lse, c.fwd_lse + qn);
    problem->forwardO = &fwdO, problem->forwardLse = &fwdLse;
  }
  auto grads = interp::referenceBackward(func, *problem, q, k, v, dO);
  if (mlir::failed(grads))
    return Status::error("the reference backward failed:\n" + diagnostics);
  copyOut(grads->o, c.o);
  copyOut(grads->lse, c.lse);
  copyOut(grads->dq, c.d_q);
  copyOut(grads->dk, c.d_k);
  copyOut(grads->dv, c.d_v);
  for (int i = 0; i < c.num_inputs; ++i)
    if (c.input_grads[i])
      copyOut(grads->dInputs[i], c.input_grads[i]);
  if (c.param_grads)
    copyOut(grads->dParams, c.param_grads);
  return Status();
}

} // namespace

extern "C" int flashtile_reference_attention(const flashtile_reference_call *call) {
  return capi::guarded("flashtile_reference_attention", [&] {
    std::string error;
    if (!call)
      error = "call must not be NULL";
    else if (call->size != sizeof(flashtile_reference_call))
      error = "call->size is " + std::to_string(call->size) + ", expected sizeof(flashtile_reference_call) = " +
              std::to_string(sizeof(flashtile_reference_call));
    else if (Status s = runReference(*call); !s.ok())
      error = s.message();
    if (error.empty())
      return 0;
    capi::setLastError("flashtile_reference_attention: " + error);
    return -1;
  });
}
