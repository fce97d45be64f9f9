"""The forward's tile configurations against each other and against FA4 and cuDNN, on the GPU machine
(bench/device/forward-knobs.sh runs it once per configuration, each in its own process).

flashtile is called through its Python package; the configuration under test is an ahead-of-time kernel library
(`flashtile aot --kinds forward --schedule fa3 --block-m ... --block-n ...`) that the runtime loads from
FLASHTILE_AOT_DIR, so its kernels replace the JIT's for the calls they serve (none: the JIT's defaults). Every row is
checked against an fp32 reference on sampled query rows with FlashAttention's rule (2x SDPA's error + 1e-5) before it
is timed. --peers fa4,sdpa_cudnn also times those. FLOPs: 4·b·h·s²·d, halved when causal (FlashAttention's count).
Prints one line a (shape, causal) and appends every row to --json.
"""
import argparse
import json
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
import triton.testing

import flashtile


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def reference_rows(q, k, v, rows, causal):
    """fp32 attention of the sampled query rows (b, len(rows), h, d)."""
    qf, kf, vf = (t.float() for t in (q, k, v))
    s = torch.einsum("brhd,bshd->bhrs", qf[:, rows], kf) / q.shape[-1] ** 0.5
    if causal:
        keys = torch.arange(k.shape[1], device=q.device)
        s = s.masked_fill(keys[None, None, None, :] > torch.tensor(rows, device=q.device)[None, None, :, None],
                          float("-inf"))
    return torch.einsum("bhrs,bshd->brhd", s.softmax(-1), vf)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", default=os.environ.get("FLASHTILE_AOT_DIR", "jit"), help="the configuration's name")
    ap.add_argument("--shapes", default="96:8192,96:16384", help="D:S pairs (16k tokens, hidden 2048)")
    ap.add_argument("--peers", default="", help="also time these: fa4, sdpa_cudnn")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    fa4 = None
    if "fa4" in args.peers:
        try:
            from flash_attn.cute import interface as fa4
        except Exception as e:  # not installed on this machine
            print(f"fa4: skipped ({type(e).__name__}: {str(e)[:120]})")
    rows = []
    for pair in args.shapes.split(","):
        d, s = map(int, pair.split(":"))
        b, h = max(1, 16384 // s), 2048 // d
        torch.manual_seed(d + s)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            flops = 4 * b * h * s * s * d / (2 if causal else 1)
            out = flashtile.flash_attn_func(q, k, v, causal=causal)
            sample = sorted(set([0, s - 1] + torch.randint(0, s, (30,)).tolist()))
            ref = reference_rows(q, k, v, sample, causal)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                lowp = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                                      is_causal=causal).transpose(1, 2)
            err = (out[:, sample].float() - ref).abs().max().item()
            err_lowp = (lowp[:, sample].float() - ref).abs().max().item()
            row = dict(label=args.label, d=d, seqlen=s, causal=causal, ok=err <= 2 * err_lowp + 1e-5,
                       tflops={"flashtile": flops / bench(lambda: flashtile.flash_attn_func(q, k, v, causal=causal))
                               / 1e9})
            if fa4 is not None:
                row["tflops"]["fa4"] = flops / bench(lambda: fa4.flash_attn_func(q, k, v, causal=causal)) / 1e9
            if "sdpa_cudnn" in args.peers:
                qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

                def cudnn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
                row["tflops"]["sdpa_cudnn"] = flops / bench(cudnn) / 1e9
            rows.append(row)
            figures = "  ".join(f"{n} {t:6.1f}" for n, t in row["tflops"].items())
            print(f"{args.label:12} hd{d} {s // 1024}k {'c ' if causal else 'nc'}  {figures}  "
                  f"{'ok' if row['ok'] else 'FAIL'} (err {err:.2e}, sdpa {err_lowp:.2e})", flush=True)
    if args.json:
        old = json.load(open(args.json)) if os.path.exists(args.json) else []
        json.dump(old + rows, open(args.json, "w"), indent=1)
    if not all(r["ok"] for r in rows):
        raise SystemExit("forward_knobs: a configuration failed the correctness check")


if __name__ == "__main__":
    main()
