// LaunchPlan.h — how one call of a compiled module is launched, as data the compiler writes and the runtime runs.
//
// A compiled unit is a module of kernels in one cubin (the attention kernel, and where its schedule needs them a
// combine kernel, a KV-cache append kernel, ...). Its plan lists the launches of a call in order: each one's
// entry, grid rule, block, cluster, shared memory, the tensor maps it takes, whether it runs at all or several
// times, and whether it may start early by programmatic dependent launch; the workspaces the call needs (size
// rule, zeroed or not, the kernel-parameter fields that point into them); the kernel-parameter fields the runtime
// sets per call; and the split-count rule of split-KV modules. The runtime evaluates the rules over the call's
// sizes and launches: it never asks which schedule wrote the plan.
//
// Rules are integer expressions over the call's sizes (PlanExpr): the symbols of kPlanSymbols, integer literals,
// + - * / (floor division of non-negative values), comparisons (> >= == != < <=, 1 or 0), and cdiv(a, b),
// min(a, b), max(a, b).
#ifndef FLASHTILE_RUNTIME_LAUNCHPLAN_H
#define FLASHTILE_RUNTIME_LAUNCHPLAN_H

#include "flashtile/runtime/Status.h"

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flashtile {

/// The sizes a plan's rules read. Query and key rows are those of the longest sequence (varlen: max_seqlen).
struct PlanSymbols {
  long long batch = 0, headsQ = 0, headsKv = 0;
  long long rows = 0;    // query rows of the longest sequence
  long long keys = 0;    // keys of the longest sequence
  long long newRows = 0; // keys a KV-cache call appends (seqlen_new), 0 otherwise
  long long headDim = 0, headDimV = 0;
  long long lseRows = 0; // rows of LSE: batch x heads_q x seqlen_q dense, heads_q x total_q varlen
  long long sms = 0;     // streaming multiprocessors of the device (read only when a rule names `sms`)
  long long splits = 1;  // the call's split count (split-KV modules; 1 otherwise)
  long long keyRows = 0; // rows of K/V: batch x seqlen_k dense, total_k varlen
  long long deterministic = 0; // backward calls asking for a fixed accumulation order: 1, else 0
};

/// The names rules spell the symbols with, in PlanSymbols' order.
inline constexpr std::array<std::string_view, 12> kPlanSymbols = {
    "batch",      "heads_q",  "heads_kv", "rows", "keys",     "new_rows",
    "head_dim", "head_dim_v", "lse_rows", "sms",  "key_rows", "deterministic"};
/// The split count, a symbol of every rule but the split rule's own.
inline constexpr std::string_view kSplitsSymbol = "splits";

/// An integer rule over PlanSymbols, parsed from its text and printed back the same.
class PlanExpr {
public:
  PlanExpr();
  ~PlanExpr();
  PlanExpr(const PlanExpr &);
  PlanExpr &operator=(const PlanExpr &);
  /// A literal.
  static PlanExpr constant(long long value);
  /// Parses `text`; an error names the position and what was expected. Nesting is bounded (kMaxDepth).
  static StatusOr<PlanExpr> parse(std::string_view text);
  /// The value for `symbols`; an error for a division by zero or a value past 2^62 in magnitude.
  StatusOr<long long> eval(const PlanSymbols &symbols) const;
  /// Whether the rule reads `symbol` (one of kPlanSymbols or kSplitsSymbol).
  bool reads(std::string_view symbol) const;
  const std::string &text() const { return source; }

  static constexpr int kMaxDepth = 32;
  struct Node;

private:
  std::string source;
  std::shared_ptr<const Node> root;
};

/// A TMA descriptor a launch takes: one attention tensor (q, k, v), `boxRows` rows x the whole head dim a copy,
/// swizzled over `swizzleBytes`.
struct PlanTensorMap {
  std::string tensor;
  int boxRows = 0;
  int swizzleBytes = 0;
};

/// One launch of a call.
struct PlanLaunch {
  std::string entry;                   // the kernel's symbol in the module's cubin
  std::array<PlanExpr, 3> grid;        // blocks in x, y, z
  int threads = 0;                     // threads per block (x)
  std::array<int, 3> cluster{1, 1, 1}; // thread-block cluster dims (1, 1, 1: none)
  int smemBytes = 0;                   // dynamic shared memory per block
  std::optional<PlanExpr> when;        // launched only where this is non-zero
  std::optional<PlanExpr> repeat;      // launched this many times in order, `repeatField` = 0, 1, ...
  std::string repeatField;             // an int field of the kernel parameters (kPlanIntFields)
  std::vector<PlanTensorMap> tensorMaps; // passed as the kernel's second parameter, in this order
  bool dependent = false; // programmatic dependent launch: may start while the previous launch finishes
};

/// Scratch memory a call needs on its stream.
struct PlanWorkspace {
  std::string name;             // for messages
  PlanExpr bytes;               // size
  std::optional<PlanExpr> when; // needed only where this is non-zero
  bool zeroed = false;          // set to zero on the stream before the first launch (a multiple of 4 bytes)
  std::vector<std::pair<std::string, PlanExpr>> bind; // pointer fields of the kernel parameters, byte offsets
  /// The device error record of KV-cache kernels (KernelAbi.h, FlashtileKvError): not laid out per call but kept by
  /// the runtime, one per context, zeroed when allocated and again only when the runtime reads it (at a call that
  /// synchronizes anyway, or Runtime::checkErrors). Binds kvErrors at 0, is sizeof(FlashtileKvError) bytes, has no
  /// `when` and is not zeroed per call; the runtime sets kvCall with it.
  bool errorRecord = false;
};

/// The split count of split-KV modules: the caller's numSplits, else the runtime's heuristic over the blocks one
/// split would launch and the key tiles there are to split (occupancy of launch `occupancyOf`).
struct PlanSplits {
  PlanExpr blocks;
  PlanExpr kvTiles;
  int occupancyOf = 0; // index of the launch whose blocks the heuristic counts per SM
};

struct LaunchPlan {
  std::vector<PlanLaunch> launches;
  std::vector<PlanWorkspace> workspaces;
  std::vector<std::pair<std::string, PlanExpr>> set; // int fields of the kernel parameters, per call
  std::optional<PlanSplits> splits;

  /// `prefix`-keyed `key=value` lines (KernelInfo's text form).
  std::string serialize() const;
  /// Reads the `launch.`, `workspace.`, `set.` and `splits.` fields of a manifest; `fields` are consumed.
  static StatusOr<LaunchPlan> parse(std::map<std::string, std::string, std::less<>> &fields);
  /// Checks what parse() accepts: at least one launch, entries that are C identifiers, block and cluster sizes,
  /// shared memory within `maxSmem`, known fields, tensor maps the runtime encodes.
  Status verify(int maxSmem) const;
  /// The launch of `entry`, or null.
  const PlanLaunch *launchOf(std::string_view entry) const;
  /// Whether any rule reads `symbol`.
  bool reads(std::string_view symbol) const;
  /// One line a launch, for generated sources' comments and `flashtile info`.
  std::string describe() const;
};

/// Kernel-parameter fields (KernelAbi.h) a plan may set: ints, and pointers into workspaces.
inline constexpr std::array<std::string_view, 5> kPlanIntFields = {"qTiles", "numSplits", "kvStep", "accumSplitStride",
                                                                   "kvTiles"};
/// "vTransposed" is a field of FlashtileFp8Params (Fp8Abi.h), the last parameter of e4m3 modules' kernels.
inline constexpr std::array<std::string_view, 14> kPlanPointerFields = {
    "oAccum",  "lseAccum", "stateAcc", "stateMax", "stateSum",  "tileCounter",      // forward
    "delta",   "dqAccum",  "dkAccum",  "dvAccum",  "semaphores", "inputGradPartials", // backward
    "kvErrors",                                                                    // the KV cache's error record
    "vTransposed"};                                                                // e4m3: the Vᵀ images

} // namespace flashtile

#endif // FLASHTILE_RUNTIME_LAUNCHPLAN_H
