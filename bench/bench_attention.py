#!/usr/bin/env python3
"""flashtile vs PyTorch SDPA (FlashAttention-2 and cuDNN backends), FlexAttention and FlashAttention 4, same process,
same inputs.

Runs on a GPU machine with PyTorch. flashtile is called through its C ABI (libflashtile.so, CApi.h) with kernels
from an ahead-of-time directory (`flashtile aot`); PyTorch is only the harness. For every case:
  correctness  ours vs an fp32 reference on a sample of query rows, with FlashAttention's rule
               max|out - ref| <= 2 * max|sdpa_lowp - ref| + 1e-5 (sdpa_lowp: PyTorch's FLASH backend's output);
  speed        triton.testing.do_bench median (it flushes L2 between runs), TFLOP/s with FLOPs counted as
               FlashAttention does: 4*B*H*Sq*Sk*D, attended pairs only for causal.
FA4 (--fa4): flash-attn-4's CuTe kernels (`flash_attn.cute.interface.flash_attn_func`, its SM90 forward on Hopper),
where they import: bench/device/fa4-install.sh carries them to the GPU machine (put the PYTHONPATH it prints first).
Also measured in the same run: bf16 matmul TFLOP/s and device-copy GB/s (the ceilings), warm dispatch (host time
per flashtile_forward call on a tiny problem, one prepared ctypes call each) and, with --cli, NVRTC's cold compile of each
kernel of the grid on this machine; with --compile-times, the MLIR part of each (DSL -> CUDA), as measured by
`flashtile aot` on the build machine (this machine has no MLIR).
Output: a table on stdout, every row as JSON (--json), and a Markdown summary (--markdown).
"""
import argparse
import ctypes
import datetime
import json
import math
import os
import re
import subprocess
import sys
import time

import torch
import torch._dynamo

# Each variant/shape is a new FlexAttention specialization; the default limit (8) would fall back to eager.
torch._dynamo.config.recompile_limit = 256
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from fa4_peer import load_fa4  # bench/ is the script's folder, first on sys.path

from timing import bench  # noqa: E402  (bench/timing.py: the median milliseconds of a call)

DTYPES = {"bf16": (torch.bfloat16, 1), "f16": (torch.float16, 0)}


class Flashtile:
    def __init__(self, lib, aot_dir, schedule=None):
        self.lib = ctypes.CDLL(lib)
        self.lib.flashtile_create.restype = ctypes.c_void_p
        self.lib.flashtile_last_error.restype = ctypes.c_char_p
        self.lib.flashtile_version.restype = ctypes.c_char_p
        self.lib.flashtile_load_aot.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        ll4 = ctypes.c_longlong * 4
        self.ll4 = ll4
        self.lib.flashtile_forward.argtypes = (
            [ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 +
            [ll4, ll4, ll4, ll4, ctypes.c_float, ctypes.c_char_p, ctypes.c_void_p])
        self.rt = self.lib.flashtile_create()
        if not self.rt or self.lib.flashtile_load_aot(self.rt, aot_dir.encode()) != 0:
            raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())
        if schedule and self.lib.flashtile_set_schedule(ctypes.c_void_p(self.rt), schedule.encode()) != 0:
            raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())
        self.version = self.lib.flashtile_version().decode()

    def forward(self, q, k, v, o, lse, causal):
        """q, k: (B, S, H, D), v, o: (B, S, H, Dv) tensors (any strides, last dim contiguous); lse: fp32 (B, H, Sq)."""
        b, sq, hq, d = q.shape
        sk, hk = k.shape[1], k.shape[2]
        rc = self.lib.flashtile_forward(
            self.rt, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
            DTYPES[dtype_name(q.dtype)][1], b, sq, sk, hq, hk, d, v.shape[3],
            self.ll4(*q.stride()), self.ll4(*k.stride()), self.ll4(*v.stride()), self.ll4(*o.stride()),
            0.0, b"causal" if causal else b"none", ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc != 0:
            raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())


def dtype_name(dt):
    return "bf16" if dt == torch.bfloat16 else "f16"


def attended_pairs(sq, sk, causal):
    if not causal:
        return sq * sk
    # bottom-right aligned: query i sees keys j <= i + sk - sq
    return sum(max(0, min(sk, i + sk - sq + 1)) for i in range(sq))


