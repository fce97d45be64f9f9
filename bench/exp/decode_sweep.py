"""Experiment (not committed): decode kernel knob sweep and per-kernel times."""
import os, sys, json
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import torch
import decode_bench as db
from torch.profiler import profile, ProfilerActivity

lib = sys.argv[1]; fa2 = sys.argv[2]; dirs = sys.argv[3].split(",")
cases = [c for c in db.CASES if c[0] in ("B16 GQA 32/8 kv32k", "B1 GQA 32/8 kv128k", "B64 GQA 32/8 kv8k", "B16 MHA 32/32 kv8k")]
splits_list = [int(s) for s in sys.argv[4].split(",")] if len(sys.argv) > 4 else [0]
dtype = torch.bfloat16
res = {}
tens = {}
for label, b, hq, hk, sq, sk in cases:
    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, 128, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hk, 128, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, hk, 128, device="cuda", dtype=dtype)
    o = torch.empty_like(q); lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
    tens[label] = (q, k, v, o, lse)
    fn, _ = db.sdpa_fn(db.SDPBackend.CUDNN_ATTENTION, q, k, v, False)
    kvb = 2 * b * sk * hk * 128 * 2
    ms = db.bench(fn); print(f"{label:24s} cudnn {kvb/ms/1e6:7.0f} GB/s", flush=True)
for d in dirs:
    ft = db.Flashtile(lib, [fa2, d])
    for label, b, hq, hk, sq, sk in cases:
        q, k, v, o, lse = tens[label]
        kvb = 2 * b * sk * hk * 128 * 2
        for s in splits_list:
            try:
                ft.forward(q, k, v, o, lse, causal=True, splits=s); torch.cuda.synchronize()
                ref = db.reference(q[:1], k[:1], v[:1], causal=True)
                err = (o[:1].float() - ref).abs().max().item()
                ms = db.bench(lambda: ft.forward(q, k, v, o, lse, causal=True, splits=s))
                print(f"{os.path.basename(d):14s} {label:24s} s={s:3d} {kvb/ms/1e6:7.0f} GB/s err {err:.1e}", flush=True)
            except Exception as e:
                print(f"{os.path.basename(d):14s} {label:24s} s={s} ERROR {e}", flush=True)
    del ft
# per-kernel breakdown for the base dir
ft = db.Flashtile(lib, [fa2, dirs[0]])
for label in tens:
    q, k, v, o, lse = tens[label]
    for _ in range(5): ft.forward(q, k, v, o, lse, causal=True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20): ft.forward(q, k, v, o, lse, causal=True)
        torch.cuda.synchronize()
    evs = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    evs.sort(key=lambda e: e.time_range.start)
    main = [e for e in evs if "combine" not in e.name]; comb = [e for e in evs if "combine" in e.name]
    gaps = []
    for e in comb:
        prev = max((m for m in main if m.time_range.end <= e.time_range.start + 0.01), key=lambda m: m.time_range.end, default=None)
        if prev: gaps.append(e.time_range.start - prev.time_range.end)
    avg = lambda xs: sum(xs) / len(xs) if xs else float('nan')
    fn, _ = db.sdpa_fn(db.SDPBackend.CUDNN_ATTENTION, q, k, v, False)
    for _ in range(5): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof2:
        for _ in range(20): fn()
        torch.cuda.synchronize()
    cev = [e for e in prof2.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    names = {}
    for e in cev: names.setdefault(e.name[:60], []).append(e.time_range.elapsed_us())
    print(f"{label:24s} cudnn kernels: " + "; ".join(f"{n} {sum(v)/len(v):.1f}us x{len(v)}" for n, v in names.items()), flush=True)
    print(f"{label:24s} main {avg([e.time_range.elapsed_us() for e in main]):8.1f} us  combine {avg([e.time_range.elapsed_us() for e in comb]):6.1f} us  gap {avg(gaps):5.1f} us  n={len(main)},{len(comb)}", flush=True)
