#!/usr/bin/env python
"""What ``--workers`` buys (issue 49): wall time of one structure search with 1 worker against N, the settings
paired in one process; prints a markdown table.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_workers.py --data DATA --path CKPT [--split test]
        [--tags self,mix:4] [--workers 2] [--max-sentences 300] [--rounds 3] [--json OUT]

The checkpoint is loaded once (its tag heads' placement read from its task) and the first ``--max-sentences``
sentences of ``--split`` read once; every source runs once unmeasured on a few sentences, then ``--rounds`` rounds
each run 1 and N workers on all the sentences in an order rotated every round (``benchlib.paired_runs``). The
parent runs one torch thread, as each worker does, so the two settings run the same kernels (the numbers are
checked equal). Columns: wall seconds (median), the speed-up (the median over rounds of the per-round wall-time
ratio [min-max]) and the parent's CPU seconds (the workers' CPU is theirs: with N workers the parent mostly waits).
A machine with other jobs on its cores shows less than the N-fold ideal: the table's first line says how many cores
this process may use.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True)
    p.add_argument("--path", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--tags", default="self,mix:4")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--max-sentences", type=int, default=300)
    p.add_argument("--batch-sentences", type=int, default=32, help="sentences per planned batch (default: 32)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json")
    a = p.parse_args(argv)

    import torch

    from benchlib import markdown_table, median, paired_runs, speed_ratio
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.data.lm_dataset import task_placement
    from sipe_fairseq.eval.prefix_scores import load_split_sentences
    from sipe_fairseq.structure.family import StructureOptions
    from sipe_fairseq.structure.scoring import score_sentences
    from sipe_fairseq.structure.workers import available_cores

    torch.set_num_threads(1)
    model, task = load_lm(a.path, a.data)
    sentences = load_split_sentences(task, a.split)[0][: a.max_sentences]
    d = task.source_dictionary
    rows, out = [], {}
    for source in a.tags.split(","):
        def run(n, subset=sentences, source=source):
            options = StructureOptions(max_memory=2 ** 40, workers=n, placement=task_placement(task))
            return score_sentences(model, subset, source, options, d.eos(), d.pad(), a.batch_sentences)

        run(1, sentences[:4])  # warm-up: lazy allocations
        results = {}
        timed = paired_runs({"1": lambda: results.__setitem__(1, run(1)),
                             str(a.workers): lambda: results.__setitem__(a.workers, run(a.workers))}, a.rounds)
        gap = max(abs(x.logprob - y.logprob) for x, y in zip(results[1], results[a.workers]))
        ratio, spread = speed_ratio(timed[str(a.workers)], timed["1"], "wall")
        out[source] = {"wall": {k: v["wall"] for k, v in timed.items()}, "cpu": {k: v["cpu"] for k, v in timed.items()},
                       "speedup": ratio, "spread": spread, "max_abs_logprob_difference": gap}
        for k in ("1", str(a.workers)):
            rows.append([source, k, f"{median(timed[k]['wall']):.1f}", f"{median(timed[k]['cpu']):.1f}",
                         "1.00 (reference)" if k == "1" else f"{ratio:.2f}x [{spread[0]:.2f}-{spread[1]:.2f}]",
                         "" if k == "1" else f"{gap:.1e}"])
    print(f"{len(sentences)} sentences of {a.split}, batches of {a.batch_sentences}, {a.rounds} rounds; "
          f"this process may use {available_cores()} cores\n")
    print(markdown_table(["source", "workers", "wall s", "parent CPU s", "speed-up (wall)", "max logprob difference"], rows,
                         "lrrrrr"))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
