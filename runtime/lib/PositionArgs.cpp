// PositionArgs.cpp — checking the positions of a call that is a block of a larger problem (AttentionArgs::positions)
// and turning them into the kernels' FlashtilePositions; nothing here touches the GPU.
#include "PositionsInternal.h"

#include <cstdint>
#include <string>
#include <tuple>

using namespace flashtile;

namespace {

std::string text(long long value) { return std::to_string(value); }

Status positionsError(const std::string &message) { return Status::error("positions: " + message); }

/// The call's heads inside the larger problem's, in whole groups of query heads a K/V head.
Status checkHeads(const AttentionArgs &args, const BlockPositions &p) {
  for (auto [name, value] : {std::pair<std::string_view, int>{"headOffset", p.headOffset},
                             {"headsQGlobal", p.headsQGlobal},
                             {"headsKvGlobal", p.headsKvGlobal}})
    if (value < 0)
      return positionsError(std::string(name) + " is " + text(value) + "; it must be >= 0 (heads 0: the call's)");
  const int group = args.headsQ / args.headsKv;
  const long long headsQ = p.headsQGlobal ? p.headsQGlobal : args.headsQ;
  const long long headsKv = p.headsKvGlobal ? p.headsKvGlobal : args.headsKv;
  if (headsQ % headsKv != 0 || headsQ / headsKv != group || p.headOffset % group != 0 ||
      p.headOffset + static_cast<long long>(args.headsQ) > headsQ)
    return positionsError("headOffset (" + text(p.headOffset) + "), headsQGlobal (" + text(headsQ) +
                          ") and headsKvGlobal (" + text(headsKv) + ") must place the call's " + text(args.headsQ) +
                          " query heads inside the larger problem's, in whole groups of " + text(group) +
                          " query heads a K/V head: headsQGlobal / headsKvGlobal = " + text(group) +
                          ", headOffset a multiple of " + text(group) +
                          ", headOffset + headsQ <= headsQGlobal (0: "
                          "the call's headsQ / headsKv)");
  return Status();
}

/// A dense call's rows (keys): [offset, offset + length) inside the larger problem's `global` (0: length).
Status checkDenseRows(std::string_view offsetName, int offset, std::string_view lengthName, int length,
                      std::string_view globalName, int global) {
  if (offset < 0)
    return positionsError(std::string(offsetName) + " is " + text(offset) + "; it must be >= 0");
  if (global < 0)
    return positionsError(std::string(globalName) + " is " + text(global) +
                          "; it must be >= 0 (0: " + std::string(lengthName) + ", the call's own)");
  const long long total = global ? global : length;
  if (static_cast<long long>(offset) + length > total)
    return positionsError(std::string(offsetName) + " + " + std::string(lengthName) + " = " + text(offset) + " + " +
                          text(length) + " is past the larger problem's " + std::string(globalName) + " = " +
                          text(total) + (global ? "" : " (0: the call's " + std::string(lengthName) + ")") +
                          "; accepted: " + std::string(offsetName) + " + " + std::string(lengthName) +
                          " <= " + std::string(globalName));
  return Status();
}

/// Host copies of a varlen call's positions: each array's values, and each sequence's rows inside the larger
/// problem's sequence where the call's own host offsets say how long it is.
Status checkVarlenHostCopies(const AttentionArgs &args, const BlockPositions &p) {
  for (auto [name, cu] : {std::pair<std::string_view, const int *>{"cuSeqlensQGlobalHost", p.cuSeqlensQGlobalHost},
                          {"cuSeqlensKGlobalHost", p.cuSeqlensKGlobalHost}}) {
    if (!cu)
      continue;
    if (cu[0] != 0)
      return positionsError(std::string(name) + "[0] = " + text(cu[0]) + "; the larger problem's offsets start at 0");
    for (int b = 0; b < args.batch; ++b)
      if (cu[b + 1] < cu[b])
        return positionsError(std::string(name) + " is not non-decreasing: [" + text(b + 1) + "] = " + text(cu[b + 1]) +
                              " < [" + text(b) + "] = " + text(cu[b]));
  }
  for (auto [name, offsets] :
       {std::pair<std::string_view, const int *>{"qOffsetsHost", p.qOffsetsHost}, {"kOffsetsHost", p.kOffsetsHost}})
    for (int b = 0; offsets && b < args.batch; ++b)
      if (offsets[b] < 0)
        return positionsError(std::string(name) + "[" + text(b) + "] = " + text(offsets[b]) + "; offsets must be >= 0");
  const std::tuple<std::string_view, const int *, const int *, const int *> sides[] = {
      {"qOffsets", p.qOffsetsHost, args.cuSeqlensQHost, p.cuSeqlensQGlobalHost},
      {"kOffsets", p.kOffsetsHost, args.cuSeqlensKHost, p.cuSeqlensKGlobalHost}};
  for (auto [name, offsets, own, global] : sides) {
    if (!own || (!offsets && !global))
      continue; // without the call's own lengths, or with neither offsets nor global lengths, nothing to compare
    for (int b = 0; b < args.batch; ++b) {
      const long long length = own[b + 1] - own[b];
      const long long offset = offsets ? offsets[b] : 0;
      const long long total = global ? global[b + 1] - global[b] : length;
      if (offset + length > total)
        return positionsError(std::string(name) + ": sequence " + text(b) + "'s rows [" + text(offset) + ", " +
                              text(offset + length) + ") are not inside the larger problem's sequence of " +
                              text(total) + " rows (" +
                              (global ? std::string(name == "qOffsets" ? "cuSeqlensQGlobal" : "cuSeqlensKGlobal")
                                      : std::string("the call's own length: no global offsets")) +
                              "); accepted: offset + length <= the larger problem's length");
    }
  }
  return Status();
}

} // namespace

