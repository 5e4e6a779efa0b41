#!/usr/bin/env python
"""Time ``sipe-hexatag encode``: throughput on a CoNLL-U file (``--conllu``, e.g. UD English EWT train) and one
long non-projective sentence of each of ``--sizes`` words, before (the old code, kept as the
reference in tests/hexatag_reference.py) and after (``sipe_fairseq.hexatag``), in one run; prints
markdown tables.

    .venv/bin/python scripts/bench_hexatag.py --conllu FILE [--repeats 5] [--sizes 250,500,1000,2000]
    .venv/bin/python scripts/bench_hexatag.py --conllu FILE --baseline /path/to/old/checkout   # + the whole old command

The machine is shared and noisy: each row is the median of ``--repeats`` runs, and the before and
after runs alternate within this one process (a pair per repeat), so drift hits both alike; the
speed-up column is the median of the per-pair ratios. Throughput is timed twice, by the wall clock
and by this process's CPU time (``time.process_time``: far less sensitive to other processes).
The reference is about cubic on a non-projective sentence (minutes at 2,000 words):
``--reference-repeats`` (default 1) bounds its runs on the long sentences, ``--reference-max``
skips it above that many words. A last row times the costliest tree known for lifting (a chain
with half the words hung below its deepest word: n * n / 4 lifts), without the reference.
"""
import argparse
import contextlib
import io
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))
import hexatag_reference as reference  # noqa: E402
from benchlib import markdown_table, paired_times  # noqa: E402
from sipe_fairseq.cli import hexatag as cli  # noqa: E402
from sipe_fairseq.hexatag import encode_tree, read_conllu  # noqa: E402


