"""Small backward calls for compute-sanitizer (bench/device/backward-sanitize.sh): every kernel of the backward's
three-launch plan on shapes with partial tiles, GQA, a causal walk, windows, softcap, Sq != Sk, varlen and fp16.
Run once plainly (the JIT compiles and caches the kernels, and the gradients must be finite), then under the tools.
An argument names the schedule of the calls (schedule=, strict: `python3 bench/backward_sanitize.py fa3` checks fa3's
backward kernels, the cases at head dims it has none for skipped)."""

import sys

import torch

import flashtile

CASES = [  # (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, softcap, window, dtype)
    (1, 130, 130, 2, 2, 64, False, 0.0, (-1, -1), torch.bfloat16),
    (2, 77, 150, 4, 2, 128, True, 0.0, (-1, -1), torch.bfloat16),
    (1, 150, 77, 2, 1, 64, True, 0.0, (-1, -1), torch.float16),
    (1, 129, 129, 2, 2, 128, False, 30.0, (-1, -1), torch.bfloat16),
    (1, 160, 160, 2, 2, 64, False, 0.0, (48, 16), torch.float16),
    (1, 1, 65, 2, 2, 32, False, 0.0, (-1, -1), torch.bfloat16),
    (1, 100, 100, 3, 1, 96, True, 0.0, (-1, -1), torch.bfloat16),
    (1, 90, 150, 2, 2, 96, False, 0.0, (40, 8), torch.float16),
    (2, 70, 133, 4, 2, 192, True, 0.0, (-1, -1), torch.bfloat16),
    (1, 131, 131, 2, 2, 256, False, 30.0, (-1, -1), torch.bfloat16),
    (1, 100, 70, 2, 1, 256, True, 0.0, (-1, -1), torch.float16),
]
# Q and K of head dim 192, V of 128 (head_dim_v < head_dim).
WIDE_V = (1, 97, 140, 2, 2, 192, 128, False, torch.bfloat16)


def main():
    torch.manual_seed(0)
    named = dict(schedule=sys.argv[1], strict=True) if len(sys.argv) > 1 else {}
    # The head dims the named schedule's backward serves (fa3: 64 to 256); all without one.
    served = (64, 96, 128, 192, 256) if named.get("schedule") == "fa3" else None
    cases = [c for c in CASES if served is None or c[5] in served]
    for (b, sq, sk, hq, hk, d, causal, softcap, window, dtype) in cases:
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
        out = flashtile.flash_attn_func(q, k, v, causal=causal, softcap=softcap, window_size=window, **named)
        grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
        torch.cuda.synchronize()
        assert all(torch.isfinite(g).all() for g in grads), f"non-finite gradients: {(b, sq, sk, hq, hk, d)}"
    b, sq, sk, hq, hk, d, dv, causal, dtype = WIDE_V
    q, k = (torch.randn(b, n, h, d, device="cuda", dtype=dtype, requires_grad=True) for n, h in ((sq, hq), (sk, hk)))
    v = torch.randn(b, sk, hk, dv, device="cuda", dtype=dtype, requires_grad=True)
    out = flashtile.flash_attn_func(q, k, v, causal=causal, **named)
    grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize()
    assert all(torch.isfinite(g).all() for g in grads), "non-finite gradients at head dims 192/128"
    # Varlen: three sequences of different lengths packed.
    lengths = [33, 130, 1]
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device="cuda")
    total = sum(lengths)
    q, k, v = (torch.randn(total, 2, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    out = flashtile.flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=True, **named)
    grads = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    torch.cuda.synchronize()
    assert all(torch.isfinite(g).all() for g in grads), "non-finite varlen gradients"
    print(f"backward-sanitize: {len(cases) + 2} backward calls done")


if __name__ == "__main__":
    main()
