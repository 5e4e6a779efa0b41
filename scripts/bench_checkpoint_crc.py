#!/usr/bin/env python
"""Cost of the checkpoint CRC check (:func:`sipe_fairseq.checkpoints.load.check_archive`, run by every
``read_checkpoint``): a state dict of ``--mb`` MB of float32 weights saved with ``torch.save`` (a zip archive,
as fairseq saves checkpoints), then the check timed against ``torch.load`` of the same file.

    .venv/bin/python scripts/bench_checkpoint_crc.py [--mb 100] [--repeats 5] [--dir /tmp]

Two conditions: warm (the file in the page cache, as right after a copy or a first load: the check is CRC-32
over the bytes) and cold (the cache dropped for that file with ``posix_fadvise(DONTNEED)``, where the
system honours it: the check then reads the file from disk, and the load that follows finds it cached).
Prints one markdown table: median and min-max seconds over ``--repeats`` runs.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from sipe_fairseq.checkpoints.load import check_archive  # noqa: E402


def _drop_cache(path: str) -> None:
    with open(path, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def _time(fn, repeats: int, before=None):
    out = []
    for _ in range(repeats):
        if before is not None:
            before()
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=float, default=100.0, help="size of the weights in MB (default: %(default)s)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dir", default=tempfile.gettempdir(), help="where the file is written (then removed)")
    args = p.parse_args()
    torch.set_num_threads(1)
    n = int(args.mb * 1e6 / 4 / 64)  # 64 tensors of float32
    weights = {f"layers.{i}.weight": torch.randn(n) for i in range(64)}
    fd, path = tempfile.mkstemp(suffix=".pt", dir=args.dir)
    os.close(fd)
    try:
        torch.save({"model": weights, "cfg": {"task": {"_name": "bench"}}}, path)
        size = os.path.getsize(path) / 1e6
        rows = [("check_archive, warm", _time(lambda: check_archive(path), args.repeats)),
                ("torch.load, warm", _time(lambda: torch.load(path, map_location="cpu"), args.repeats)),
                ("check_archive, cold", _time(lambda: check_archive(path), args.repeats, lambda: _drop_cache(path)))]
    finally:
        os.remove(path)
    print(f"file: {size:.1f} MB, {args.repeats} runs\n")
    print("| step | median s | min-max s |\n|---|---|---|")
    for name, times in rows:
        print(f"| {name} | {statistics.median(times):.3f} | {min(times):.3f}-{max(times):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
