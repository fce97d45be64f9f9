#!/usr/bin/env python3
"""Decode timings: flashtile's decode schedule (split-KV) vs PyTorch SDPA's FLASH and CUDNN backends, same process.

Runs on a GPU machine with PyTorch. flashtile is called through its C ABI (libflashtile.so, CApiDecode.h) with
kernels from ahead-of-time directories (fa2 and decode: bench/device/prepare-decode.sh). For every case:
  correctness  ours vs an fp32 reference of all query rows (bottom-right causal), FlashAttention's rule
               max|out - ref| <= 2 * max|sdpa_flash - ref| + 1e-5;
  speed        triton.testing.do_bench median (it flushes L2 between runs), bandwidth = bytes of K and V a call
               reads (B * Sk * Hkv * (D + Dv) * 2) / time, for every backend alike.
PyTorch's `is_causal` is top-left aligned, which for a few query rows over a long cache would attend one key: the
SDPA timings use no mask (a handful of keys more per row, the same bytes read). GQA goes through
enable_gqa=True where a backend takes it; otherwise K and V are expanded to the query heads first (marked
"expanded": that backend then reads group-size times more bytes than the bandwidth column counts).
KV cache (--kvcache, on by default): the cases of issue 13's table through flashtile_forward_kvcache
(CApiKvCache.h) on a contiguous cache and on a paged cache (--page-size, default 64; pages of a pool in shuffled
order through a block table) holding the same keys, with SDPA's FLASH and CUDNN backends on the same K/V in the same
run (SDPA has no paged cache: paged is compared with our contiguous call). Target: paged >= 0.95x contiguous.
Output: a table on stdout and every row as JSON (--json).
"""
import argparse
import ctypes
import datetime
import json
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from timing import bench  # noqa: E402  (bench/timing.py: the median milliseconds of a call)

DTYPES = {"bf16": (torch.bfloat16, 1), "f16": (torch.float16, 0)}

# (label, batch, heads_q, heads_kv, seqlen_q, seqlen_k): issue 13's table, speculative decoding, a paged-free long
# context, and a prefill shape that must stay where it was (it runs the fa2 schedule).
CASES = [
    ("B16 GQA 32/8 kv32k", 16, 32, 8, 1, 32768),
    ("B64 GQA 32/8 kv8k", 64, 32, 8, 1, 8192),
    ("B1 GQA 32/8 kv128k", 1, 32, 8, 1, 131072),
    ("B16 MHA 32/32 kv8k", 16, 32, 32, 1, 8192),
    ("spec q4 B16 GQA 32/8 kv32k", 16, 32, 8, 4, 32768),
    ("spec q8 B16 GQA 32/8 kv32k", 16, 32, 8, 8, 32768),
    ("spec q16 B16 GQA 32/8 kv32k", 16, 32, 8, 16, 32768),
    ("prefill B2 H16 8k causal", 2, 16, 16, 8192, 8192),
]


class KvCacheCall(ctypes.Structure):
    """flashtile_kvcache_call (CApiKvCache.h), field for field."""
    _fields_ = ([("size", ctypes.c_ulonglong)]
                + [(n, ctypes.c_void_p) for n in ("q", "k_cache", "v_cache", "o", "lse", "k_new", "v_new",
                                                  "cache_seqlens", "cache_batch_idx", "block_table",
                                                  "cache_seqlens_host", "cache_batch_idx_host", "block_table_host",
                                                  "workspace", "stream")]
                + [("inputs", ctypes.c_void_p * 4), ("variant", ctypes.c_char_p),
                   ("workspace_bytes", ctypes.c_ulonglong)]
                + [(n, ctypes.c_longlong * 4) for n in ("q_stride", "o_stride", "k_cache_stride", "v_cache_stride",
                                                         "k_new_stride", "v_new_stride")]
                + [("block_table_stride", ctypes.c_longlong)]
                + [(n, ctypes.c_int) for n in ("dtype", "batch", "seqlen_q", "heads_q", "heads_kv", "head_dim",
                                               "head_dim_v", "cache_batch", "cache_seqlen", "num_pages", "page_size",
                                               "max_pages_per_seq", "seqlen_new", "num_splits", "num_params",
                                               "num_inputs")]
                + [("softmax_scale", ctypes.c_float), ("params", ctypes.c_float * 8)]
                + [("rotary_cos", ctypes.c_void_p), ("rotary_sin", ctypes.c_void_p)]
                + [(n, ctypes.c_int) for n in ("rotary_dim", "seqlen_ro", "rotary_interleaved")])


