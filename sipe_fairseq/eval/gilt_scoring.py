"""Scoring text with a ``gilt_txl`` model (gilt-facts.md section 4): incremental decoding with a KV
cache per hypothesis, and a beam over graphs.

Each sentence is scored on its own, after a ``</s>`` that starts it (as ``--sample-break-mode eos``),
word by word. At word w (the i-th of its sentence) the LM pays for its first subword x_k given the
prefix and each hypothesis's graph; then the arc scorer (o_w from h_(k-1) and emb(x_k)) scores its
2i - 1 candidate arcs and the count head gives pi(c). The search branches on the top
``count_beam`` counts c <= min(2i - 1, 29), adds the top-c arcs by p_ij and **log pi(c) only**
(never log p_ij), keeps the best ``beam`` hypotheses, then feeds the word's subwords with the features
of the new graph (all subwords of the word in one cached step). Perplexity from the beam is
exp(-logsumexp_beam[log p(x | G) + sum log pi(c)] / n), n = tokens (per token) or words (per word),
both counting ``</s>``: a beam approximation of the marginal over count choices (no tree or
acyclicity constraint, pi not renormalised over the allowed counts, as the released code).

Beside it, with the gold graph: the conditional log p(x | G_gold) (what training logs) and the joint
bound log p(x | G_gold) + log P_arcs(G_gold), the gold arcs paid for under the scorer's Bernoulli arc
distribution (as criterion ``gilt_lm``'s ``joint_loss``).

``python -m sipe_fairseq.eval.gilt_scoring --path CKPT --data DIR [--split valid] [--beam 20]
[--count-beam 5] [--max-sentences N]`` prints the three perplexities; exit status 3 for a checkpoint
that cannot be loaded, 2 for bad data.
"""
import argparse
import logging
import math
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..data.graph_features import N_FEATURES, GraphTape
from ..modules.arc_scorer import MAX_COUNT

logger = logging.getLogger(__name__)

Words = Sequence[Sequence[int]]  # token ids per word (first subword first)
Arcs = Sequence[Tuple[Sequence[int], Sequence[int]]]  # per word: heads among 0..w-1, dependents among 1..w-1


@dataclass
class SentenceScore:
    n_tokens: int  # subwords + </s>
    n_words: int  # words + </s>
    logp: float  # beam: logsumexp over hypotheses; gold: log p(x | G_gold)
    arc_logp: float = 0.0  # gold: log P_arcs(G_gold) (Bernoulli over the 2i pairs of every word)
    count_logp: float = 0.0  # gold: sum log pi(c_gold)
    hypotheses: int = 1
    best_arcs: Tuple[Tuple[int, int], ...] = ()  # beam: the arcs (head, dependent) of the best hypothesis


class _Beam:
    """Hypotheses of one sentence: scores, LM log-probs, graphs, word inputs o, and the KV cache."""

    def __init__(self, model):
        self.model, self.dec = model, model.decoder
        self.state = {}
        self.score = None
        self.lm = None
        self.tapes = [GraphTape()]
        self.arcs: List[Tuple[Tuple[int, int], ...]] = [()]
        self.o = None  # (B, words + 1, 3d), index 0 unused (the root)
        self.tokens: List[int] = []
        self.word_of_pos: List[int] = []

    def feed(self, tokens: Sequence[int], word: int, rows: Optional[torch.Tensor]):
        """Feed ``tokens`` (all of word ``word``, 0: no word) with tape rows (B, 3, word+1) of the new graph."""
        b = 1 if self.score is None else self.score.numel()
        self.tokens += list(tokens)
        self.word_of_pos += [word] * len(tokens)
        prefix = torch.tensor(self.tokens).expand(b, -1)
        n, k = len(self.tokens), len(tokens)
        dtype = self.dec.embed_tokens.weight.dtype
        feats = torch.zeros(b, k, n, N_FEATURES, dtype=torch.long)
        if rows is not None:
            table = torch.cat([torch.zeros(b, 1, N_FEATURES, dtype=torch.long), rows[:, :, 1:].transpose(1, 2)], 1)  # 0: no word
            keys = torch.tensor(self.word_of_pos)
            feats[:] = table[:, keys][:, None]
        logits, extra = self.dec(prefix, gilt_features=feats, incremental_state=self.state)
        lp = F.log_softmax(logits.to(torch.float64 if dtype == torch.float64 else torch.float32), -1)
        up, low = self.dec.arc_layers()
        self.last = (extra["inner_states"][up][:, -1], extra["inner_states"][low][:, -1])
        return lp

    def reorder(self, order: torch.Tensor):
        self.dec.reorder_incremental_state(self.state, order)
        self.last = tuple(t.index_select(0, order) for t in self.last)
        self.o = self.o.index_select(0, order)