def timed(fn):
    """``(wall seconds, CPU seconds)`` of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def run_cli(argv):
    with contextlib.redirect_stderr(io.StringIO()):
        status = cli.main(argv)
    assert status == 0, f"sipe-hexatag {' '.join(argv)} exited with {status}"


@contextlib.contextmanager
def cli_encoder(fn):
    """Let the CLI encode with ``fn`` (the reference or the library's encode_tree)."""
    saved = cli.encode_tree
    cli.encode_tree = fn
    try:
        yield
    finally:
        cli.encode_tree = saved


def command_table(args, path, sentences) -> str:
    """The whole ``encode`` command, old (``--baseline``) and this one, as subprocesses timed in pairs."""
    def command(root):  # run in root: ``python -m`` puts the current directory first on sys.path
        root = os.path.abspath(root)
        env = dict(os.environ, PYTHONPATH=root)
        argv = [sys.executable, "-m", "sipe_fairseq.cli.hexatag", "encode", os.path.abspath(path), "-o", os.devnull]
        return lambda: subprocess.run(argv, env=env, cwd=root, check=True, stderr=subprocess.DEVNULL)

    def children_cpu():
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    fns = {"old": command(args.baseline), "new": command(ROOT)}
    runs = {"wall": paired_times(fns, args.repeats), "cpu": paired_times(fns, args.repeats, clock=children_cpu)}
    rows = []
    for name, label in (("old", f"`{args.baseline}`"), ("new", "this checkout")):
        row = [label]
        for clock in ("wall", "cpu"):
            sec = statistics.median(runs[clock][name])
            gain = statistics.median([o / n for n, o in zip(runs[clock]["new"], runs[clock]["old"])])
            row += [f"{sec:.2f}", f"{sentences / sec:,.0f}", "" if name == "old" else f"{gain:.2f}x"]
        rows.append(row)
    return ("Whole command, `python -m sipe_fairseq.cli.hexatag encode` (start-up included), "
            f"median of {args.repeats}:\n\n" + markdown_table(
                ["code", "wall s", "sentences/s (wall)", "speed-up (wall, paired)", "CPU s", "sentences/s (CPU)",
                 "speed-up (CPU, paired)"], rows) + "\n")


def random_tree(n, seed):
    """A non-projective tree: words in a random order, each attached to a random word placed before it."""
    rng = random.Random(seed)
    order = list(range(1, n + 1))
    rng.shuffle(order)
    heads = [0] * n
    for k in range(1, n):
        heads[order[k] - 1] = order[rng.randrange(k)]
    return heads


def main_bench():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--conllu", required=True,
                        help="CoNLL-U file to encode, e.g. EWT train (relative paths: from the current directory)")
    parser.add_argument("--repeats", type=int, default=5, help="runs per row (pairs before/after); the median is reported")
    parser.add_argument("--sizes", default="250,500,1000,2000", help="words of the long non-projective sentences")
    parser.add_argument("--reference-repeats", type=int, default=1, help="runs of the reference on each long sentence")
    parser.add_argument("--reference-max", type=int, default=2000, help="no reference run on sentences longer than this")
    parser.add_argument("--baseline", metavar="DIR", help="also time the whole command (a subprocess, start-up included) with "
                        "the sipe_fairseq package in DIR, e.g. an older checkout, against this one")
    args = parser.parse_args()
    med = statistics.median

    path = os.path.normpath(args.conllu)
    sentences = words = 0
    for sent in read_conllu(path):
        sentences, words = sentences + 1, words + len(sent.words)
    print(f"### `sipe-hexatag encode` on `{path}` ({sentences:,} sentences, {words:,} words), in-process `main()`, "
          f"median of {args.repeats}\n")
    with tempfile.TemporaryDirectory() as tmp:
        outs = {name: os.path.join(tmp, name) for name in ("before", "after")}

        def encode_with(fn, out):
            def go():
                with cli_encoder(fn):
                    run_cli(["encode", path, "-o", out])
            return go

        fns = {"before": encode_with(reference.encode_tree, outs["before"]),
               "after": encode_with(encode_tree, outs["after"])}
        runs = {"wall": paired_times(fns, args.repeats), "cpu": paired_times(fns, args.repeats, clock=time.process_time)}
        with open(outs["before"]) as a, open(outs["after"]) as b:
            same = a.read() == b.read()
    rows = []
    for name in ("before", "after"):
        row = [name]
        for clock in ("wall", "cpu"):
            sec = med(runs[clock][name])
            gain = med([b / a for a, b in zip(runs[clock]["after"], runs[clock]["before"])])
            row += [f"{sec:.2f}", f"{sentences / sec:,.0f}", "" if name == "before" else f"{gain:.2f}x"]
        rows.append(row)
    print(markdown_table(["code", "wall s", "sentences/s (wall)", "speed-up (wall, paired)",
                          "CPU s", "sentences/s (CPU)", "speed-up (CPU, paired)"], rows))
    print(f"\nOutputs identical: {'yes' if same else '**NO**'}. `before` = this CLI and CoNLL-U reader with the reference "
          "projectivize + encode (tests/hexatag_reference.py); it gains from the faster reader, so the speed-up of the "
          "whole old command is larger" + (" (next table)" if args.baseline else " (--baseline DIR)") + ".\n")
    if args.baseline:
        print(command_table(args, path, sentences))

    print("### One non-projective sentence (random tree: each word attached to a random earlier-placed word), "
          "`encode_tree` (check, lift, encode)\n")
    rows = []
    cases = [(f"{n:,}", random_tree(n, seed=n), n <= args.reference_max) for n in map(int, args.sizes.split(","))]
    n = max(map(int, args.sizes.split(",")))
    cases.append((f"{n:,} (hung chain)", [i + 1 for i in range(1, n // 2)] + [0] + [1] * (n - n // 2), False))
    header = ["words", "lifts", "before, wall s", "before, CPU s", "after, wall s", "after, CPU s", "speed-up (CPU)"]
    for name, heads, with_reference in cases:
        runs = [timed(lambda: encode_tree(heads)) for _ in range(args.repeats)]  # noqa: B023
        after = [med(col) for col in zip(*runs)]
        lifts = encode_tree(heads)[2]
        if with_reference:
            runs = [timed(lambda: reference.encode_tree(heads)) for _ in range(args.reference_repeats)]  # noqa: B023
            before = [f"{med(col):.3f}" for col in zip(*runs)]
            gain = f"{med([r[1] for r in runs]) / after[1]:,.0f}x"
            if len(heads) <= 500:
                assert reference.encode_tree(heads) == encode_tree(heads)
        else:
            before, gain = ["(not run)"] * 2, ""
        row = [name, f"{lifts:,}", *before, f"{after[0]:.4f}", f"{after[1]:.4f}", gain]
        print(markdown_table(header, [row]) if not rows else "| " + " | ".join(row) + " |", flush=True)
        rows.append(row)


if __name__ == "__main__":
    main_bench()
