#!/usr/bin/env python
"""The adaptive mixture's trade (issue 35): perplexity against speed of ``mix:K`` over a grid of
(K, P, M[, Q]) settings, each checkpoint's settings paired in one process; prints a markdown table.

    OMP_NUM_THREADS=1 python scripts/bench_mix.py --data runs/ewt/data-bin --split test --max-sentences 300 \\
        --path none=runs/ewt/checkpoints-none-s1/checkpoint_best.pt --path gilt=runs/ewt/checkpoints-gilt-s1/checkpoint_best.pt \\
        [--grid 16:1:0 16:0.99:0 8:0.99:3 ...] [--rounds 1] [--json OUT]

A setting ``K:P:M`` is ``mix:K`` with ``--tags-mass P`` and ``--tags-top-pairs M`` (M: SiPE only; 0 every
allowed pair); ``K:P:M:Q`` adds ``--tags-pair-mass Q`` (SiPE only; 1 when omitted, and shown in the label
only when below 1). The reference of every checkpoint is ``16:1:0``, ``mix:16`` over every allowed pair, always
run. Per checkpoint: the model is loaded once and the first ``--max-sentences`` sentences of ``--split``
are read once; one unmeasured run of every setting on the first ``--warmup-sentences`` sentences, then
``--rounds`` rounds each running every setting on all the sentences, in an order rotated every round
(``benchlib.paired_runs``), so that the machine's load hits every setting alike. Columns:

* ppl/token: the setting's exact perplexity (``q_K`` is normalized under every setting);
* ppl vs mix:16: its relative difference from the reference's, in percent;
* live hyp/word: the hypotheses kept at each word's ranking, per word; positions/token: decoder positions
  run per token (every hypothesis at every step);
* sentences/s: CPU time of this process, which scores every batch itself (``--workers 1``; ``--threads``,
  default 1: robust to other processes' load on a shared machine); speed vs mix:16: the median over rounds of
  the per-round throughput ratio to the reference [min-max]; wall: the same ratio of wall-clock times.

A checkpoint without structure (``--sipe-injection none``, stock LMs) scores the same under every setting
(plain scoring): it gets one row. M > 0 for a GiLT checkpoint (no tag pairs) repeats the M = 0 setting and is
skipped, and so is Q < 1 for a GiLT checkpoint.
"""
import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib

REFERENCE = (16, 1.0, 0, 1.0)
GRID = ("16:0.999:0", "16:0.99:0", "16:0.95:0", "16:0.999:4", "16:0.99:4", "16:0.99:3", "8:0.99:4", "8:0.99:3", "4:0.99:3",
        "1:1:0")


def setting(text: str):
    """``"K:P:M"`` or ``"K:P:M:Q"`` -> (K, P, M, Q): K >= 1, 0 < P <= 1, M >= 0, 0 < Q <= 1 (1 when omitted)."""
    try:
        parts = text.split(":")
        if len(parts) not in (3, 4):
            raise ValueError
        k, p, m, q = int(parts[0]), float(parts[1]), int(parts[2]), float(parts[3]) if len(parts) == 4 else 1.0
    except ValueError:
        raise argparse.ArgumentTypeError(f"setting {text!r}: expected K:P:M[:Q], e.g. 16:0.99:3 or 16:0.99:0:0.99") from None
    if k < 1 or not 0.0 < p <= 1.0 or m < 0 or not 0.0 < q <= 1.0:
        raise argparse.ArgumentTypeError(f"setting {text!r}: expected K >= 1, 0 < P <= 1, M >= 0, 0 < Q <= 1")
    return k, p, m, q


def label(s) -> str:
    k, p, m, q = s
    return f"mix:{k} P={p:g} M={m or 'all'}" + (f" Q={q:g}" if q < 1.0 else "")


def settings_for(kind: str, grid):
    """The settings a model of structure ``kind`` distinguishes, the reference first (module docstring)."""
    if kind == "none":
        return [REFERENCE]
    out = [REFERENCE]
    for s in grid:
        s = (s[0], s[1]) + ((s[2], s[3]) if kind == "hexatags" else (0, 1.0))
        if s not in out:
            out.append(s)
    return out


