#!/usr/bin/env python
"""Time ``sipe-hexatag`` on a CoNLL-U file (default: UD English EWT train); prints a markdown table.

    .venv/bin/python scripts/bench_hexatag.py [--conllu FILE] [--repeat 3]
"""
import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sipe_fairseq.cli.hexatag import main
from sipe_fairseq.hexatag import read_conllu

ROOT = Path(__file__).resolve().parent.parent


def best_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def run_main(argv):
    with contextlib.redirect_stderr(io.StringIO()):
        status = main(argv)
    assert status == 0, f"sipe-hexatag {' '.join(argv)} exited with {status}"


def main_bench():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", default=str(ROOT / "../shared/data/ud-english-ewt/en_ewt-ud-train.conllu"),
                        help="CoNLL-U file to encode (relative paths: from the current directory)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best time is reported")
    args = parser.parse_args()
    path = os.path.normpath(args.conllu)
    sentences = words = 0
    for sent in read_conllu(path):
        sentences, words = sentences + 1, words + len(sent.words)
    script = shutil.which("sipe-hexatag", path=str(Path(sys.executable).parent)) or shutil.which("sipe-hexatag")
    if script is None:
        sys.exit("sipe-hexatag console script not found (pip install -e .)")

    with tempfile.TemporaryDirectory() as tmp:
        tags = os.path.join(tmp, "tags")
        rows = [
            ("encode, in-process `main()`", lambda: run_main(["encode", path, "-o", tags])),
            ("encode, console script (incl. start-up)",
             lambda: subprocess.run([script, "encode", path, "-o", tags], check=True, stderr=subprocess.DEVNULL)),
            ("decode, in-process `main()`", lambda: run_main(["decode", tags, "-o", os.devnull])),
        ]
        print(f"`{path}`, best of {args.repeat}\n")
        print("| run | sentences | words | seconds | sentences/s |")
        print("|---|---:|---:|---:|---:|")
        for name, fn in rows:
            seconds = best_time(fn, args.repeat)
            print(f"| {name} | {sentences} | {words} | {seconds:.2f} | {sentences / seconds:,.0f} |")


if __name__ == "__main__":
    main_bench()
