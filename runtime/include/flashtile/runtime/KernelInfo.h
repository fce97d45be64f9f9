// KernelInfo.h — what the runtime asks for (KernelSpec) and what the compiler says it built (KernelInfo).
//
// The compiler writes a KernelInfo next to every cubin (an ahead-of-time `<name>.manifest`, or the info part of
// a cache entry); the runtime reads it back to pick and launch the kernel. The text form is plain `key=value`
// lines so that a person can read and diff a kernel library.
#ifndef FLASHTILE_RUNTIME_KERNELINFO_H
#define FLASHTILE_RUNTIME_KERNELINFO_H

#include "flashtile/runtime/ParamRule.h"
#include "flashtile/runtime/Status.h"

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

/// GPU targets the compiler emits and the runtime dispatches to.
inline constexpr std::array<std::string_view, 3> kSupportedArchs = {"sm_80", "sm_90a", "sm_100a"};
/// Element types of Q, K, V and O, as spelled in specs and manifests.
inline constexpr std::array<std::string_view, 2> kSupportedDtypes = {"f16", "bf16"};

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

  /// One line naming every field, e.g.
  /// "arch=sm_90a;dtype=bf16;headDim=128;headDimV=128;variant=causal;schedule=fa2;shapeClass=default", with
  /// ";kvCache=1" appended for KV-cache calls and ";rotary=<pairs>" for rotary ones.
  std::string key() const;
};

/// Metadata of one compiled kernel.
struct KernelInfo {
  std::string entry; // the kernel's symbol name in the cubin (extern "C")
  std::string arch;  // one of kSupportedArchs
  std::string dtype; // one of kSupportedDtypes
  int headDim = 0;
  int headDimV = 0;
  std::string variant; // see KernelSpec::variant
  std::string schedule;
  std::string shapeClass;
  int blockM = 0;                      // query rows per thread block: grid.x = ceil(seqlenQ / blockM)
  int blockN = 0;                      // keys per K/V tile (informational for the runtime)
  int threads = 0;                     // threads per block
  int smemBytes = 0;                   // dynamic shared memory per block
  std::vector<std::string> paramNames; // the variant's numeric params, in FlashtileFwdParams::variantParams order
  std::vector<std::string> inputNames; // the variant's input arrays, in FlashtileFwdParams::inputs order
  std::vector<ParamRule> paramRules;   // the variant's rules for its params' values, checked at every call
  std::string compilerVersion;         // flashtile::compilerVersion() of the compiler that built it
  // Split-KV kernels (the decode schedule): the key range is split across numSplits blocks, grid.x = Q tiles x
  // numSplits, and when numSplits > 1 the combine kernel `combineEntry` (same cubin) merges the partials: grid
  // (ceil(rows / combineRows), headsQ, batch) of combineThreads threads, no dynamic shared memory. Empty and 0
  // for other kernels (the fields are then absent from the text form; packQueryHeads=1 only when set).
  std::string combineEntry;
  int combineRows = 0;
  int combineThreads = 0;

  // GQA packing (split-KV kernels only): a block's rows are the query heads of one K/V head x the query rows, the
  // grid (ceil(rows x headsQ / headsKv / blockM) x numSplits, headsKv, batch).
  bool packQueryHeads = false;

  // KV-cache kernels (split-KV kernels that read caches, KernelAbi.h's kvCache fields): the entry (same cubin) that
  // appends a call's new keys and values to the cache before the attention kernel runs; empty otherwise.
  std::string appendEntry;
  // KV-cache kernels that rotate Q and the appended keys (tile.rotary, KernelAbi.h's rotary fields): the pairs,
  // kRotaryHalves (i, i + rotaryDim / 2) or kRotaryInterleaved (2i, 2i + 1); empty for kernels without rotation.
  std::string rotary;

  // TMA kernels (the sm90 family): the kernel's second parameter is the TMA descriptors of Q, K and V
  // (AttentionTensorMaps, TensorMap.h), one box of blockM (Q) or blockN (K, V) rows x the whole head dim each,
  // 128-byte swizzled; the runtime encodes them per call. Absent from the text form unless set (tensorMaps=1).
  bool tensorMaps = false;

  // Persistent kernels (the fa3 schedule's tile.work_loop): the grid is min(units, SMs) blocks, a unit being two Q
  // tiles of one (batch, head) pair (ceil(FlashtileFwdParams::qTiles / 2) x headsQ x batch units); a block runs one
  // unit in every gridDim.x (the kernel decodes them). Absent from the text form unless set (persistent=1).
  bool persistent = false;
  // Persistent kernels of the dynamic scheduler (tile.work_loop dynamic): the blocks take units of one Q tile from
  // a counter, FlashtileFwdParams::tileCounter, which the runtime zeroes on the launch's stream before each launch
  // in a workspace no other launch uses meanwhile (the caller's `workspace`, else the runtime's own buffer for the
  // stream; under CUDA graph capture the caller's). The grid is min(qTiles x headsQ x batch, SMs) blocks. Absent
  // from the text form unless set (tileCounter=1).
  bool tileCounter = false;
  // The dispatch rule its schedule records (Schedule::preferredOver): while no schedule is set (Runtime::setSchedule)
  // and no JIT is installed, a call whose spec asks for schedule `preferredOver` runs this kernel instead when it
  // matches the call's spec otherwise (arch, dtype, head dims, variant). Empty: none; absent from the text form.
  std::string preferredOver;

  // K/V-step kernels (the fa1 schedule's tile.state_load / tile.state_store): launched once per K/V tile
  // (FlashtileFwdParams::kvStep = 0 .. ceil(max seqlen_k / blockN) - 1, one launch when there is no key) on the
  // grid (ceil(seqlenQ / blockM), headsQ, batch), with the state workspace of KernelAbi.h (stateAcc, stateMax,
  // stateSum: headDimV + 2 fp32 values per LSE row). Absent from the text form unless set (kvSteps=1).
  bool kvSteps = false;

  bool splitKv() const { return !combineEntry.empty(); }
  bool readsKvCache() const { return !appendEntry.empty(); }

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
