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
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..data.graph_features import N_FEATURES, GraphTape
from ..models.gilt_lm import check_prefix_decodable, top_arcs
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
    count_logp: float = 0.0  # gold: sum log pi(c_gold); beam: the best hypothesis's sum log pi(c)
    hypotheses: int = 1
    best_arcs: Tuple[Tuple[int, int], ...] = ()  # beam: the arcs (head, dependent) of the best hypothesis
    # per target x_1 .. x_n </s>: gold: log p(x_t | x_<t, G_gold); beam: the increments of the running
    # logsumexp over the beam (the word's count choices charged to its first subword), summing to ``logp``
    token_logprobs: List[float] = field(default_factory=list)
    best_lm: List[float] = field(default_factory=list)  # per target: the best hypothesis's LM log-probs
    word_costs: List[float] = field(default_factory=list)  # per word: gold: log P_arcs of its arcs; beam: log pi(c)
    prefix_logp: List[float] = field(default_factory=list)  # beam: running logsumexp after each word and after </s>
    position_types: List[str] = field(default_factory=list)  # "word_initial" | "continuation" | "eos" per target

    @property
    def lm_logp(self) -> float:
        """log p(x | G) of the best hypothesis (gold: of G_gold; beam 1, count beam 1: the exact greedy ``self``)."""
        return float(sum(self.best_lm))


class _Beam:
    """Hypotheses of one sentence: scores, graphs, word inputs o, and the KV cache."""

    def __init__(self, model):
        self.model, self.dec = model, model.decoder
        self.state = {}
        self.score = None
        self.tapes = [GraphTape()]
        self.arcs: List[Tuple[Tuple[int, int], ...]] = [()]
        self.o = None  # (B, words + 1, 3d), index 0 unused (the root)
        self.tokens: List[int] = []
        self.word_of_pos: List[int] = []

    def feed(self, tokens: Sequence[int], word: int, rows: Optional[torch.Tensor]):
        """Feed ``tokens`` (all of word ``word``, 0: no word) with tape rows (B, 3, word+1) of the new graph;
        returns the LM log-probabilities (float64) at the fed positions."""
        b = 1 if self.score is None else self.score.numel()
        self.tokens += list(tokens)
        self.word_of_pos += [word] * len(tokens)
        device = self.dec.embed_tokens.weight.device
        prefix = torch.tensor(self.tokens, device=device).expand(b, -1)
        n, k = len(self.tokens), len(tokens)
        feats = torch.zeros(b, k, n, N_FEATURES, dtype=torch.long)
        if rows is not None:
            table = torch.cat([torch.zeros(b, 1, N_FEATURES, dtype=torch.long), rows[:, :, 1:].transpose(1, 2)], 1)  # 0: no word
            keys = torch.tensor(self.word_of_pos)
            feats[:] = table[:, keys][:, None]
        logits, extra = self.dec.cached_step(prefix, feats.to(device), self.state)
        lp = F.log_softmax(logits.double(), -1).cpu()
        self.last = self.dec.arc_states(extra)
        return lp

    def reorder(self, order: torch.Tensor):
        # fairseq's own entry point (what its SequenceGenerator calls): every module holding a cache reorders
        self.dec.reorder_incremental_state_scripting(self.state, order.to(self.o.device))
        self.last = self.last.index_select(0, order.to(self.last.device))
        self.o = self.o.index_select(0, order.to(self.o.device))


