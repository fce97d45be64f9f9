//===- TmaRing.cpp - the text of TMA rings behind full/empty mbarriers ----===//
#include "codegen/common/TmaRing.h"
#include "codegen/common/Concat.h"

namespace flashtile::codegen {

const char *operandName(Operand operand) {
  switch (operand) {
  case Operand::Q:
    return "Q";
  case Operand::K:
    return "K";
  case Operand::V:
    return "V";
  }
  return "?";
}

std::string ringHolds(const BarrierInfo &barrier) {
  return barrier.workUnit ? std::string("the work unit") : std::string(operandName(barrier.operand));
}

std::string ringSlot(const std::string &position, int slots) {
  return slots == 1 ? std::string("0") : cat("(", position, ") % ", slots);
}

void printRingTiles(CudaWriter &w, const std::string &ns, int stages, int elementBytes) {
  const std::string times = elementBytes == 1 ? std::string() : cat(" * ", elementBytes);
  w.line(cat("constexpr int kStages = ", stages, ";"));
  w.line(cat("constexpr unsigned kQTileBytes = kBlockM * kHeadDim", times, ", kKTileBytes = kBlockN * kHeadDim", times,
             ","));
  w.line(cat("                   kVTileBytes = kBlockN * kHeadDimV", times, ";"));
  w.line("extern __shared__ __align__(1024) unsigned char smemRaw[];");
  w.line(cat("unsigned char *const sQ = smemRaw + ((1024 - ", ns, "::smemAddress(smemRaw) % 1024) % 1024);"));
  w.line("unsigned char *const sK = sQ + kQTileBytes;");
  w.line("unsigned char *const sV = sK + kStages * kKTileBytes;");
  w.line(cat(ns, "::Mbarrier *const barriers = reinterpret_cast<", ns, "::Mbarrier *>(sV + kStages * kVTileBytes);"));
}

int64_t ringSmemBytes(const KernelShape &shape, int64_t reserve) {
  const int64_t elementBytes = shape.dtype == "e4m3" ? 1 : 2;
  return elementBytes * (int64_t(shape.blockM) * shape.headDim +
                       int64_t(shape.stages) * shape.blockN * (shape.headDim + shape.headDimV)) +
         reserve;
}

void printRingTileCoordinates(CudaWriter &w) {
  w.comment("---- this tile's (batch, head) and the TMA coordinates of its tiles: {0, row, 0, head, batch}; a varlen");
  w.comment("sequence is rows [cuSeqlens[b], cuSeqlens[b + 1]) of one packed tensor (batch coordinate 0) ----");
  w.line("const int b = blockBatch, h = blockHead;");
  w.line("const int hKv = h / (p.headsQ / p.headsKv);  // grouped-query attention: K/V head of query head h");
  w.line("const int m0 = qTile * kBlockM;              // first query row of this tile");
  w.line("const int qRow0 = params.cuSeqlensQ ? min(max(params.cuSeqlensQ[b], 0), params.seqlenQ) : 0;");
  w.line("const int kRow0 = params.cuSeqlensK ? p.keyOffset : 0;");
  w.line("const int tmaBatch = params.cuSeqlensQ ? 0 : b;");
  w.line("const int warpRow0 = m0 + warp * kWarpRows;  // first query row of this (computing) warp");
}

int printRingBarrierDeclarations(CudaWriter &w, const std::string &ns, const std::vector<BarrierInfo> &barriers) {
  int offset = 0;
  for (const BarrierInfo &barrier : barriers) {
    w.line(
        cat(ns, "::Mbarrier *const ", barrier.name, " = barriers + ", offset, ";  // ", barrier.slots,
            barrier.slots == 1 ? " slot" : " slots", " of ", ringHolds(barrier),
            barrier.bytes > 0 ? cat(", ", barrier.bytes, " bytes a phase") : std::string(", released by consumers")));
    offset += barrier.slots;
  }
  return offset;
}

void printRingBarrierInits(CudaWriter &w, const std::string &ns, const std::vector<BarrierInfo> &barriers,
                           int consumerWarps) {
  for (const BarrierInfo &barrier : barriers) {
    int count = barrier.bytes > 0 ? 1 : static_cast<int>(barrier.arrivals) * consumerWarps;
    w.openUnrolledFor("i", std::to_string(barrier.slots));
    w.line(cat(ns, "::mbarrier::init(&", barrier.name, "[i], ", count, ");"));
    w.close();
  }
}

void printRingWait(CudaWriter &w, const std::string &ns, const BarrierInfo &barrier, const std::string &position) {
  std::string round = barrier.slots == 1 ? cat("(", position, ")") : cat("(", position, ") / ", barrier.slots);
  if (barrier.bytes > 0) {
    w.comment(cat("wait until ", ringHolds(barrier), " has landed in the slot of ring position ", position,
                  " (phase parity of its round)"));
    w.line(cat(ns, "::mbarrier::wait(&", barrier.name, "[", ringSlot(position, barrier.slots), "], (", round,
               ") & 1);"));
  } else {
    w.comment(cat("wait until the consumers released the slot of ring position ", position,
                  " from the round before (round 0: a fresh barrier's parity-1 wait passes)"));
    w.line(cat(ns, "::mbarrier::wait(&", barrier.name, "[", ringSlot(position, barrier.slots), "], ((", round,
               ") & 1) ^ 1);"));
  }
}

void printRingRelease(CudaWriter &w, const std::string &ns, const BarrierInfo &barrier, const std::string &position,
                      const std::string &why) {
  w.comment(cat("release the ", barrier.workUnit ? "work unit" : operandName(barrier.operand),
                " slot of ring position ", position, ": ", why));
  w.line("__syncwarp();");
  w.line("if (lane == 0)");
  w.line(cat("  ", ns, "::mbarrier::arrive(&", barrier.name, "[", ringSlot(position, barrier.slots), "]);"));
}

void printRingCopy(CudaWriter &w, const std::string &ns, Operand operand, const std::string &tile,
                   const std::string &position, const BarrierInfo &barrier) {
  std::string slot = ringSlot(position, barrier.slots);
  const char *smem = operand == Operand::Q ? "sQ" : operand == Operand::K ? "sK" : "sV";
  const char *bytes = operand == Operand::Q ? "kQTileBytes" : operand == Operand::K ? "kKTileBytes" : "kVTileBytes";
  const char *map = operand == Operand::Q ? "maps.q" : operand == Operand::K ? "maps.k" : "maps.v";
  std::string row = operand == Operand::Q ? "qRow0 + m0" : cat("kRow0 + ", tile, " * kBlockN");
  const char *head = operand == Operand::Q ? "h" : "hKv";
  w.comment(cat("TMA: ", operandName(operand), operand == Operand::Q ? "" : cat(" tile ", tile),
                " into the slot of ring position ", position, "; its bytes complete the phase of ", barrier.name,
                " (rows past the tensor read as zeros)"));
  w.open("");
  w.line(cat("const int slot = ", slot, ";"));
  w.line(cat(ns, "::mbarrier::arriveExpectTx(&", barrier.name, "[slot], ", bytes, ");"));
  w.line(cat(ns, "::tma::load5d(", smem, " + slot * ", bytes, ", &", map, ", &", barrier.name, "[slot], 0, ", row,
             ", 0, ", head, ", tmaBatch);"));
  w.close();
}

} // namespace flashtile::codegen
