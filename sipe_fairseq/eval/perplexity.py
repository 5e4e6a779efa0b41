"""Perplexity of whole splits (``sipe-eval-lm``, Table 2's PPL) as ``fairseq-eval-lm`` computes it, through the
task's eval-lm data loader: :func:`score_split`, :func:`split_summary`, :func:`perplexity_markdown`. Single
sentences (BLiMP, SyntaxGym, minimal pairs, the Python interface) are scored by the structure engine
(:func:`sipe_fairseq.structure.scoring.score_sentences`), masked-LM encoders by pseudo-log-likelihood
(:mod:`.pll`).

Tag log-probabilities come from :func:`~sipe_fairseq.modules.tag_heads.tag_log_probs`.

Perplexity p(x | tags), the joint bound -log p(x, tags), and both broken down by position type.

A SiPE decoder is conditioned on parser tags, and the tags carry information about later words
(the last word's ``EOS`` non-terminal announces the end of the sentence). So besides the
conditional perplexity that ``fairseq-eval-lm`` prints, this module reports

* the joint score ``-log p(x, tags) = LM NLL + terminal NLL + non-terminal NLL`` (every tagged
  position's tags are predicted from its left context, see ``data/lm_dataset.py``), an upper bound
  on ``-log p(x)`` comparable with a model that sees no tags (for which joint = LM);
* the LM NLL by target type: the end-of-sentence token, word-initial subwords, continuation
  subwords. A gain confined to ``eos`` is information the tags leak, not modelling.
"""
import math
from collections import defaultdict
from typing import Dict, Iterable

import torch
from fairseq import utils

from ..data.tag_dictionary import TAG_HEADS
from ..modules.arc_scorer import arc_losses
from ..modules.tag_heads import tag_log_probs
from ..structure.family import family_of, masked_lm, takes_tags
from .progress import progress
from .reports.tables import table

POSITION_TYPES = ("eos", "word_initial", "continuation")


@torch.no_grad()
def score_batches(model, batches: Iterable[dict], eos: int, pad: int) -> Dict[str, float]:
    """Sum NLLs (nats) over batches of a ``hexatag_lm`` dataset; returns sums and counts."""
    model.eval()
    use_tags = takes_tags(model)
    inputs = {"src_tokens", "src_lengths"} | ({"src_words"} if family_of(model).predicts_arcs else set())  # GiLT's words
    sums = defaultdict(float)
    for sample in progress(batches, desc="perplexity"):
        if "net_input" not in sample:
            continue
        net = dict(sample["net_input"])
        if not use_tags:
            net = {k: v for k, v in net.items() if not k.startswith("src_") or k in inputs}
        out = model(**net)
        lprobs = model.get_normalized_probs(out, log_probs=True, sample=sample)
        target = sample["target"]
        scored = target.ne(pad)
        nll = -lprobs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1).float()
        kinds = {
            "eos": scored & target.eq(eos),
            "word_initial": scored & target.ne(eos) & sample["word_start_target"].bool(),
        }
        kinds["continuation"] = scored & ~kinds["eos"] & ~kinds["word_initial"]
        sums["lm_nll"] += nll[scored].sum().item()
        sums["tokens"] += int(scored.sum())
        for name, mask in kinds.items():
            sums[f"lm_nll.{name}"] += nll[mask].sum().item()
            sums[f"tokens.{name}"] += int(mask.sum())
        arcs = out[1].get("arcs") if isinstance(out[1], dict) else None
        if arcs is not None and "gilt_head" in sample:  # GiLT: the gold graph paid for, -log P_arcs(G_gold)
            bce, _, _, n_words, *_ = arc_losses(arcs, sample["gilt_head"], sample["gilt_dep"])
            sums["arcs_nll"] += float(bce)
            sums["arcs_count"] += n_words
        for kind, n in TAG_HEADS:
            logits = out[1].get(f"{kind}_logits") if use_tags else None
            if logits is None:
                continue
            scores = tag_log_probs(logits, sample[f"{kind}_target"], n)
            sums[f"{kind}_nll"] += scores.nll().item()
            sums[f"{kind}_count"] += int(scores.tagged.sum())
    return dict(sums)


