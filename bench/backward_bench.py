"""The attention backward on the GPU machine: flashtile's beside torch SDPA's FLASH and CUDNN backends' backward and
FlexAttention's backward, in one run (bench/device/backward-check.sh runs it).

Shapes as flash-attn's benchmarks: bf16, batch x seqlen = 16k tokens, hidden 2048 (heads = 2048 / head dim), head
dims 64 and 128, seqlen 1k to 8k, causal and not. The FLOP count is flash-attn's: the backward does 2.5x the forward's
4·b·h·s²·d (halved under a causal mask). Each backward is timed alone (the forward's outputs kept, autograd.grad
with retain_graph), median of CUDA-event timings after warm-up.

--check first compares flashtile's gradients with autograd of an fp32 reference on small shapes, by FlashAttention's
rule per tensor: max|g - ref| <= 2·max|g_lowp - ref| + 1e-4 (3x with softcap), and prints one line a case.
--schedule NAME runs flashtile's calls with that schedule (schedule=, forward and backward; a head dim it has no
backward for falls back to the next schedule with one log line); --strict refuses that fallback instead.
"""

import argparse
import json
import math
import statistics

import torch
import torch.nn.functional as F

import flashtile


def ref_attention(q, k, v, causal, softcap, window, upcast):
    if upcast:
        q, k, v = q.float(), k.float(), v.float()
    d = q.shape[-1]
    hq, hk = q.shape[2], k.shape[2]
    if hq != hk:
        k = k.repeat_interleave(hq // hk, dim=2)
        v = v.repeat_interleave(hq // hk, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q * d ** -0.5, k).float()
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    sq, sk = q.shape[1], k.shape[1]
    row = torch.arange(sq, device=q.device)[:, None] + sk - sq  # bottom-right aligned
    col = torch.arange(sk, device=q.device)[None, :]
    masked = torch.zeros(sq, sk, dtype=torch.bool, device=q.device)
    if causal:
        masked |= col > row
    if window[0] >= 0:
        masked |= col < row - window[0]
    if window[1] >= 0:
        masked |= col > row + window[1]
    s = s.masked_fill(masked, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return torch.einsum("bhts,bshd->bthd", p.to(v.dtype), v)


SCHEDULE = {}  # flashtile's schedule= and strict= keywords (--schedule, --strict)


def check(cases):
    failures = 0
    for (b, sq, sk, hq, hk, d, causal, softcap, window, dtype) in cases:
        torch.manual_seed(sq * 31 + sk + d)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
        out = flashtile.flash_attn_func(q, k, v, causal=causal, softcap=softcap, window_size=window, **SCHEDULE)
        g = torch.randn_like(out)
        got = torch.autograd.grad(out, (q, k, v), g)

        def grads(upcast):
            leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
            return torch.autograd.grad(ref_attention(*leaves, causal, softcap, window, upcast), leaves, g)

        ref, lowp = grads(True), grads(False)
        factor = 3.0 if softcap else 2.0
        line = []
        ok = True
        for name, x, r, l in zip(("dq", "dk", "dv"), got, ref, lowp):
            err = (x.float() - r.float()).abs().max().item()
            bound = factor * (l.float() - r.float()).abs().max().item() + 1e-4
            good = err <= bound and not torch.isnan(x).any().item()
            ok &= good
            line.append(f"{name} {err:.2e}/{bound:.2e}{'' if good else ' FAIL'}")
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} b{b} sq{sq} sk{sk} h{hq}/{hk} d{d} causal={int(causal)} softcap={softcap} "
              f"window={window} {str(dtype)[6:]}: " + ", ".join(line), flush=True)
    return failures


def time_ms(fn, warmup=3, reps=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def backward_timer(forward, q, k, v):
    out = forward(q, k, v)
    g = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)


def bench(head_dims, seqlens, dtype, peers=("sdpa_flash", "sdpa_cudnn", "flex"), deterministic=False, also=()):
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
        # Every shape recompiles (dynamic=False): past the default limit of 8, torch falls back to an unfused
        # flex_attention that materializes the scores.
        torch._dynamo.config.recompile_limit = 64
    except Exception as e:  # pragma: no cover - torch without these
        print("torch backends unavailable:", e)
        return []
    rows = []
    for d in head_dims:
        heads = 2048 // d
        for s in seqlens:
            b = 16384 // s
            for causal in (False, True):
                q, k, v = (torch.randn(b, s, heads, d, device="cuda", dtype=dtype, requires_grad=True)
                           for _ in range(3))
                flops = 2.5 * 4 * b * heads * s * s * d / (2 if causal else 1)
                row = {"d": d, "seqlen": s, "batch": b, "heads": heads, "causal": causal}

                def sdpa(backend):
                    def f(q, k, v):
                        with sdpa_kernel(backend):
                            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                                  v.transpose(1, 2), is_causal=causal)
                    return f

                mask = None
                if causal and "flex" in peers:
                    mask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, s, s, device="cuda")
                fns = {
                    "flashtile": lambda q, k, v: flashtile.flash_attn_func(q, k, v, causal=causal, **SCHEDULE),
                    "sdpa_flash": sdpa(SDPBackend.FLASH_ATTENTION),
                    "sdpa_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
                    "flex": lambda q, k, v: flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                 block_mask=mask),
                }
                for name in also:  # flashtile with another schedule named (column flashtile_<name>)
                    fns["flashtile_" + name] = (lambda n: lambda q, k, v: flashtile.flash_attn_func(
                        q, k, v, causal=causal, schedule=n, strict=True))(name)
                if deterministic:
                    fns["flashtile_det"] = lambda q, k, v: flashtile.flash_attn_func(q, k, v, causal=causal,
                                                                                     deterministic=True,
                                                                                     **SCHEDULE)
                fns = {name: fn for name, fn in fns.items() if name.startswith("flashtile") or name in peers}
                for name, fn in fns.items():
                    try:
                        ms = time_ms(backward_timer(fn, q, k, v))
                        row[name] = round(flops / ms / 1e9, 1)
                    except Exception as e:
                        row[name] = None
                        print(f"{name} d{d} s{s} causal={causal}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                print(json.dumps(row), flush=True)
                rows.append(row)
                del q, k, v
                torch.cuda.empty_cache()
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--bench", action="store_true")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqlens", default="1024,2048,4096,8192")
    parser.add_argument("--json", default="")
    parser.add_argument("--peers", default="sdpa_flash,sdpa_cudnn,flex", help="the peers timed beside flashtile")
    parser.add_argument("--deterministic", action="store_true",
                        help="also time flashtile's deterministic backward (column flashtile_det)")
    parser.add_argument("--schedule", default="", help="the schedule flashtile's calls name (default: the runtime's)")
    parser.add_argument("--strict", action="store_true", help="with --schedule: no fallback to another schedule")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"), help="the --bench element type")
    parser.add_argument("--check-head-dims", default="", help="--check only the cases of these head dims")
    parser.add_argument("--also", default="", help="--bench: also time flashtile naming these schedules (strict), "
                                                   "columns flashtile_<schedule>")
    args = parser.parse_args()
    if args.schedule:
        SCHEDULE.update(schedule=args.schedule, strict=args.strict)
    failures = 0
    if args.check:
        cases = []
        for dtype in (torch.bfloat16, torch.float16):
            for d in (64, 128):
                for causal in (False, True):
                    cases.append((2, 113, 203, 4, 4, d, causal, 0.0, (-1, -1), dtype))
                    cases.append((1, 256, 256, 4, 2, d, causal, 0.0, (-1, -1), dtype))
            cases.append((2, 300, 300, 4, 4, 64, True, 30.0, (-1, -1), dtype))
            cases.append((2, 300, 300, 4, 4, 128, False, 0.0, (40, 12), dtype))
            cases.append((1, 1, 147, 2, 2, 64, False, 0.0, (-1, -1), dtype))
            cases.append((1, 1023, 1024, 2, 2, 128, True, 0.0, (-1, -1), dtype))
        cases.append((2, 200, 200, 4, 4, 32, True, 0.0, (-1, -1), torch.bfloat16))
        cases.append((2, 200, 200, 4, 4, 96, False, 0.0, (-1, -1), torch.bfloat16))
        cases.append((2, 200, 200, 4, 2, 256, True, 0.0, (-1, -1), torch.bfloat16))
        cases.append((1, 150, 230, 2, 2, 256, False, 30.0, (-1, -1), torch.float16))
        cases.append((2, 200, 200, 4, 4, 192, False, 0.0, (-1, -1), torch.bfloat16))
        if args.check_head_dims:
            keep = {int(x) for x in args.check_head_dims.split(",")}
            cases = [c for c in cases if c[5] in keep]
        failures = check(cases)
        print(f"check: {failures} of {len(cases)} cases failed", flush=True)
    if args.bench:
        rows = bench([int(x) for x in args.head_dims.split(",")], [int(x) for x in args.seqlens.split(",")],
                     torch.bfloat16 if args.dtype == "bf16" else torch.float16, tuple(args.peers.split(",")),
                     args.deterministic, tuple(x for x in args.also.split(",") if x))
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
