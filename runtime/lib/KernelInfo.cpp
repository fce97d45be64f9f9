// KernelInfo.cpp — the text form of kernel metadata and the checks that keep it well formed.
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/KernelAbi.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <span>

using namespace flashtile;

namespace {

/// Serialization order; also the list of accepted fields.
constexpr std::string_view kFieldNames[] = {
    "entry",  "arch",    "dtype",     "headDim",    "headDimV",   "variant",    "schedule",       "shapeClass",
    "blockM", "blockN",  "threads",   "smemBytes",  "paramNames", "inputNames", "paramRules", "compilerVersion"};
constexpr size_t kNumFields = std::size(kFieldNames);
/// Fields only split-KV kernels have (serialized after the others when combineEntry is set).
constexpr std::string_view kSplitKvFieldNames[] = {"combineEntry",   "combineRows", "combineThreads",
                                                   "packQueryHeads", "appendEntry", "rotary"};
/// Fields only TMA kernels have (persistent kernels are TMA kernels for now: the fa3 schedule's).
constexpr std::string_view kTmaFieldNames[] = {"tensorMaps", "persistent", "tileCounter"};
/// Fields only K/V-step kernels have (the fa1 schedule's).
constexpr std::string_view kStepFieldNames[] = {"kvSteps"};
/// Fields of the dispatch rule a schedule records in its kernels (Schedule::preferredOver).
constexpr std::string_view kDispatchFieldNames[] = {"preferredOver"};

constexpr int kWarpSize = 32;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxIdLength = 200;
// Head dims: what the tile dialect accepts (multiples of 8 up to 512). Tiles: multiples of the 16-row MMA tile, up
// to 1024 rows (a block of 1024 threads); anything else in a manifest is damage, not a kernel.
constexpr int kHeadDimAlign = 8, kMaxHeadDim = 512;
constexpr int kTileAlign = 16, kMaxTile = 1024;
constexpr size_t kMaxNameLength = 128;

std::string joined(std::span<const std::string_view> items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i ? ", " : "") + std::string(items[i]);
  return out;
}

bool contains(std::span<const std::string_view> items, std::string_view item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

bool isIdentifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

Status fieldError(std::string_view field, const std::string &problem) {
  return Status::error("field '" + std::string(field) + "': " + problem);
}

/// 'text', built by appending: GCC 12 reports a false -Wrestrict on `"'" + std::string(text)` here.
std::string quoted(std::string_view text) {
  std::string out = "'";
  out += text;
  out += "'";
  return out;
}

StatusOr<int> parseInt(std::string_view field, std::string_view text) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return fieldError(field, quoted(text) + " is not an integer");
  return value;
}

std::vector<std::string> splitList(std::string_view text) {
  std::vector<std::string> items;
  if (text.empty())
    return items;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    items.emplace_back(trim(text.substr(start, comma - start)));
    if (comma == std::string_view::npos)
      return items;
    start = comma + 1;
  }
}

/// A positive multiple of `align` up to `max`.
Status checkMultiple(std::string_view field, int value, int align, int max) {
  if (value > 0 && value <= max && value % align == 0)
    return Status();
  return fieldError(field, std::to_string(value) + " is not a multiple of " + std::to_string(align) + " in [" +
                               std::to_string(align) + ", " + std::to_string(max) + "]");
}

std::string joinedNames(const std::vector<std::string> &names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i ? "," : "") + names[i];
  return out;
}

/// At most `limit` distinct identifiers.
Status checkNames(std::string_view field, const std::vector<std::string> &names, size_t limit,
                  std::string_view limitName) {
  if (names.size() > limit)
    return fieldError(field, std::to_string(names.size()) + " names; at most " + std::to_string(limit) + " (" +
                                 std::string(limitName) + ") are supported");
  for (size_t i = 0; i < names.size(); ++i) {
    if (!isIdentifier(names[i]) || names[i].size() > kMaxNameLength)
      return fieldError(field, "'" + names[i] + "' is not an identifier of at most " + std::to_string(kMaxNameLength) +
                                   " characters");
    if (std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i)
      return fieldError(field, "'" + names[i] + "' appears twice");
  }
  return Status();
}

} // namespace

bool flashtile::isValidId(std::string_view id) {
  if (id.empty() || id.size() > kMaxIdLength)
    return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == ':' || c == '#' || c == '-';
  });
}

