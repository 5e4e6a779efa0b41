#!/usr/bin/env python
"""How much of a BLiMP pair's scoring could be shared (issue 49, "work that is paid once"): the decoder positions
of the two sentences' common token prefix, as a share of all positions; prints a markdown table.

    .venv/bin/python scripts/bench_pair_prefix.py --blimp DEST/blimp --data data-bin [--json OUT]
    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_pair_prefix.py --blimp DEST/blimp --data data-bin \
        --path CKPT --tags self --every 20 [--rounds 2]

Each pair is read and encoded as ``sipe-eval blimp`` encodes it (``sipe_fairseq.eval.blimp.read_blimp`` and
``prepare`` with ``--parser none``: rule-based words, the data directory's sentencepiece model). A sentence of
``n`` targets (``</s>`` included) runs ``n`` decoder positions; the input at position ``t`` is ``</s>, x_1 ..
x_{t-1}``, so the positions whose inputs the two sentences share are ``1 + lcp`` (``lcp``: the length of their common
token prefix; at most the shorter sentence's ``n``). Under a source that chooses the structure from the prefix
(``self``, ``beam:K``, ``mix:K``) the structure over those positions is shared too (a function of the same
prefix); ``given`` reads a parse of each whole sentence, which may differ inside the prefix, and shares nothing.
The share is an upper bound on what scoring the prefix once saves in decoder positions.

With ``--path``, the engine scores every ``--every``-th pair's sentences under ``--tags`` (at the suites' default
width for ``beam:K``/``mix:K``) with ``--tags-share-prefixes all`` (a pair's common beginning run once,
``structure.search.shared_forks``) and ``none`` (every sentence alone), paired by round (``benchlib.paired_runs``,
order rotated): CPU seconds of this process, the decoder positions the sentences cost alone and the share taken
from another sentence, and the largest difference of a sentence's log-probability between the two (float32).
"""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def common_prefix(a, b) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--blimp", required=True, nargs="+", help="BLiMP JSONL files or folders")
    p.add_argument("--data", required=True, help="a sipe-preprocess data directory (its spm.model and dict.txt)")
    p.add_argument("--json", help="also write the numbers as JSON here")
    p.add_argument("--path", help="a checkpoint: also time the engine with and without shared prefixes")
    p.add_argument("--tags", default="self", help="the source to time (--path)")
    p.add_argument("--every", type=int, default=20, help="every N-th pair (--path)")
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args(argv)

    from sipe_fairseq.data.encode import SentenceEncoder
    from sipe_fairseq.eval.blimp import prepare, read_blimp
    from sipe_fairseq.parsing.sources import NoTrees

    pairs = read_blimp(a.blimp)
    prepared = prepare(pairs, NoTrees(), SentenceEncoder(a.data))
    by = defaultdict(lambda: {"pairs": 0, "positions": 0, "shared": 0})
    skipped = 0
    for pair in pairs:
        good, bad = prepared.encoded.get(pair.good), prepared.encoded.get(pair.bad)
        if good is None or bad is None:
            skipped += 1
            continue
        g, b = good[0].tolist(), bad[0].tolist()
        row = by[pair.uid]
        row["pairs"] += 1
        row["positions"] += len(g) + len(b)
        row["shared"] += min(1 + common_prefix(g, b), len(g), len(b))
    total = {k: sum(r[k] for r in by.values()) for k in ("pairs", "positions", "shared")}
    ranked = sorted(by.items(), key=lambda kv: -kv[1]["shared"] / kv[1]["positions"])
    print(f"{total['pairs']:,} pairs of {len(by)} paradigms ({skipped} skipped: not encoded); positions that a pair's "
          f"two sentences share: {total['shared']:,} of {total['positions']:,} "
          f"({100 * total['shared'] / total['positions']:.1f}%)\n")
    print("| paradigm | pairs | positions | shared | share |\n|---|---:|---:|---:|---:|")
    shown = ranked[:5] + [("...", None)] + ranked[-5:] if len(ranked) > 10 else ranked
    for name, r in shown:
        if r is None:
            print("| ... | | | | |")
            continue
        print(f"| {name} | {r['pairs']:,} | {r['positions']:,} | {r['shared']:,} | {100 * r['shared'] / r['positions']:.1f}% |")
    out = {"total": total, "skipped": skipped, "paradigms": dict(by)}
    if a.path:
        out["engine"] = time_engine(a, pairs, prepared)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


def time_engine(a, pairs, prepared) -> dict:
    """The engine on every ``--every``-th pair with a pair's prefix shared and not (module docstring)."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
    from benchlib import markdown_table, median, paired_runs
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.structure.family import StructureOptions
    from sipe_fairseq.structure.options import SUITE_WIDTH
    from sipe_fairseq.structure.scoring import score_encoded
    from sipe_fairseq.structure.sources import parse_source

    torch.set_num_threads(1)
    model, task = load_lm(a.path, a.data)
    d = task.source_dictionary
    encoded = []
    for pair in pairs[:: a.every]:
        good, bad = prepared.encoded.get(pair.good), prepared.encoded.get(pair.bad)
        if good is not None and bad is not None:
            encoded += [good, bad]
    width = SUITE_WIDTH if parse_source(a.tags).branches else {}
    results = {}

    def run(mode):
        def go():
            results[mode] = score_encoded(model, encoded, a.tags, d, StructureOptions(workers=1, share_prefixes=mode, **width))
        return go

    timed = paired_runs({"all": run("all"), "none": run("none")}, a.rounds)
    positions = sum(s.extra["positions"] for s in results["none"])
    shared = sum(s.extra.get("shared_positions", 0) for s in results["all"])
    gap = max(abs(x.logprob - y.logprob) for x, y in zip(results["all"], results["none"]))
    ratio = [x / y for x, y in zip(timed["all"]["cpu"], timed["none"]["cpu"])]
    print(f"\n{len(encoded):,} sentences (every {a.every}th pair) under {a.tags}"
          f"{' at the suites default width' if width else ''}, {a.rounds} rounds, one thread\n")
    print(markdown_table(["--tags-share-prefixes", "CPU s (median)", "positions", "taken from the pair's other sentence"],
                         [["none", f"{median(timed['none']['cpu']):.2f}", f"{positions:,}", "0"],
                          ["all", f"{median(timed['all']['cpu']):.2f}", f"{positions:,}",
                           f"{shared:,} ({100 * shared / positions:.1f}%)"]]))
    print(f"\nCPU time all / none: {median(ratio):.2f}x [{min(ratio):.2f}-{max(ratio):.2f}]; largest difference of a "
          f"sentence's log-probability: {gap:.1e}")
    return {"sentences": len(encoded), "tags": a.tags, "cpu": {k: timed[k]["cpu"] for k in timed},
            "positions": positions, "shared": shared, "max_logprob_difference": gap}


if __name__ == "__main__":
    sys.exit(main())
