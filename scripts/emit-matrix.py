#!/usr/bin/env python3
"""emit-matrix.py FLASHTILE_BINARY DIR: prints the CUDA of 585 configurations of every schedule (fa1, fa2, fa3,
decode: built-in variants x head dims 64/128/256/192:128 x bf16/f16 x shape classes, and knobs: qk-ahead stages, lazy
rescaling, the dynamic scheduler, no intra-warpgroup overlap, persistent staged blocks, KV caches with rotary, e4m3 KV caches) into DIR,
one .cu file each (.err for a configuration the compiler refused), two at a time. Two runs compared with `diff -r`
show what a compiler change does to every schedule's kernels (scripts/emit-all.sh covers fa2 in more shapes)."""
import subprocess, sys, os
from concurrent.futures import ThreadPoolExecutor
bin_, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
jobs = []
for v in "none causal sliding_window_causal softcap alibi_causal sinks sinks_causal document_mask causal_top_left".split():
    for dt in ("bf16", "f16"):
        for d in ("64", "128", "256", "192:128"):
            hd, hdv = (d.split(":") + [d])[:2]
            for sch in ("fa1", "fa2", "fa3", "decode"):
                for sc in ("default", "short"):
                    arch = "sm_80" if sch == "fa2" and sc == "short" else "sm_90a"
                    extra = ["--pack-gqa", "1"] if sch == "decode" and sc == "short" else []
                    jobs.append([sch, v, dt, hd, hdv, sc, arch] + extra)
jobs += [["decode", "none", "bf16", "128", "128", "default", "sm_90a", "--kv-cache", "1", "--rotary", "halves"],
         ["decode", "causal", "bf16", "128", "128", "default", "sm_90a", "--kv-cache", "1", "--pack-gqa", "1", "--rotary", "interleaved"],
         ["decode", "causal", "bf16", "128", "128", "default", "sm_90a", "--kv-cache", "1", "--kv-dtype", "e4m3"],
         ["decode", "none", "f16", "64", "64", "default", "sm_80", "--kv-cache", "1", "--kv-dtype", "e4m3", "--rotary", "halves"],
         ["fa3", "causal", "bf16", "128", "128", "default", "sm_90a", "--scheduler", "dynamic"],
         ["fa3", "causal", "bf16", "128", "128", "default", "sm_90a", "--intra-wg-overlap", "0"],
         ["fa3", "none", "bf16", "128", "128", "default", "sm_90a", "--persistent", "1", "--stage-o", "1"],
         ["fa2", "causal", "bf16", "128", "128", "default", "sm_90a", "--stages", "2"],
         ["fa2", "softcap", "bf16", "64", "64", "default", "sm_90a", "--stages", "2", "--rescale-threshold", "8"]]
def run(j):
    sch, v, dt, hd, hdv, sc, arch, *extra = j
    name = "_".join([sch, v, dt, hd, hdv, sc, arch] + [e.strip("-") for e in extra])
    r = subprocess.run([bin_, "emit", "--schedule", sch, "--variant", v, "--dtype", dt, "--head-dim", hd,
                        "--head-dim-v", hdv, "--shape-class", sc, "--arch", arch, *extra, "-o", f"{out}/{name}.cu"],
                       capture_output=True, text=True)
    if r.returncode:
        open(f"{out}/{name}.err", "w").write(r.stderr)
with ThreadPoolExecutor(2) as ex:
    list(ex.map(run, jobs))
print(len([f for f in os.listdir(out) if f.endswith(".cu")]), "cu,", len([f for f in os.listdir(out) if f.endswith(".err")]), "err")
