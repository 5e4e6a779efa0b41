#!/usr/bin/env python
"""How large a beam's batch should be (``sipe_fairseq.structure.scoring.BEAM_ROWS``): ``mix:K`` (or ``beam:K``) at the
suites' width over the same sentences with the batch sized for each of ``--rows`` hypotheses (``rows / (8 K)``
sentences), paired by round in one process (``benchlib.paired_runs``, order rotated); prints a markdown table.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_beam_rows.py --data DATA --path CKPT --blimp DEST/blimp \\
        --every 20 --rows 8192 4096 --workers 2 --rounds 2
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_beam_rows.py --data DATA --path CKPT --split test \\
        --max-sentences 600 --rows 8192 4096 2048 --workers 2 --rounds 2

Sentences: BLiMP's (``--blimp``: every ``--every``-th pair, both sentences, encoded without a parse: the search reads
none), or a split of the data directory. Columns: the rows a batch is sized for, the sentences per batch, the wall
time of each round, the median of the per-round ratio to the first ``--rows`` [min-max], and the largest difference of
a sentence's log-probability from the first ``--rows`` (float32 batchings differ in their last digits).
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="the checkpoint's sipe-preprocess data directory")
    p.add_argument("--path", required=True, help="a SiPE or GiLT decoder checkpoint")
    p.add_argument("--blimp", nargs="+", help="BLiMP JSONL files or folders (else --split)")
    p.add_argument("--every", type=int, default=20, help="BLiMP: every N-th pair (default: %(default)s)")
    p.add_argument("--split", default="test", help="without --blimp: the split's sentences (default: %(default)s)")
    p.add_argument("--max-sentences", type=int, default=None, help="without --blimp: the first N sentences")
    p.add_argument("--tags", default="mix:16", help="a beam source (default: %(default)s)")
    p.add_argument("--rows", type=int, nargs="+", default=[8192, 4096], help="BEAM_ROWS values (default: %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)

    import torch

    from benchlib import markdown_table, median, paired_runs, speed_ratio
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.data.lm_dataset import task_placement
    from sipe_fairseq.structure import scoring
    from sipe_fairseq.structure.family import StructureOptions
    from sipe_fairseq.structure.options import SUITE_WIDTH
    from sipe_fairseq.structure.scoring import sentences_from_encoded
    from sipe_fairseq.structure.sources import parse_source

    torch.set_num_threads(1)
    model, task = load_lm(a.path, a.data)
    d = task.source_dictionary
    if a.blimp:
        from sipe_fairseq.data.encode import SentenceEncoder
        from sipe_fairseq.eval.blimp import prepare, read_blimp
        from sipe_fairseq.parsing.sources import NoTrees

        pairs = read_blimp(a.blimp)[:: a.every]
        prepared = prepare(pairs, NoTrees(), SentenceEncoder(a.data))
        encoded = [prepared.encoded[t] for p in pairs for t in (p.good, p.bad) if t in prepared.encoded]
        sentences, what = sentences_from_encoded(encoded, d, d.eos()), f"BLiMP every {a.every}th pair"
    else:
        from sipe_fairseq.eval.prefix_scores import load_split_sentences

        sentences = load_split_sentences(task, a.split)[0][: a.max_sentences]
        what = f"{a.split}"
    src = parse_source(a.tags)
    options = StructureOptions(workers=a.workers, placement=task_placement(task), **SUITE_WIDTH)
    results = {}

    def run(rows):
        def go():
            scoring.BEAM_ROWS = rows
            results[rows] = scoring.score_sentences(model, sentences, src, options, d.eos(), d.pad())
        return go

    default = scoring.BEAM_ROWS
    try:
        timed = paired_runs({str(r): run(r) for r in a.rows}, a.rounds)
    finally:
        scoring.BEAM_ROWS = default
    first = str(a.rows[0])
    table = []
    for r in a.rows:
        ratio, spread = speed_ratio(timed[str(r)], timed[first], "wall")
        gap = max(abs(x.logprob - y.logprob) for x, y in zip(results[r], results[a.rows[0]]))
        table.append([f"{r:,}", src.batch_cap(scoring.BATCH_SENTENCES, r), ", ".join(f"{t:.1f}" for t in timed[str(r)]["wall"]),
                      "(reference)" if r == a.rows[0] else f"{1 / ratio:.2f}x [{1 / spread[1]:.2f}-{1 / spread[0]:.2f}]",
                      "" if r == a.rows[0] else f"{gap:.1e}"])
    print(f"{len(sentences):,} sentences ({what}) under {src} at the suites' width, {a.workers} worker(s), {a.rounds} "
          f"rounds; median wall {median(timed[first]['wall']):.1f} s at {a.rows[0]:,} rows\n")
    print(markdown_table(["rows", "sentences per batch", "wall s per round", "time vs first", "max logprob difference"],
                         table, "rrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