std::string KernelSpec::key() const {
  return "arch=" + arch + ";dtype=" + dtype + ";headDim=" + std::to_string(headDim) +
         ";headDimV=" + std::to_string(headDimV) + ";variant=" + variant + ";schedule=" + schedule +
         ";shapeClass=" + shapeClass + (kvCache ? ";kvCache=1" : "") + (rotary.empty() ? "" : ";rotary=" + rotary);
}

KernelSpec KernelInfo::spec() const {
  return {arch, dtype, headDim, headDimV, variant, schedule, shapeClass, readsKvCache(), rotary};
}

int flashtile::maxSmemBytes(std::string_view arch) {
  constexpr int kKiB = 1024;
  if (arch == "sm_80")
    return 163 * kKiB;
  if (arch == "sm_90a" || arch == "sm_100a")
    return 227 * kKiB;
  return 0;
}

bool flashtile::matches(const KernelInfo &info, const KernelSpec &spec) {
  return info.arch == spec.arch && info.dtype == spec.dtype && info.headDim == spec.headDim &&
         info.headDimV == spec.headDimV && info.variant == spec.variant && info.schedule == spec.schedule &&
         info.shapeClass == spec.shapeClass && info.readsKvCache() == spec.kvCache && info.rotary == spec.rotary;
}

std::string KernelInfo::serialize() const {
  const std::array<std::string, kNumFields> values = {entry,
                                                      arch,
                                                      dtype,
                                                      std::to_string(headDim),
                                                      std::to_string(headDimV),
                                                      variant,
                                                      schedule,
                                                      shapeClass,
                                                      std::to_string(blockM),
                                                      std::to_string(blockN),
                                                      std::to_string(threads),
                                                      std::to_string(smemBytes),
                                                      joinedNames(paramNames),
                                                      joinedNames(inputNames),
                                                      serializeParamRules(paramRules),
                                                      compilerVersion};
  std::string text;
  for (size_t i = 0; i < kNumFields; ++i)
    text += std::string(kFieldNames[i]) + "=" + values[i] + "\n";
  if (!combineEntry.empty())
    text += "combineEntry=" + combineEntry + "\ncombineRows=" + std::to_string(combineRows) +
            "\ncombineThreads=" + std::to_string(combineThreads) + "\n";
  if (packQueryHeads)
    text += "packQueryHeads=1\n";
  if (!appendEntry.empty())
    text += "appendEntry=" + appendEntry + "\n";
  if (!rotary.empty())
    text += "rotary=" + rotary + "\n";
  if (tensorMaps)
    text += "tensorMaps=1\n";
  if (persistent)
    text += "persistent=1\n";
  if (tileCounter)
    text += "tileCounter=1\n";
  if (kvSteps)
    text += "kvSteps=1\n";
  if (!preferredOver.empty())
    text += "preferredOver=" + preferredOver + "\n";
  return text;
}