class Flashtile:
    def __init__(self, lib, aot_dirs):
        self.lib = ctypes.CDLL(lib)
        self.lib.flashtile_create.restype = ctypes.c_void_p
        self.lib.flashtile_last_error.restype = ctypes.c_char_p
        self.lib.flashtile_version.restype = ctypes.c_char_p
        self.lib.flashtile_load_aot.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        ll4 = ctypes.c_longlong * 4
        self.ll4 = ll4
        self.lib.flashtile_forward_decode.argtypes = (
            [ctypes.c_void_p] * 6 + [ctypes.c_int] * 8 + [ll4, ll4, ll4, ll4, ctypes.c_float, ctypes.c_char_p,
                                                          ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                                          ctypes.c_size_t, ctypes.c_void_p])
        self.lib.flashtile_forward_kvcache.argtypes = [ctypes.c_void_p, ctypes.POINTER(KvCacheCall)]
        self.rt = self.lib.flashtile_create()
        if not self.rt:
            raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())
        for d in aot_dirs:
            if self.lib.flashtile_load_aot(self.rt, d.encode()) != 0:
                raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())
        self.version = self.lib.flashtile_version().decode()

    def forward(self, q, k, v, o, lse, causal, splits=0):
        b, sq, hq, d = q.shape
        sk, hk = k.shape[1], k.shape[2]
        rc = self.lib.flashtile_forward_decode(
            self.rt, q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr(),
            DTYPES["bf16" if q.dtype == torch.bfloat16 else "f16"][1], b, sq, sk, hq, hk, d, v.shape[3],
            self.ll4(*q.stride()), self.ll4(*k.stride()), self.ll4(*v.stride()), self.ll4(*o.stride()),
            0.0, b"causal" if causal else b"none", None, splits, None, 0,
            ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc != 0:
            raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())


    def kvcache_call(self, q, k_cache, v_cache, o, lse, cache_seqlens, block_table=None, causal=True, splits=0):
        """A flashtile_kvcache_call over a contiguous cache (block_table None) or a paged one; its ctypes struct is
        built once and reused, as a serving loop would."""
        b, sq, hq, d = q.shape
        call = KvCacheCall()
        call.size = ctypes.sizeof(KvCacheCall)
        call.q, call.k_cache, call.v_cache, call.o, call.lse = (t.data_ptr() for t in (q, k_cache, v_cache, o, lse))
        call.cache_seqlens = cache_seqlens.data_ptr()
        for name, t in (("q_stride", q), ("o_stride", o), ("k_cache_stride", k_cache), ("v_cache_stride", v_cache)):
            getattr(call, name)[:] = list(t.stride())
        call.dtype = DTYPES["bf16" if q.dtype == torch.bfloat16 else "f16"][1]
        call.batch, call.seqlen_q, call.heads_q, call.heads_kv = b, sq, hq, k_cache.shape[2]
        call.head_dim, call.head_dim_v = d, v_cache.shape[3]
        if block_table is None:
            call.cache_batch, call.cache_seqlen = k_cache.shape[0], k_cache.shape[1]
        else:
            call.block_table = block_table.data_ptr()
            call.num_pages, call.page_size = k_cache.shape[0], k_cache.shape[1]
            call.max_pages_per_seq, call.block_table_stride = block_table.shape[1], block_table.stride(0)
        call.num_splits = splits
        call.variant = b"causal" if causal else b"none"
        pointer = ctypes.pointer(call)

        def run():
            call.stream = torch.cuda.current_stream().cuda_stream
            if self.lib.flashtile_forward_kvcache(self.rt, pointer) != 0:
                raise RuntimeError("flashtile: " + self.lib.flashtile_last_error().decode())
        return run


