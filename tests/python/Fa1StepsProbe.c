/* Fa1StepsProbe.c — reads the K/V-step fields of the parameter block the fake driver (FakeCuda.c) saw last, for
 * host/fa1_steps.py: the struct's layout comes from KernelAbi.h itself, not from a Python copy of it. */
#include "flashtile/runtime/KernelAbi.h"

#include <string.h>

const unsigned char *fakeCudaLastParams(void);

static struct FlashtileFwdParams last(void) {
  struct FlashtileFwdParams params;
  memcpy(&params, fakeCudaLastParams(), sizeof(params));
  return params;
}

int probeKvStep(void) { return last().kvStep; }
unsigned long long probeStateAcc(void) { return (unsigned long long)last().stateAcc; }
unsigned long long probeStateMax(void) { return (unsigned long long)last().stateMax; }
unsigned long long probeStateSum(void) { return (unsigned long long)last().stateSum; }