def score_sentence(model, words: Words, eos: int, beam: int = 20, count_beam: int = 5,
                   gold: Optional[Arcs] = None) -> SentenceScore:
    """Score one sentence: the beam over graphs, or with ``gold`` arcs a single teacher-forced hypothesis.
    ``beam=1, count_beam=1`` keeps the greedy graph (argmax count, top-c arcs per word): a function of the
    prefix, so ``lm_logp`` is the exact log-probability of the ``self`` source."""
    bs = _Beam(model)
    dec = bs.dec
    lp = bs.feed([eos], 0, None)
    dt = torch.float64
    bs.score = torch.zeros(1, dtype=dt)
    lm = torch.zeros(1, 0, dtype=dt)  # per hypothesis, per scored target
    counts = torch.zeros(1, 0, dtype=dt)  # per hypothesis, per word: log pi(c)
    bs.o = torch.zeros(1, 1, 3 * dec.arc_dim, dtype=dec.embed_tokens.weight.dtype,
                       device=dec.embed_tokens.weight.device)
    running, prefix, types, z = [], [], [], 0.0
    arc_costs: List[float] = []
    arc_logp, count_logp = 0.0, 0.0

    def advance(step: torch.Tensor, kind: str):  # every hypothesis pays for one more target
        nonlocal lm, z
        bs.score = bs.score + step
        lm = torch.cat([lm, step[:, None]], 1)
        types.append(kind)
        if kind != "word_initial":  # a word's first subword is closed after its count choice
            zi = float(torch.logsumexp(bs.score, 0))
            running.append(zi - z)
            z = zi

    for i, pieces in enumerate(words, 1):
        first = pieces[0]
        advance(lp[:, -1, first], "word_initial")
        emb = dec.arc_embedding(torch.tensor([bs.tokens + [first]], device=bs.o.device))
        o_w = torch.cat([bs.last[:, 0], bs.last[:, 1], emb.expand(bs.o.size(0), -1)], -1)
        o_nodes = torch.cat([bs.o, o_w[:, None]], 1)
        prev = torch.stack([torch.from_numpy(t.row()).T for t in bs.tapes])  # (B, i, 3) over nodes 0..i-1
        prev = torch.cat([prev, prev.new_zeros(prev.size(0), 1, N_FEATURES)], 1)
        head, dep, count_logits = dec.arc_scorer.score_word(o_nodes, prev.to(o_nodes.device))
        head, dep = head.cpu(), dep.cpu()
        count_lp = F.log_softmax(count_logits.to(dt), -1).cpu()
        n_cand = 2 * i - 1
        # candidates: v -> i for v = 0..i-1, then i -> v for v = 1..i-1
        cand = torch.cat([head[:, :i], dep[:, 1:i]], 1).to(dt)
        children = []  # (parent row, score, log pi(c), heads, deps)
        if gold is not None:
            heads, deps = gold[i - 1]
            c = len(heads) + len(deps)
            labels = torch.tensor([float(v in heads) for v in range(i)] + [float(v in deps) for v in range(1, i)], dtype=dt)
            word_arc = float(-F.binary_cross_entropy_with_logits(cand[0], labels, reduction="sum")
                             - F.binary_cross_entropy_with_logits(head[0, i].to(dt), torch.zeros((), dtype=dt)))  # the self pair
            arc_costs.append(word_arc)
            arc_logp += word_arc
            count_logp += float(count_lp[0, min(c, MAX_COUNT)])
            lpc = count_lp[0, min(c, MAX_COUNT)]
            children.append((0, bs.score[0] + lpc, lpc, list(heads), list(deps)))
        else:
            allowed = min(n_cand, MAX_COUNT) + 1
            top_c = count_lp[:, :allowed].topk(min(count_beam, allowed), -1)
            for b in range(cand.size(0)):
                for lpc, c in zip(top_c.values[b].tolist(), top_c.indices[b].tolist()):
                    heads, deps = top_arcs(head[b], dep[b], i, c)
                    children.append((b, bs.score[b] + lpc, lpc, heads, deps))
            children.sort(key=lambda ch: -float(ch[1]))  # stable: ties keep the earlier hypothesis/count
            children = children[:beam]
        parents = torch.tensor([ch[0] for ch in children])
        bs.score = torch.stack([torch.as_tensor(ch[1], dtype=dt) for ch in children])
        lm = lm.index_select(0, parents)
        counts = torch.cat([counts.index_select(0, parents),
                            torch.tensor([float(ch[2]) for ch in children], dtype=dt)[:, None]], 1)
        zi = float(torch.logsumexp(bs.score, 0))  # the word's first subword and its count choice
        running.append(zi - z)
        z = zi
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
            advance(lp[:, t, tok], "continuation")
        prefix.append(z)  # the running logsumexp after word i (the prefix marginal at the word boundary)
    advance(lp[:, -1, eos], "eos")
    prefix.append(z)
    n_tokens = sum(len(p) for p in words) + 1
    best = 0 if gold is not None else int(bs.score.argmax())
    best_lm = lm[best].tolist()
    if gold is not None:
        return SentenceScore(n_tokens, len(words) + 1, float(sum(best_lm)), arc_logp, count_logp, best_arcs=bs.arcs[0],
                             token_logprobs=list(best_lm), best_lm=best_lm, word_costs=arc_costs, prefix_logp=prefix,
                             position_types=types)
    return SentenceScore(n_tokens, len(words) + 1, float(torch.logsumexp(bs.score, 0)), count_logp=float(counts[best].sum()),
                         hypotheses=bs.score.numel(), best_arcs=bs.arcs[best], token_logprobs=running, best_lm=best_lm,
                         word_costs=counts[best].tolist(), prefix_logp=prefix, position_types=types)


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


