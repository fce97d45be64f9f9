#!/usr/bin/env python3
"""Where a kernel's warps stall, instruction by instruction: reads the SASS page of Nsight Compute's source counters
(`ncu -i REPORT --page source --csv --print-source sass`, as bench/device/profile-backward-source.sh writes it) and
prints the sampled stall reasons over the kernel, the instructions with the most samples, and the samples of each
loop body (a backward branch's range), so that a loop's share of the time can be read beside its instructions.

    python3 bench/sass_stalls.py bwd-source.csv [--top 40] [--loops 300]
"""
import argparse
import collections
import csv
import re


def read(path):
    rows = list(csv.reader(open(path, newline="")))
    header = rows[1]
    col = {name: i for i, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]
    out = []
    for r in rows[2:]:
        if len(r) < len(header):
            continue
        num = lambda name: float(r[col[name]] or 0) if r[col[name]].replace(".", "", 1).isdigit() else 0.0
        out.append({"addr": int(r[col["Address"]], 16), "text": r[col["Source"]].strip(),
                    "samples": num("Warp Stall Sampling (All Samples)"),
                    "executed": num("Instructions Executed"),
                    "reasons": {h[6:]: num(h) for h in reasons}})
    base = out[0]["addr"] if out else 0
    for x in out:
        x["addr"] -= base
    return out


def loops(insts, min_len):
    """Backward branches to a label of the same listing: (first index, last index) of each body."""
    index = {x["addr"]: i for i, x in enumerate(insts)}
    found = []
    for i, x in enumerate(insts):
        m = re.search(r"BRA\s+(?:`\()?(0x[0-9a-f]+)", x["text"])
        if not m:
            continue
        target = int(m.group(1), 16)
        j = index.get(target)
        if j is not None and j < i and i - j >= min_len:
            found.append((j, i))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--loops", type=int, default=200, help="smallest loop body listed, in instructions")
    args = ap.parse_args()
    insts = read(args.csv)
    total = sum(x["samples"] for x in insts) or 1
    by_reason = collections.Counter()
    for x in insts:
        by_reason.update(x["reasons"])
    print(f"{len(insts)} instructions, {total:.0f} samples; by reason:")
    print("  " + ", ".join(f"{k} {v / total:.1%}" for k, v in by_reason.most_common(10) if v))
    print(f"\nthe {args.top} instructions with the most samples:")
    for x in sorted(insts, key=lambda x: -x["samples"])[:args.top]:
        top = ", ".join(f"{k} {v:.0f}" for k, v in sorted(x["reasons"].items(), key=lambda kv: -kv[1])[:3] if v)
        print(f"  {x['addr']:06x} {x['samples'] / total:6.2%}  {x['text'][:60]:60s} {top}")
    print("\nloop bodies (backward branches):")
    for j, i in loops(insts, args.loops):
        body = insts[j:i + 1]
        s = sum(x["samples"] for x in body)
        c = collections.Counter()
        for x in body:
            c.update(x["reasons"])
        print(f"  {insts[j]['addr']:06x}..{insts[i]['addr']:06x} {i - j + 1:5d} instructions {s / total:6.1%} of the "
              f"samples: " + ", ".join(f"{k} {v / (s or 1):.0%}" for k, v in c.most_common(5) if v))


if __name__ == "__main__":
    main()
