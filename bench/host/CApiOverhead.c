/* CApiOverhead.c — times the C ABI's host path on any machine (bench/host/overhead.sh builds and runs it).
 *
 * With bench/host/FakeCuda.c as libcuda.so.1, flashtile_forward_variant runs everything up to the driver's
 * launch: argument checks, kernel lookup (the JIT compiles with NVRTC on the first call, or reads the disk cache)
 * and the parameter block. Prints, in microseconds: the process's first call (cold: MLIR + NVRTC, or a disk-cache
 * hit when the cache holds the kernel), loading the library and creating the runtime, and the warm per-call cost
 * of a few call shapes. Usage: capi-overhead [ITERATIONS [SEQLEN]]; bench/host/overhead.sh builds and runs it. */
#define _POSIX_C_SOURCE 200809L
#include "flashtile/runtime/CApi.h"
#include "flashtile/runtime/CApiJit.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double nowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void require(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "%s: %s\n", what, flashtile_last_error());
    exit(1);
  }
}

/* The sequence length of the calls: 128 (the short shape class) unless argv[2] says otherwise. */
static int seqlen = 128;

/* B=1, S=seqlen, one head, d=64, bf16 (bench/python_timings.py's tiny call). */
static int call(flashtile_runtime *rt, const char *variant, const flashtile_variant_args *args) {
  const long long stride[4] = {seqlen * 64, 64, 64, 1};
  void *q = (void *)(uintptr_t)0x100000, *k = (void *)(uintptr_t)0x200000, *v = (void *)(uintptr_t)0x300000;
  void *o = (void *)(uintptr_t)0x400000;
  float *lse = (float *)(uintptr_t)0x500000;
  return flashtile_forward_variant(rt, q, k, v, o, lse, FLASHTILE_BF16, 1, seqlen, seqlen, 1, 1, 64, 64, stride, stride,
                                   stride, stride, 0.f, variant, args, NULL);
}

/* The same call through flashtile_forward_call: one struct, filled once, copied per call with new pointers. */
static flashtile_call callTemplate(void) {
  flashtile_call c = {0};
  c.size = sizeof(c);
  c.variant = "causal";
  for (int i = 0; i < 4; ++i) {
    long long stride[4] = {128 * 64, 64, 64, 1};
    c.q_stride[i] = c.k_stride[i] = c.v_stride[i] = c.o_stride[i] = stride[i];
  }
  c.dtype = FLASHTILE_BF16;
  c.batch = 1, c.seqlen_q = 128, c.seqlen_k = 128, c.heads_q = 1, c.heads_kv = 1, c.head_dim = 64, c.head_dim_v = 64;
  return c;
}

static int callStruct(flashtile_runtime *rt, const flashtile_call *shape) {
  flashtile_call c = *shape;
  c.q = (void *)(uintptr_t)0x100000, c.k = (void *)(uintptr_t)0x200000, c.v = (void *)(uintptr_t)0x300000;
  c.o = (void *)(uintptr_t)0x400000, c.lse = (float *)(uintptr_t)0x500000;
  return flashtile_forward_call(rt, &c);
}

int main(int argc, char **argv) {
  int iters = argc > 1 ? atoi(argv[1]) : 200000;
  if (argc > 2)
    seqlen = atoi(argv[2]);
  double start = nowUs();
  flashtile_runtime *rt = flashtile_create();
  require(rt ? 0 : -1, "flashtile_create");
  require(flashtile_enable_jit(rt), "flashtile_enable_jit");
  double created = nowUs();
  require(call(rt, "causal", NULL), "first call");
  double first = nowUs();
  printf("create + enable_jit: %.1f us\nfirst call (causal): %.1f us\n", created - start, first - created);

  float cap = 20.f;
  flashtile_variant_args softcap = {&cap, 1, NULL, 0};
  require(call(rt, "softcap", &softcap), "first softcap call");
  struct {
    const char *name, *variant;
    const flashtile_variant_args *args;
  } rows[] = {{"causal", "causal", NULL}, {"softcap (one number)", "softcap", &softcap}};
  for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); ++r) {
    for (int i = 0; i < 1000; ++i)
      require(call(rt, rows[r].variant, rows[r].args), "warm-up");
    double t0 = nowUs();
    for (int i = 0; i < iters; ++i)
      call(rt, rows[r].variant, rows[r].args);
    printf("warm call, %s: %.3f us\n", rows[r].name, (nowUs() - t0) / iters);
  }
  flashtile_call shape = callTemplate();
  require(callStruct(rt, &shape), "flashtile_forward_call");
  double t0 = nowUs();
  for (int i = 0; i < iters; ++i)
    callStruct(rt, &shape);
  printf("warm call, causal, flashtile_forward_call: %.3f us\n", (nowUs() - t0) / iters);

  /* The backward at issue 38's smallest shape (hd128, 1k, batch 16, 16 heads, causal, bf16; fa3 on the fake
   * sm_90a): everything flashtile_backward_call does before and around its launches (the kernel lookup, the TMA
   * descriptors, the workspaces, the plan's launches). */
  flashtile_bwd_call bwd = {0};
  bwd.size = sizeof(bwd);
  bwd.forward = callTemplate();
  flashtile_call *f = &bwd.forward;
  f->batch = 16, f->seqlen_q = f->seqlen_k = 1024, f->heads_q = f->heads_kv = 16, f->head_dim = f->head_dim_v = 128;
  const long long big[4] = {1024LL * 16 * 128, 16 * 128, 128, 1};
  for (int i = 0; i < 4; ++i)
    f->q_stride[i] = f->k_stride[i] = f->v_stride[i] = f->o_stride[i] = bwd.d_o_stride[i] = bwd.d_q_stride[i] =
        bwd.d_k_stride[i] = bwd.d_v_stride[i] = big[i];
  f->q = (void *)(uintptr_t)0x100000, f->k = (void *)(uintptr_t)0x200000, f->v = (void *)(uintptr_t)0x300000;
  f->o = (void *)(uintptr_t)0x400000, f->lse = (float *)(uintptr_t)0x500000;
  bwd.d_o = (void *)(uintptr_t)0x600000, bwd.d_q = (void *)(uintptr_t)0x700000;
  bwd.d_k = (void *)(uintptr_t)0x800000, bwd.d_v = (void *)(uintptr_t)0x900000;
  t0 = nowUs();
  require(flashtile_backward_call(rt, &bwd), "flashtile_backward_call");
  printf("first backward call (hd128 1k causal): %.1f us\n", nowUs() - t0);
  const int bwdIters = iters / 10 > 0 ? iters / 10 : 1;
  t0 = nowUs();
  for (int i = 0; i < bwdIters; ++i)
    flashtile_backward_call(rt, &bwd);
  printf("warm backward call, hd128 1k causal, flashtile_backward_call: %.3f us\n", (nowUs() - t0) / bwdIters);
  flashtile_destroy(rt);
  return 0;
}
