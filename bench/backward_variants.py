#!/usr/bin/env python3
"""The backward of every built-in variant beside our plain backward and FlexAttention's backward (GPU machine).

Issue target: softcap, ALiBi, sinks and windows at >= 0.9x our plain backward with the same masking and >= 1.5x
FlexAttention's backward. Through the Python package (`flashtile.attention`, the JIT), bf16, B=2, H=16, S=8192,
head dim 128 by default. Useful TFLOP/s with flash-attn's count for a backward: 2.5 x 4 x D x attended pairs per
(batch, head). "plain" is our backward of the variant's plain masking (none or causal); for the windows, whose plain
is causal, the useful-FLOP rate is what is compared (they attend fewer pairs). FlexAttention: torch.compile'd
flex_attention with the variant's score_mod and block mask (check_variants.Variant.flex), forward + backward compiled;
sinks have no FlexAttention form. Each backward is timed alone (median of 10 after 3 warm-ups) as in backward_bench.py.
Before timing, every variant's gradients are compared with an fp32 autograd reference (FlashAttention's rule, 2x;
3x with softcap) at a small shape, so a fast wrong backward cannot pass unnoticed.
backward_bench.py --variants times the built-in variants against FA4 as well, with training-step times.
"""
import argparse
import json

import torch
import torch._dynamo

import flashtile
from backward_bench import time_ms
from check_variants import VARIANTS

torch._dynamo.config.recompile_limit = 256


def reference_grads(var, q, k, v, inputs, grad_out, upcast):
    """Autograd of check_variants' reference (fp32 when upcast, else low-precision matmuls and P)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out, _ = var.reference(*leaves, inputs, lowp=not upcast)
    return torch.autograd.grad(out, leaves, grad_out.float())


def check(var, dtype, gen):
    b, s, h, d = 2, 300, 4, 64
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen, requires_grad=True)
               for _ in range(3))
    inputs = var.inputs(b, h, s, gen)
    out = flashtile.attention(q, k, v, var.name, params=var.params or None, inputs=inputs or None)
    grad_out = torch.randn(out.shape, device="cuda", dtype=dtype, generator=gen)
    got = torch.autograd.grad(out, (q, k, v), grad_out)
    ref = reference_grads(var, q, k, v, inputs, grad_out, True)
    lowp = reference_grads(var, q, k, v, inputs, grad_out, False)
    worst = 0.0
    for name, g, r, l in zip(("dq", "dk", "dv"), got, ref, lowp):
        bound = var.tol * (l.float() - r).abs().max().item() + 1e-4
        err = (g.float() - r).abs().max().item()
        worst = max(worst, err / bound)
        if not err <= bound:
            print(f"  {var.name} {name}: max err {err:.3e} > bound {bound:.3e}", flush=True)
    return worst


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--variants", default="softcap,softcap_causal,alibi,alibi_causal,sinks,sinks_causal,"
                        "sliding_window,sliding_window_causal,document_mask")
    parser.add_argument("--flex", default="softcap,softcap_causal,alibi,alibi_causal,sliding_window_causal",
                        help="variants also timed under FlexAttention (each compiles a forward and a backward)")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--seqlen", type=int, default=8192)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--schedule", default=None, help="the backward's schedule (default: the runtime's choice)")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    wanted = args.variants.split(",")
    unknown = sorted(set(wanted) - {v.name for v in VARIANTS})
    if unknown:
        raise SystemExit(f"--variants: unknown {unknown}; accepted: {[v.name for v in VARIANTS]}")
    selected = [v for v in VARIANTS if v.name in wanted]
    flex_names = set(args.flex.split(",")) if args.flex else set()

    gen = torch.Generator(device="cuda")
    gen.manual_seed(0)
    failures = 0
    for var in selected:
        for dtype in (torch.bfloat16, torch.float16):
            worst = check(var, dtype, gen)
            ok = worst <= 1.0
            failures += not ok
            print(f"check {var.name} {str(dtype)[6:]}: {'ok' if ok else 'FAIL'} (worst error / bound {worst:.2f})",
                  flush=True)

    b, s, h, d = args.batch, args.seqlen, args.heads, args.head_dim
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    kw = {"schedule": args.schedule} if args.schedule else {}

    def ours_timer(name, params, inputs):
        out = flashtile.attention(q, k, v, name, params=params or None, inputs=inputs or None, **kw)
        g = torch.randn_like(out)
        return lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)

    flex_attention = None
    if flex_names:
        from torch.nn.attention.flex_attention import flex_attention as fa
        flex_attention = torch.compile(fa, dynamic=False)

    plain_rate = {}
    for plain in sorted({var.plain for var in selected}):
        pairs = s * s if plain == "none" else s * (s + 1) / 2
        plain_rate[plain] = 2.5 * 4 * b * h * d * pairs / time_ms(ours_timer(plain, [], [])) / 1e9
    rows = []
    print(f"\nbackward, bf16 hd={d} B={b} H={h} S={s}, useful TFLOP/s (2.5 x 4 x D x attended pairs)")
    print(f"{'variant':22} {'ours':>7} {'plain':>7} {'ratio':>6} {'flex':>7} {'ours/flex':>9}")
    for var in selected:
        gen.manual_seed(1)
        inputs = var.inputs(b, h, s, gen)
        pairs = var.mask(s, s, inputs, b).expand(b, 1, s, s).sum().item() / b
        flops = 2.5 * 4 * b * h * d * pairs
        ours = flops / time_ms(ours_timer(var.name, var.params, inputs)) / 1e9
        flex = None
        if flex_attention is not None and var.name in flex_names:
            spec = var.flex(s, s, inputs, b, h)
            if spec is not None:
                score_mod, block_mask = spec

                def flex_timer():
                    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
                    out = flex_attention(qt, kt, vt, score_mod=score_mod, block_mask=block_mask)
                    g = torch.randn_like(out)
                    return lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
                try:
                    flex = flops / time_ms(flex_timer()) / 1e9
                except Exception as e:  # reported, not fatal: the row says '-'
                    print(f"  flex {var.name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        row = {"variant": var.name, "ours": round(ours, 1), "plain": var.plain,
               "plain_tflops": round(plain_rate[var.plain], 1), "ratio_plain": round(ours / plain_rate[var.plain], 2),
               "flex": None if flex is None else round(flex, 1),
               "ratio_flex": None if flex is None else round(ours / flex, 2)}
        rows.append(row)
        fs = f"{flex:7.1f} {ours / flex:9.2f}" if flex else "      -         -"
        print(f"{var.name:22} {ours:7.1f} {plain_rate[var.plain]:7.1f} {ours / plain_rate[var.plain]:6.2f} {fs}",
              flush=True)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if failures:
        raise SystemExit(f"{failures} variant gradient checks failed")


if __name__ == "__main__":
    main()
