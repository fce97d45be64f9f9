"""The attention backward beside its anchors, in one run on the GPU machine (bench/device/backward-anchors.sh; also
bench/device/backward-check.sh).

Columns, each timed in the same process on the same tensors:
- flashtile, and with --deterministic flashtile_det (its deterministic backward, plain and causal cases);
- fa4: flash-attn-4's CuTe kernels (`flash_attn.cute.interface.flash_attn_func`, its SM90 forward and backward on
  Hopper). Optional: when it does not import, one line says so and the column is left out (bench/device/
  fa4-install.sh carries it to the GPU machine). No ALiBi column (FA4 has no built-in ALiBi);
- sdpa_cudnn, sdpa_flash: torch SDPA's CUDNN_ATTENTION and FLASH_ATTENTION (FA2) backends, plain and causal only;
- flex: torch.compile'd FlexAttention with the case's score_mod and block mask. Every shape and case recompiles
  (dynamic=False); dynamo's recompile limits are raised so that it never falls back to the eager, unfused
  flex_attention after 8 of them, and a WARNING line says so if it does anyway (--flex-shapes limits where it runs).

Shapes as flash-attn's benchmarks: bf16, batch x seqlen = 16k tokens, hidden 2048 (heads = 2048 / head dim), plain
and causal at --head-dims x --seqlens (or the D:S pairs of --shapes), any of head dims 32, 64, 96, 128, 192, 256.
--variants adds, at --variant-shape (hd128 8k), softcap 30, ALiBi and a causal sliding window of 1024, each against
Flex on the same variant and FA4 where it has it (softcap, window).

Each implementation is timed three ways (median of CUDA-event timings after warm-up): its forward (grad enabled, as in
training), its backward alone (the forward's outputs kept, autograd.grad with retain_graph) and a training step
(forward + backward). FLOPs are flash-attn's count: forward 4·b·h·s²·d, backward 2.5x that, halved when causal; with
a window, the (query, key) pairs the window actually attends replace s² (a causal window w at seqlen s: w(w+1)/2 +
(s-w)(w+1)), so a window's TFLOP/s compares with the plain backward's. Output: one JSON line per case, then a table of
backward TFLOP/s per shape with the speed ratios flashtile/FA4, flashtile/cuDNN, flashtile/Flex (> 1: flashtile is
faster) and deterministic/default, and with --variants a table of milliseconds per variant (backward and training
step) with the same ratios. --json FILE keeps every row, rewritten after each case (a run cut short keeps what it
measured); --table FILE prints the tables of such a file again (no GPU needed).

--check first compares flashtile's gradients with autograd of an fp32 reference on small shapes, by FlashAttention's
rule per tensor: max|g - ref| <= 2·max|g_lowp - ref| + 1e-4 (3x with softcap), and prints one line a case.
--schedule NAME runs flashtile's calls with that schedule (schedule=, forward and backward; a head dim it has no
backward for falls back to the next schedule with one log line); --strict refuses that fallback instead.
"""

import argparse
import json
import logging
import statistics
import warnings

from fa4_peer import load_fa4  # bench/ is the script's folder, first on sys.path

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --help and --table work without torch; the rest needs the GPU machine
    torch = F = None
try:
    import flashtile
except ImportError:
    flashtile = None


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


def check(cases, deterministic=False):
    failures = 0
    for (b, sq, sk, hq, hk, d, causal, softcap, window, dtype) in cases:
        torch.manual_seed(sq * 31 + sk + d)
        q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype, requires_grad=True)
        out = flashtile.flash_attn_func(q, k, v, causal=causal, softcap=softcap, window_size=window,
                                        deterministic=deterministic, **SCHEDULE)
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


class Case:
    """A mask and score terms in flash-attn 2.x's terms: window (left, right), -1 unbounded, bottom-right aligned."""

    def __init__(self, name, causal=False, softcap=0.0, window=(-1, -1), alibi=False):
        self.name, self.causal, self.softcap, self.window, self.alibi = name, causal, softcap, window, alibi
        left, right = window
        if causal:
            right = 0 if right < 0 else min(right, 0)
        self.bounds = (left, right)  # query i attends keys i - left .. i + right (-1: unbounded)

    def plain(self):
        return not (self.softcap or self.alibi or self.window != (-1, -1))

    def pairs(self, s):
        """(query, key) pairs attended at seqlen s: s² (s²/2 causal, flash-attn's count), exact with a window."""
        if self.window == (-1, -1):
            return s * s / (2 if self.causal else 1)
        left, right = self.bounds
        return sum(max(0, (s - 1 if right < 0 else min(s - 1, i + right)) - (0 if left < 0 else max(0, i - left)) + 1)
                   for i in range(s))


