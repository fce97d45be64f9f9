//===- PositionsCuda.cpp - CUDA of programs with position offsets ----------===//
#include "codegen/common/PositionsCuda.h"
#include "codegen/common/PositionsAbiText.h"
#include "passes/IR/TilePositions.h"

namespace flashtile::codegen {

bool takesPositions(tile::FuncOp func) { return func && func->hasAttr(tile::kPositionOffsetsAttr); }

std::string positionsParam(tile::FuncOp func) {
  return takesPositions(func) ? ", const FlashtilePositions positions" : "";
}

std::string positionsStructText() {
  return "\n// ==== position offsets: runtime/include/flashtile/runtime/PositionsAbi.h, verbatim ====\n" +
         std::string(kPositionsAbiText);
}

std::string positionsMembersText() {
  return "  // Where the block sits in the larger problem (tile.position_offsets): what the variant's functions read\n"
         "  // for tile.dim q_offset, k_offset, seqlen_q_global, seqlen_k_global, key_offset_global, head_offset,\n"
         "  // heads_q_global and heads_kv_global; set once per block from FlashtilePositions.\n"
         "  int qOffset, kOffset, seqlenQGlobal, seqlenKGlobal, keyOffsetGlobal;\n"
         "  int headOffset, headsQGlobal, headsKvGlobal;\n";
}

void printPositionsView(CudaWriter &w) {
  w.comment("---- position offsets: where this block's rows, keys and heads sit in the larger problem; the variant's");
  w.comment("functions and KV-range rules read these, loads, stores and the tile walk the block's own rows ----");
  w.open("if (params.cuSeqlensQ)");
  w.line("const int z = blockBatch;");
  w.line("p.qOffset = positions.qOffsets ? positions.qOffsets[z] : 0;");
  w.line("p.kOffset = positions.kOffsets ? positions.kOffsets[z] : 0;");
  w.line("p.seqlenQGlobal = positions.cuSeqlensQGlobal ? positions.cuSeqlensQGlobal[z + 1] - "
         "positions.cuSeqlensQGlobal[z] : p.seqlenQ;");
  w.line("p.seqlenKGlobal = positions.cuSeqlensKGlobal ? positions.cuSeqlensKGlobal[z + 1] - "
         "positions.cuSeqlensKGlobal[z] : p.seqlenK;");
  w.line("p.keyOffsetGlobal = positions.cuSeqlensKGlobal ? positions.cuSeqlensKGlobal[z] : p.keyOffset;");
  w.close();
  w.open("else");
  w.line("p.qOffset = positions.qOffset;");
  w.line("p.kOffset = positions.kOffset;");
  w.line("p.seqlenQGlobal = positions.seqlenQGlobal ? positions.seqlenQGlobal : p.seqlenQ;");
  w.line("p.seqlenKGlobal = positions.seqlenKGlobal ? positions.seqlenKGlobal : p.seqlenK;");
  w.line("p.keyOffsetGlobal = blockBatch * p.seqlenKGlobal;");
  w.close();
  w.line("p.headOffset = positions.headOffset;");
  w.line("p.headsQGlobal = positions.headsQGlobal ? positions.headsQGlobal : p.headsQ;");
  w.line("p.headsKvGlobal = positions.headsKvGlobal ? positions.headsKvGlobal : p.headsKv;");
}

} // namespace flashtile::codegen
