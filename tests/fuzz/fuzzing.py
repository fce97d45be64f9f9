"""What the fuzzers (fuzz_ir.py, fuzz_variant.py) share: the flags every one takes and what counts as a crash of
the program under test. A diagnostic and a non-zero exit are the expected answer to bad input; a signal, a sanitizer
report or an LLVM fatal error is not."""
import argparse
import time

CRASH_MARKERS = ["Stack dump", "LLVM ERROR", "Assertion", "UNREACHABLE", "AddressSanitizer", "LeakSanitizer",
                 "runtime error:", "terminate called", "Segmentation fault"]


def arguments(doc, count_flag, counted):
    """A parser with --seconds, --seed, --out and `count_flag` (stop after that many `counted`); the caller adds
    what its program under test needs."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60, help="time budget (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock, printed)")
    parser.add_argument(count_flag, type=int, default=0,
                        help="stop after this many %s (default 0: only the time budget stops)" % counted)
    parser.add_argument("--out", default=None, help="where crashing inputs are saved (default: a temp dir)")
    return parser


def seed_of(args):
    """--seed, or one from the clock (printed by the caller, so that a failure can be replayed)."""
    return args.seed if args.seed is not None else int(time.time() * 1000) % (2**31)


def crashed(returncode, stderr):
    """Why a run counts as a crash, or None."""
    if returncode < 0 or returncode >= 128:
        return "exit status %d" % returncode
    for marker in CRASH_MARKERS:
        if marker in stderr:
            return "stderr reports '%s'" % marker
    return None
