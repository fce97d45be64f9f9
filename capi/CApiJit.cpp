// CApiJit.cpp — the compiler behind the C ABI: JIT on a runtime, variants from descriptions (CApiJit.h).
#include "flashtile/runtime/CApiJit.h"

#include "capi/VariantDescription.h"
#include "examples/variants/Variants.h"
#include "flashtile/runtime/Excerpt.h"
#include "jit/Jit.h"
#include "passes/Target/TargetFamily.h"
#include "runtime/lib/CApiInternal.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>

using namespace flashtile;

namespace {

/// One compiler for the process, shared by every runtime: variants are registered under ids that hash their IR,
/// so runtimes cannot collide. Never destroyed, so that runtimes torn down at exit still find it.
jit::Jit &processJit() {
  static jit::Jit *instance = new jit::Jit();
  return *instance;
}

int report(const Status &status) {
  if (status.ok())
    return 0;
  capi::setLastError(status.message());
  return -1;
}

char *copyOut(const std::string &text) {
  char *out = static_cast<char *>(std::malloc(text.size() + 1));
  if (!out) {
    capi::setLastError("out of memory copying a " + std::to_string(text.size()) + "-byte result");
    return nullptr;
  }
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

/// Runs `fn` (returning StatusOr<std::string>) and hands its string to C, or NULL with the error set.
template <typename Fn> char *stringResult(const char *what, Fn &&fn) {
  try {
    StatusOr<std::string> result = fn();
    if (!result.ok()) {
      report(result.status());
      return nullptr;
    }
    return copyOut(*result);
  } catch (const std::exception &e) {
    capi::setLastError(std::string(what) + ": internal error: " + e.what());
  } catch (...) {
    capi::setLastError(std::string(what) + ": internal error");
  }
  return nullptr;
}

/// A built-in name or a JSON description (anything starting with '{').
StatusOr<Variant> resolveVariant(const char *variant) {
  if (!variant || !*variant)
    return Status::error("variant: expected a built-in name or a variant description, got an empty string");
  std::string_view text(variant);
  if (text.find_first_not_of(" \t\r\n") != std::string_view::npos && text[text.find_first_not_of(" \t\r\n")] == '{')
    return parseVariantDescription(text);
  if (std::optional<Variant> builtin = variants::byName(variant))
    return *builtin;
  std::string known;
  for (const std::string &name : variants::names())
    known += (known.empty() ? "" : ", ") + name;
  return Status::error("variant: unknown built-in '" + excerpt(variant) + "'; built in: " + known +
                       " (or pass a variant description)");
}

} // namespace

extern "C" {

int flashtile_enable_jit(flashtile_runtime *rt) {
  return capi::guarded("flashtile_enable_jit", [&] {
    if (!rt)
      return report(Status::error("flashtile_enable_jit: rt must not be NULL"));
    processJit().install(rt->runtime);
    return 0;
  });
}

char *flashtile_register_variant(const char *description) {
  return stringResult("flashtile_register_variant", [&]() -> StatusOr<std::string> {
    if (!description)
      return Status::error("flashtile_register_variant: description must not be NULL");
    StatusOr<Variant> variant = parseVariantDescription(description);
    if (!variant.ok())
      return variant.status();
    return processJit().add(*variant);
  });
}

char *flashtile_variant_id(const char *variant) {
  return stringResult("flashtile_variant_id", [&]() -> StatusOr<std::string> {
    StatusOr<Variant> resolved = resolveVariant(variant);
    if (!resolved.ok())
      return resolved.status();
    mlir::FailureOr<std::string> id = variantId(*resolved);
    if (mlir::failed(id))
      return Status::error("variant '" + resolved->name() + "' does not build a valid program");
    return *id;
  });
}

char *flashtile_compile_variant(const char *variant, const char *stage, int dtype, int head_dim, int head_dim_v,
                                const char *arch) {
  return stringResult("flashtile_compile_variant", [&]() -> StatusOr<std::string> {
    StatusOr<Variant> resolved = resolveVariant(variant);
    if (!resolved.ok())
      return resolved.status();
    std::string stageName = stage ? stage : "";
    if (stageName != "tile" && stageName != "scheduled" && stageName != "cuda")
      return Status::error("stage: '" + excerpt(stageName) + "' is not one of tile, scheduled, cuda");
    if (Status s = flashtile::capi::checkDtypeCode(dtype); !s.ok())
      return s;
    int headDimV = head_dim_v == 0 ? head_dim : head_dim_v;
    if (!supportsHeadDims(head_dim, headDimV))
      return Status::error("head_dim/head_dim_v: " + std::to_string(head_dim) + "/" + std::to_string(headDimV) +
                           " is not supported; accepted: " + supportedHeadDimsText());
    // The names the CLI's --arch accepts, aliases included (sm_89 builds sm_80 kernels, sm_90 is sm_90a).
    std::string archName = arch ? arch : std::string(kDefaultCompileArch);
    if (!target::canonicalArch(archName))
      return Status::error("arch: " + target::unknownArchMessage(excerpt(archName)));
    jit::CompileOptions options;
    options.dtype = dtype == FLASHTILE_E4M3 ? ElementType::E4M3
                    : dtype == FLASHTILE_BF16 ? ElementType::BF16
                                              : ElementType::F16;
    options.headDim = head_dim;
    options.headDimV = headDimV;
    options.schedule.arch = archName;
    StatusOr<jit::Stage> upTo = jit::parseStage(stageName);
    if (!upTo.ok())
      return upTo.status();
    StatusOr<jit::CompileResult> result = jit::compile(*resolved, options, *upTo);
    if (!result.ok())
      return result.status();
    return stageName == "tile" ? result->tileIr : stageName == "scheduled" ? result->scheduledIr : result->cuda;
  });
}

char *flashtile_builtin_variants(void) {
  return stringResult("flashtile_builtin_variants", []() -> StatusOr<std::string> {
    std::string out;
    for (const std::string &name : variants::names())
      out += (out.empty() ? "" : ",") + name;
    return out;
  });
}

void flashtile_string_free(char *s) { std::free(s); }

} // extern "C"