# ------------------------------------------------------------------ structure sources (given, self, beam:K)
def is_tree(arcs, n: int) -> bool:
    """Whether ``arcs`` ((head, dependent), 0 = root) over words 1..n form one dependency tree:
    every word exactly one head, exactly one root arc, no cycle."""
    head = {}
    for h, d in arcs:
        if d in head:
            return False
        head[d] = h
    if sorted(head) != list(range(1, n + 1)) or sum(h == 0 for h in head.values()) != 1:
        return False
    for w in range(1, n + 1):
        seen, v = set(), w
        while v != 0:
            if v in seen:
                return False
            seen.add(v)
            v = head[v]
    return True


def gold_arc_set(gold: Arcs):
    """Per-word (heads, dependents) lists -> the set of arcs (head, dependent)."""
    return {(h, w) for w, (hs, _) in enumerate(gold, 1) for h in hs} | {(w, d) for w, (_, ds) in enumerate(gold, 1) for d in ds}


def words_of(tokens: torch.Tensor, starts: Sequence[int]) -> List[List[int]]:
    """Token ids per word of ``tokens`` (``x_1 .. x_n </s>``) from the word starts (target indices)."""
    ids = tokens.tolist()[:-1]
    bounds = list(starts) + [len(ids)]
    return [ids[a:b] for a, b in zip(bounds, bounds[1:])]


def score_source(model, words: Words, eos: int, source: str, count_beam: int = 5, gold: Optional[Arcs] = None):
    """One sentence under a structure source, as a :class:`~sipe_fairseq.eval.prefix_tags.SentenceScore`
    (the record every ``--tags`` scorer returns; its per-word ``tag_logprobs`` hold the structure's cost):

    * ``given``: the gold graph ``gold``: ``log p(x | G_gold)`` per token; the joint adds log P_arcs(G_gold)
      (Bernoulli arcs, charged to each word's first subword as the tag cost of a SiPE joint);
    * ``self``: the greedy graph (beam 1, count beam 1: argmax count, top-c arcs), a function of the prefix:
      the exact ``log q(x)``; the joint adds the chosen counts' log pi(c);
    * ``beam:K``: the beam over graphs (section 4) with ``count_beam`` counts per hypothesis: the
      logsumexp over the beam, per token the running logsumexp's increments; the joint is the best
      hypothesis's ``log p(x | G) + sum log pi(c)``.

    ``extra``: ``arcs`` (the graph scored: gold, greedy or the best hypothesis's), ``prefix_logp``
    (the prefix log-probability after each word and after </s>: beam, the running logsumexp; given and
    self, the summed per-token log-probs), ``hypotheses``."""
    from .prefix_tags import SentenceScore as SourceScore
    from .prefix_tags import parse_tag_source

    kind, k = parse_tag_source(source)
    if kind == "beam-word":
        raise ValueError(f"tag source {source!r} is a beam over SiPE tags; a GiLT model takes given, self or beam:K")
    check_prefix_decodable(model)
    if kind == "given":
        if gold is None:
            raise ValueError("tag source 'given' for a GiLT model needs the sentence's graph (a data directory's arcs, "
                             "or trees from a parser: --parser/--trees)")
        s = score_sentence(model, words, eos, gold=gold)
        joint = s.logp + s.arc_logp
        logprob, per_token = s.logp, s.best_lm
    elif kind == "self":
        s = score_sentence(model, words, eos, beam=1, count_beam=1)
        logprob, per_token = s.lm_logp, s.best_lm
        joint = s.lm_logp + s.count_logp
    else:
        s = score_sentence(model, words, eos, beam=k, count_beam=count_beam)
        logprob, per_token = s.logp, s.token_logprobs
        joint = s.lm_logp + s.count_logp
    prefix = s.prefix_logp
    if kind != "beam":  # the prefix log-probability of the scored graph: LM only, after each word and after </s>
        types, cum = s.position_types, torch.tensor(per_token, dtype=torch.float64).cumsum(0).tolist()
        n = len(types)
        prefix = [cum[t] for t in range(n) if t + 1 < n and types[t + 1] in ("word_initial", "eos")] + [cum[-1]]
    return SourceScore(source, logprob, list(per_token), s.position_types, [], list(s.word_costs),
                       is_tree(s.best_arcs, len(words)), joint,
                       extra={"arcs": list(s.best_arcs), "prefix_logp": prefix, "hypotheses": s.hypotheses})


