// KernelInfo.cpp — the text form of kernel metadata and the checks that keep it well formed.
#include "flashtile/runtime/KernelInfo.h"
#include "flashtile/runtime/KernelAbi.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <optional>
#include <span>

using namespace flashtile;

namespace {

/// Serialization order (after `format`); also the list of required fields.
constexpr std::string_view kFieldNames[] = {"entry",      "arch",       "dtype",      "headDim",         "headDimV",
                                            "variant",    "schedule",   "shapeClass", "blockM",          "blockN",
                                            "paramNames", "inputNames", "paramRules", "compilerVersion", "kind"};
constexpr size_t kNumFields = std::size(kFieldNames);
/// Fields present only when set.
constexpr std::string_view kOptionalFieldNames[] = {"kvCache",        "rotary",       "defaultFor", "preferredOver",
                                                    "neverRunOnArch", "checkAgainst", "positions",  "kvDtype"};
constexpr std::string_view kFormatField = "format";

constexpr size_t kMaxIdLength = 200;
// Head dims: what the tile dialect accepts (multiples of 8 up to 512). Tiles: multiples of the 16-row MMA tile, up
// to 1024 rows (a block of 1024 threads); anything else in a manifest is damage, not a kernel.
constexpr int kHeadDimAlign = 8, kMaxHeadDim = 512;
constexpr int kTileAlign = 16, kMaxTile = 1024;
constexpr size_t kMaxNameLength = 128;
/// More schedules than a dispatch rule could name: a longer list is damage.
constexpr size_t kMaxPreferredOver = 16;

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
         ";shapeClass=" + shapeClass + (kvCache ? ";kvCache=1" : "") + (rotary.empty() ? "" : ";rotary=" + rotary) +
         (kind == kForwardKind ? "" : ";kind=" + kind) + (positions ? ";positions=1" : "") +
         (kvDtype.empty() ? "" : ";kvDtype=" + kvDtype);
}

KernelSpec KernelInfo::spec() const {
  return {arch, dtype, headDim, headDimV, variant, schedule, shapeClass, kvCache, rotary, kind, positions, kvDtype};
}

std::string flashtile::supportedArchsText() { return joined(kSupportedArchs); }

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
         info.shapeClass == spec.shapeClass && info.kvCache == spec.kvCache && info.rotary == spec.rotary &&
         info.kind == spec.kind && info.positions == spec.positions && info.kvDtype == spec.kvDtype;
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
                                                      joinedNames(paramNames),
                                                      joinedNames(inputNames),
                                                      serializeParamRules(paramRules),
                                                      compilerVersion,
                                                      kind};
  std::string text = std::string(kFormatField) + "=" + std::to_string(kManifestFormat) + "\n";
  for (size_t i = 0; i < kNumFields; ++i)
    text += std::string(kFieldNames[i]) + "=" + values[i] + "\n";
  if (kvCache)
    text += "kvCache=1\n";
  if (!rotary.empty())
    text += "rotary=" + rotary + "\n";
  if (defaultFor != DefaultCalls::None)
    text += "defaultFor=" + std::string(defaultCallsName(defaultFor)) + "\n";
  if (!preferredOver.empty())
    text += "preferredOver=" + joinedNames(preferredOver) + "\n";
  if (neverRunOnArch)
    text += "neverRunOnArch=1\n";
  if (!checkAgainst.empty())
    text += "checkAgainst=" + checkAgainst + "\n";
  if (positions)
    text += "positions=1\n";
  if (!kvDtype.empty())
    text += "kvDtype=" + kvDtype + "\n";
  return text + plan.serialize();
}