PLAIN, CAUSAL = Case("plain"), Case("causal", causal=True)
VARIANTS = [PLAIN, CAUSAL, Case("softcap", softcap=30.0), Case("alibi", alibi=True),
            Case("window", causal=True, window=(1024, -1))]  # the causal sliding window of 1024


class FlexFallbackWatch(logging.Handler):
    """Catches dynamo's 'hit config.recompile_limit' warning (past it, flex_attention runs eagerly, unfused)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        message = record.getMessage()
        if "recompile_limit" in message or "cache_size_limit" in message:
            self.seen.append(message.splitlines()[0])


FLEX_WATCH = FlexFallbackWatch()


def compiled_flex():
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention
    for name, value in (("cache_size_limit", 4096), ("recompile_limit", 4096),
                        ("accumulated_cache_size_limit", 65536), ("accumulated_recompile_limit", 65536)):
        if hasattr(torch._dynamo.config, name):  # the names differ between torch versions
            setattr(torch._dynamo.config, name, value)
    logging.getLogger("torch._dynamo").addHandler(FLEX_WATCH)
    return torch.compile(flex_attention, dynamic=False)


def flex_mods(case, s, slopes):
    """FlexAttention's score_mod and block mask for the case."""
    from torch.nn.attention.flex_attention import create_block_mask
    score_mod = None
    if case.softcap:
        cap = case.softcap
        score_mod = lambda x, b, h, i, j: cap * torch.tanh(x / cap)
    if case.alibi:
        score_mod = lambda x, b, h, i, j: x - slopes[h] * (i - j).abs()
    left, right = case.bounds
    if left < 0 and right < 0:
        return score_mod, None

    def mask_mod(b, h, i, j):
        keep = j >= 0
        if left >= 0:
            keep = keep & (i - j <= left)
        if right >= 0:
            keep = keep & (j - i <= right)
        return keep
    return score_mod, create_block_mask(mask_mod, None, None, s, s, device="cuda")


def implementations(case, s, slopes, peers, fa4, flex, also, deterministic):
    """name -> forward(q, k, v) (layout b, s, h, d) for every implementation asked for that has this case."""
    ft = dict(causal=case.causal, softcap=case.softcap, window_size=case.window, alibi_slopes=slopes)
    fns = {"flashtile": lambda q, k, v: flashtile.flash_attn_func(q, k, v, **ft, **SCHEDULE)}
    for name in also:  # flashtile with another schedule named (column flashtile_<name>)
        fns["flashtile_" + name] = lambda q, k, v, n=name: flashtile.flash_attn_func(q, k, v, **ft, schedule=n,
                                                                                      strict=True)
    if deterministic and case.name in ("plain", "causal"):
        fns["flashtile_det"] = lambda q, k, v: flashtile.flash_attn_func(q, k, v, **ft, deterministic=True,
                                                                         **SCHEDULE)
    if fa4 is not None and not case.alibi:
        window = tuple(None if x < 0 else x for x in case.window)

        def fa4_forward(q, k, v):
            out = fa4.flash_attn_func(q, k, v, causal=case.causal, softcap=case.softcap, window_size=window)
            return out[0] if isinstance(out, tuple) else out  # (out, lse)
        fns["fa4"] = fa4_forward
    if case.plain():
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for name, backend in (("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa_flash", SDPBackend.FLASH_ATTENTION)):
            def sdpa(q, k, v, backend=backend):
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                         is_causal=case.causal)
                return out.transpose(1, 2)
            fns[name] = sdpa
    if flex is not None:
        score_mod, block_mask = flex_mods(case, s, slopes)
        fns["flex"] = lambda q, k, v: flex(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           score_mod=score_mod, block_mask=block_mask).transpose(1, 2)
    return {name: fn for name, fn in fns.items() if name.startswith("flashtile") or name in peers}


def measure(fn, q, k, v):
    """Milliseconds of fn's forward (grad enabled), its backward alone and a training step (forward + backward)."""
    out = fn(q, k, v)
    g = torch.randn_like(out)
    bwd = time_ms(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True))
    fwd = time_ms(lambda: fn(q, k, v))
    step = time_ms(lambda: torch.autograd.grad(fn(q, k, v), (q, k, v), g))
    return {"fwd": round(fwd, 4), "bwd": round(bwd, 4), "step": round(step, 4)}


