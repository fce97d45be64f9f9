/* DynschedProbe.c — reads the tile counter of the parameter block the fake driver (FakeCuda.c) saw last, for
 * host/dynsched_counter.py: the struct's layout comes from KernelAbi.h itself, not from a Python copy of it. */
#include "flashtile/runtime/KernelAbi.h"

#include <string.h>

const unsigned char *fakeCudaLastParams(void);

unsigned long long probeTileCounter(void) {
  struct FlashtileFwdParams params;
  memcpy(&params, fakeCudaLastParams(), sizeof(params));
  return (unsigned long long)params.tileCounter;
}

int probeQTiles(void) {
  struct FlashtileFwdParams params;
  memcpy(&params, fakeCudaLastParams(), sizeof(params));
  return params.qTiles;
}