def score_sentence(model, words: Words, eos: int, beam: int = 20, count_beam: int = 5,
                   gold: Optional[Arcs] = None) -> SentenceScore:
    """Score one sentence: the beam over graphs, or with ``gold`` arcs a single teacher-forced hypothesis."""
    bs = _Beam(model)
    dec = bs.dec
    lp = bs.feed([eos], 0, None)
    dt = lp.dtype
    bs.score = torch.zeros(1, dtype=dt)
    bs.lm = torch.zeros(1, dtype=dt)
    bs.o = torch.zeros(1, 1, 3 * dec.cfg.decoder_embed_dim, dtype=dec.embed_tokens.weight.dtype)
    arc_logp, count_logp = 0.0, 0.0
    for i, pieces in enumerate(words, 1):
        first = pieces[0]
        step = lp[:, -1, first]
        bs.score, bs.lm = bs.score + step, bs.lm + step
        emb = dec.embed_tokens.weight[first] * dec.embed_scale
        o_w = torch.cat([bs.last[0], bs.last[1], emb.expand(bs.o.size(0), -1)], -1)
        o_nodes = torch.cat([bs.o, o_w[:, None]], 1)
        prev = torch.stack([torch.from_numpy(t.row()).T for t in bs.tapes])  # (B, i, 3) over nodes 0..i-1
        prev = torch.cat([prev, prev.new_zeros(prev.size(0), 1, N_FEATURES)], 1)
        head, dep, count_logits = dec.arc_scorer.score_word(o_nodes, prev)
        count_lp = F.log_softmax(count_logits.to(dt), -1)
        n_cand = 2 * i - 1
        # candidates: v -> i for v = 0..i-1, then i -> v for v = 1..i-1
        cand = torch.cat([head[:, :i], dep[:, 1:i]], 1).to(dt)
        cands = [(v, i) for v in range(i)] + [(i, v) for v in range(1, i)]
        children = []  # (parent row, score, lm, heads, deps)
        if gold is not None:
            heads, deps = gold[i - 1]
            c = len(heads) + len(deps)
            labels = torch.tensor([float(v in heads) for v in range(i)] + [float(v in deps) for v in range(1, i)], dtype=dt)
            arc_logp += float(-F.binary_cross_entropy_with_logits(cand[0], labels, reduction="sum")
                              - F.binary_cross_entropy_with_logits(head[0, i].to(dt), torch.zeros((), dtype=dt)))  # the self pair
            count_logp += float(count_lp[0, min(c, MAX_COUNT)])
            children.append((0, bs.score[0] + count_lp[0, min(c, MAX_COUNT)], bs.lm[0], list(heads), list(deps)))
        else:
            allowed = min(n_cand, MAX_COUNT) + 1
            top_c = count_lp[:, :allowed].topk(min(count_beam, allowed), -1)
            order = torch.sort(cand, dim=-1, descending=True, stable=True).indices
            for b in range(cand.size(0)):
                for lpc, c in zip(top_c.values[b].tolist(), top_c.indices[b].tolist()):
                    chosen = [cands[j] for j in order[b, :c].tolist()]
                    heads = sorted(h for h, d in chosen if d == i)
                    deps = sorted(d for h, d in chosen if h == i)
                    children.append((b, bs.score[b] + lpc, bs.lm[b], heads, deps))
            children.sort(key=lambda ch: -float(ch[1]))  # stable: ties keep the earlier hypothesis/count
            children = children[:beam]
        parents = torch.tensor([ch[0] for ch in children])
        bs.score = torch.stack([torch.as_tensor(ch[1], dtype=dt) for ch in children])
        bs.lm = torch.stack([torch.as_tensor(ch[2], dtype=dt) for ch in children])
        bs.o = o_nodes
        bs.reorder(parents)
        tapes = []
        for ch in children:
            t = bs.tapes[ch[0]].copy()
            t.add_word(ch[3], ch[4])
            tapes.append(t)
        bs.tapes = tapes
        bs.arcs = [bs.arcs[ch[0]] + tuple((h, i) for h in ch[3]) + tuple((i, d) for d in ch[4]) for ch in children]
        rows = torch.stack([torch.from_numpy(t.row()) for t in tapes])  # (B, 3, i+1)
        lp = bs.feed(pieces, i, rows)
        for t, tok in enumerate(pieces[1:]):
            bs.score, bs.lm = bs.score + lp[:, t, tok], bs.lm + lp[:, t, tok]
    bs.score, bs.lm = bs.score + lp[:, -1, eos], bs.lm + lp[:, -1, eos]
    n_tokens = sum(len(p) for p in words) + 1
    if gold is not None:
        return SentenceScore(n_tokens, len(words) + 1, float(bs.lm[0]), arc_logp, count_logp)
    best = int(bs.score.argmax())
    return SentenceScore(n_tokens, len(words) + 1, float(torch.logsumexp(bs.score, 0)), hypotheses=bs.score.numel(),
                         best_arcs=bs.arcs[best])


