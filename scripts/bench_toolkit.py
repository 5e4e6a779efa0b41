#!/usr/bin/env python
"""The Python interface's toolkit against plain scoring (issue 50), paired in one process; prints a markdown table.

    OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_toolkit.py --path CKPT --data DATA [--split test]
        [--tags self] [--sentences 1000] [--rounds 3] [--json OUT]

The checkpoint is loaded once (``sipe_fairseq.hub.load``, one worker) and the first ``--sentences`` sentences of
``--split`` are read back as word lists. Three comparisons, each a pair of calls timed in turn over ``--rounds``
rounds (order rotated every round, ``benchlib.paired_runs``):

* **context**: every sentence scored after the sentence before it (``score(texts, context=[previous])``) against
  the concatenation of the two scored as one text (``score([previous + text])``): the context is fed once, with
  the text, in both;
* **predict**: ``predict(prefixes, k=5, word_budget=0)`` (the next-token distribution after each prefix) against
  ``score(prefixes)`` of the same prefixes (the prefixes: each sentence's first half of its words);
* **measures**: ``score(texts, measures=("rank", "entropy"))`` against ``score(texts)``;
* **one context**: every sentence after one common context (the first sentence), ``score(texts, context=first)``,
  against ``score(texts)`` alone: the engine runs the context once per batch and copies it to each text
  (``structure.search.shared_forks``); and the same call with the sharing off (``share_prefixes="none"``, the
  commands' ``--tags-share-prefixes none``), which feeds the context with every text;
* **documents**: the sentences cut into documents of ``--document`` sentences, each after its document's
  sentences before it (``sipe-surprisal --documents``), against ``score(texts)`` alone, with the sharing on and off.

Columns: CPU seconds of this process (median over rounds), and the ratio, the median of the per-round ratios
[min-max].
"""
import argparse
import copy
import json
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--split", default="test")
    p.add_argument("--tags", default="self")
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--document", type=int, default=10, help="sentences per document of the documents comparison")
    p.add_argument("--json")
    a = p.parse_args(argv)

    import torch

    from benchlib import markdown_table, median, paired_runs, speed_ratio
    from sipe_fairseq import hub

    torch.set_num_threads(1)
    lm = hub.load(a.path, data=a.data, workers=1)
    unshared = copy.copy(lm)
    unshared.options = replace(lm.options, share_prefixes="none")
    lines = (Path(a.data) / f"{a.split}.txt")
    if lines.exists():
        texts = [line.split() for line in lines.read_text(encoding="utf-8").splitlines() if line.strip()]
    else:  # the split's words from its token stream (pieces joined at the word marks)
        from sipe_fairseq.eval.prefix_scores import load_split_sentences

        sentences = load_split_sentences(lm.task, a.split)[0]
        d = lm.dictionary
        texts = [["".join(d[int(t)] for t in w).replace("\u2581", "") for w in s.words()] for s in sentences]
    texts = [t for t in texts if len(t) >= 2][: a.sentences]
    previous, current = texts[:-1], texts[1:]
    prefixes = [t[: max(1, len(t) // 2)] for t in texts]
    first, rest = (texts[0],), texts[1:]
    documents = [[tuple(texts[d: k]) or None for k in range(d, min(d + a.document, len(texts)))]
                 for d in range(0, len(texts), a.document)]
    before = [c for doc in documents for c in doc]  # each sentence's document so far
    pairs = {
        "context": {"score(text, context=previous)": lambda: lm.score(current, a.tags, context=[[p] for p in previous]),
                    "score(previous + text)": lambda: lm.score([p + c for p, c in zip(previous, current)], a.tags)},
        "predict": {"predict(prefixes, k=5)": lambda: lm.predict(prefixes, 5, a.tags, word_budget=0),
                    "score(prefixes)": lambda: lm.score(prefixes, a.tags)},
        "measures": {"score(texts, measures=rank,entropy)": lambda: lm.score(texts, a.tags, ("rank", "entropy")),
                     "score(texts)": lambda: lm.score(texts, a.tags)},
        "one context": {"score(texts, context=first)": lambda: lm.score(rest, a.tags, context=first),
                        "score(texts)": lambda: lm.score(rest, a.tags)},
        "one context, not shared": {"score(texts, context=first), not shared":
                                    lambda: unshared.score(rest, a.tags, context=first),
                                    "score(texts)": lambda: lm.score(rest, a.tags)},
        "documents": {"score(texts, context=document so far)": lambda: lm.score(texts, a.tags, context=before),
                      "score(texts)": lambda: lm.score(texts, a.tags)},
        "documents, not shared": {"score(texts, context=document so far), not shared":
                                  lambda: unshared.score(texts, a.tags, context=before),
                                  "score(texts)": lambda: lm.score(texts, a.tags)},
    }
    rows, out = [], {}
    for name, fns in pairs.items():
        (label, fn), (ref_label, ref) = fns.items()
        fn(), ref()  # warm-up
        timed = paired_runs({label: fn, ref_label: ref}, a.rounds)
        ratio, spread = speed_ratio(timed[ref_label], timed[label], "cpu")
        out[name] = {k: v["cpu"] for k, v in timed.items()} | {"ratio": ratio, "spread": spread}
        rows.append([name, label, f"{median(timed[label]['cpu']):.2f}", ref_label, f"{median(timed[ref_label]['cpu']):.2f}",
                     f"{ratio:.2f}x [{spread[0]:.2f}-{spread[1]:.2f}]"])
    print(f"{len(texts)} sentences of {a.split} under {a.tags}, {a.rounds} rounds, one thread\n")
    print(markdown_table(["comparison", "call", "CPU s", "against", "CPU s", "time ratio"], rows, "llrlrr"))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