def bench(jobs, dtype, peers, deterministic=False, also=(), flex_shapes=None, json_path=""):
    """jobs: (head dim, seqlen, Case). flex_shapes: the (head dim, seqlen) pairs Flex runs at (None: all)."""
    fa4 = load_fa4() if "fa4" in peers else None
    flex = compiled_flex() if "flex" in peers else None
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    rows = []
    for d, s, case in jobs:
        heads, b = 2048 // d, 16384 // s
        q, k, v = (torch.randn(b, s, heads, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        slopes = torch.rand(heads, device="cuda") * 0.5 + 0.01 if case.alibi else None
        fwd_flops = 4 * b * heads * d * case.pairs(s)
        row = {"d": d, "seqlen": s, "batch": b, "heads": heads, "case": case.name, "causal": case.causal,
               "ms": {}, "fwd_tflops": {}}
        use_flex = flex if flex_shapes is None or (d, s) in flex_shapes else None
        for name, fn in implementations(case, s, slopes, peers, fa4, use_flex, also, deterministic).items():
            try:
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always" if name == "flex" else "default")
                    ms = measure(fn, q, k, v)
                eager = [str(w.message) for w in caught if "without torch.compile" in str(w.message)]
                for text, w in {str(w.message): w for w in caught}.items():  # each other warning once
                    if "without torch.compile" not in text:
                        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
                if name == "flex" and (FLEX_WATCH.seen or eager):
                    print(f"WARNING: FlexAttention fell back to eager at d{d} s{s} {case.name} "
                          f"({(FLEX_WATCH.seen + eager)[0][:120]}): its figures are not compiled Flex's", flush=True)
                    row["flex_eager"] = True
                    FLEX_WATCH.seen.clear()
                row["ms"][name] = ms
                row[name] = round(2.5 * fwd_flops / ms["bwd"] / 1e9, 1)  # backward TFLOP/s
                row["fwd_tflops"][name] = round(fwd_flops / ms["fwd"] / 1e9, 1)
            except Exception as e:
                row[name] = None
                print(f"{name} d{d} s{s} {case.name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
        print(json.dumps(row), flush=True)
        rows.append(row)
        if json_path:
            with open(json_path, "w") as f:
                json.dump(rows, f, indent=1)
        del q, k, v
        torch.cuda.empty_cache()
    return rows


def speed(row, a, b, key="bwd"):
    """How many times faster a runs than b (b's time / a's time); '-' when either is missing."""
    ms = row.get("ms", {})
    if a not in ms or b not in ms:
        return "-"
    return f"{ms[b][key] / ms[a][key]:.2f}"


def print_tables(rows, variant_shape):
    def num(x, digits=1):
        return "-" if x is None else f"{x:.{digits}f}"

    def table(title, header, lines):
        widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
        print("\n" + title)
        for line in [header] + lines:
            print("  ".join(str(x).rjust(w) if i else str(x).ljust(w) for i, (x, w) in enumerate(zip(line, widths))))

    names = ("flashtile", "flashtile_det", "fa4", "sdpa_cudnn", "sdpa_flash", "flex")
    lines = []
    for r in rows:
        if r.get("case", "causal" if r.get("causal") else "plain") not in ("plain", "causal"):
            continue
        label = f"hd{r['d']} {r['seqlen'] / 1024:g}k {'c' if r['causal'] else 'nc'}"
        fwd = r.get("fwd_tflops", {})
        lines.append([label] + [num(r.get(n)) for n in names] +
                     [speed(r, "flashtile", n) for n in ("fa4", "sdpa_cudnn", "flex")] +
                     [speed(r, "flashtile_det", "flashtile")] + [num(fwd.get(n)) for n in names[:1] + names[2:4]])
    if lines:
        table("backward TFLOP/s (forward: last three columns); speed ratios (> 1: flashtile faster)",
              ["case", "flashtile", "det", "fa4", "cudnn", "fa2", "flex", "ft/fa4", "ft/cudnn", "ft/flex", "det/ft",
               "fwd ft", "fwd fa4", "fwd cudnn"], lines)
    lines = []
    for r in rows:
        if (r["d"], r["seqlen"]) != variant_shape or "case" not in r:
            continue
        ms = r["ms"]
        lines.append([r["case"]] + [num(ms[n][key], 2) if n in ms else "-"
                                    for key in ("fwd", "bwd", "step") for n in ("flashtile", "fa4", "flex")] +
                     [speed(r, "flashtile", n, key) for key in ("bwd", "step") for n in ("fa4", "flex")])
    if lines:
        d, s = variant_shape
        table(f"variants at hd{d} {s / 1024:g}k: milliseconds, forward (grad enabled), backward and training step "
              "(forward + backward); speed ratios (> 1: flashtile faster)",
              ["variant", "fwd ft", "fwd fa4", "fwd flex", "bwd ft", "bwd fa4", "bwd flex", "step ft", "step fa4",
               "step flex", "bwd ft/fa4", "bwd ft/flex", "step ft/fa4", "step ft/flex"], lines)


def pairs_arg(text):
    return [tuple(int(x) for x in item.split(":")) for item in text.split(",") if item]


def main():
    parser = argparse.ArgumentParser(description="flashtile's attention backward beside FA4, cuDNN, FA2 and Flex "
                                                 "(the module's docstring says how each is timed)")
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--bench", action="store_true", help="plain and causal at --head-dims x --seqlens (--shapes)")
    parser.add_argument("--variants", action="store_true",
                        help="plain, causal, softcap 30, ALiBi and a causal window of 1024 at --variant-shape, with "
                             "training-step times (with --bench too: both tables from one run)")
    parser.add_argument("--head-dims", default="64,128", help="any of 32,64,96,128,192,256")
    parser.add_argument("--seqlens", default="1024,2048,4096,8192")
    parser.add_argument("--shapes", default="", help="D:S pairs timed instead of --head-dims x --seqlens, in order")
    parser.add_argument("--variant-shape", default="128:8192", help="D:S of --variants")
    parser.add_argument("--json", default="", help="write every row to this file (after each case)")
    parser.add_argument("--table", default="", help="only print the tables of a --json file")
    parser.add_argument("--peers", default="sdpa_flash,sdpa_cudnn,flex,fa4", help="the peers timed beside flashtile")
    parser.add_argument("--flex-shapes", default="all",
                        help="D:S pairs where Flex runs (each shape and case is a compile), or all")
    parser.add_argument("--deterministic", action="store_true",
                        help="also time flashtile's deterministic backward (column flashtile_det)")
    parser.add_argument("--schedule", default="", help="the schedule flashtile's calls name (default: the runtime's)")
    parser.add_argument("--strict", action="store_true", help="with --schedule: no fallback to another schedule")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"), help="the --bench element type")
    parser.add_argument("--check-head-dims", default="", help="--check only the cases of these head dims")
    parser.add_argument("--check-deterministic", action="store_true",
                        help="--check flashtile's deterministic backward (deterministic=True in every call)")
    parser.add_argument("--also", default="", help="--bench: also time flashtile naming these schedules (strict), "
                                                   "columns flashtile_<schedule>")
    args = parser.parse_args()
    variant_shape = pairs_arg(args.variant_shape)[0]
    if args.table:
        with open(args.table) as f:
            print_tables(json.load(f), variant_shape)
        return
    if torch is None or flashtile is None:
        raise SystemExit("backward_bench.py needs torch and flashtile (the GPU machine's python3 with the wheel)")
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
        # hd 192 again: causal GQA over a partial 96-key tile (swap-dkv), fp16 with unequal lengths, bottom-right
        cases.append((2, 300, 300, 4, 2, 192, True, 0.0, (-1, -1), torch.bfloat16))
        cases.append((1, 257, 333, 2, 2, 192, False, 0.0, (-1, -1), torch.float16))
        if args.check_head_dims:
            keep = {int(x) for x in args.check_head_dims.split(",")}
            cases = [c for c in cases if c[5] in keep]
        failures = check(cases, deterministic=args.check_deterministic)
        print(f"check: {failures} of {len(cases)} cases failed", flush=True)
    if args.bench or args.variants:
        shapes = []
        if args.bench:
            shapes = pairs_arg(args.shapes) or [(int(d), int(s)) for d in args.head_dims.split(",")
                                                 for s in args.seqlens.split(",")]
        jobs = [(*variant_shape, case) for case in VARIANTS] if args.variants else []
        jobs += [(d, s, case) for d, s in shapes for case in (PLAIN, CAUSAL)
                 if not (args.variants and (d, s) == variant_shape)]
        flex_shapes = None if args.flex_shapes == "all" else set(pairs_arg(args.flex_shapes)) | {variant_shape}
        rows = bench(jobs, torch.bfloat16 if args.dtype == "bf16" else torch.float16, tuple(x for x in args.peers.split(",") if x),
                     args.deterministic, tuple(x for x in args.also.split(",") if x), flex_shapes, args.json)
        print_tables(rows, variant_shape)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
