// Runtime.h — the public entry point: pick a kernel for an attention call and launch it.
//
// Kernels come from ahead-of-time directories (`<name>.manifest` + `<name>.cubin`) or, on a miss, from a JIT
// hook the compiler library installs; JIT results go through the KernelCache. Arguments are checked before
// anything touches the GPU, so a bad call gets an error value naming the argument, never a crash or abort.
#ifndef FLASHTILE_RUNTIME_RUNTIME_H
#define FLASHTILE_RUNTIME_RUNTIME_H

#include "flashtile/runtime/Dispatch.h"
#include "flashtile/runtime/KernelCache.h"
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/KvCache.h"
#include "flashtile/runtime/Log.h"
#include "flashtile/runtime/SplitKv.h"
#include "flashtile/runtime/Status.h"

#include <cuda.h>

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flashtile {

/// The element type of Q, K and V. E4M3 is float8_e4m3fn (docs/fp8.md): its calls write O in bf16 (LSE fp32, as
/// always) and take optional fp32 descales; they have no backward, and only schedules with an 8-bit MMA path run
/// them.
enum class DType { F16, BF16, E4M3 };

/// "f16" / "bf16" / "e4m3" (the spelling in specs and manifests); "invalid" for values outside the enum.
std::string_view dtypeName(DType dtype);
/// The bytes of one Q/K/V element of `dtype` (1 for E4M3, 2 for the 16-bit types).
int dtypeBytes(DType dtype);
/// The element type O has in a call of `dtype`: BF16 for E4M3 (as flash-attn 3's FP8 forward), else `dtype`.
DType outputDtype(DType dtype);

/// Head dimensions the compiler generates kernels for, with headDimV = headDim.
inline constexpr std::array<int, 6> kSupportedHeadDims = {32, 64, 96, 128, 192, 256};
/// The (headDim, headDimV) pairs with headDimV != headDim kernels are generated for: 192/128 is DeepSeek-V3's MLA
/// prefill (Q/K carry a 64-dim rotary part on top of the 128 dims V shares).
inline constexpr std::array<std::pair<int, int>, 1> kSupportedHeadDimPairs = {{{192, 128}}};
/// Whether kernels exist for (headDim, headDimV): headDim in kSupportedHeadDims and headDimV equal to it, or a pair
/// in kSupportedHeadDimPairs.
bool supportsHeadDims(int headDim, int headDimV);
/// "32, 64, 96, 128, 192, 256 (head_dim_v = head_dim), or 192/128 (head_dim/head_dim_v)": for error messages.
std::string supportedHeadDimsText();

/// Where a call sits in a larger problem it is one block of (a sequence split across GPUs: flashtile.parallel,
/// docs/parallel.md). The call runs a module compiled with position offsets (KernelSpec::positions), whose kernels
/// take these values as FlashtilePositions (PositionsAbi.h): the variant's hooks and KV-range rules see the larger
/// problem's coordinates and sizes, while loads, stores and the tile walk stay in the call's own rows. 0 and null
/// mean "the call's own" (no offset, the call's sizes).
struct BlockPositions {
  // Dense calls: query row i is qOffset + i and key j is kOffset + j of the larger problem, whose sequences have
  // seqlenQGlobal queries and seqlenKGlobal keys (0: the call's seqlenQ / seqlenK). Both offsets >= 0, and the
  // call's rows inside the larger problem's: qOffset + seqlenQ <= seqlenQGlobal (kOffset + seqlenK likewise).
  int qOffset = 0, kOffset = 0;
  int seqlenQGlobal = 0, seqlenKGlobal = 0;
  // Varlen calls (AttentionArgs::cuSeqlensQ set; the four dense fields above must be 0): device int32 arrays,
  // 4-byte aligned. qOffsets / kOffsets: batch values each, where sequence b's row 0 and key 0 sit in the larger
  // problem's sequence b (null: 0); cuSeqlensQGlobal / cuSeqlensKGlobal: batch + 1 offsets of the larger problem's
  // packed sequences (null: the call's own), which give each sequence's global lengths and the hooks' key_offset.
  const int *qOffsets = nullptr, *kOffsets = nullptr;
  const int *cuSeqlensQGlobal = nullptr, *cuSeqlensKGlobal = nullptr;
  // Optional host copies of the four arrays (same lengths), checked by validate() as the device arrays cannot be:
  // offsets >= 0, global offsets non-decreasing from 0, each sequence's rows inside the larger problem's (with the
  // call's own host offsets, cuSeqlensQHost / cuSeqlensKHost, where given).
  const int *qOffsetsHost = nullptr, *kOffsetsHost = nullptr;
  const int *cuSeqlensQGlobalHost = nullptr, *cuSeqlensKGlobalHost = nullptr;
  // Query head h is headOffset + h of headsQGlobal query heads and headsKvGlobal K/V heads (Ulysses; 0: the call's
  // headsQ / headsKv). The call's heads are whole GQA groups inside the larger problem's: the same group size,
  // headOffset a multiple of it, headOffset + headsQ <= headsQGlobal.
  int headOffset = 0, headsQGlobal = 0, headsKvGlobal = 0;
};

/// One attention forward call over device pointers. Q is B x Sq x Hq x D, K is B x Sk x Hkv x D, V is
/// B x Sk x Hkv x Dv, O is B x Sq x Hq x Dv (any strides with a contiguous last dim); LSE is fp32 B x Hq x Sq,
/// contiguous, natural log. Varlen (flash_attn_varlen_func, see cuSeqlensQ): Q is total_q x Hq x D, K total_k x Hkv
/// x D, V total_k x Hkv x Dv, O total_q x Hq x Dv, and LSE fp32 Hq x total_q (flash-attn 2.x varlen's layout).
struct AttentionArgs {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr; // required: every kernel writes it
  DType dtype = DType::BF16;
  int batch = 0;
  int seqlenQ = 0; // 0 is a valid no-op; varlen: total_q, the rows of the packed Q/O
  int seqlenK = 0; // 0 is valid: O = 0 and LSE = -inf; varlen: total_k, the rows of the packed K/V
  int headsQ = 0;
  int headsKv = 0; // headsQ must be a multiple (grouped-query attention)
  int headDim = 0;
  int headDimV = 0; // equal to headDim, or a pair in kSupportedHeadDimPairs
  // Strides in elements, ordered {batch, seq, head, dim}; the dim stride must be 1, the others non-negative
  // multiples of 8 elements (kernels use 16-byte vector loads; E4M3's Q, K and V: of 16 elements, O's of 8, O being
  // bf16 there). Varlen ignores the batch strides.
  std::array<long long, 4> qStride{}, kStride{}, vStride{}, oStride{};
  float softmaxScale = 0.f; // 0 selects 1/sqrt(headDim); must be finite
  // FP8 descales (dtype E4M3 only; flash-attn 3's q_descale, k_descale, v_descale): each null (= 1) or a device
  // pointer to batch x headsKv contiguous fp32 values (4-byte aligned), indexed [b][hKv]. The kernels fold
  // qDescale·kDescale of a query head's K/V head into the softmax scale (a variant's hooks see the same scaled score
  // as in bf16) and multiply O by vDescale when it is finalized. Other dtypes: all three must be null.
  const float *qDescale = nullptr, *kDescale = nullptr, *vDescale = nullptr;
  /// The scale kernels use: softmaxScale, or 1/sqrt(headDim) when it is 0.
  float effectiveScale() const;
  std::string variant = "none";     // a built-in name ("none", "causal", "sliding_window", ...) or a JIT variant id
  std::vector<float> variantParams; // the variant's numbers, in its declaration order
  // The variant's input arrays (device pointers, 4-byte aligned), in its declaration order, each of the element
  // type the variant declares: fp32 for ALiBi slopes and sinks, int32 for document starts. The kernel does not know
  // their lengths: each variant documents the shape its index rule reads (e.g. alibi: headsQ floats).
  std::vector<const void *> inputs;

  // Varlen (flash_attn_varlen_func): both null (dense), or both device pointers to batch + 1 int32 offsets
  // (4-byte aligned). Sequence b is rows [cuSeqlensQ[b], cuSeqlensQ[b + 1]) of Q/O and of LSE's rows, and rows
  // [cuSeqlensK[b], cuSeqlensK[b + 1]) of K/V. An empty sequence writes nothing (Sq_b = 0) or O = 0 and
  // LSE = -inf (Sk_b = 0); causal and other masks align to each sequence's own Sq_b and Sk_b.
  const int *cuSeqlensQ = nullptr, *cuSeqlensK = nullptr;
  int maxSeqlenQ = 0, maxSeqlenK = 0; // varlen: the longest Sq_b (it sizes the grid) and Sk_b; both >= 0
  // Optional host copies of the offsets (batch + 1 each), checked by validate(): non-decreasing, inside
  // [0, seqlenQ/seqlenK], no sequence longer than maxSeqlenQ/maxSeqlenK. The device offsets themselves are checked
  // only with FLASHTILE_CHECK_VARLEN=1 (a synchronous copy per call). Unchecked bad offsets give wrong results but
  // no out-of-bounds access: kernels clamp every sequence to the packed rows.
  const int *cuSeqlensQHost = nullptr, *cuSeqlensKHost = nullptr;

  // Split-KV (kernels of the decode schedule, which the runtime picks for calls of at most kDecodeMaxSeqlenQ query
  // rows a sequence; SplitKv.h): 0 lets the runtime choose the number of splits of the key range
  // (numSplitsHeuristic), 1..kMaxSplits forces it. Other kernels ignore it.
  int numSplits = 0;
  // The device memory split calls write their partials to (splitKvWorkspaceBytes, 256-byte aligned): null lets the
  // runtime own it (one buffer per context and stream, grown as needed, which synchronizes the stream once when it
  // grows). Under CUDA graph capture without a workspace a call runs unsplit (numSplits 1): pass one there.
  // K/V-step kernels (the fa1 schedule: a plan that repeats its launch over kvStep, LaunchPlan.h) keep each query
  // row's online-softmax state here between their launches: (headDimV + 2) x 4 bytes per LSE row; under CUDA graph
  // capture they need one. Kernels of fa3's dynamic scheduler (a plan whose zeroed workspace binds tileCounter) keep
  // their tile counter in its first 4 bytes, which each launch zeroes on its stream first; a workspace serves one
  // stream at a time. Under graph capture: needed.
  void *workspace = nullptr;
  size_t workspaceBytes = 0;

  // A block of a larger problem (context parallelism): set, the call runs a module compiled with position offsets and
  // its kernels take these positions (BlockPositions); unset (the default), a plain call, as before. KV-cache calls
  // take none.
  std::optional<BlockPositions> positions;

  // KV cache (flash_attn_with_kvcache, KvCache.h): with kvCache.layout set, k/v/kStride/vStride/seqlenK describe
  // the caches and the call runs the decode schedule's kernels (any seqlenQ; dense Q only).
  KvCacheArgs kvCache;

  // The schedule this call runs (e.g. Python's schedule=): empty lets the runtime choose (Runtime::setSchedule, or the
  // schedules' dispatch rules). A named schedule without a kernel for the call falls back to the runtime's choice
  // with one log line, or is an error when strictSchedule (or Runtime::setStrictSchedule) is set.
  std::string schedule;
  // Strict schedule mode for this call, on top of the runtime's (Runtime::setStrictSchedule): a call whose first
  // schedule (named, or preferred by the rules) has no kernel for it is an error instead of a fallback.
  bool strictSchedule = false;

  bool isVarlen() const { return cuSeqlensQ || cuSeqlensK; }

  /// Arguments for packed B x S x H x D tensors (flash_attn_func's layout); headDimV 0 means headDim.
  static AttentionArgs contiguous(DType dtype, const void *q, const void *k, const void *v, void *o, float *lse,
                                  int batch, int seqlenQ, int seqlenK, int headsQ, int headsKv, int headDim,
                                  int headDimV = 0);
  /// Arguments for packed sequences (flash_attn_varlen_func's layout): Q totalQ x Hq x D, K totalK x Hkv x D,
  /// V totalK x Hkv x Dv, O totalQ x Hq x Dv, LSE Hq x totalQ; `batch` sequences; headDimV 0 means headDim.
  static AttentionArgs varlen(DType dtype, const void *q, const void *k, const void *v, void *o, float *lse,
                              const int *cuSeqlensQ, const int *cuSeqlensK, int batch, int totalQ, int totalK,
                              int maxSeqlenQ, int maxSeqlenK, int headsQ, int headsKv, int headDim, int headDimV = 0);
  /// Arguments over a contiguous KV cache: Q/O packed B x Sq x H x D, the caches packed cacheBatch x cacheSeqlen x
  /// Hkv x D; cacheSeqlens (device, B int32) may be null (every sequence full). KvCacheArgs::append adds new keys.
  static AttentionArgs contiguousCache(DType dtype, const void *q, const void *kCache, const void *vCache, void *o,
                                       float *lse, int batch, int seqlenQ, int cacheBatch, int cacheSeqlen,
                                       int headsQ, int headsKv, int headDim, const int *cacheSeqlens,
                                       int headDimV = 0);
  /// Arguments over a paged KV cache: the caches packed numPages x pageSize x Hkv x D, blockTable (device) packed
  /// batch x maxPagesPerSeq int32.
  static AttentionArgs pagedCache(DType dtype, const void *q, const void *kCache, const void *vCache, void *o,
                                  float *lse, int batch, int seqlenQ, int numPages, int pageSize,
                                  const int *blockTable, int maxPagesPerSeq, int headsQ, int headsKv, int headDim,
                                  const int *cacheSeqlens, int headDimV = 0);
};

/// One attention backward call (Runtime::backward): the gradients of a forward call's Q, K, V (and of its variant's
/// fp32 inputs) given the gradient of its output. `forward` holds the forward call's arguments as it was made: q,
/// k, v, the sizes, strides, variant, its numbers and inputs, varlen offsets; its `o` and `lse` are the forward's
/// results (read, not written). The KV-cache mode has no backward (kvCache must be unset).
struct BackwardArgs {
  AttentionArgs forward;
  const void *dO = nullptr;               // dL/dO: O's shape, strides dOStride
  void *dQ = nullptr, *dK = nullptr, *dV = nullptr; // written: Q's, K's and V's shapes, in the call's dtype
  // Strides in elements, ordered {batch, seq, head, dim}, with forward's rules (dim stride 1, others multiples of 8).
  std::array<long long, 4> dOStride{}, dQStride{}, dKStride{}, dVStride{};
  // Gradients of the variant's inputs, in its declaration order: empty, or one entry an input; an entry is null
  // (not wanted) or a device fp32 array shaped as that input, overwritten where a (batch, head) reads it (the rest is
  // left as it is: pass zeros). Int32 inputs have none (null).
  std::vector<float *> inputGrads;
  // Every accumulation in a fixed order: dQ, dK, dV and input gradients bitwise identical across runs and stream
  // interleavings. Off (the default), accumulations run in arrival order (atomics): not bitwise reproducible.
  bool deterministic = false;
  // The backward's scratch memory (its plan's workspaces: dQ's fp32 accumulator, rowsum(dO * O), ...): null lets the
  // runtime own it per context and stream (as AttentionArgs::workspace); under CUDA graph capture, pass one (a call
  // without one there fails, naming the bytes it needs).
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
};


/// Checks a call's variant arguments (parameter values, inputs) against what the variant accepts; installed by
/// the compiler library (jit::Jit::checkFn), which knows the variants. Runs on every forward(), before the GPU.
using VariantCheckFn = std::function<Status(const AttentionArgs &)>;

/// The JIT hook: builds the kernel for a spec. The compiler library installs one with Runtime::setCompiler; it
/// is called only on a cache miss, and what it returns must match the spec.
using CompileFn = std::function<StatusOr<CachedKernel>(const KernelSpec &)>;

/// The compiler's answer to "does spec's shape class have a kernel of its own?": spec.shapeClass when the schedule
/// tiles that class differently from kDefaultShapeClass for this spec, else kDefaultShapeClass (so the two share
/// one kernel). Installed with the JIT (jit::Jit::shapeClassFn); asked once per spec.
using ShapeClassFn = std::function<StatusOr<std::string>(const KernelSpec &)>;

/// Which kernel a call runs, and why (Runtime::explain).
struct ScheduleChoice {
  KernelSpec spec;                // the spec of the kernel that runs: its schedule is the one chosen
  std::string entry;              // the kernel's entry (KernelInfo::entry)
  bool aheadOfTime = false;       // from a loaded ahead-of-time directory; else built by the JIT (or from its cache)
  std::vector<std::string> order; // the schedules tried for the call, in order
  std::string forcedBy;  // what named the first schedule ("setSchedule", "FLASHTILE_SCHEDULE", ...); empty: none
  bool fellBack = false; // a schedule before spec.schedule in `order` has no kernel for the call
  std::string reason;    // one line: why spec.schedule (preferred, forced, or fell back because ...)

  /// "schedule=...\nentry=...\nsource=aot|jit\norder=a,b\nforced_by=...\nfell_back=0|1\nreason=...\n": the text
  /// form of the C ABI (flashtile_explain) and the CLI.
  std::string text() const;
};

/// Thread-safe: forward() may be called concurrently from several threads (each with its own stream).
///
/// Which schedule runs a call: the one the call names (AttentionArgs::schedule), else the runtime's (setSchedule,
/// FLASHTILE_SCHEDULE; decode-sized calls: setDecodeSchedule), else the fastest the dispatch rules know (Dispatch.h:
/// the JIT's, installed by jit::Jit::install, and those recorded in loaded ahead-of-time kernels). A schedule with no
/// kernel for the call (no ahead-of-time kernel and none the JIT can build: fa3 tiles no head dim 96) falls back to
/// the next one with one log line, or fails in strict mode (setStrictSchedule, FLASHTILE_STRICT_SCHEDULE=1). The
/// runtime names no schedule: the order is the rules', as data.
class Runtime {
public:
  /// The JIT cache takes its settings from the environment (KernelCache::optionsFromEnvironment); the schedule
  /// settings too: FLASHTILE_SCHEDULE (as setSchedule) and FLASHTILE_STRICT_SCHEDULE=1 (as setStrictSchedule(true)).
  Runtime();
  explicit Runtime(KernelCache::Options cacheOptions);
  ~Runtime();
  Runtime(const Runtime &) = delete;
  Runtime &operator=(const Runtime &) = delete;

  /// Adds every `<name>.manifest` in `dir` (KernelInfo text) with the `<name>.cubin` beside it. Each is checked
  /// first: both must be regular files (a FIFO or directory is refused, never read), the manifest's fields in
  /// range and written by this compiler version (compilerVersion()), the cubin an ELF image for the manifest's
  /// arch that defines its entry symbol. All or nothing: on error (naming the file and the reason) nothing is
  /// added. Two kernels for one spec are an error.
  Status loadAotDirectory(const std::string &dir);
  /// The JIT: `compile` builds kernels the ahead-of-time directories lack; `shapeClassOf` (optional) tells
  /// which shape classes have kernels of their own. Without it, a class with no ahead-of-time kernel of its own is
  /// compiled as asked.
  void setCompiler(CompileFn compile, ShapeClassFn shapeClassOf = {});
  void setVariantCheck(VariantCheckFn check);
  /// The compiler's dispatch rules (schedule::dispatchRules(), installed with the JIT by jit::Jit::install): which
  /// schedules run calls that name none, best first (Dispatch.h). Loaded ahead-of-time kernels add the rules their
  /// manifests record. Without any rule, a call must name its schedule.
  void setDispatchRules(std::vector<DispatchRule> rules);
  /// Forces a schedule on calls that name none (decode-sized calls keep the schedules made for them, see
  /// setDecodeSchedule); empty returns to the dispatch rules. Initially FLASHTILE_SCHEDULE's value, if set.
  void setSchedule(std::string schedule);
  /// Forces a schedule on decode-sized calls (isDecodeCall) that name none. Unset (initially): the rules' schedules
  /// for decode-sized calls first, then setSchedule's; empty: decode-sized calls are treated as any other call.
  void setDecodeSchedule(std::string schedule);
  /// Strict schedule mode: a call whose first schedule (named, or preferred by the rules) has no kernel for it fails,
  /// naming the schedule and the reason, instead of falling back with a log line. Initially on when
  /// FLASHTILE_STRICT_SCHEDULE is set to anything but "" or "0".
  void setStrictSchedule(bool strict);
  /// Whether `args` is decode-sized: at most kDecodeMaxSeqlenQ query rows a sequence (dense seqlenQ, varlen
  /// maxSeqlenQ), or a KV-cache call (only the decode schedule reads caches).
  static bool isDecodeCall(const AttentionArgs &args);
  /// The number of splits forward() gives `args` on a kernel of `kernel`'s tiling (1 for kernels that do not
  /// split the key range): args.numSplits when set, else numSplitsHeuristic for a GPU of `smCount` SMs that each
  /// hold `blocksPerSm` of the kernel's thread blocks at once (forward() asks the driver).
  static int numSplitsFor(const AttentionArgs &args, const KernelInfo &kernel, int smCount,
                          int blocksPerSm = kSplitKvBlocksPerSm);

  /// Checks `args`, selects or builds the kernel for this GPU and launches it on `stream` (asynchronous).
  Status forward(const AttentionArgs &args, CUstream stream = nullptr);
  /// Checks `args`, selects or builds the backward module for this GPU (kind "backward"; the schedule as forward()
  /// chooses it, among schedules with a backward) and runs its plan on `stream` (asynchronous).
  Status backward(const BackwardArgs &args, CUstream stream = nullptr);
  /// The bytes of workspace backward(args) needs (its plan's workspaces, laid out as the call lays them out; 0:
  /// none), for a caller that passes its own (BackwardArgs::workspace; needed under CUDA graph capture). Selects or
  /// builds the backward module as backward() does; launches nothing. args.workspace is ignored.
  StatusOr<size_t> backwardWorkspaceBytes(const BackwardArgs &args);
  /// The bytes of workspace forward(args) needs (its plan's workspaces as the call lays them out, split-KV's with the
  /// splits the call would choose; 0: none), for a caller that passes its own (AttentionArgs::workspace; needed under
  /// CUDA graph capture by e4m3 calls (V transposed) and fa1's K/V steps, and for split decode calls there). Selects
  /// or builds and loads the kernel as forward() does (without a first-use self-check); launches nothing.
  /// args.workspace is ignored.
  StatusOr<size_t> forwardWorkspaceBytes(const AttentionArgs &args);
  /// Every check on `args` that needs no GPU (validate(args.forward), then the gradients' pointers and strides).
  static Status validateBackward(const BackwardArgs &args);

  /// The spec forward() asks for first on this thread's GPU (the first schedule it tries).
  StatusOr<KernelSpec> specFor(const AttentionArgs &args);
  /// The spec for `arch` (one of kSupportedArchs); needs no GPU.
  StatusOr<KernelSpec> specFor(const AttentionArgs &args, const std::string &arch) const;
  /// Which kernel forward() runs for `args` on this thread's GPU and why, found as forward() finds it (the JIT builds
  /// what the caches lack; a fallback logs its line once); nothing is launched. Errors are forward()'s.
  StatusOr<ScheduleChoice> explain(const AttentionArgs &args);
  /// The same for `arch` (one of kSupportedArchs); needs no GPU.
  StatusOr<ScheduleChoice> explain(const AttentionArgs &args, const std::string &arch);
  /// The same for the call's module of `kind` (one of kProgramKinds): with kBackwardKind, which kernel backward()
  /// runs for the gradients of the call `args` on `arch` (the first schedule of the forward's order that has a
  /// backward kernel for it).
  StatusOr<ScheduleChoice> explain(const AttentionArgs &args, const std::string &arch, std::string_view kind);
  /// The shape class of a call (see kShapeClasses): kShortShapeClass when its sequences have at most
  /// kShortSeqlen query rows and key rows on average (dense: seqlenQ and seqlenK; varlen: over the batch's
  /// sequences, total_q / batch and total_k / batch), else kDefaultShapeClass.
  static std::string_view shapeClassFor(const AttentionArgs &args);
  /// The kernel for `spec`: an ahead-of-time one, else the JIT cache's. Needs no GPU. A spec of a shape class
  /// other than the default runs the default class's kernel when its class has no kernel of its own: none
  /// ahead of time and no JIT, or the JIT's ShapeClassFn says the class shares the default's tiling.
  StatusOr<std::shared_ptr<const CachedKernel>> findKernel(const KernelSpec &spec);

  /// Every check on `args` that needs no GPU; the message names the argument and the accepted values.
  static Status validate(const AttentionArgs &args);
  /// The checks of `args` against the kernel that will run it (no GPU needed): validateVariantArgs, and a launch
  /// grid of fewer than 2^31 blocks.
  static Status validateFor(const AttentionArgs &args, const KernelInfo &kernel);
  /// The checks of args' variant numbers and arrays against a kernel of the variant: one value per parameter
  /// that satisfies the variant's rules (KernelInfo::paramRules; the message names the parameter and the accepted
  /// values), one non-null, 4-byte aligned pointer per input.
  static Status validateVariantArgs(const AttentionArgs &args, const KernelInfo &kernel);
  /// The checks of varlen offsets, on host copies (either may be null: not checked): non-decreasing, inside the
  /// packed rows, no sequence longer than args.maxSeqlenQ/maxSeqlenK. validate() runs it on args' host copies;
  /// forward() on copies of the device offsets when FLASHTILE_CHECK_VARLEN=1.
  static Status validateCuSeqlens(const AttentionArgs &args, const int *cuSeqlensQHost, const int *cuSeqlensKHost);

  /// Reads back the KV cache's device error records (KernelAbi.h: FlashtileKvError) of every context this runtime
  /// ran KV-cache calls in, after synchronizing each context: an error names the call whose kernel met an
  /// out-of-range cache_seqlens, cache_batch_idx or block_table value (its number, kernel, sizes and stream), the
  /// value and the accepted range (the kernels clamped it: that call's output is wrong). The record is then zeroed.
  /// The runtime also reads it where it synchronizes a stream anyway (FLASHTILE_CHECK_KVCACHE=1, a growing workspace),
  /// and fails that call. Not under CUDA graph capture (it synchronizes).
  Status checkErrors();

  KernelCache &cache();

  /// Where the runtime's warnings go (a kernel cache that cannot be written, an entry that is not a regular file):
  /// stderr by default, silenced by FLASHTILE_LOG=off; process-wide (see Log.h). Returns the previous handler.
  static LogHandler setLogHandler(LogHandler handler);

private:
  // The public calls run these inside a guard that turns any exception into an error Status.
  Status loadAotDirectoryUnguarded(const std::string &dir);
  StatusOr<KernelSpec> specForUnguarded(const AttentionArgs &args, const std::string &arch) const;
  StatusOr<std::shared_ptr<const CachedKernel>> findKernelUnguarded(const KernelSpec &spec);
  Status forwardUnguarded(const AttentionArgs &args, CUstream stream);
  Status backwardUnguarded(const BackwardArgs &args, CUstream stream);

  struct Impl;
  std::unique_ptr<Impl> impl;
};

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_RUNTIME_H
