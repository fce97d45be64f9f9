#!/usr/bin/env python3
"""Variants on the GPU: correctness against PyTorch references, and speed next to our plain kernel and FlexAttention.

For every built-in variant (kernels from `flashtile aot --variants ...`, called through libflashtile.so):
  check   fresh random inputs, several shapes incl. Sq != Sk; max|out - ref_fp32| <= k * max|ref_lowp - ref_fp32| +
          1e-5 with k = 2 (3 for softcap), where ref_lowp runs the same math with bf16/f16 matmuls and P; LSE too.
          Then once more over packed sequences (flashtile_forward_varlen_variant), each against its own reference.
          At every head dim of --head-dims (D or D:DV) and dtype of --dtypes; --strict makes a call whose preferred
          (or named) schedule has no kernel fail instead of falling back (flashtile_set_strict_schedule).
  speed   bf16, head dim 128, B=2, H=16, Sq=Sk=8192: useful-FLOP TFLOP/s (4*D*attended pairs) of the variant, of our
          plain kernel with the same masking (causal or none) and of FlexAttention's version (torch.compile); for
          document_mask also of our plain causal kernel over the same documents as packed sequences (varlen), which
          attends exactly the same pairs.
"""
import argparse
import ctypes
import itertools
import math
import sys

import torch
import torch._dynamo

# Each variant/shape is a new FlexAttention specialization; the default limit (8) would fall back to eager.
torch._dynamo.config.recompile_limit = 256

from bench_attention import Flashtile, bench, DTYPES

LOG2E = 1.4426950408889634
LL3 = ctypes.c_longlong * 3  # varlen strides: {seq, head, dim}


class Variant:
    def __init__(self, name, plain, params=(), tol=2.0, causal=None, window=None, softcap=None, alibi=False,
                 sinks=False, docs=False):
        self.name, self.plain, self.params, self.tol = name, plain, list(params), tol
        self.causal, self.window, self.softcap, self.alibi, self.sinks, self.docs = \
            causal, window, softcap, alibi, sinks, docs

    def inputs(self, b, h, sk, gen):
        if self.alibi:
            return [torch.rand(h, device="cuda", generator=gen) * 0.5 + 0.01]
        if self.sinks:
            return [torch.randn(h, device="cuda", generator=gen) * 2]
        if self.docs:  # documents of random lengths: doc_start[b][t] = first token of token t's document
            boundary = torch.rand(b, sk, device="cuda", generator=gen) < 8.0 / sk
            boundary[:, 0] = True
            t = torch.arange(sk, device="cuda").expand(b, sk)
            return [torch.cummax(torch.where(boundary, t, 0), 1).values.int().contiguous()]
        return []

    def mask(self, sq, sk, inputs, b):
        """bool (b or 1, 1, sq, sk): which keys each query sees; None = all."""
        i = torch.arange(sq, device="cuda")[:, None]
        j = torch.arange(sk, device="cuda")[None, :]
        ia = i + sk - sq  # bottom-right alignment
        m = torch.ones(sq, sk, dtype=torch.bool, device="cuda")
        if self.causal == "bottom_right":
            m &= j <= ia
        if self.causal == "top_left":
            m &= j <= i
        if self.window:
            left, right = self.window
            if left >= 0:
                m &= j >= ia - left
            if right >= 0:
                m &= j <= ia + right
        m = m[None, None]
        if self.docs:  # doc_start[b][i'] <= j (j <= i' is the causal term)
            start = inputs[0][:, ia.clamp(0, sk - 1)[:, 0]]  # (B, Sq)
            m = m & (j[None] >= start[:, :, None])[:, None]
        return m

    def reference(self, q, k, v, inputs, lowp):
        """q: (B, Sq, H, D); returns O (B, Sq, H, D) fp32 and LSE (B, H, Sq)."""
        b, sq, h, d = q.shape
        sk = k.shape[1]
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        if not lowp:
            qt, kt, vt = qt.float(), kt.float(), vt.float()
        s = torch.matmul(qt, kt.transpose(-1, -2)).float() / math.sqrt(d)
        if self.softcap:
            s = self.softcap * torch.tanh(s / self.softcap)
        if self.alibi:
            i = torch.arange(sq, device="cuda")[:, None] + sk - sq
            j = torch.arange(sk, device="cuda")[None, :]
            s = s - inputs[0][None, :, None, None] * (i - j).abs()[None, None].float()
        s = s.masked_fill(~self.mask(sq, sk, inputs, b), float("-inf"))
        if self.sinks:
            sink = inputs[0][None, :, None, None].expand(b, h, sq, 1)
            s = torch.cat([s, sink], -1)
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
        if self.sinks:
            p = p[..., :-1]
        if lowp:
            p = p.to(q.dtype)
        o = torch.matmul(p, vt).float().transpose(1, 2)
        if lowp:
            o = o.to(q.dtype).float()
        return o, lse

    def flex(self, sq, sk, inputs, b, h):
        from torch.nn.attention.flex_attention import create_block_mask
        score_mod, mask_mod = None, None
        if self.softcap:
            cap = self.softcap
            score_mod = lambda s, bb, hh, i, j: cap * torch.tanh(s / cap)
        if self.alibi:
            slopes = inputs[0]
            score_mod = lambda s, bb, hh, i, j: s - slopes[hh] * (i + sk - sq - j).abs()
        if self.sinks:
            return None  # FlexAttention has no sink term
        conds = []
        if self.causal == "bottom_right":
            conds.append(lambda bb, hh, i, j: j <= i + sk - sq)
        if self.causal == "top_left":
            conds.append(lambda bb, hh, i, j: j <= i)
        if self.window:
            left, right = self.window
            if left >= 0:
                conds.append(lambda bb, hh, i, j: j >= i + sk - sq - left)
            if right >= 0:
                conds.append(lambda bb, hh, i, j: j <= i + sk - sq + right)
        if self.docs:
            start = inputs[0]
            conds.append(lambda bb, hh, i, j: j >= start[bb, (i + sk - sq).clamp(0, sk - 1)])
        block_mask = None
        if conds:
            def mask_mod(bb, hh, i, j):
                r = conds[0](bb, hh, i, j)
                for c in conds[1:]:
                    r = r & c(bb, hh, i, j)
                return r
            block_mask = create_block_mask(mask_mod, b if self.docs else None, None, sq, sk)
        return score_mod, block_mask