def reference(q, k, v, causal):
    """fp32 attention, bottom-right causal: (B, Sq, H, D)."""
    b, sq, hq, d = q.shape
    sk, hk = k.shape[1], k.shape[2]
    qq = q.float().transpose(1, 2)
    kk = k.float().transpose(1, 2).repeat_interleave(hq // hk, 1)
    vv = v.float().transpose(1, 2).repeat_interleave(hq // hk, 1)
    s = torch.matmul(qq, kk.transpose(-1, -2)) / math.sqrt(d)
    if causal:
        i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
        j = torch.arange(sk, device=q.device)[None, :]
        s = s.masked_fill(j > i, float("-inf"))
    return torch.matmul(torch.softmax(s, -1), vv).transpose(1, 2)


def sdpa_fn(backend, q, k, v, causal_prefill):
    """A closure timing one SDPA backend, and whether K/V had to be expanded for GQA."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    group = q.shape[2] // k.shape[2]

    def call(kk, vv, gqa):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, kk, vv, is_causal=causal_prefill, enable_gqa=gqa)

    try:
        call(kt, vt, group > 1)
        torch.cuda.synchronize()
        return (lambda: call(kt, vt, group > 1)), False
    except RuntimeError:
        if group == 1:
            raise
    ke, ve = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
    call(ke, ve, False)
    torch.cuda.synchronize()
    return (lambda: call(ke, ve, False)), True


def run_case(ft, label, b, hq, hk, sq, sk, d, dtype, splits):
    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    o = torch.empty_like(q)
    lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
    prefill = sq > 16
    row = {"case": label, "batch": b, "heads_q": hq, "heads_kv": hk, "seqlen_q": sq, "seqlen_k": sk, "head_dim": d,
           "splits": splits}
    kv_bytes = 2 * b * sk * hk * d * q.element_size()
    # Correctness (all rows, fp32 reference, against the FLASH backend's distance from it).
    ft.forward(q, k, v, o, lse, causal=True, splits=splits)
    torch.cuda.synchronize()
    if b * hq * sq * sk <= (1 << 31):
        ref = reference(q, k, v, causal=True)
        err = (o.float() - ref).abs().max().item()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            lowp_o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(hq // hk, 1),
                v.transpose(1, 2).repeat_interleave(hq // hk, 1), is_causal=prefill).transpose(1, 2)
        err_lowp = (lowp_o.float() - reference(q, k, v, causal=prefill)).abs().max().item()
        row.update(err=err, err_lowp=err_lowp, ok=err <= 2 * err_lowp + 1e-5)
    row["flashtile_ms"] = bench(lambda: ft.forward(q, k, v, o, lse, causal=True, splits=splits))
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            fn, expanded = sdpa_fn(backend, q, k, v, prefill)
            row[name + "_ms"] = bench(fn)
            row[name + "_expanded"] = expanded
        except RuntimeError as e:
            row[name + "_error"] = str(e).splitlines()[0][:120]
    for key in ("flashtile", "flash", "cudnn"):
        if key + "_ms" in row:
            row[key + "_gbs"] = kv_bytes / (row[key + "_ms"] * 1e-3) / 1e9
    if prefill:
        flops = 4 * b * hq * d * sum(min(sk, i + sk - sq + 1) for i in range(sq))
        for key in ("flashtile", "flash", "cudnn"):
            if key + "_ms" in row:
                row[key + "_tflops"] = flops / (row[key + "_ms"] * 1e-3) / 1e12
    return row


def paged_copy(k, v, page_size, generator, in_order=False):
    """The pool (pages in shuffled order, or in order) and block table of a paged cache holding dense K/V (B, Sk, H,
    D)."""
    b, sk, hk, d = k.shape
    per_seq = (sk + page_size - 1) // page_size
    pad = per_seq * page_size - sk
    if pad:
        k = torch.cat([k, k.new_zeros(b, pad, hk, d)], 1)
        v = torch.cat([v, v.new_zeros(b, pad, hk, v.shape[3])], 1)
    n = b * per_seq
    perm = (torch.arange(n) if in_order else torch.randperm(n, generator=generator)).cuda()
    k_pool = torch.empty(n, page_size, hk, d, device=k.device, dtype=k.dtype)
    v_pool = torch.empty(n, page_size, hk, v.shape[3], device=v.device, dtype=v.dtype)
    k_pool[perm] = k.reshape(n, page_size, hk, d)
    v_pool[perm] = v.reshape(n, page_size, hk, v.shape[3])
    return k_pool, v_pool, perm.to(torch.int32).reshape(b, per_seq).contiguous()


def run_kvcache_case(ft, label, b, hq, hk, sq, sk, d, dtype, page_size, splits, in_order=False):
    """One of issue 13's decode cases on a contiguous and on a paged KV cache, with SDPA on the same K/V."""
    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype)
    k = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    v = torch.randn(b, sk, hk, d, device="cuda", dtype=dtype)
    o = torch.empty_like(q)
    lse = torch.empty(b, hq, sq, device="cuda", dtype=torch.float32)
    seqlens = torch.full((b,), sk, device="cuda", dtype=torch.int32)
    k_pool, v_pool, table = paged_copy(k, v, page_size, torch.Generator().manual_seed(1), in_order)
    contiguous = ft.kvcache_call(q, k, v, o, lse, seqlens, splits=splits)
    paged = ft.kvcache_call(q, k_pool, v_pool, o, lse, seqlens, block_table=table, splits=splits)
    row = {"case": label + f" kvcache page {page_size}", "batch": b, "heads_q": hq, "heads_kv": hk, "seqlen_q": sq,
           "seqlen_k": sk, "head_dim": d, "page_size": page_size, "splits": splits}
    kv_bytes = 2 * b * sk * hk * d * q.element_size()
    if b * hq * sq * sk <= (1 << 31):
        ref = reference(q, k, v, causal=True)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            lowp_o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(hq // hk, 1),
                v.transpose(1, 2).repeat_interleave(hq // hk, 1)).transpose(1, 2)
        err_lowp = (lowp_o.float() - reference(q, k, v, causal=False)).abs().max().item()
        for name, fn in (("contiguous", contiguous), ("paged", paged)):
            o.fill_(float("nan"))
            fn()
            torch.cuda.synchronize()
            err = (o.float() - ref).abs().max().item()
            row[name + "_err"] = err
            row[name + "_ok"] = err <= 2 * err_lowp + 1e-5
        row["err_lowp"] = err_lowp
    for name, fn in (("contiguous", contiguous), ("paged", paged)):
        row[name + "_ms"] = bench(fn)
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            fn, expanded = sdpa_fn(backend, q, k, v, False)
            row[name + "_ms"] = bench(fn)
            row[name + "_expanded"] = expanded
        except RuntimeError as e:
            row[name + "_error"] = str(e).splitlines()[0][:120]
    for key in ("contiguous", "paged", "flash", "cudnn"):
        if key + "_ms" in row:
            row[key + "_gbs"] = kv_bytes / (row[key + "_ms"] * 1e-3) / 1e9
    row["paged_vs_contiguous"] = row["contiguous_ms"] / row["paged_ms"]
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True, help="path to libflashtile.so")
    ap.add_argument("--aot-dir", required=True, help="fa2 kernels (`flashtile aot`)")
    ap.add_argument("--decode-aot-dir", required=True, help="decode kernels (`flashtile aot --schedule decode`)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--splits", default="0", help="comma-separated split counts to time (0: the runtime's choice)")
    ap.add_argument("--cases", default=None, help="substring filter on the case labels")
    ap.add_argument("--kvcache", type=int, default=1, help="1: also the KV-cache rows (contiguous vs paged)")
    ap.add_argument("--page-size", type=int, default=64, help="page size of the paged KV-cache rows")
    ap.add_argument("--pages-in-order", action="store_true",
                    help="paged rows: pages in the pool in sequence order (identity block table) instead of shuffled")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    ft = Flashtile(args.lib, [args.aot_dir, args.decode_aot_dir])
    dtype = DTYPES[args.dtype][0]
    print(f"flashtile {ft.version}, torch {torch.__version__}, {torch.cuda.get_device_name()}, "
          f"{datetime.date.today()}")
    print(f"{'case':<30} {'splits':>6} {'flashtile GB/s':>15} {'FLASH GB/s':>11} {'CUDNN GB/s':>11} "
          f"{'x cuDNN':>8} {'err/err_lowp':>13}")
    rows = []
    for label, b, hq, hk, sq, sk in CASES:
        if args.cases and args.cases not in label:
            continue
        for splits in [int(s) for s in args.splits.split(",")]:
            row = run_case(ft, label, b, hq, hk, sq, sk, args.head_dim, dtype, splits)
            rows.append(row)
            gbs = lambda key: f"{row[key + '_gbs']:.0f}" + ("*" if row.get(key + "_expanded") else "") \
                if key + "_gbs" in row else "-"
            ratio = row["flashtile_gbs"] / row["cudnn_gbs"] if "cudnn_gbs" in row else float("nan")
            check = (f"{row['err']:.2e}/{row['err_lowp']:.2e}" + ("" if row["ok"] else " FAIL")) if "err" in row \
                else "-"
            print(f"{label:<30} {splits:>6} {gbs('flashtile'):>15} {gbs('flash'):>11} {gbs('cudnn'):>11} "
                  f"{ratio:>8.2f} {check:>13}")
    if args.kvcache:
        print(f"\nKV cache (flashtile_forward_kvcache, causal): contiguous vs paged (page {args.page_size}, "
              f"{'pages in order' if args.pages_in_order else 'shuffled pages'}), SDPA on the same K/V")
        print(f"{'case':<30} {'splits':>6} {'contig GB/s':>12} {'paged GB/s':>11} {'paged/contig':>13} "
              f"{'FLASH GB/s':>11} {'CUDNN GB/s':>11} {'paged x cuDNN':>14} {'check':>6}")
        for label, b, hq, hk, sq, sk in CASES:
            if sq > 16 or (args.cases and args.cases not in label):
                continue
            for splits in [int(s) for s in args.splits.split(",")]:
                row = run_kvcache_case(ft, label, b, hq, hk, sq, sk, args.head_dim, dtype, args.page_size, splits,
                                       args.pages_in_order)
                rows.append(row)
                gbs = lambda key: f"{row[key + '_gbs']:.0f}" + ("*" if row.get(key + "_expanded") else "") \
                    if key + "_gbs" in row else "-"
                vs_cudnn = row["paged_gbs"] / row["cudnn_gbs"] if "cudnn_gbs" in row else float("nan")
                check = ("ok" if row["contiguous_ok"] and row["paged_ok"] else "FAIL") if "paged_ok" in row else "-"
                print(f"{label:<30} {splits:>6} {gbs('contiguous'):>12} {gbs('paged'):>11} "
                      f"{row['paged_vs_contiguous']:>13.3f} {gbs('flash'):>11} {gbs('cudnn'):>11} {vs_cudnn:>14.2f} "
                      f"{check:>6}")
    print("* K/V expanded to the query heads for that backend (it reads more bytes than counted)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