Status KernelInfo::verify() const {
  if (!isIdentifier(entry))
    return fieldError("entry", "'" + entry + "' is not a C identifier");
  if (!contains(kSupportedArchs, arch))
    return fieldError("arch", "'" + arch + "' is not one of " + joined(kSupportedArchs));
  if (!contains(kSupportedDtypes, dtype))
    return fieldError("dtype", "'" + dtype + "' is not one of " + joined(kSupportedDtypes));
  for (auto [field, value] : {std::pair{"headDim", headDim}, {"headDimV", headDimV}})
    if (Status s = checkMultiple(field, value, kHeadDimAlign, kMaxHeadDim); !s.ok())
      return s;
  for (auto [field, value] : {std::pair{"blockM", blockM}, {"blockN", blockN}})
    if (Status s = checkMultiple(field, value, kTileAlign, kMaxTile); !s.ok())
      return s;
  for (auto [field, value] : {std::pair{"variant", &variant}, {"schedule", &schedule}, {"shapeClass", &shapeClass}})
    if (!isValidId(*value))
      return fieldError(field, "'" + *value + "' is not a non-empty id of at most " + std::to_string(kMaxIdLength) +
                                   " characters from [A-Za-z0-9_.:#-]");
  if (threads < kWarpSize || threads > kMaxThreadsPerBlock || threads % kWarpSize != 0)
    return fieldError("threads", std::to_string(threads) + " is not a multiple of " + std::to_string(kWarpSize) +
                                     " in [" + std::to_string(kWarpSize) + ", " + std::to_string(kMaxThreadsPerBlock) +
                                     "]");
  if (smemBytes < 0 || smemBytes > maxSmemBytes(arch))
    return fieldError("smemBytes", std::to_string(smemBytes) + " is not in [0, " + std::to_string(maxSmemBytes(arch)) +
                                       "] (the most a block may use on " + arch + ")");
  if (Status s = checkNames("paramNames", paramNames, FLASHTILE_MAX_VARIANT_PARAMS, "FLASHTILE_MAX_VARIANT_PARAMS");
      !s.ok())
    return s;
  if (Status s = checkNames("inputNames", inputNames, FLASHTILE_MAX_VARIANT_INPUTS, "FLASHTILE_MAX_VARIANT_INPUTS");
      !s.ok())
    return s;
  for (const ParamRule &rule : paramRules)
    if (Status s = verifyParamRule(rule, paramNames); !s.ok())
      return fieldError("paramRules", s.message());
  if (tensorMaps && (arch != "sm_90a" || !combineEntry.empty()))
    return fieldError("tensorMaps", "is set on a kernel for " + arch +
                                        (combineEntry.empty() ? "" : " with a combine kernel") +
                                        "; TMA kernels are sm_90a kernels without split-KV");
  if (!preferredOver.empty() && (!isIdentifier(preferredOver) || preferredOver.size() > kMaxNameLength ||
                                 preferredOver == schedule))
    return fieldError("preferredOver", "'" + preferredOver + "' is not a schedule name other than this kernel's ('" +
                                           schedule + "')");
  if (tileCounter && !persistent)
    return fieldError("tileCounter", "is set on a kernel that is not persistent; only persistent blocks take tiles "
                                     "from a counter");
  if (persistent && !combineEntry.empty())
    return fieldError("persistent", "is set on a kernel with a combine kernel; split-KV kernels are not persistent");
  if (kvSteps && (!combineEntry.empty() || persistent || tensorMaps))
    return fieldError("kvSteps", "is set on a split-KV, persistent or TMA kernel; K/V-step kernels are none of these");
  if (packQueryHeads && combineEntry.empty())
    return fieldError("packQueryHeads", "is set on a kernel without combineEntry; only split-KV kernels pack");
  if (combineEntry.empty()) {
    if (combineRows != 0 || combineThreads != 0)
      return fieldError("combineEntry", "missing, but combineRows or combineThreads is set");
  } else {
    if (!isIdentifier(combineEntry) || combineEntry == entry)
      return fieldError("combineEntry", "'" + combineEntry + "' is not a C identifier other than the entry");
    if (combineRows < 1 || combineRows > kMaxThreadsPerBlock)
      return fieldError("combineRows", std::to_string(combineRows) + " is not in [1, " +
                                           std::to_string(kMaxThreadsPerBlock) + "]");
    if (combineThreads < kWarpSize || combineThreads % kWarpSize != 0 || combineThreads > kMaxThreadsPerBlock)
      return fieldError("combineThreads", std::to_string(combineThreads) + " is not a multiple of 32 in [32, " +
                                              std::to_string(kMaxThreadsPerBlock) + "]");
  }
  if (!appendEntry.empty() &&
      (combineEntry.empty() || !isIdentifier(appendEntry) || appendEntry == entry || appendEntry == combineEntry))
    return fieldError("appendEntry", "'" + appendEntry + "' is not a C identifier other than the entry and the "
                                     "combine entry of a split-KV kernel (only split-KV kernels read KV caches)");
  if (!rotary.empty() && ((rotary != kRotaryHalves && rotary != kRotaryInterleaved) || appendEntry.empty()))
    return fieldError("rotary", "'" + rotary + "' is not " + std::string(kRotaryHalves) + " or " +
                                    std::string(kRotaryInterleaved) + " on a KV-cache kernel (one with appendEntry)");
  if (compilerVersion.empty() || !std::all_of(compilerVersion.begin(), compilerVersion.end(),
                                              [](char c) { return std::isgraph(static_cast<unsigned char>(c)); }))
    return fieldError("compilerVersion", "'" + compilerVersion + "' is empty or contains spaces");
  return Status();
}

