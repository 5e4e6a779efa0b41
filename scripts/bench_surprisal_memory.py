"""Benchmark: the peak resident memory of ``sipe-surprisal`` against the size of its input (issue 48: it should
stay flat: the input is checked, then scored in chunks of ``--tags-batch-sentences`` and written as it goes).

    python scripts/bench_surprisal_memory.py --lines 20,20000
    python scripts/bench_surprisal_memory.py --path ck/checkpoint_best.pt --data data-bin --lines 20,2000,20000 --json
    python scripts/bench_surprisal_memory.py --script /tmp/surprisal_before.py   # an older copy of the command

Each run is one fresh ``sipe-surprisal`` process on a file of N toy-grammar sentences (one per line, the
grammar's sentences of at most 16 words, cycled), ``--output`` a file; its peak RSS and CPU time are those of
a fresh wrapper process's children (``resource.getrusage(RUSAGE_CHILDREN)``), so each number is one run's
alone. Without ``--path`` a tiny ``sipe_txl_tiny`` checkpoint is trained first on the toy corpus (a few updates,
as the tests' checkpoints), in a temporary folder. Prints one markdown row per input size: lines, peak RSS
(MB), its growth over the smallest input, CPU seconds (user + system: the number to read on a shared
machine), wall seconds, exit status, output bytes.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchlib import markdown_table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# a fresh process that runs one command and prints its exit status and its children's peak RSS (KB on Linux)
WRAPPER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
           "u = resource.getrusage(resource.RUSAGE_CHILDREN); print(rc, u.ru_maxrss, u.ru_utime + u.ru_stime)")
TRAIN = ["--user-dir", str(ROOT / "sipe_fairseq"), "--task", "hexatag_lm", "--criterion", "hexatag_lm",
         "--tokens-per-sample", "64", "--sample-break-mode", "complete", "--arch", "sipe_txl_tiny",
         "--sipe-injection", "position", "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1024",
         "--max-update", "6", "--seed", "1", "--no-epoch-checkpoints", "--no-last-checkpoints", "--num-workers", "0",
         "--log-format", "simple"]


def build_checkpoint(folder: Path):
    """A tiny SiPE decoder on the toy corpus: (checkpoint, data directory)."""
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar

    corpus, data = folder / "toy", folder / "data"
    toy_grammar.make_corpus(corpus, n_train=300, n_valid=40, n_test=40, seed=3)
    assert preprocess_main(["--train", str(corpus / "train.conllu"), "--valid", str(corpus / "valid.conllu"),
                            "--test", str(corpus / "test.conllu"), "--destdir", str(data), "--spm-vocab-size", "200",
                            "--no-progress"]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    subprocess.run([str(BIN / "fairseq-train"), str(data), *TRAIN, "--save-dir", str(folder / "ck")], check=True,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return folder / "ck" / "checkpoint_best.pt", data


def write_input(path: Path, n: int) -> None:
    from sipe_fairseq.data import toy_grammar

    texts = [s.text for s in toy_grammar.generate(min(n, 500), seed=7) if len(s.words) <= 16]  # within 64 positions
    with open(path, "w", encoding="utf-8") as f:
        for k in range(n):
            f.write(texts[k % len(texts)] + "\n")


def measure(command, args, folder: Path, n: int):
    """(exit status, peak RSS in MB, CPU seconds, wall seconds, output bytes) of one run on ``n`` lines."""
    source, out = folder / f"in-{n}.txt", folder / f"out-{n}.tsv"
    write_input(source, n)
    if out.exists():
        out.unlink()
    cmd = [*command, "--path", str(args.path), "--data", str(args.data), "--tags", args.tags, "--output", str(out),
           *(["--json"] if args.json else []), *args.extra, str(source)]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", WRAPPER, *cmd], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    rc, kb, cpu = proc.stdout.split()[-3:]
    return int(rc), int(kb) / 1024, float(cpu), seconds, out.stat().st_size if out.exists() else 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", default=None, help="a decoder checkpoint (default: a tiny one trained here)")
    p.add_argument("--data", default=None, help="its data directory (with --path)")
    p.add_argument("--lines", default="20,20000", help="input sizes, comma-separated")
    p.add_argument("--tags", default="self", help="sipe-surprisal's --tags (default: self: no parser needed)")
    p.add_argument("--json", action="store_true", help="sipe-surprisal --json")
    p.add_argument("--script", default=None, help="run this copy of the command (python FILE) instead of the module")
    p.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more arguments of sipe-surprisal")
    args = p.parse_args(argv)
    command = [sys.executable, args.script] if args.script else [sys.executable, "-m", "sipe_fairseq.cli.surprisal"]
    with tempfile.TemporaryDirectory(prefix="bench-surprisal-") as tmp:
        folder = Path(tmp)
        if args.path is None:
            args.path, args.data = build_checkpoint(folder)
        rows, first = [], None
        for n in (int(x) for x in args.lines.split(",")):
            rc, mb, cpu, seconds, size = measure(command, args, folder, n)
            first = mb if first is None else first
            rows.append([f"{n:,}", f"{mb:.0f}", f"{mb - first:+.0f}", f"{cpu:.1f}", f"{seconds:.1f}", str(rc), f"{size:,}"])
    print(f"sipe-surprisal --tags {args.tags}{' --json' if args.json else ''} ({args.script or 'the module'})")
    print(markdown_table(["lines", "peak RSS (MB)", "growth (MB)", "CPU s", "wall s", "exit", "output bytes"], rows,
                         align="rrrrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