Status KernelInfo::verify() const {
  if (!isIdentifier(entry))
    return fieldError("entry", "'" + entry + "' is not a C identifier");
  if (!contains(kProgramKinds, kind))
    return fieldError("kind", "'" + kind + "' is not one of " + joined(kProgramKinds));
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
  if (Status s = checkNames("paramNames", paramNames, FLASHTILE_MAX_VARIANT_PARAMS, "FLASHTILE_MAX_VARIANT_PARAMS");
      !s.ok())
    return s;
  if (Status s = checkNames("inputNames", inputNames, FLASHTILE_MAX_VARIANT_INPUTS, "FLASHTILE_MAX_VARIANT_INPUTS");
      !s.ok())
    return s;
  for (const ParamRule &rule : paramRules)
    if (Status s = verifyParamRule(rule, paramNames); !s.ok())
      return fieldError("paramRules", s.message());
  if (Status s = checkNames("preferredOver", preferredOver, kMaxPreferredOver, "kMaxPreferredOver"); !s.ok())
    return s;
  if (std::find(preferredOver.begin(), preferredOver.end(), schedule) != preferredOver.end())
    return fieldError("preferredOver", "'" + schedule +
                                           "' is this kernel's own schedule; a rule prefers it over "
                                           "other schedules");
  if (!rotary.empty() && ((rotary != kRotaryHalves && rotary != kRotaryInterleaved) || !kvCache))
    return fieldError("rotary", "'" + rotary + "' is not " + std::string(kRotaryHalves) + " or " +
                                    std::string(kRotaryInterleaved) + " on a KV-cache kernel (kvCache=1)");
  if (!kvDtype.empty() && (kvDtype != "e4m3" || !kvCache || (dtype != "bf16" && dtype != "f16")))
    return fieldError("kvDtype", quoted(kvDtype) + " is not e4m3 on a bf16 or f16 KV-cache kernel (kvCache=1); a "
                                                   "kernel whose K and V are of its dtype omits the field");
  if (neverRunOnArch != !checkAgainst.empty())
    return fieldError(neverRunOnArch ? "checkAgainst" : "neverRunOnArch",
                      "neverRunOnArch=1 and checkAgainst=<a proven schedule> come together (a kernel never run on its "
                      "arch is checked against a proven schedule's kernel before its first use)");
  if (neverRunOnArch && (!isValidId(checkAgainst) || checkAgainst == schedule))
    return fieldError("checkAgainst",
                      quoted(checkAgainst) + " is not a schedule id other than the kernel's own ('" + schedule + "')");
  if (neverRunOnArch && kvCache)
    return fieldError("neverRunOnArch", "a KV-cache kernel cannot be self-checked (the check runs a dense call)");
  if (Status s = plan.verify(maxSmemBytes(arch)); !s.ok())
    return s;
  if (!plan.launchOf(entry))
    return fieldError("entry", "'" + entry + "' is not a kernel the launch plan launches (the module's name is its "
                                             "main kernel's)");
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
    if (!fields.emplace(name, trim(line.substr(equals + 1))).second)
      return fieldError(name, "appears twice (line " + std::to_string(lineNumber) + ")");
  }
  // The version first: a manifest of another format has other fields, and the version is what to tell.
  // Format 1 had no `format` field and a `threads` field in every manifest.
  auto format = fields.find(kFormatField);
  const bool formatOne = format == fields.end() && fields.count("threads");
  if (formatOne || (format != fields.end() && format->second != std::to_string(kManifestFormat)))
    return Status::error("manifest format " + (formatOne ? std::string("1") : format->second) +
                         " (written before launch plans, or by another version); this runtime reads format " +
                         std::to_string(kManifestFormat) + ": rebuild the kernels with this version's `flashtile aot`");
  for (size_t i = 0; i < kNumFields; ++i)
    if (!fields.count(kFieldNames[i]))
      return fieldError(kFieldNames[i], "missing");
  if (format == fields.end())
    return fieldError(kFormatField, "missing");
  fields.erase(format);

  KernelInfo info;
  auto take = [&](std::string_view name) {
    auto it = fields.find(name);
    if (it == fields.end())
      return std::string();
    std::string value = std::move(it->second);
    fields.erase(it);
    return value;
  };
  info.kind = take("kind");
  info.entry = take("entry");
  info.arch = take("arch");
  info.dtype = take("dtype");
  info.variant = take("variant");
  info.schedule = take("schedule");
  info.shapeClass = take("shapeClass");
  info.paramNames = splitList(take("paramNames"));
  info.inputNames = splitList(take("inputNames"));
  info.compilerVersion = take("compilerVersion");
  info.rotary = take("rotary");
  info.preferredOver = splitList(take("preferredOver"));
  if (fields.count("defaultFor")) {
    std::string calls = take("defaultFor");
    std::optional<DefaultCalls> parsed = parseDefaultCalls(calls);
    if (!parsed || *parsed == DefaultCalls::None)
      return fieldError("defaultFor", quoted(calls) + " is not all or decode-sized");
    info.defaultFor = *parsed;
  }
  info.checkAgainst = take("checkAgainst");
  if (fields.count("neverRunOnArch")) {
    std::string flag = take("neverRunOnArch");
    if (flag != "1")
      return fieldError("neverRunOnArch", quoted(flag) + " is not 1 (a proven kernel omits the field)");
    info.neverRunOnArch = true;
  }
  if (fields.count("positions")) {
    std::string flag = take("positions");
    if (flag != "1")
      return fieldError("positions", quoted(flag) + " is not 1 (a kernel without position offsets omits the field)");
    info.positions = true;
  }
  if (fields.count("kvDtype"))
    info.kvDtype = take("kvDtype");
  if (fields.count("kvCache")) {
    std::string flag = take("kvCache");
    if (flag != "0" && flag != "1")
      return fieldError("kvCache", quoted(flag) + " is not 0 or 1");
    info.kvCache = flag == "1";
  }
  std::string ruleText = take("paramRules");
  for (auto [field, target] : {std::pair{"headDim", &info.headDim},
                               {"headDimV", &info.headDimV},
                               {"blockM", &info.blockM},
                               {"blockN", &info.blockN}}) {
    StatusOr<int> value = parseInt(field, take(field));
    if (!value.ok())
      return value.status();
    *target = *value;
  }
  StatusOr<LaunchPlan> plan = LaunchPlan::parse(fields);
  if (!plan.ok())
    return plan.status();
  info.plan = std::move(*plan);
  if (!fields.empty())
    return Status::error("unknown field '" + fields.begin()->first + "' (accepted: " + joined(kFieldNames) + ", " +
                         joined(kOptionalFieldNames) +
                         ", and the launch plan's launch.N.*, workspace.N.*, set.*, splits.*)");
  StatusOr<std::vector<ParamRule>> rules = parseParamRules(ruleText);
  if (!rules.ok())
    return fieldError("paramRules", rules.status().message());
  info.paramRules = std::move(*rules);
  if (Status s = info.verify(); !s.ok())
    return s;
  return info;
}