StatusOr<KernelInfo> KernelInfo::parse(std::string_view text) {
  std::map<std::string, std::string, std::less<>> fields;
  int lineNumber = 0;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    std::string_view line = trim(text.substr(0, newline));
    text = newline == std::string_view::npos ? std::string_view() : text.substr(newline + 1);
    ++lineNumber;
    if (line.empty() || line.front() == '#')
      continue;
    size_t equals = line.find('=');
    if (equals == std::string_view::npos)
      return Status::error("line " + std::to_string(lineNumber) + ": expected 'field=value', got '" +
                           std::string(line) + "'");
    std::string_view name = trim(line.substr(0, equals));
    if (!contains(kFieldNames, name) && !contains(kSplitKvFieldNames, name) && !contains(kTmaFieldNames, name) &&
        !contains(kStepFieldNames, name) && !contains(kDispatchFieldNames, name))
      return Status::error("line " + std::to_string(lineNumber) + ": unknown field '" + std::string(name) +
                           "' (accepted: " + joined(kFieldNames) + "; split-KV kernels: " + joined(kSplitKvFieldNames) +
                           "; TMA kernels: " + joined(kTmaFieldNames) + "; K/V-step kernels: " +
                           joined(kStepFieldNames) + "; dispatch: " + joined(kDispatchFieldNames) + ")");
    if (!fields.emplace(name, trim(line.substr(equals + 1))).second)
      return fieldError(name, "appears twice (line " + std::to_string(lineNumber) + ")");
  }
  for (size_t i = 0; i < kNumFields; ++i)
    if (!fields.count(kFieldNames[i]))
      return fieldError(kFieldNames[i], "missing");

  KernelInfo info;
  info.entry = fields["entry"];
  info.arch = fields["arch"];
  info.dtype = fields["dtype"];
  info.variant = fields["variant"];
  info.schedule = fields["schedule"];
  info.shapeClass = fields["shapeClass"];
  info.paramNames = splitList(fields["paramNames"]);
  info.inputNames = splitList(fields["inputNames"]);
  info.compilerVersion = fields["compilerVersion"];
  if (auto it = fields.find("combineEntry"); it != fields.end())
    info.combineEntry = it->second;
  if (auto it = fields.find("appendEntry"); it != fields.end())
    info.appendEntry = it->second;
  if (auto it = fields.find("rotary"); it != fields.end())
    info.rotary = it->second;
  if (auto it = fields.find("preferredOver"); it != fields.end())
    info.preferredOver = it->second;
  if (auto it = fields.find("packQueryHeads"); it != fields.end()) {
    if (it->second != "0" && it->second != "1")
      return fieldError("packQueryHeads", quoted(it->second) + " is not 0 or 1");
    info.packQueryHeads = it->second == "1";
  }
  for (auto [field, flag] : {std::pair{"tensorMaps", &info.tensorMaps},
                             {"persistent", &info.persistent},
                             {"tileCounter", &info.tileCounter},
                             {"kvSteps", &info.kvSteps}})
    if (auto it = fields.find(field); it != fields.end()) {
      if (it->second != "0" && it->second != "1")
        return fieldError(field, quoted(it->second) + " is not 0 or 1");
      *flag = it->second == "1";
    }
  for (auto [field, target] : {std::pair{"combineRows", &info.combineRows}, {"combineThreads", &info.combineThreads}})
    if (auto it = fields.find(field); it != fields.end()) {
      StatusOr<int> value = parseInt(field, it->second);
      if (!value.ok())
        return value.status();
      *target = *value;
    }
  StatusOr<std::vector<ParamRule>> rules = parseParamRules(fields["paramRules"]);
  if (!rules.ok())
    return fieldError("paramRules", rules.status().message());
  info.paramRules = std::move(*rules);
  for (auto [field, target] : {std::pair{"headDim", &info.headDim},
                               {"headDimV", &info.headDimV},
                               {"blockM", &info.blockM},
                               {"blockN", &info.blockN},
                               {"threads", &info.threads},
                               {"smemBytes", &info.smemBytes}}) {
    StatusOr<int> value = parseInt(field, fields[field]);
    if (!value.ok())
      return value.status();
    *target = *value;
  }
  if (Status s = info.verify(); !s.ok())
    return s;
  return info;
}