def arc_f1(pred: Sequence, gold: Sequence) -> Dict[str, float]:
    """Arc precision, recall and F1 (percent) of predicted arc lists against gold arc sets, summed over sentences."""
    tp = sum(len(set(p) & set(g)) for p, g in zip(pred, gold))
    n_pred, n_gold = sum(len(set(p)) for p in pred), sum(len(set(g)) for g in gold)
    p, r = tp / max(n_pred, 1), tp / max(n_gold, 1)
    return {"arc_precision": 100.0 * p, "arc_recall": 100.0 * r, "arc_f1": 100.0 * (2 * p * r / (p + r) if p + r else 0.0)}


@torch.no_grad()
def score_split_sources(model, data: str, split: str, dictionary, sources: Sequence[str], count_beam: int = 5,
                        max_sentences: Optional[int] = None) -> Dict[str, Dict[str, float]]:
    """Every sentence of a data directory's ``split`` scored alone under each structure source; the
    rows of :func:`~sipe_fairseq.eval.prefix_tags.summarize` (``given`` also ``given-joint``), with the
    arc precision/recall/F1 of the scored graph (self: greedy; beam: the best hypothesis) against the
    gold graph of ``{split}.arcs``."""
    import time

    from .prefix_tags import summarize

    model.eval()
    sentences = read_sentences(data, split, dictionary)
    total = len(sentences)
    if max_sentences is not None:
        sentences = sentences[:max_sentences]
    eos = dictionary.eos()
    results = {}
    for source in sources:
        start = time.time()
        scores = [score_source(model, words, eos, source, count_beam, gold) for words, gold in sentences]
        row = summarize(scores)
        row.update({"split_sentences": total, "longer_than_max_positions": 0, "seconds": time.time() - start,
                    "count_beam": count_beam, "model": "gilt"})
        if source != "given":
            row.update(arc_f1([s.extra["arcs"] for s in scores], [gold_arc_set(g) for _, g in sentences]))
        results[source] = row
        if source == "given":
            joint = summarize(scores, joint=True)
            joint.update({k: row[k] for k in ("split_sentences", "longer_than_max_positions", "seconds", "count_beam",
                                               "model")})
            results["given-joint"] = joint
    return results


@torch.no_grad()
def self_graph_sample(model, sample: dict, dictionary) -> dict:
    """``fairseq-eval-lm --task gilt_lm --inference-tags self``: ``sample`` (one sentence per row,
    ``--sample-break-mode eos``) with its gold graph inputs (``gilt_pairs``, ``gilt_prev``) replaced by
    the greedy graph the model builds from the prefix (:func:`score_source` ``self``); fairseq's
    ``SequenceScorer`` then runs the model once on it: the exact per-token ``log q(x_t | x_<t)``."""
    from ..data.arcs import per_word
    from ..data.gilt_dataset import MATRIX_KEYS, block_graph

    check_prefix_decodable(model)
    net = sample["net_input"]
    src, target = net["src_tokens"], sample["target"]
    eos, pad = dictionary.eos(), dictionary.pad()
    new = {key: net[key].clone() for key in MATRIX_KEYS}
    for i in range(len(src)):
        n = int(target[i].ne(pad).sum())
        tokens = target[i, :n].cpu()
        if n < 1 or int(src[i, 0]) != eos or int(tokens[-1]) != eos or int(tokens.eq(eos).sum()) != 1 \
                or bool(target[i, n:].ne(pad).any()):
            raise ValueError(f"--inference-tags self: row {i} of sample {sample.get('id', ['?'])[i]} is not one sentence "
                             "(</s> x_1 .. x_n </s>); use --sample-break-mode eos")
        word_no = net["src_words"][i, 1:n].cpu()  # block word of each input position x_1 .. x_(n-1)
        starts = [q for q in range(n - 1) if int(word_no[q]) and (q == 0 or int(word_no[q]) != int(word_no[q - 1]))]
        if not starts:
            continue  # an empty sentence: </s> only, no graph
        words = words_of(tokens, starts)
        s = score_sentence(model, words, eos, beam=1, count_beam=1)
        graph = block_graph([per_word(s.best_arcs, len(words))])
        for key in MATRIX_KEYS:
            m = graph[key].shape[0]
            new[key][i] = 0
            new[key][i, :m, :m] = torch.from_numpy(graph[key]).to(new[key])
    return dict(sample, net_input=dict(net, **new))


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
    try:
        check_prefix_decodable(model)
    except ValueError as e:
        print(f"error: checkpoint {args.path}: {e}", file=sys.stderr)
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