def reference_rows(q, k, v, rows, causal):
    """fp32 attention for a subset of query rows: (B, len(rows), H, D)."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qs = q[:, rows].float().transpose(1, 2)                        # B H r D
    kk = k.float().transpose(1, 2).repeat_interleave(hq // hk, 1)  # B H Sk D
    vv = v.float().transpose(1, 2).repeat_interleave(hq // hk, 1)
    s = torch.matmul(qs, kk.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        i = torch.tensor(rows, device=q.device)[:, None] + (sk - sq)
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    p = torch.softmax(s, -1)
    return torch.matmul(p, vv).transpose(1, 2)


def ceilings():
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = bench(lambda: a @ a)
    mm = 2 * 8192 ** 3 / ms / 1e9
    x = torch.empty(2 * 1024 ** 3, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    ms = bench(lambda: y.copy_(x))
    copy = 2 * x.numel() / ms / 1e6
    del a, x, y
    return mm, copy


def parse_head_dims(text):
    """--head-dims items: D (head_dim = head_dim_v = D) or D:DV."""
    out = []
    for item in text.split(","):
        d, _, dv = item.partition(":")
        out.append((int(d), int(dv) if dv else int(d)))
    return out


def head_dims_label(hd, hdv):
    return f"{hd}" if hd == hdv else f"{hd}:{hdv}"


def run_case(ft, dtype, hd, seqlen, causal, tokens, hidden, flex, hdv=None, fa4=None):
    hdv = hdv or hd
    dt = DTYPES[dtype][0]
    b, h = max(1, tokens // seqlen), hidden // hd
    torch.manual_seed(seqlen * 7 + hd + causal)
    q, k = (torch.randn(b, seqlen, h, hd, device="cuda", dtype=dt) for _ in range(2))
    v = torch.randn(b, seqlen, h, hdv, device="cuda", dtype=dt)
    o = torch.empty_like(v)
    lse = torch.empty(b, h, seqlen, device="cuda", dtype=torch.float32)
    row = dict(dtype=dtype, hd=hd, hdv=hdv, seqlen=seqlen, batch=b, heads=h, causal=causal)
    flops = 2 * b * h * (hd + hdv) * attended_pairs(seqlen, seqlen, causal)

    # correctness on sampled rows (first, last, and random ones)
    ft.forward(q, k, v, o, lse, causal)
    torch.cuda.synchronize()
    rows = sorted(set([0, seqlen - 1] + torch.randint(0, seqlen, (126,)).tolist()))
    ref = reference_rows(q, k, v, rows, causal)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    lowp = None  # torch's FA2 where it runs the case (not head_dim_v != head_dim), else its next 16-bit backend
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel(backend):
                lowp = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
            break
        except RuntimeError:
            continue
    err = (o[:, rows].float() - ref).abs().max().item()
    err_lowp = (lowp[:, rows].float() - ref).abs().max().item()
    row.update(err=err, err_lowp=err_lowp, ok=bool(err <= 2 * err_lowp + 1e-5) and not math.isnan(err))

    def sdpa(backend):
        def fn():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        return fn

    timings = {"flashtile": lambda: ft.forward(q, k, v, o, lse, causal),
               "torch_flash": sdpa(SDPBackend.FLASH_ATTENTION),
               "torch_cudnn": sdpa(SDPBackend.CUDNN_ATTENTION)}
    if flex is not None:
        timings["flex"] = flex(qt, kt, vt, causal)
    if fa4 is not None:  # (batch, seqlen, heads, head_dim), as flashtile's
        timings["fa4"] = lambda: fa4.flash_attn_func(q, k, v, causal=causal)
    for name, fn in timings.items():
        try:
            ms = bench(fn)
            row[name + "_tflops"] = flops / ms / 1e9
        except Exception as e:  # a backend that does not support the case
            row[name + "_tflops"] = None
            row[name + "_error"] = str(e).splitlines()[0][:200]
    return row


def warm_dispatch_us(ft, calls=2000):
    """Host microseconds per flashtile_forward call on a tiny problem (cache hit: argument checks, kernel lookup,
    launch enqueue). The ctypes argument list is built once, so Python adds only the foreign call itself."""
    q = torch.randn(1, 64, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v, o = torch.randn_like(q), torch.randn_like(q), torch.empty_like(q)
    lse = torch.empty(1, 1, 64, device="cuda")
    ft.forward(q, k, v, o, lse, False)  # loads the kernel
    call_args = (ft.rt, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(), 1, 1, 64, 64, 1, 1,
                 128, 128, ft.ll4(*q.stride()), ft.ll4(*k.stride()), ft.ll4(*v.stride()), ft.ll4(*o.stride()), 0.0, b"none",
                 ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
    forward = ft.lib.flashtile_forward
    for _ in range(50):
        forward(*call_args)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        forward(*call_args)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def cold_compiles(cli, aot_dir, compile_times, dtypes, head_dims):
    """(kernel, MLIR ms from the build machine or None, NVRTC ms here or None) for the grid's none/causal kernels."""
    mlir = {}
    if compile_times and os.path.exists(compile_times):
        for line in open(compile_times):
            m = re.match(r"(?:\[\s*\d+/\d+\]\s+)?(\S+)\s.*mlir\s+([\d.]+) ms", line)  # "[k/N] name ... mlir X ms"
            if m:
                mlir[m.group(1)] = float(m.group(2))
    out = []
    for dtype in dtypes:
        for hd, hdv in head_dims:
            for variant in ("none", "causal"):
                name = f"flashtile_fa2_{variant}_{dtype}_d{hd}" + (f"_dv{hdv}" if hdv != hd else "")
                nvrtc = None
                src = os.path.join(aot_dir, name + ".cu")
                if cli and os.path.exists(src):
                    # A process of its own per kernel: each compile is cold (NVRTC's start-up included).
                    res = subprocess.run([cli, "nvrtc", src], capture_output=True, text=True)
                    m = re.search(r"([\d.]+) ms", res.stdout)
                    nvrtc = float(m.group(1)) if res.returncode == 0 and m else None
                out.append((name, mlir.get(name), nvrtc))
    return out


