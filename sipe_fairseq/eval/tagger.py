"""Hexatagger evaluation (the ``hexatagger:CKPT`` parser backend is
:mod:`sipe_fairseq.checkpoints.hexatagger`).

    sipe-eval tagger --data DIR --path CKPT --split test

Tags every sentence of a ``sipe-preprocess`` split with a ``sipe_tagger`` checkpoint, decodes with
the constrained decoder (:func:`~sipe_fairseq.hexatag.constrained.constrained_decode`, the same as
``sipe-tag --backend hexatagger:CKPT``) and reports UAS and exact match against the gold tags
decoded to heads (i.e. the gold trees as preprocessed: projectivized by lifting), plus the
unconstrained tag accuracy.
"""
from ..checkpoints.hexatagger import tag_batch
from ..data.tag_dictionary import FIRST_TAG_ID, tag_names
from ..hexatag import decode


def evaluate_tagger(model, task, split: str, batch_size: int = 64) -> dict:
    """UAS / exact match (constrained decoding) and unconstrained tag accuracies on ``split``."""
    task.load_dataset(split)
    ds = task.datasets[split]
    pad = task.source_dictionary.pad()
    terms, nts = tag_names("terminal"), tag_names("nonterminal")
    n_words = correct = exact = n_sent = 0
    for i in range(0, len(ds), batch_size):
        items = [ds[j] for j in range(i, min(i + batch_size, len(ds)))]
        toks = [it["net_input.src_tokens"] for it in items]
        firsts = [(it["terminal_target"] >= FIRST_TAG_ID).nonzero().squeeze(-1).tolist() for it in items]
        predicted = tag_batch(model, toks, firsts, pad)
        for it, pos, tags in zip(items, firsts, predicted):
            gold_tags = [(terms[int(it["terminal_target"][p]) - FIRST_TAG_ID],
                          nts[int(it["nonterminal_target"][p]) - FIRST_TAG_ID]) for p in pos]
            gold, pred = decode(gold_tags), decode(tags)
            same = sum(a == b for a, b in zip(gold, pred))
            n_words += len(gold)
            correct += same
            exact += int(same == len(gold))
            n_sent += 1
    return {"split": split, "sentences": n_sent, "words": n_words, "uas": 100.0 * correct / max(n_words, 1),
            "exact_match": 100.0 * exact / max(n_sent, 1)}