def score_split(model, task, split: str, context_window: int = 0, max_tokens: int = 4096, batch_size=None):
    """Load ``split`` in a ``hexatag_lm`` task and score it with ``model`` through the task's
    eval-lm data loader (as ``fairseq-eval-lm``); returns :func:`split_summary` rows."""
    if masked_lm(model):
        raise ValueError(f"{type(model).__name__} is a masked-LM encoder: perplexity needs a left-to-right decoder "
                         "(encoders are scored by pseudo-log-likelihood, e.g. sipe-eval blimp)")
    task.load_dataset(split)
    itr = task.eval_lm_dataloader(dataset=task.dataset(split), max_tokens=max_tokens, batch_size=batch_size,
                                  max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
                                  context_window=context_window)
    d = task.source_dictionary
    return split_summary(score_batches(model, itr, eos=d.eos(), pad=d.pad()))


def split_summary(sums: Dict[str, float]) -> Dict[str, Dict[str, float]]:
    """Per-token NLL (nats and bits) and perplexities from :func:`score_batches` sums."""
    rows = {}

    def row(nll, count):
        mean = nll / count if count else float("nan")
        return {"count": int(count), "nll": mean, "bits": mean / math.log(2), "ppl": math.exp(mean) if count else float("nan")}

    rows["lm"] = row(sums["lm_nll"], sums["tokens"])
    for name in POSITION_TYPES:
        rows[f"lm.{name}"] = row(sums.get(f"lm_nll.{name}", 0.0), sums.get(f"tokens.{name}", 0))
    words = sums.get("tokens.word_initial", 0) + sums.get("tokens.eos", 0)
    rows["lm.per_word"] = row(sums["lm_nll"], words)
    tag_nll = 0.0
    for kind in [k for k, _ in TAG_HEADS] + ["arcs"]:  # arcs: a GiLT model's gold graph (bits per word)
        if sums.get(f"{kind}_count"):
            rows[kind] = row(sums[f"{kind}_nll"], sums[f"{kind}_count"])
            tag_nll += sums[f"{kind}_nll"]
    rows["joint"] = row(sums["lm_nll"] + tag_nll, sums["tokens"])  # -log p(x, tags) per token
    rows["joint.per_word"] = row(sums["lm_nll"] + tag_nll, words)
    rows["joint"]["sees_tags"] = rows["joint.per_word"]["sees_tags"] = bool(tag_nll)
    return rows


def perplexity_markdown(results: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """Side-by-side table: one column per model, rows = score (perplexity per token / per word)."""
    names = list(results)
    rows = []
    labels = [
        ("lm", "ppl p(x \\| tags) per token (fairseq-eval-lm)"),
        ("joint", "ppl joint -log p(x,tags) per token (bound on p(x))"),
        ("lm.per_word", "ppl p(x \\| tags) per word"),
        ("joint.per_word", "ppl joint per word"),
        ("lm.eos", "bits/token at </s>"),
        ("lm.word_initial", "bits/token at word-initial subwords"),
        ("lm.continuation", "bits/token at continuation subwords"),
        ("terminal", "bits/tag terminal"),
        ("nonterminal", "bits/tag non-terminal"),
        ("arcs", "bits/word gold arcs (GiLT)"),
    ]
    for key, label in labels:
        cells = []
        for n in names:
            r = results[n].get(key)
            if r is None or not r["count"]:
                cells.append("-")
            elif key in ("lm", "joint", "lm.per_word", "joint.per_word"):
                cells.append(f"{r['ppl']:.3f}")
            else:
                cells.append(f"{r['bits']:.3f}")
        rows.append([label, *cells])
    lines = table(["score", *names], rows)
    counts = {n: results[n]["lm"]["count"] for n in names}
    lines.append(f"\ntokens scored: {counts}; a model without tag heads has joint = LM (it sees no tags); a GiLT model's "
                 "p(x | tags) is p(x | gold graph) and its joint pays for the gold arcs as independent Bernoullis "
                 "(the training loss: not a bound for the count-then-top-c model that --tags self/beam:K score).")
    return "\n".join(lines)