VARIANTS = [
    Variant("causal", "causal", causal="bottom_right"),
    Variant("causal_top_left", "causal", causal="top_left"),
    Variant("sliding_window", "causal", params=[256, 0], window=(256, 0)),
    Variant("sliding_window_causal", "causal", params=[1024, -1], causal="bottom_right", window=(1024, -1)),
    Variant("softcap", "none", params=[30.0], tol=3.0, softcap=30.0),
    Variant("softcap_causal", "causal", params=[30.0], tol=3.0, causal="bottom_right", softcap=30.0),
    Variant("alibi", "none", alibi=True),
    Variant("alibi_causal", "causal", causal="bottom_right", alibi=True),
    Variant("sinks", "none", sinks=True),
    Variant("sinks_causal", "causal", causal="bottom_right", sinks=True),
    Variant("document_mask", "causal", causal="bottom_right", docs=True),
]


def call(ft, variant, q, k, v, o, lse, params, inputs):
    pa = (ctypes.c_float * max(1, len(params)))(*params)
    ia = (ctypes.c_void_p * max(1, len(inputs)))(*[x.data_ptr() for x in inputs])
    va = VariantArgs(ctypes.cast(pa, ctypes.c_void_p), len(params), ctypes.cast(ia, ctypes.c_void_p), len(inputs))
    b, sq, h, d = q.shape
    rc = ft.lib.flashtile_forward_variant(
        ft.rt, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), DTYPES[dt_name(q)][1], b, sq,
        k.shape[1], h, k.shape[2], d, v.shape[3], ft.ll4(*q.stride()), ft.ll4(*k.stride()), ft.ll4(*v.stride()),
        ft.ll4(*o.stride()), 0.0, variant.encode(), ctypes.byref(va),
        ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    if rc != 0:
        raise RuntimeError(f"flashtile {variant}: " + ft.lib.flashtile_last_error().decode())


def call_varlen(ft, variant, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, params, inputs):
    """Packed sequences (flash_attn_varlen_func layout): q (total_q, H, D), lse (H, total_q)."""
    pa = (ctypes.c_float * max(1, len(params)))(*params)
    ia = (ctypes.c_void_p * max(1, len(inputs)))(*[x.data_ptr() for x in inputs])
    va = VariantArgs(ctypes.cast(pa, ctypes.c_void_p), len(params), ctypes.cast(ia, ctypes.c_void_p), len(inputs))
    tq, h, d = q.shape
    rc = ft.lib.flashtile_forward_varlen_variant(
        ft.rt, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), cu_q.data_ptr(),
        cu_k.data_ptr(), DTYPES[dt_name(q)][1], cu_q.numel() - 1, tq, k.shape[0], max_q, max_k, h, k.shape[1], d,
        v.shape[2], LL3(*q.stride()), LL3(*k.stride()), LL3(*v.stride()), LL3(*o.stride()), 0.0,
        variant.encode(), ctypes.byref(va), ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    if rc != 0:
        raise RuntimeError(f"flashtile {variant} (varlen): " + ft.lib.flashtile_last_error().decode())