def read_sentences(data: str, split: str, dictionary, max_sentences: int = 0):
    """(token ids per word, gold arcs per word) for each non-empty sentence of a data directory's split."""
    import os

    from fairseq.data import data_utils

    from ..data.arc_streams import load_arc_stream
    from ..data.arcs import decode_words
    from ..data.tag_dictionary import FIRST_TAG_ID

    tokens = data_utils.load_indexed_dataset(os.path.join(data, split), dictionary)
    terminal = data_utils.load_indexed_dataset(os.path.join(data, f"{split}.terminal"), None)
    if tokens is None or terminal is None:
        raise FileNotFoundError(f"{data}: no token/terminal stream for split {split!r}")
    arcs, n_words = load_arc_stream(data, split, tokens, terminal)
    out = []
    for s in range(len(tokens)):
        if not n_words[s]:
            continue
        toks, term = tokens[s].tolist()[:-1], terminal[s].tolist()
        words: List[List[int]] = []
        for t, tag in zip(toks, term):
            if tag >= FIRST_TAG_ID:
                words.append([t])
            else:
                words[-1].append(t)
        out.append((words, decode_words(arcs[s].tolist(), int(n_words[s]))))
        if max_sentences and len(out) == max_sentences:
            break
    return out


@torch.no_grad()
def score_corpus(model, sentences, eos: int, beam: int, count_beam: int) -> dict:
    """Perplexities over ``sentences`` ((words, gold arcs) pairs): gold conditional, joint bound, beam marginal."""
    model.eval()
    tot = {"tokens": 0, "words": 0, "cond": 0.0, "joint": 0.0, "beam": 0.0, "tp": 0, "pred": 0, "gold": 0}
    for words, gold in sentences:
        g = score_sentence(model, words, eos, gold=gold)
        b = score_sentence(model, words, eos, beam, count_beam)
        tot["tokens"] += g.n_tokens
        tot["words"] += g.n_words
        tot["cond"] += g.logp
        tot["joint"] += g.logp + g.arc_logp
        tot["beam"] += b.logp
        gold_arcs = {(h, w) for w, (hs, _) in enumerate(gold, 1) for h in hs}
        gold_arcs |= {(w, d) for w, (_, ds) in enumerate(gold, 1) for d in ds}
        tot["tp"] += len(gold_arcs & set(b.best_arcs))
        tot["pred"] += len(b.best_arcs)
        tot["gold"] += len(gold_arcs)
    res = {"sentences": len(sentences), "tokens": tot["tokens"], "words": tot["words"]}
    p, r = tot["tp"] / max(tot["pred"], 1), tot["tp"] / max(tot["gold"], 1)
    res["best_arc_f1"] = 100.0 * (2 * p * r / (p + r) if p + r else 0.0)  # the beam's 1-best graph vs the gold arcs
    for key in ("cond", "joint", "beam"):
        res[f"{key}_ppl_token"] = math.exp(-tot[key] / tot["tokens"])
        res[f"{key}_ppl_word"] = math.exp(-tot[key] / tot["words"])
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sipe_fairseq.eval.gilt_scoring", description=__doc__.split("\n\n")[0])
    p.add_argument("--path", required=True, help="gilt_txl checkpoint")
    p.add_argument("--data", required=True, help="sipe-preprocess directory (with {split}.arcs)")
    p.add_argument("--split", default="valid")
    p.add_argument("--beam", type=int, default=20, help="hypotheses kept per word (paper: 300; GLUE parsing 20)")
    p.add_argument("--count-beam", type=int, default=5, help="counts branched on per hypothesis (paper: 5)")
    p.add_argument("--max-sentences", type=int, default=0, help="score only the first N sentences (0: all)")
    args = p.parse_args(argv)
    logging.basicConfig(format="%(asctime)s | %(levelname)s | %(name)s | %(message)s", level=logging.INFO, stream=sys.stderr)
    import sipe_fairseq

    sipe_fairseq.register()
    from ..checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, load_with_task

    try:
        model, task = load_with_task(args.path, args.data)
    except CheckpointError as e:
        print(f"error: {e}", file=sys.stderr)
        return CHECKPOINT_EXIT_STATUS
    if getattr(model.decoder, "arc_scorer", None) is None:
        print(f"error: checkpoint {args.path}: not a gilt_txl model with an arc scorer", file=sys.stderr)
        return CHECKPOINT_EXIT_STATUS
    try:
        sentences = read_sentences(args.data, args.split, task.dictionary, args.max_sentences)
    except (FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res = score_corpus(model, sentences, task.dictionary.eos(), args.beam, args.count_beam)
    print(f"{res['sentences']} sentences, {res['tokens']} tokens, {res['words']} words (both counting </s>); "
          f"beam {args.beam}, count beam {args.count_beam}")
    print(f"{'arc F1 of the 1-best graph':30s} {res['best_arc_f1']:.2f}")
    for key, name in (("cond", "gold-graph conditional"), ("joint", "joint bound (gold arcs paid)"), ("beam", "beam marginal")):
        print(f"{name:30s} ppl/token {res[f'{key}_ppl_token']:.3f}  ppl/word {res[f'{key}_ppl_word']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
