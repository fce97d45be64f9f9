// KernelInfo.h — what the runtime asks for (KernelSpec) and what the compiler says it built (KernelInfo).
//
// The compiler writes a KernelInfo next to every cubin (an ahead-of-time `<name>.manifest`, or the info part of
// a cache entry); the runtime reads it back to pick and launch the kernel. The text form is plain `key=value`
// lines so that a person can read and diff a kernel library.
#ifndef FLASHTILE_RUNTIME_KERNELINFO_H
#define FLASHTILE_RUNTIME_KERNELINFO_H

#include "flashtile/runtime/Dispatch.h"
#include "flashtile/runtime/LaunchPlan.h"
#include "flashtile/runtime/ParamRule.h"
#include "flashtile/runtime/Status.h"

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

/// GPU targets the compiler emits and the runtime dispatches to: the one list of architecture names the generic
/// layers read (tests/layering/check-layering.sh keeps them from writing one as a string elsewhere).
inline constexpr std::array<std::string_view, 3> kSupportedArchs = {"sm_80", "sm_90a", "sm_100a"};
/// The arch of a compile that names none (the C ABI's flashtile_compile_variant with a NULL arch).
inline constexpr std::string_view kDefaultCompileArch = "sm_90a";
/// kSupportedArchs for messages: "sm_80, sm_90a, sm_100a".
std::string supportedArchsText();
/// Element types of Q, K and V, as spelled in specs and manifests (O is bf16 for e4m3: outputDtype, Runtime.h).
inline constexpr std::array<std::string_view, 3> kSupportedDtypes = {"f16", "bf16", "e4m3"};

/// The pairs a rotary kernel rotates (KernelSpec::rotary, KernelInfo::rotary).
inline constexpr std::string_view kRotaryHalves = "halves";
inline constexpr std::string_view kRotaryInterleaved = "interleaved";

/// Shape classes: kernels for one (arch, dtype, head dims, variant, schedule) may be tiled differently for the
/// shapes they run. The runtime picks a call's class (Runtime::shapeClassFor); the compiler's schedules give each
/// class its defaults, and a class whose defaults equal the "default" class's has no kernel of its own.
///  default — any shape;
///  short   — sequences of at most kShortSeqlen query rows and key rows on average (dense: seqlen_q and seqlen_k;
///            varlen: total_q / batch and total_k / batch),
///            where a block's fixed cost (its Q tile's load, the epilogue) weighs most: at head dim 128 FA2 runs
///            causal-like programs in 64-row blocks there.
inline constexpr std::string_view kDefaultShapeClass = "default";
inline constexpr std::string_view kShortShapeClass = "short";
inline constexpr std::array<std::string_view, 2> kShapeClasses = {kDefaultShapeClass, kShortShapeClass};
inline constexpr int kShortSeqlen = 1024;

/// Module kinds: what a compiled module computes (the program kinds of its kernels belong to it, passes/IR/
/// ProgramKinds.h: the backward module holds the backward_preprocess, backward_main and backward_postprocess
/// kernels). A call asks for one kind; kernels of another kind never serve it.
inline constexpr std::string_view kForwardKind = "forward";
/// The backward: one module of three kernels (preprocess, main, postprocess) whose plan computes dQ, dK, dV (and
/// the variant's input gradients) of one call (Runtime::backward).
inline constexpr std::string_view kBackwardKind = "backward";
inline constexpr std::array<std::string_view, 2> kProgramKinds = {kForwardKind, kBackwardKind};

/// The version of the manifest's text form. 2: launch plans (LaunchPlan.h) instead of per-schedule fields; a
/// manifest of another version is refused with a message naming both.
inline constexpr int kManifestFormat = 2;

/// The kernel the runtime needs for one call.
struct KernelSpec {
  std::string arch;       // one of kSupportedArchs
  std::string dtype;      // one of kSupportedDtypes
  int headDim = 0;        // Q/K head dimension
  int headDimV = 0;       // V/O head dimension
  std::string variant;    // variant id: "none", "causal", or a JIT variant id that hashes the variant's IR
  std::string schedule;   // e.g. "fa2"
  std::string shapeClass; // one of kShapeClasses
  // The call reads a KV cache (AttentionArgs::kvCache): it runs a kernel compiled with the cache code
  // (KernelInfo::readsKvCache), and plain calls one without it, so that plain decode pays nothing for caches.
  bool kvCache = false;
  // KV-cache calls with rotary embedding (KvCacheArgs::rotaryDim > 0): kRotaryHalves or kRotaryInterleaved, the
  // pairs its kernel rotates (KernelInfo::rotary); empty for every other call.
  std::string rotary;
  std::string kind{kForwardKind}; // what the program computes: one of kProgramKinds
  // The call is a block of a larger problem (AttentionArgs::positions): it runs a module compiled with position
  // offsets (KernelInfo::positions), whose kernels take FlashtilePositions (PositionsAbi.h); plain calls one without.
  bool positions = false;
  // KV-cache calls whose cache holds e4m3 (KvCacheArgs::dtype): "e4m3", the kernel's K/V element type
  // (KernelInfo::kvDtype); empty for every other call (K and V of dtype).
  std::string kvDtype;

  /// One line naming every field, e.g.
  /// "arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;variant=causal;schedule=fa2;shapeClass=default", with
  /// ";kvCache=1" appended for KV-cache calls, ";rotary=<pairs>" for rotary ones, ";kind=<kind>" for programs
  /// of a kind other than the forward, ";positions=1" for blocks of a larger problem and ";kvDtype=e4m3" for calls
  /// over an e4m3 KV cache.
  std::string key() const;
};

