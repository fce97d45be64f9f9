#!/usr/bin/env python3
"""Every knob of every schedule, under every module kind the schedule builds, either changes what the compiler makes
(the scheduled IR or the CUDA) or is refused with a message that names it: a knob accepted and ignored would let a
user believe a kernel was tuned when it was not (issue 43: the fa2 backward took --rescale-threshold and printed the
same kernel).

The schedules, their knobs and the knobs' ranges come from `flashtile compile --help` (each knob's help says which
schedules take it), so a new schedule or knob is walked without touching this file. For each (schedule, kind) the
baseline is the kernel without knobs, on the first arch where it compiles; each knob is set to values across its range
until one changes the output. It fails if values were accepted, none changed anything and none was refused (a knob
that accepts only the value the schedule picks anyway is pinned, not ignored), or if a refusal does not name the
knob. A backward module has one kernel for every shape class, so --shape-class short is walked there too.

usage: knobs-apply.py FLASHTILE
"""
import re
import subprocess
import sys

ARCHS = ("sm_90a", "sm_100a", "sm_80")
KINDS = ("forward", "backward")
VARIANTS = ("none", "causal")  # a knob may only matter where keys are masked (block order, pipelining of masked tiles)
HEAD_DIM = "128"


def run(cli, args):
    result = subprocess.run([cli, "compile", *args], capture_output=True, text=True, timeout=300)
    return result.returncode, result.stdout, result.stderr.strip()


def knobs_by_schedule(cli):
    """{schedule: [(flag, [values to try])]} from compile --help."""
    text = subprocess.run([cli, "compile", "--help"], capture_output=True, text=True, check=True).stdout
    schedules = re.search(r"--schedule TEXT:\{([^}]*)\}", text).group(1).split(",")
    table = {name: [] for name in schedules}
    # An option line, its type on the same line, its help on the same line or the next ones (indented).
    entries = re.findall(r"^  (--[a-z0-9-]+) (INT:(\d+)\.\.(\d+)|TEXT:\{([^}]*)\})\s*(.*(?:\n {20,}.*)*)", text, re.M)
    for flag, _, lo, hi, words, helptext in entries:
        if flag in ("--head-dim", "--head-dim-v"):
            continue
        helptext = " ".join(helptext.split())
        takers = re.findall(r"(?:^|; )([a-z0-9_]+): ", helptext)
        takers = [name for name in takers if name in table]
        if not takers:
            continue  # not a knob (--variant, --dtype, ...)
        if words:
            values = words.split(",")
        else:
            lo, hi = int(lo), int(hi)
            powers = [1 << i for i in range(11)]
            values = list(dict.fromkeys([lo, hi, lo + 1, lo + 2, lo + 3, (lo + hi) // 2, hi - 1, *powers]))
            values = [str(v) for v in values if lo <= v <= hi]
        for name in takers:
            table[name].append((flag, values))
    return table


def emitted(cli, base, extra):
    """(rc, output, error) of the scheduled IR and the CUDA together."""
    rc, ir, err = run(cli, base + extra + ["--emit", "scheduled"])
    if rc != 0:
        return rc, "", err
    rc, cuda, err = run(cli, base + extra + ["--emit", "cuda"])
    return rc, ir + cuda, err


def main():
    cli = sys.argv[1]
    problems, walked = [], 0
    for schedule, knobs in knobs_by_schedule(cli).items():
        for kind in KINDS:
            baselines = {}
            for arch in ARCHS:
                for variant in VARIANTS:
                    base = ["--schedule", schedule, "--kind", kind, "--arch", arch, "--head-dim", HEAD_DIM,
                            "--variant", variant]
                    rc, out, _ = emitted(cli, base, [])
                    if rc == 0:
                        baselines[variant] = (base, out)
                if baselines:
                    break
            if not baselines:
                print(f"{schedule} {kind}: not built by this schedule on any arch (skipped)")
                continue
            walks = list(knobs)
            if kind != "forward":
                walks.append(("--shape-class", ["short"]))
            for flag, values in walks:
                walked += 1
                name = flag[2:]
                changed, accepted, refusals = None, [], []
                for variant, (base, out) in baselines.items():
                    for value in values:
                        rc, other, err = emitted(cli, base, [flag, value])
                        if rc != 0:
                            refusals.append((value, err))
                            if name not in err and not err.startswith(f"flashtile: error: {flag}"):
                                problems.append(f"{schedule} {kind} {flag} {value}: refused without naming "
                                                f"{name}: {err[:300]}")
                        elif other != out:
                            changed = f"{variant}, {flag} {value}"
                            break
                        else:
                            accepted.append(f"{variant} {value}")
                    if changed:
                        break
                if changed:
                    print(f"{schedule} {kind} {flag}: changes the kernel ({changed})")
                elif accepted and not refusals:
                    problems.append(f"{schedule} {kind} {flag}: accepted ({', '.join(accepted)}) and the kernel is "
                                    f"byte-identical; refuse it by name or make it act")
                elif accepted:
                    # Only the value the schedule would pick anyway is accepted; every other one is refused by name.
                    print(f"{schedule} {kind} {flag}: pinned (accepted: {', '.join(accepted)}; refused otherwise: "
                          f"{refusals[0][1][:120]})")
                else:
                    print(f"{schedule} {kind} {flag}: refused ({refusals[0][1][:160]})")
    print(f"{walked} schedule x kind x knob walks")
    for problem in problems:
        print("FAIL:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