def check_varlen(ft, var, gen, h=4, hk=2, d=128, dv=None, dtype="bf16",
                 lengths=((300, 300), (0, 40), (129, 200), (64, 64), (1, 77))):
    """One packed batch of sequences of different lengths (one empty, Sq != Sk both ways); each sequence must match
    its own dense reference. Per-key inputs (doc_start) are packed per key row, positions within each sequence."""
    dt = DTYPES[dtype][0]
    dv = dv or d
    sq, sk = [a for a, _ in lengths], [b for _, b in lengths]
    cu_q = torch.tensor([0] + list(torch.tensor(sq).cumsum(0)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(torch.tensor(sk).cumsum(0)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(sq), h, d, device="cuda", dtype=dt, generator=gen)
    k = torch.randn(sum(sk), hk, d, device="cuda", dtype=dt, generator=gen)
    v = torch.randn(sum(sk), hk, dv, device="cuda", dtype=dt, generator=gen)
    per_seq = [var.inputs(1, h, n, gen) for n in sk]
    if var.docs:
        inputs = [torch.cat([x[0].reshape(-1) for x in per_seq]).contiguous()]
    else:
        inputs = per_seq[0]
        per_seq = [inputs] * len(sk)
    o = torch.full((sum(sq), h, dv), float("nan"), device="cuda", dtype=dt)
    lse = torch.full((h, sum(sq)), float("nan"), device="cuda")
    try:
        call_varlen(ft, var.name, q, k, v, o, lse, cu_q, cu_k, max(sq), max(sk), var.params, inputs)
    except RuntimeError as e:
        print(f"check {var.name:22} {dtype} hd={d}/{dv} varlen FAIL: {e}", flush=True)
        return False
    torch.cuda.synchronize()
    worst, ok = 0.0, True
    for i, (nq, nk) in enumerate(lengths):
        if nq == 0:
            continue
        q0, k0 = int(cu_q[i]), int(cu_k[i])
        qs = q[q0:q0 + nq][None]
        ks, vs = (x[k0:k0 + nk][None].repeat_interleave(h // hk, 2) for x in (k, v))
        ref, ref_lse = var.reference(qs, ks, vs, per_seq[i], lowp=False)
        low, _ = var.reference(qs, ks, vs, per_seq[i], lowp=True)
        err = (o[q0:q0 + nq].float() - ref[0]).abs().max().item()
        err_low = (low - ref).abs().max().item()
        got_lse = lse[:, q0:q0 + nq]
        finite = torch.isfinite(ref_lse[0])
        lse_err = (got_lse - ref_lse[0])[finite].abs().max().item() if finite.any() else 0.0
        lse_ok = bool(torch.equal(torch.isinf(got_lse), torch.isinf(ref_lse[0])))
        ok &= err <= var.tol * err_low + 1e-5 and lse_err <= 1e-3 and lse_ok and not math.isnan(err)
        worst = max(worst, err / max(err_low, 1e-12))
    print(f"check {var.name:22} {dtype} hd={d}/{dv} varlen {len(lengths)} sequences {list(lengths)} "
          f"worst err/lowp={worst:.2f} "
          f"(<= {var.tol}) {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


class VariantArgs(ctypes.Structure):
    _fields_ = [("params", ctypes.c_void_p), ("num_params", ctypes.c_int), ("inputs", ctypes.c_void_p),
                ("num_inputs", ctypes.c_int)]


def setup_argtypes(ft):
    ft.lib.flashtile_forward_variant.argtypes = (
        [ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ft.ll4] * 4 +
        [ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p])
    ft.lib.flashtile_forward_varlen_variant.argtypes = (
        [ctypes.c_void_p] * 8 + [ctypes.c_int] * 10 + [LL3] * 4 +
        [ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p])


def dt_name(t):
    return "bf16" if t.dtype == torch.bfloat16 else "f16"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--aot-dir", required=True)
    ap.add_argument("--schedule", default=None, help="run this schedule's kernels (fa1, fa2, fa3); default: the runtime's")
    ap.add_argument("--flex", action="store_true")
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--speed-seqlen", type=int, default=8192)
    ap.add_argument("--speed-seed", type=int, default=0,
                    help="seed of the speed inputs (document_mask's documents): fixed, so runs compare")
    ap.add_argument("--variants", default=None, help="comma-separated subset of the built-in variants")
    ap.add_argument("--head-dims", default="128", help="comma-separated D or D:DV of the checks (default 128)")
    ap.add_argument("--dtypes", default="bf16", help="comma-separated bf16, f16 of the checks (default bf16)")
    ap.add_argument("--strict", action="store_true",
                    help="a call whose preferred (or named) schedule has no kernel fails instead of falling back")
    ap.add_argument("--no-speed", action="store_true", help="the checks only")
    ap.add_argument("--no-check", action="store_true", help="the speed only")
    ap.add_argument("--speed-head-dim", type=int, default=128, help="head dim of the speed runs (default 128)")
    args = ap.parse_args()
    selected = [v for v in VARIANTS if args.variants is None or v.name in args.variants.split(",")]
    head_dims = [tuple(int(x) for x in (item.split(":") * 2)[:2]) for item in args.head_dims.split(",")]
    dtypes = args.dtypes.split(",")
    for dtype in dtypes:
        if dtype not in DTYPES:
            ap.error(f"--dtypes: {dtype!r}; accepted: {', '.join(DTYPES)}")
    ft = Flashtile(args.lib, args.aot_dir, args.schedule)
    setup_argtypes(ft)
    if args.strict and ft.lib.flashtile_set_strict_schedule(ctypes.c_void_p(ft.rt), 1) != 0:
        raise RuntimeError("flashtile: " + ft.lib.flashtile_last_error().decode())
    gen = torch.Generator(device="cuda")
    gen.seed()
    print(f"flashtile {ft.version} on {torch.cuda.get_device_name()}, seed {gen.initial_seed()}")
    failures, rows = 0, []
    shapes = [(2, 4, 2, 300, 300), (1, 4, 4, 128, 700), (2, 8, 2, 700, 128), (1, 16, 16, 1024, 1024)]
    checks = 0
    for var in [] if args.no_check else selected:
        for (d, dv), dtype in itertools.product(head_dims, dtypes):
            for (b, h, hk, sq, sk) in shapes:
                dt = DTYPES[dtype][0]
                q = torch.randn(b, sq, h, d, device="cuda", dtype=dt, generator=gen)
                k = torch.randn(b, sk, hk, d, device="cuda", dtype=dt, generator=gen)
                v = torch.randn(b, sk, hk, dv, device="cuda", dtype=dt, generator=gen)
                inputs = var.inputs(b, h, sk, gen)
                o = torch.full((b, sq, h, dv), float("nan"), device="cuda", dtype=dt)
                lse = torch.full((b, h, sq), float("nan"), device="cuda")
                checks += 1
                try:
                    call(ft, var.name, q, k, v, o, lse, var.params, inputs)
                except RuntimeError as e:
                    failures += 1
                    print(f"check {var.name:22} {dtype} hd={d}/{dv} B={b} H={h}/{hk} Sq={sq:5} Sk={sk:5} FAIL: {e}",
                          flush=True)
                    continue
                torch.cuda.synchronize()
                kr, vr = (x.repeat_interleave(h // hk, 2) for x in (k, v))
                ref, ref_lse = var.reference(q, kr, vr, inputs, lowp=False)
                low, _ = var.reference(q, kr, vr, inputs, lowp=True)
                err = (o.float() - ref).abs().max().item()
                err_low = (low - ref).abs().max().item()
                finite = torch.isfinite(ref_lse)
                lse_err = (lse - ref_lse)[finite].abs().max().item() if finite.any() else 0.0
                lse_ok = bool(torch.equal(torch.isinf(lse), torch.isinf(ref_lse)))
                ok = err <= var.tol * err_low + 1e-5 and lse_err <= 1e-3 and lse_ok and not math.isnan(err)
                failures += not ok
                print(f"check {var.name:22} {dtype} hd={d}/{dv} B={b} H={h}/{hk} Sq={sq:5} Sk={sk:5} err={err:.2e} "
                      f"lowp={err_low:.2e} ratio={err / max(err_low, 1e-12):.2f} (<= {var.tol}) lse_err={lse_err:.1e} "
                      f"{'PASS' if ok else 'FAIL'}", flush=True)
            checks += 1
            failures += not check_varlen(ft, var, gen, d=d, dv=dv, dtype=dtype)
    print(f"{checks - failures}/{checks} checks passed", flush=True)
    if args.no_speed:
        if failures:
            print(f"{failures} variant checks FAILED", file=sys.stderr)
            sys.exit(1)
        return

    # speed
    b, h, d, s = 2, 16, args.speed_head_dim, args.speed_seqlen
    q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    lse = torch.empty(b, h, s, device="cuda")
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    flex_attention = None
    if args.flex:
        from torch.nn.attention.flex_attention import flex_attention as fa
        flex_attention = torch.compile(fa)
    print(f"\nspeed: bf16 hd={d} B={b} H={h} S={s}, useful TFLOP/s (4*D*attended pairs)")
    print(f"{'variant':22} {'ours':>7} {'plain':>7} {'ratio':>6} {'flex':>7} {'ours/flex':>9} {'same':>7} "
          f"{'ratio':>6}   (same: our plain kernel on exactly the variant's mask, where one exists)")
    speed_gen = torch.Generator(device="cuda")
    for var in selected:
        speed_gen.manual_seed(args.speed_seed)  # the same inputs whichever variants run
        inputs = var.inputs(b, h, s, speed_gen)
        pairs = var.mask(s, s, inputs, b).expand(b, 1, s, s).sum().item() / b
        flops = 4 * b * h * d * pairs
        ours = flops / bench(lambda: call(ft, var.name, q, k, v, o, lse, var.params, inputs)) / 1e9
        plain_pairs = s * s if var.plain == "none" else s * (s + 1) / 2
        plain = 4 * b * h * d * plain_pairs / bench(lambda: call(ft, var.plain, q, k, v, o, lse, [], [])) / 1e9
        # The plain kernel with the same masking, where one exists: document_mask attends exactly what plain
        # causal attention does over each document as its own sequence (varlen, packed rows of both batches).
        same = None
        if var.docs:
            t = torch.arange(s, device="cuda").expand(b, s)
            starts = (t + torch.arange(b, device="cuda")[:, None] * s)[inputs[0] == t]
            cu = torch.cat([starts, torch.tensor([b * s], device="cuda")]).int().contiguous()
            longest = int((cu[1:] - cu[:-1]).max())
            qp, kp, vp, op = (x.reshape(b * s, h, d) for x in (q, k, v, o))
            lsep = torch.empty(h, b * s, device="cuda")
            same = flops / bench(lambda: call_varlen(ft, "causal", qp, kp, vp, op, lsep, cu, cu, longest, longest,
                                                     [], [])) / 1e9
            call(ft, var.name, q, k, v, o, lse, var.params, inputs)
            o_doc = o.clone()
            call_varlen(ft, "causal", qp, kp, vp, op, lsep, cu, cu, longest, longest, [], [])
            print(f"  ({len(cu) - 1} documents, longest {longest}; max |O - O(plain varlen)| = "
                  f"{(o_doc.float() - o.float()).abs().max().item():.1e})", flush=True)
        flex = None
        if flex_attention is not None:
            spec = var.flex(s, s, inputs, b, h)
            if spec is not None:
                score_mod, block_mask = spec
                flex = flops / bench(lambda: flex_attention(qt, kt, vt, score_mod=score_mod,
                                                             block_mask=block_mask)) / 1e9
        fs = f"{flex:7.1f}" if flex else "      -"
        fr = f"{ours / flex:9.2f}" if flex else "        -"
        ss = f"{same:7.1f} {ours / same:6.2f}" if same else "      -      -"
        print(f"{var.name:22} {ours:7.1f} {plain:7.1f} {ours / plain:6.2f} {fs} {fr} {ss}", flush=True)
        rows.append((var.name, ours, plain, flex, same))
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(f"| variant | flashtile | our plain ({'/'.join(sorted({v.plain for v in VARIANTS}))}) | ratio | "
                     f"FlexAttention | ours/Flex | our plain, same mask | ratio |\n|---|---|---|---|---|---|---|---|\n")
            for name, ours, plain, flex, same in rows:
                fh.write(f"| {name} | {ours:.0f} | {plain:.0f} | {ours / plain:.2f} | "
                         f"{f'{flex:.0f}' if flex else '-'} | {f'{ours / flex:.2f}' if flex else '-'} | "
                         f"{f'{same:.0f}' if same else '-'} | {f'{ours / same:.2f}' if same else '-'} |\n")
    if failures:
        print(f"{failures} variant checks FAILED", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