/// Metadata of one compiled kernel.
struct KernelInfo {
  std::string kind{kForwardKind}; // one of kProgramKinds
  std::string entry; // the module's name: its main kernel's symbol in the cubin (extern "C"), and its files' stem
  std::string arch;  // one of kSupportedArchs
  std::string dtype; // one of kSupportedDtypes
  int headDim = 0;
  int headDimV = 0;
  std::string variant; // see KernelSpec::variant
  std::string schedule;
  std::string shapeClass;
  int blockM = 0; // query rows per Q tile (the argument checks bound the tiles a call has)
  int blockN = 0; // keys per K/V tile (informational for the runtime)
  std::vector<std::string> paramNames; // the variant's numeric params, in FlashtileFwdParams::variantParams order
  std::vector<std::string> inputNames; // the variant's input arrays, in FlashtileFwdParams::inputs order
  std::vector<ParamRule> paramRules;   // the variant's rules for its params' values, checked at every call
  std::string compilerVersion;         // flashtile::compilerVersion() of the compiler that built it
  // KV-cache kernels that rotate Q and the appended keys (tile.rotary, KernelAbi.h's rotary fields): the pairs,
  // kRotaryHalves (i, i + rotaryDim / 2) or kRotaryInterleaved (2i, 2i + 1); empty for kernels without rotation.
  std::string rotary;
  // The module reads a KV cache (KernelAbi.h's kvCache fields): only KV-cache calls run it. Absent from the text
  // form unless set (kvCache=1).
  bool kvCache = false;
  // A KV-cache module whose caches hold e4m3 while Q is bf16 or f16 (tile.kv_dtype, docs/fp8.md): "e4m3"; its
  // kernels take FlashtileFp8Params (Fp8Abi.h) last, for k_descale and v_descale. Empty: K/V of dtype. Absent from
  // the text form unless set.
  std::string kvDtype;
  // The module's kernels take FlashtilePositions (PositionsAbi.h) as their second parameter and its variant's hooks
  // see a larger problem's positions (passes/IR/TilePositions.h): only calls with AttentionArgs::positions run it.
  // Absent from the text form unless set (positions=1).
  bool positions = false;
  // The dispatch rule its schedule records for its arch (Schedule::dispatchRule, Dispatch.h): the calls naming no
  // schedule that run it (defaultFor: "all", "decode-sized"; absent: only calls naming its schedule) and the schedules
  // whose kernels it replaces where both have one for a call (preferredOver, comma-joined; absent when none).
  DefaultCalls defaultFor = DefaultCalls::None;
  std::vector<std::string> preferredOver;
  // Honesty as data: the kernel's schedule has never run on a GPU of this arch (its authors had none), so before the
  // kernel's first use in a process the runtime runs it once beside `checkAgainst`'s kernel (a schedule proven on
  // the arch) on a small seeded problem and falls back for that process if the two disagree (runtime/lib/SelfCheck.h).
  // Written by the compiler from the schedule (Schedule::checkAgainstOn); to be removed once the kernels have run on
  // that hardware and the run is recorded. Absent from the text form unless set (neverRunOnArch=1, checkAgainst=…).
  bool neverRunOnArch = false;
  std::string checkAgainst;
  // How a call runs this module: its kernels in order, their grids, blocks, clusters, shared memory, tensor maps,
  // workspaces and dependencies (LaunchPlan.h). Serialized as `launch.N.*`, `workspace.N.*`, `set.*`, `splits.*`.
  LaunchPlan plan;

  /// Whether the call's split count matters (the plan has a split rule: split-KV modules).
  bool splitKv() const { return plan.splits.has_value(); }
  bool readsKvCache() const { return kvCache; }

  /// `key=value` lines, one per field, paramNames and inputNames comma-joined, paramRules in
  /// serializeParamRules' form. Round-trips through parse() when verify() is ok.
  std::string serialize() const;
  /// Parses serialize()'s format; blank lines and `#` comments are ignored. Rejects unknown, duplicate,
  /// missing and malformed fields with a message naming the field.
  static StatusOr<KernelInfo> parse(std::string_view text);
  /// Checks every field's value (what parse() accepts), naming the first bad field: ids and names in their
  /// alphabets, head dims and tile sizes multiples of 8 and 16 in range, threads a multiple of 32 up to 1024,
  /// smemBytes within what `arch` allows a block (kMaxSmemBytes), rules that parse and read only paramNames.
  Status verify() const;

  KernelSpec spec() const;
  /// The dispatch rule it records: its schedule and arch, defaultFor and preferredOver.
  DispatchRule dispatchRule() const { return {schedule, arch, defaultFor, preferredOver}; }
};

/// The most dynamic shared memory a block may opt in to on `arch` (one of kSupportedArchs): 163 KiB on sm_80,
/// 227 KiB on sm_90a and sm_100a; 0 for other names.
int maxSmemBytes(std::string_view arch);

/// True when `info` implements exactly `spec`: KV-cache specs only kernels that read caches, other specs only
/// kernels without the cache code.
bool matches(const KernelInfo &info, const KernelSpec &spec);

/// True for ids usable as a variant, schedule or shape class: non-empty, at most 200 characters from
/// [A-Za-z0-9_.:#-], so that they cannot break the `key=value` and `;`-joined formats.
bool isValidId(std::string_view id);

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_KERNELINFO_H