def bench_checkpoint(name, path, a):
    """Rows of one checkpoint: ``{label: {ppl, live_per_word, positions_per_token, seconds, runs, ...}}``."""
    from benchlib import log, median, paired_runs, speed_ratio
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.eval.prefix_scores import load_split_sentences, source_summary
    from sipe_fairseq.structure.family import StructureOptions, structure_of
    from sipe_fairseq.structure.scoring import score_sentences

    model, task = load_lm(path, a.data)
    model.eval()
    sentences, _ = load_split_sentences(task, a.split)
    sentences = sentences[:a.max_sentences]
    d = task.source_dictionary
    kind = structure_of(model)
    placement = str(getattr(task.args, "tag_head_placement", "first_subword"))
    settings = settings_for(kind, a.grid)
    scores = {}

    def run(s, sents):
        k, p, m, q = s
        # one process (workers=1): the CPU time measured is this process's
        options = StructureOptions(placement=placement, mass=p, top_pairs=m, pair_mass=q, workers=1)
        return score_sentences(model, sents, f"mix:{k}", options, d.eos(), d.pad(), a.batch_sentences)

    def job(s):
        def go():
            scores[s] = run(s, sentences)
        return go

    for s in settings:  # warm-up, unmeasured
        run(s, sentences[:a.warmup_sentences])
    log(f"{name}: {kind}, {len(sentences)} sentences, {len(settings)} settings, {a.rounds} round(s)")
    runs = paired_runs({label(s): job(s) for s in settings}, a.rounds)
    ref = runs[label(REFERENCE)]
    ref_ppl = source_summary(scores[REFERENCE])["ppl"]
    rows = {}
    for s in settings:
        summary = source_summary(scores[s])
        res = runs[label(s)]
        speed, rng = (1.0, None) if s == REFERENCE else speed_ratio(res, ref, "cpu")
        wall = 1.0 if s == REFERENCE else speed_ratio(res, ref, "wall")[0]
        rows[label(s)] = {"k": s[0], "mass": s[1], "top_pairs": s[2], "pair_mass": s[3], "ppl": summary["ppl"],
                          "ppl_diff_percent": 100.0 * (summary["ppl"] / ref_ppl - 1.0),
                          "live_per_word": summary["live_per_word"], "positions_per_token": summary["positions_per_token"],
                          "sentences_per_s": len(sentences) / median(res["cpu"]), "speed": speed, "speed_range": rng,
                          "wall_speed": wall, "cpu": res["cpu"], "wall": res["wall"]}
        log(f"  {label(s)}: ppl {summary['ppl']:.3f}, {len(sentences) / median(res['cpu']):.2f} sent/s")
    return {"structure": kind, "sentences": len(sentences), "rows": rows}


def markdown(results) -> str:
    from benchlib import fmt_range, markdown_table

    out = []
    for name, r in results.items():
        for lab, row in r["rows"].items():
            ref = lab == label(REFERENCE)
            out.append([name, lab, f"{row['ppl']:.3f}", "(reference)" if ref else f"{row['ppl_diff_percent']:+.3f}%",
                        f"{row['live_per_word']:.2f}", f"{row['positions_per_token']:.2f}",
                        f"{row['sentences_per_s']:.2f}",
                        "(reference)" if ref else f"{row['speed']:.2f}x{fmt_range(row['speed_range'])}",
                        f"{row['wall_speed']:.2f}x"])
    return markdown_table(["checkpoint", "setting (K, P, M, Q)", "ppl/token", "ppl vs mix:16", "live hyp/word",
                           "positions/token", "sentences/s (CPU)", "speed vs mix:16", "wall"], out, "ll" + "r" * 7)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="the sipe-preprocess directory the checkpoints were trained on")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT", help="checkpoint (repeatable)")
    p.add_argument("--split", default="test", help="split to score (default: %(default)s)")
    p.add_argument("--max-sentences", type=int, default=None, metavar="N", help="the first N sentences of the split")
    p.add_argument("--grid", nargs="+", type=setting, default=[setting(s) for s in GRID], metavar="K:P:M[:Q]",
                   help="settings: mix:K, --tags-mass P, --tags-top-pairs M, --tags-pair-mass Q (default 1) "
                        "(default: %s)" % " ".join(GRID))
    p.add_argument("--rounds", type=int, default=1, help="measured rounds, every setting each (default: %(default)s)")
    p.add_argument("--warmup-sentences", type=int, default=8, help="sentences of the unmeasured run (default: %(default)s)")
    p.add_argument("--batch-sentences", type=int, default=256, help="as --tags-batch-sentences (default: %(default)s)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    p.add_argument("--json", help="also write every measurement here")
    a = p.parse_args(argv)
    if a.rounds < 1 or (a.max_sentences is not None and a.max_sentences < 1):
        p.error("--rounds and --max-sentences: expected >= 1")

    import torch
    import sipe_fairseq
    from benchlib import log
    from sipe_fairseq.checkpoints import parse_checkpoint_specs

    torch.set_num_threads(a.threads)
    sipe_fairseq.register()
    results = {}
    for name, path in parse_checkpoint_specs(a.path).items():
        results[name] = bench_checkpoint(name, path, a)
        log(markdown({name: results[name]}))
    print(markdown(results))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": vars(a) | {"grid": [list(s) for s in a.grid]}, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
