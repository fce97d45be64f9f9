/* PositionsAbi.h — the second kernel parameter of modules compiled with position offsets (KernelInfo::positions).
 *
 * A call that is a block of a larger problem (a sequence split across GPUs: flashtile.parallel) tells the kernels
 * where its rows, keys and heads sit in it; the variant's hooks and KV-range rules then see the larger problem's
 * coordinates and sizes, while loads, stores and the tile walk stay in the call's own rows. Shared verbatim by the
 * host runtime and the generated CUDA (codegen embeds its text), so host C++ and NVRTC both compile it: no
 * includes. Every kernel of such a module takes it by value right after FlashtileFwdParams; modules compiled
 * without offsets do not (their CUDA does not mention it).
 */
#ifndef FLASHTILE_RUNTIME_POSITIONSABI_H
#define FLASHTILE_RUNTIME_POSITIONSABI_H

struct FlashtilePositions {
  /* Dense calls: query row i is qOffset + i and key j is kOffset + j of the larger problem, whose sequences have
   * seqlenQGlobal queries and seqlenKGlobal keys (the runtime passes the call's own sizes for 0). */
  int qOffset, kOffset;
  int seqlenQGlobal, seqlenKGlobal;
  /* Varlen calls (cuSeqlensQ set): per sequence b, qOffsets[b] and kOffsets[b] (batch values each; NULL: 0), and the
   * larger problem's packed offsets cuSeqlensQGlobal / cuSeqlensKGlobal (batch + 1 each; NULL: the call's own),
   * which give each sequence's global lengths and the hooks' key_offset (cuSeqlensKGlobal[b]). */
  const int *qOffsets, *kOffsets;
  const int *cuSeqlensQGlobal, *cuSeqlensKGlobal;
  /* Query head h is headOffset + h of headsQGlobal query heads and headsKvGlobal K/V heads (Ulysses). */
  int headOffset, headsQGlobal, headsKvGlobal;
};

#endif /* FLASHTILE_RUNTIME_POSITIONSABI_H */
