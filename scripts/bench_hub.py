"""Benchmark: ``sipe_fairseq.hub`` ``score(tags=SOURCE)`` against ``sipe-eval-lm --tags SOURCE``'s code path
(:func:`sipe_fairseq.eval.prefix_scores.score_split_sources`) on the same split, paired in one process.

    python scripts/bench_hub.py --path ck/checkpoint_best.pt --data data-bin --conllu test.conllu \
        --split test --sources given,self --repeats 3

The hub scores the split's sentences from their CoNLL-U (words and trees: the structure of ``given``, so no
parser runs) and encodes them itself; ``sipe-eval-lm``'s path reads the preprocessed split and runs what
``score_split_sources`` runs per source (reading the split, the engine, then ``source_summary``): each side's
time includes reading its input. Sentences longer than the model's
positions (which the hub refuses, never cutting them) are left out of both. Both use the same loaded
model; the runs alternate (order rotated each round) and each pair gives a ratio (hub / eval-lm), by wall
clock and by this process's CPU time (the second is the one to read on a shared machine). The summed
log-probabilities of the two are printed too (they must agree: tests/test_hub.py checks it on the toy data).
Prints one markdown row per source.
"""
import argparse
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchlib import markdown_table, paired_runs  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--conllu", required=True, help="the split's CoNLL-U (the file sipe-preprocess read)")
    p.add_argument("--split", default="test")
    p.add_argument("--sources", default="given,self")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--name", default=None, help="the checkpoint's name in the table")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    import torch

    torch.set_num_threads(args.threads)
    from sipe_fairseq import hub
    from sipe_fairseq.eval.prefix_scores import given_tags, load_split_sentences, source_summary
    from sipe_fairseq.hexatag.conllu_io import read_conllu
    from sipe_fairseq.structure.scoring import score_sentences

    lm = hub.load(args.path, args.data)
    limit = lm.max_positions()
    split, _ = load_split_sentences(lm.task, args.split)
    trees = [(s.words, s.heads) for s in read_conllu(args.conllu)]
    assert len(trees) == len(split), f"{args.conllu}: {len(trees)} sentences, split {args.split}: {len(split)}"
    # the hub refuses a sentence longer than the model's positions (never cut): both sides score those that fit
    total = len(split)
    keep = [i for i, s in enumerate(split) if s.n <= limit]
    trees, split = [trees[i] for i in keep], [split[i] for i in keep]
    d = lm.dictionary
    rows = []
    for source in args.sources.split(","):
        totals = {}

        def by_hub(source=source):
            totals["hub"] = -sum(r.logprob for r in lm.score(trees, tags=source))

        def by_eval_lm(source=source):  # score_split_sources's work for one source (the split read), on those kept
            sentences = load_split_sentences(lm.task, args.split)[0]
            sentences = [sentences[i] for i in keep]
            scores = score_sentences(lm.model, sentences, source, lm.options, d.eos(), d.pad(), 256)
            totals["eval-lm"] = source_summary(scores, given_tags(sentences))["nll"]

        res = paired_runs({"hub": by_hub, "eval-lm": by_eval_lm}, args.repeats)
        row = [args.name or os.path.basename(os.path.dirname(args.path)), source, f"{len(trees)} of {total}"]
        for clock in ("wall", "cpu"):
            ratios = [h / e for h, e in zip(res["hub"][clock], res["eval-lm"][clock])]
            row += [f"{statistics.median(res['hub'][clock]):.2f} / {statistics.median(res['eval-lm'][clock]):.2f}",
                    f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f})"]
        rows.append(row + [f"{totals['hub']:.4f} / {totals['eval-lm']:.4f}"])
        print(f"# {source}: done {time.strftime('%H:%M:%S')}", file=sys.stderr, flush=True)
    print(markdown_table(["checkpoint", "source", "sentences", "wall s hub / eval-lm", "ratio (min-max)",
                          "CPU s hub / eval-lm", "ratio (min-max)", "nll hub / eval-lm"], rows))


if __name__ == "__main__":
    main()
