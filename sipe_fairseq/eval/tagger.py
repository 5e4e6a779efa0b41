"""Hexatagger evaluation and the ``hexatagger:CKPT`` parser backend.

    python -m sipe_fairseq.eval.tagger --data DIR --path CKPT --split test

Tags every sentence of a ``sipe-preprocess`` split with a ``sipe_tagger`` checkpoint, decodes with
the constrained decoder (:func:`~sipe_fairseq.hexatag.constrained.constrained_decode`, the same as
``sipe-tag --backend hexatagger:CKPT``) and reports UAS and exact match against the gold tags
decoded to heads (i.e. the gold trees as preprocessed: projectivized by lifting), plus the
unconstrained tag accuracy.
"""
import argparse
import json
import logging
import os
import sys
from typing import List, Sequence

import torch

from ..hexatag import decode
from ..hexatag.constrained import constrained_decode
from .parsers import ParseError, register_parser, simple_tokenize

logger = logging.getLogger(__name__)


def load_tagger(path: str, data: str = None):
    """``(model, task)`` from a ``sipe_tagger`` checkpoint (``data`` overrides the task's data dir).
    A tagger whose encoder came from ``--init-encoder`` rebuilds from its own config; the init
    checkpoint is not needed."""
    import sipe_fairseq
    from fairseq import checkpoint_utils

    from ..checkpoint_compat import allow_fairseq_checkpoint_globals

    sipe_fairseq.register()
    overrides = {"data": data} if data else {}
    # fairseq stores the model's argparse.Namespace in the checkpoint config: allow just that class
    allow_fairseq_checkpoint_globals()
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task([path], arg_overrides=overrides)
    model = models[0].eval()
    return model, task


@torch.no_grad()
def tag_batch(model, token_lists: Sequence[torch.Tensor], firsts: Sequence[Sequence[int]], pad: int):
    """Constrained-decoded tag sequences for a batch of 1-D token tensors with first-subword positions."""
    t = max(len(x) for x in token_lists)
    src = torch.full((len(token_lists), t), pad, dtype=torch.long)
    for k, x in enumerate(token_lists):
        src[k, :len(x)] = x
    term, nont = model(src)
    term, nont = term.float().log_softmax(-1), nont.float().log_softmax(-1)
    out = []
    for k, pos in enumerate(firsts):
        idx = torch.as_tensor(list(pos), dtype=torch.long)
        out.append(constrained_decode(term[k, idx].tolist(), nont[k, idx].tolist()))
    return out


@register_parser("hexatagger")
class HexataggerParser:
    """``hexatagger:CKPT``: a ``sipe_tagger`` checkpoint as a parser. Words are encoded with the
    checkpoint's data directory (``spm.model``, ``dict.txt``) as in training; raw text is split by
    :func:`~sipe_fairseq.eval.parsers.simple_tokenize` (UD/PTB style)."""

    def __init__(self, path: str, batch_size: int = 64, max_tokens: int = 510):
        if not path:
            raise ValueError("hexatagger backend needs a checkpoint: hexatagger:PATH/checkpoint_best.pt")
        from ..data.encode import SentenceEncoder

        self.spec = f"hexatagger:{path}"
        self.model, self.task = load_tagger(path)
        self.encoder = SentenceEncoder(self.task.cfg.data, dictionary=self.task.source_dictionary)
        limit = self.model.max_positions()  # a pre-trained body with learned absolute positions
        self.batch_size, self.max_tokens = batch_size, min(max_tokens, limit) if limit else max_tokens

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        encoded = []
        for k, words in enumerate(sentences):
            if not words:
                raise ParseError("empty sentence (no words)", k)
            toks, _, _, firsts = self.encoder.encode(list(words))
            if len(toks) > self.max_tokens:
                raise ParseError(f"sentence too long ({len(toks)} subwords > {self.max_tokens})", k)
            encoded.append((toks, firsts))
        heads = []
        pad = self.task.source_dictionary.pad()
        for i in range(0, len(encoded), self.batch_size):
            chunk = encoded[i:i + self.batch_size]
            for tags in tag_batch(self.model, [c[0] for c in chunk], [c[1] for c in chunk], pad):
                heads.append(decode(tags))
        return heads

    def parse_text(self, sentences: Sequence[str]):
        words = []
        for k, text in enumerate(sentences):
            w = simple_tokenize(text)
            if not w:
                raise ParseError(f"empty sentence {text!r}", k)
            words.append(w)
        return list(zip(words, self.parse_words(words)))


def evaluate(model, task, split: str, batch_size: int = 64) -> dict:
    """UAS / exact match (constrained decoding) and unconstrained tag accuracies on ``split``."""
    from ..data.tag_dictionary import FIRST_TAG_ID, tag_classes

    task.load_dataset(split)
    ds = task.datasets[split]
    pad = task.source_dictionary.pad()
    terms, nts = tag_classes("terminal"), tag_classes("nonterminal")
    n_words = correct = exact = n_sent = 0
    for i in range(0, len(ds), batch_size):
        items = [ds[j] for j in range(i, min(i + batch_size, len(ds)))]
        toks = [it["net_input.src_tokens"] for it in items]
        firsts = [(it["terminal_target"] >= FIRST_TAG_ID).nonzero().squeeze(-1).tolist() for it in items]
        predicted = tag_batch(model, toks, firsts, pad)
        for it, pos, tags in zip(items, firsts, predicted):
            gold_tags = [(terms[int(it["terminal_target"][p]) - FIRST_TAG_ID], nts[int(it["nonterminal_target"][p]) - FIRST_TAG_ID])
                         for p in pos]
            gold, pred = decode(gold_tags), decode(tags)
            same = sum(a == b for a, b in zip(gold, pred))
            n_words += len(gold)
            correct += same
            exact += int(same == len(gold))
            n_sent += 1
    return {"split": split, "sentences": n_sent, "words": n_words, "uas": 100.0 * correct / max(n_words, 1),
            "exact_match": 100.0 * exact / max(n_sent, 1)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sipe_fairseq.eval.tagger", description="UAS / exact match of a sipe_tagger")
    p.add_argument("--data", required=True, help="sipe-preprocess directory")
    p.add_argument("--path", required=True, help="sipe_tagger checkpoint")
    p.add_argument("--split", default="test")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--json", help="also write the scores here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stderr)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    model, task = load_tagger(args.path, args.data)
    scores = evaluate(model, task, args.split, args.batch_size)
    print(f"{args.split}: sentences {scores['sentences']}, words {scores['words']}, "
          f"UAS {scores['uas']:.2f}, exact match {scores['exact_match']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(scores, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
