#!/usr/bin/env python
"""How much of a BLiMP pair's scoring could be shared (issue 49, "work that is paid once"): the decoder positions
of the two sentences' common token prefix, as a share of all positions; prints a markdown table.

    .venv/bin/python scripts/bench_pair_prefix.py --blimp DEST/blimp --data data-bin [--json OUT]

Each pair is read and encoded as ``sipe-eval blimp`` encodes it (``sipe_fairseq.eval.blimp.read_blimp`` and
``prepare`` with ``--parser none``: rule-based words, the data directory's sentencepiece model). A sentence of
``n`` targets (``</s>`` included) runs ``n`` decoder positions; the input at position ``t`` is ``</s>, x_1 ..
x_{t-1}``, so the positions whose inputs the two sentences share are ``1 + lcp`` (``lcp``: the length of their common
token prefix; at most the shorter sentence's ``n``). Under a source that chooses the structure from the prefix
(``self``, ``beam:K``, ``mix:K``) the structure over those positions is shared too (a function of the same
prefix); ``given`` reads a parse of each whole sentence, which may differ inside the prefix, and shares nothing.
The share is an upper bound on what scoring the prefix once saves in decoder positions; it is measured here, not
built (the engine scores every sentence alone).
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
    if a.json:
        Path(a.json).write_text(json.dumps({"total": total, "skipped": skipped, "paradigms": dict(by)}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
