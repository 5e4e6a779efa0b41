#!/usr/bin/env python
"""Freed memory kept for reuse (``sipe_fairseq/cli/allocator.py``) against glibc's own settings: the
same ``sipe-eval-lm --tags SOURCE`` run in fresh processes with ``SIPE_MALLOC=system`` and without,
paired by round (the order alternates); prints a markdown table of CPU time (user, system), minor page
faults and peak resident memory, the medians over rounds, and the ratio of CPU time.

    OMP_NUM_THREADS=1 python scripts/bench_malloc.py --data runs/ewt/data-bin --split test \\
        --path runs/ewt/checkpoints-wordnt-s1/checkpoint_best.pt --tags mix:16 --max-sentences 150 [--rounds 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
SETTINGS = {"kept (default)": {}, "glibc's own (SIPE_MALLOC=system)": {"SIPE_MALLOC": "system"}}


def run_once(cmd, extra_env) -> dict:
    """One command in a fresh process: its CPU seconds, minor faults and peak RSS (``os.wait4``: that child's own)."""
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), **extra_env)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"bench_malloc: {' '.join(cmd)} failed (exit status {proc.returncode})")
    return {"user": usage.ru_utime, "sys": usage.ru_stime, "minflt": usage.ru_minflt, "maxrss_mb": usage.ru_maxrss / 1024}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--path", required=True)
    p.add_argument("--tags", default="mix:16")
    p.add_argument("--max-sentences", type=int, default=150)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    cmd = [str(BIN / "sipe-eval-lm"), args.data, "--gen-subset", args.split, "--path", args.path, "--tags", args.tags,
           "--tags-max-sentences", str(args.max_sentences), "--no-progress"]
    runs = {name: [] for name in SETTINGS}
    names = list(SETTINGS)
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            runs[name].append(run_once(cmd, SETTINGS[name]))
    ref = names[1]
    ratios = [(a["user"] + a["sys"]) / (b["user"] + b["sys"]) for a, b in zip(runs[names[0]], runs[ref])]
    print(f"`sipe-eval-lm --tags {args.tags}`, the first {args.max_sentences} sentences of {args.split}, "
          f"{args.rounds} rounds (medians)\n")
    print("| allocator | CPU user s | CPU system s | minor faults | peak RSS MB | CPU time vs glibc's own |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in names:
        med = {k: statistics.median(x[k] for x in runs[name]) for k in runs[name][0]}
        ratio = "(reference)" if name == ref else \
            f"{statistics.median(ratios):.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]"
        print(f"| {name} | {med['user']:.1f} | {med['sys']:.1f} | {med['minflt']:,.0f} | {med['maxrss_mb']:,.0f} | {ratio} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