Status detail::checkPositionArgs(const AttentionArgs &args) {
  if (!args.positions)
    return Status();
  const BlockPositions &p = *args.positions;
  if (args.kvCache.enabled())
    return positionsError("set on a KV-cache call; KV-cache kernels take no position offsets (a block of a split "
                          "sequence runs a plain forward or backward call: unset kvCache or positions)");
  if (args.dtype == DType::E4M3)
    return positionsError("set on an e4m3 call; e4m3 kernels take no position offsets (a block of a split sequence "
                          "runs in bf16 or f16)");
  if (Status s = checkHeads(args, p); !s.ok())
    return s;
  const std::pair<std::string_view, const int *> arrays[] = {{"qOffsets", p.qOffsets},
                                                             {"kOffsets", p.kOffsets},
                                                             {"cuSeqlensQGlobal", p.cuSeqlensQGlobal},
                                                             {"cuSeqlensKGlobal", p.cuSeqlensKGlobal},
                                                             {"qOffsetsHost", p.qOffsetsHost},
                                                             {"kOffsetsHost", p.kOffsetsHost},
                                                             {"cuSeqlensQGlobalHost", p.cuSeqlensQGlobalHost},
                                                             {"cuSeqlensKGlobalHost", p.cuSeqlensKGlobalHost}};
  if (!args.isVarlen()) {
    for (auto [name, pointer] : arrays)
      if (pointer)
        return positionsError(std::string(name) +
                              " is set on a dense call; qOffsets, kOffsets, cuSeqlensQGlobal, "
                              "cuSeqlensKGlobal and their host copies are for varlen calls (cuSeqlensQ set); dense "
                              "calls use qOffset, kOffset, seqlenQGlobal and seqlenKGlobal");
    if (Status s = checkDenseRows("qOffset", p.qOffset, "seqlenQ", args.seqlenQ, "seqlenQGlobal", p.seqlenQGlobal);
        !s.ok())
      return s;
    return checkDenseRows("kOffset", p.kOffset, "seqlenK", args.seqlenK, "seqlenKGlobal", p.seqlenKGlobal);
  }
  for (auto [name, value] : {std::pair<std::string_view, int>{"qOffset", p.qOffset},
                             {"kOffset", p.kOffset},
                             {"seqlenQGlobal", p.seqlenQGlobal},
                             {"seqlenKGlobal", p.seqlenKGlobal}})
    if (value != 0)
      return positionsError(std::string(name) + " is " + text(value) +
                            " on a varlen call; varlen calls place each "
                            "sequence with qOffsets, kOffsets, cuSeqlensQGlobal and cuSeqlensKGlobal (device arrays), "
                            "and leave qOffset, kOffset, seqlenQGlobal and seqlenKGlobal 0");
  for (auto [name, pointer] : arrays)
    if (reinterpret_cast<uintptr_t>(pointer) % alignof(int) != 0)
      return positionsError(std::string(name) + " is not 4-byte aligned; it points to int32 values");
  for (size_t i = 0; i < 4; ++i)
    if (arrays[i + 4].second && !arrays[i].second)
      return positionsError(std::string(arrays[i + 4].first) + " is set but " + std::string(arrays[i].first) +
                            " (the device array the kernels read) is null; host copies only check a device array");
  return checkVarlenHostCopies(args, p);
}

Status detail::checkPositionsLaunch(const AttentionArgs &args, const KernelInfo &kernel) {
  const bool wanted = args.positions.has_value();
  if (kernel.positions == wanted)
    return Status();
  return Status::error("kernel " + kernel.entry + " (schedule " + kernel.schedule + ") is compiled " +
                       (kernel.positions ? "with" : "without") + " position offsets but the call " +
                       (wanted ? "is a block of a larger problem (positions set)" : "has no positions") +
                       "; a call runs a module compiled as it is (KernelSpec::positions, `flashtile compile "
                       "--position-offsets`)");
}

FlashtilePositions detail::positionsFor(const AttentionArgs &args) {
  FlashtilePositions out{};
  if (!args.positions)
    return out;
  const BlockPositions &p = *args.positions;
  out.qOffset = p.qOffset;
  out.kOffset = p.kOffset;
  out.seqlenQGlobal = p.seqlenQGlobal;
  out.seqlenKGlobal = p.seqlenKGlobal;
  out.qOffsets = p.qOffsets;
  out.kOffsets = p.kOffsets;
  out.cuSeqlensQGlobal = p.cuSeqlensQGlobal;
  out.cuSeqlensKGlobal = p.cuSeqlensKGlobal;
  out.headOffset = p.headOffset;
  out.headsQGlobal = p.headsQGlobal;
  out.headsKvGlobal = p.headsKvGlobal;
  return out;
}
