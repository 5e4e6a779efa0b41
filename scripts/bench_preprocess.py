#!/usr/bin/env python
"""Wall time of ``sipe-preprocess`` vs ``fairseq-preprocess --only-source`` on the same subwords.

    .venv/bin/python scripts/bench_preprocess.py [--conllu en_ewt-ud-train.conllu] [--repeat 3]

Steps: train the sentencepiece model once (timed on its own), write the subword text with
``sipe-preprocess --keep-text``, then time both tools as subprocesses (``sipe-preprocess`` with
``--spm-model``, so spm training is not counted), best of ``--repeat`` runs. Prints a markdown
table and checks that both wrote the same dict.txt/train.bin/train.idx. Target ratio: <= 1.5.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared" / "data" / "ud-english-ewt" / "en_ewt-ud-train.conllu"


def _tool(name):
    exe = Path(sys.executable).with_name(name)
    return [str(exe)] if exe.exists() else [sys.executable, "-m", {"sipe-preprocess": "sipe_fairseq.cli.preprocess",
                                                                   "fairseq-preprocess": "fairseq_cli.preprocess"}[name]]


def _timed(cmd, env):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conllu", default=str(DEFAULT), help="CoNLL-U training file (default: UD EWT train)")
    p.add_argument("--repeat", type=int, default=3, help="runs per tool; the best is reported")
    p.add_argument("--spm-vocab-size", type=int, default=8000)
    args = p.parse_args(argv)
    if not os.path.isfile(args.conllu):
        sys.exit(f"{args.conllu}: not found (pass --conllu)")
    sys.path.insert(0, str(ROOT))
    from sipe_fairseq.data.preprocess import read_split, train_spm

    env = dict(os.environ, LOGLEVEL="WARNING")
    with tempfile.TemporaryDirectory(prefix="bench_preprocess.") as tmp:
        tmp = Path(tmp)
        words = read_split(args.conllu).words
        t = time.perf_counter()
        model = train_spm((" ".join(s) for s in words), args.spm_vocab_size)
        t_spm = time.perf_counter() - t
        (tmp / "spm.model").write_bytes(model)
        sipe = _tool("sipe-preprocess") + ["--train", args.conllu, "--spm-model", str(tmp / "spm.model")]
        subprocess.run(sipe + ["--destdir", str(tmp / "text"), "--keep-text"], check=True, env=env)
        text = tmp / "text" / "train.tok"
        fs, sp = [], []
        for k in range(args.repeat):
            fs.append(_timed(_tool("fairseq-preprocess") + ["--only-source", "--trainpref", str(text),
                                                            "--destdir", str(tmp / f"fs{k}")], env))
            sp.append(_timed(sipe + ["--destdir", str(tmp / f"sipe{k}")], env))
        same = all((tmp / "fs0" / n).read_bytes() == (tmp / "sipe0" / n).read_bytes()
                   for n in ("dict.txt", "train.bin", "train.idx"))
        n_sent = sum(1 for _ in open(text, encoding="utf-8"))
        n_tok = sum(len(line.split()) + 1 for line in open(text, encoding="utf-8"))
    print(f"Input: {args.conllu} ({n_sent} sentences, {n_tok} tokens incl. </s>), best of {args.repeat}, "
          f"{os.cpu_count()} CPUs; token files byte-identical: {same}\n")
    print("| step | wall time (s) |")
    print("|---|---:|")
    print(f"| sentencepiece training ({args.spm_vocab_size} pieces, not counted below) | {t_spm:.2f} |")
    print(f"| `fairseq-preprocess --only-source` on the subword text | {min(fs):.2f} |")
    print(f"| `sipe-preprocess --spm-model` (tokens + terminal + nonterminal streams) | {min(sp):.2f} |")
    print(f"| ratio sipe / fairseq (target <= 1.5) | {min(sp) / min(fs):.2f}x |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