def make_flex():
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return None
    compiled = torch.compile(flex_attention)

    def factory(qt, kt, vt, causal):
        mask = None
        if causal:
            sq, sk = qt.shape[2], kt.shape[2]
            mask = create_block_mask(lambda b, h, i, j: j <= i + (sk - sq), None, None, sq, sk)
        return lambda: compiled(qt, kt, vt, block_mask=mask)
    return factory


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libflashtile.so")
    ap.add_argument("--aot-dir", required=True, help="kernels written by `flashtile aot`")
    ap.add_argument("--schedule", default=None, help="run this schedule's kernels (fa2, fa3); default: the runtime's")
    ap.add_argument("--dtypes", default="bf16,f16")
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--seqlens", default="512,1024,2048,4096,8192,16384")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen")
    ap.add_argument("--hidden", type=int, default=2048, help="heads * head_dim")
    ap.add_argument("--flex", action="store_true", help="also time FlexAttention (torch.compile, slow to start)")
    ap.add_argument("--fa4", action="store_true", help="also time FA4 (flash-attn-4's CuTe kernels; skipped with a "
                                                         "line where they do not import)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--cli", default=None, help="flashtile binary (runtime-only is enough): times NVRTC cold compiles")
    ap.add_argument("--compile-times", default=None,
                    help="`flashtile aot` output from the build machine: its MLIR times per kernel")
    args = ap.parse_args()

    ft = Flashtile(args.lib, args.aot_dir, args.schedule)
    gpu = torch.cuda.get_device_name()
    mm, copy = ceilings()
    print(f"flashtile {ft.version} on {gpu}, torch {torch.__version__}; ceilings: bf16 matmul {mm:.0f} TFLOP/s, "
          f"copy {copy:.0f} GB/s")
    dispatch = warm_dispatch_us(ft)
    print(f"warm dispatch: {dispatch:.2f} us per flashtile_forward call (host; one ctypes call each)")
    compiles = cold_compiles(args.cli, args.aot_dir, args.compile_times, args.dtypes.split(","),
                             parse_head_dims(args.head_dims))
    for name, mlir_ms, nvrtc_ms in compiles:
        if mlir_ms is not None or nvrtc_ms is not None:
            fmt = lambda x: f"{x:7.1f} ms" if x is not None else "      -   "
            print(f"cold compile {name:34} MLIR {fmt(mlir_ms)} (build machine)  NVRTC {fmt(nvrtc_ms)} (here)")
    flex = make_flex() if args.flex else None
    fa4 = load_fa4() if args.fa4 else None
    rows = []
    hdr = f"{'dtype':5} {'hd':>7} {'seqlen':>6} {'causal':>6} {'ours':>7} {'fa2':>7} {'cudnn':>7} {'flex':>7} " \
          f"{'fa4':>7} {'ours/fa2':>8} {'ours/cudnn':>10} {'ours/fa4':>8} {'err':>9} {'err_lowp':>9} ok"
    print(hdr)
    for dtype in args.dtypes.split(","):
        for hd, hdv in parse_head_dims(args.head_dims):
            for seqlen in map(int, args.seqlens.split(",")):
                for causal in (False, True):
                    r = run_case(ft, dtype, hd, seqlen, causal, args.tokens, args.hidden, flex, hdv, fa4)
                    rows.append(r)
                    f = lambda x: f"{x:7.1f}" if x else "      -"
                    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
                    print(f"{dtype:5} {head_dims_label(hd, hdv):>7} {seqlen:6} {str(causal):>6} {f(r['flashtile_tflops'])} "
                          f"{f(r['torch_flash_tflops'])} {f(r['torch_cudnn_tflops'])} {f(r.get('flex_tflops'))} "
                          f"{f(r.get('fa4_tflops'))} "
                          f"{ratio(r['flashtile_tflops'], r['torch_flash_tflops']):>8} "
                          f"{ratio(r['flashtile_tflops'], r['torch_cudnn_tflops']):>10} "
                          f"{ratio(r['flashtile_tflops'], r.get('fa4_tflops')):>8} "
                          f"{r['err']:9.2e} {r['err_lowp']:9.2e} {'PASS' if r['ok'] else 'FAIL'}", flush=True)
    meta = dict(date=datetime.date.today().isoformat(), gpu=gpu, torch=torch.__version__, flashtile=ft.version,
                matmul_tflops=mm, copy_gbs=copy, dispatch_us=dispatch, command=" ".join(sys.argv),
                cold_compiles=[dict(kernel=n, mlir_ms=a, nvrtc_ms=b) for n, a, b in compiles])
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(meta=meta, rows=rows), fh, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write(f"### {meta['date']} — {gpu}, flashtile {ft.version}, torch {torch.__version__}\n\n")
            fh.write(f"Ceilings in the same run: bf16 matmul {mm:.0f} TFLOP/s, device copy {copy:.0f} GB/s. "
                     f"Warm dispatch {dispatch:.2f} us per call.\n\n")
            timed = [(n, a, b) for n, a, b in compiles if a is not None or b is not None]
            if timed:
                fh.write("| kernel | MLIR ms (build machine) | NVRTC ms (here, cold) |\n|---|---|---|\n")
                for n, a, b in timed:
                    fh.write(f"| {n} | {a if a is not None else '-'} | {b if b is not None else '-'} |\n")
                fh.write("\n")
            fh.write("| dtype | hd | seqlen | causal | flashtile | torch FA2 | cuDNN | Flex | FA4 | ours/FA2 | ours/cuDNN "
                     "| ours/FA4 | check |\n")
            fh.write("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                g = lambda k: f"{r[k]:.0f}" if r.get(k) else "-"
                rt = lambda a, b: f"{r[a] / r[b]:.2f}" if r.get(a) and r.get(b) else "-"
                fh.write(f"| {r['dtype']} | {head_dims_label(r['hd'], r['hdv'])} | {r['seqlen']} | {r['causal']} | {g('flashtile_tflops')} | "
                         f"{g('torch_flash_tflops')} | {g('torch_cudnn_tflops')} | {g('flex_tflops')} | {g('fa4_tflops')} | "
                         f"{rt('flashtile_tflops', 'torch_flash_tflops')} | {rt('flashtile_tflops', 'torch_cudnn_tflops')} | "
                         f"{rt('flashtile_tflops', 'fa4_tflops')} | "
                         f"{'PASS' if r['ok'] else 'FAIL'} |\n")
    if not all(r["ok"] for r in rows):
        print("some cases FAILED the correctness check", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
