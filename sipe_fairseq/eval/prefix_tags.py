"""Score sentences with a tagged decoder whose tags come from the prefix only (issue 12, section 2).

A SiPE decoder conditions on hexatags; the tags of a parse of the whole sentence carry information
about later words (the last word's ``EOS``), so ``p(x | tags)`` is not a probability of the words.
Three tag sources (``--tags`` / :func:`parse_tag_source`):

* ``given``: the sentence's own tags (data directory or parser): ``log p(x | tags)`` per token, and
  beside it the joint ``log p(x, tags)`` (tag heads' log-probabilities of the given tags added);
* ``self``: at each word's anchor (the position the tag heads were trained at, task option
  ``--tag-head-placement``) the model's own heads choose the word's tags (argmax of the summed
  terminal and non-terminal log-probabilities), restricted to pairs the incremental prefix check
  allows (:func:`sipe_fairseq.hexatag.constrained.allowed_pairs`); the word's tokens are scored
  with them. The tags are a deterministic function of the prefix, so
  ``q(x) = prod_t p(x_t | x_<t, tags(x_<t))`` is a normalized distribution: its perplexity is exact;
* ``beam:K``: a word-synchronous beam over tag sequences: every hypothesis is expanded with every
  allowed pair for the next word, the positions that depend on that word's tags are scored under
  each, and the top K by ``log p(x, T)`` so far (LM log-probabilities plus the tag heads'
  log-probabilities of the chosen tags) are kept; ``log p(x) >= logsumexp`` over the final beam of
  ``log p(x, T)`` (a lower bound on the model's marginal ``sum_T p(x, T)``); K = 1 scores
  ``p(x, argmax T)``.

Positions and anchors (``tasks/hexatag_lm.py``, ``data/lm_dataset.py``). The input is
``</s> x_1 .. x_{n-1}``, the targets ``x_1 .. x_n`` (``x_n = </s>``); a word's tags sit on its first
subword, so the tags of word ``w`` (first subword at target index ``q_w``) enter at input position
``q_w + 1``. Positions ``q_w + 1 .. q_{w+1}`` (``q_{N+1}`` = the index of ``</s>``) are exactly the
predictions that see word ``w``'s tags and not word ``w+1``'s: step ``w`` scores them. The heads
that choose word ``w+1``'s tags run at ``q_w + 1`` (``first_subword``: the input is word ``w``'s
first subword; ``q_0 = -1`` so the sentence start predicts word 1) or at ``q_{w+1}`` (``last_subword``:
the last position before the word), both inside step ``w``. Word starts come from the given tag
stream (a word starts where it has a tag), else from sentencepiece's U+2581 mark.

The prefix check. ``constrained`` sources only choose pairs after which the tags can still end as
one valid tree. A word tagged ``EOS`` closes the tree; in ``self`` a word after it restarts from
the empty prefix (counted as ``restarts``); in ``beam`` a closed hypothesis is not kept when another
word follows (its mass is dropped, the bound stays a bound). Whether the final tags form a tree is
reported (``complete``): the sentence's end is not known when its last word's tags are chosen.

Beam per-token numbers: the increments of the running bound ``log Z_p`` (``Z_p`` = the summed
``p(x_<=p, T)`` of the live hypotheses after position ``p``; the mass pruned after a step is
charged to the step's last position), so they sum to the sentence's bound.

The model call. Without a KV cache every step runs the decoder on the whole prefix (all
hypotheses x candidate pairs as one batch) and takes the positions it needs. A decoder that names
``incremental_state`` in its ``forward`` signature (fairseq's ``FairseqIncrementalDecoder`` API) is
called with one cache per hypothesis set instead: it receives the full prefix and returns only the
positions it has not cached; ``reorder_incremental_state`` (with repeated indices) follows the
beam's expansions and pruning. ``use_cache=False`` forces the full forward.
"""
import inspect
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from ..hexatag.constrained import CLOSED, PAIRS, START, advance, allowed_pairs, is_valid
from ..hexatag.tags import NONTERMINALS, TERMINALS
from .lm_scores import POSITION_TYPES, accepts_tags

PLACEMENTS = ("first_subword", "last_subword")
WORD_MARK = "\u2581"
_PAIR_INDEX = {p: i for i, p in enumerate(PAIRS)}
# pair index -> (terminal class, non-terminal class)
_PAIR_CLASSES = [(TERMINALS.index(t), NONTERMINALS.index(n)) for t, n in PAIRS]


def parse_tag_source(spec: str) -> Tuple[str, int]:
    """``"given"`` -> ("given", 0), ``"self"`` -> ("self", 1), ``"beam:K"`` -> ("beam", K);
    raises ``ValueError`` with the accepted forms otherwise."""
    spec = spec.strip()
    if spec in ("given", "self"):
        return spec, 0 if spec == "given" else 1
    kind, sep, k = spec.partition(":")
    if kind == "beam" and sep and k.isdigit() and int(k) >= 1:
        return "beam", int(k)
    raise ValueError(f"tag source {spec!r}: expected given, self or beam:K with K >= 1")


def supports_kv_cache(model) -> bool:
    """Whether the decoder takes a KV cache: its ``forward`` names ``incremental_state``."""
    decoder = getattr(model, "decoder", model)
    return "incremental_state" in inspect.signature(decoder.forward).parameters


def word_starts(tokens: torch.Tensor, terminals: Optional[torch.Tensor] = None, dictionary=None) -> List[int]:
    """Target indices of each word's first subword (``tokens`` = ``x_1 .. x_n </s>``): where the
    given tag stream has a tag, else (no tags) where the piece carries U+2581. Raises ``ValueError``
    when the sentence does not start with a word."""
    n = len(tokens) - 1
    if terminals is not None and bool((terminals[:n] >= FIRST_TAG_ID).any()):
        starts = (terminals[:n] >= FIRST_TAG_ID).nonzero().squeeze(-1).tolist()
    elif dictionary is not None:
        starts = [i for i in range(n) if dictionary[int(tokens[i])].startswith(WORD_MARK)]
    else:
        raise ValueError("no tags and no dictionary: cannot find word starts")
    if n < 1 or not starts or starts[0] != 0:
        raise ValueError(f"sentence of {n} tokens does not start with a word (word starts {starts[:5]})")
    return starts


@dataclass
class SentenceScore:
    """One sentence under one tag source (natural logs)."""
    source: str
    logprob: float  # given: log p(x | tags); self: log q(x) (exact); beam: lower bound on log p(x)
    token_logprobs: List[float]  # per target x_1 .. x_n </s> (beam: increments of the running bound)
    position_types: List[str]  # "eos" | "word_initial" | "continuation" per target
    tags: List[Tuple[str, str]]  # per word: given, chosen (self) or the best final hypothesis's (beam)
    tag_logprobs: List[float]  # per word: the heads' log p(terminal) + log p(non-terminal) of ``tags``
    complete: bool  # ``tags`` form one valid tree
    joint: float  # log p(x, tags) of ``tags`` (LM + tag heads); for a model without tags = logprob
    restarts: int = 0  # self: words whose tags were chosen after an EOS-tagged word
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return len(self.token_logprobs)

    @property
    def n_words(self) -> int:
        return sum(1 for k in self.position_types if k == "word_initial")


# ------------------------------------------------------------------------------ model calls
class _Forward:
    """Runs the decoder for one hypothesis set, with or without a KV cache."""

    def __init__(self, model, use_cache: Optional[bool] = None):
        self.model = model
        self.cache = supports_kv_cache(model) if use_cache is None else bool(use_cache)
        self.state = {} if self.cache else None
        self.cached = 0  # positions held by the cache

    def reorder(self, order: Sequence[int]) -> None:
        if self.cache:
            self.model.decoder.reorder_incremental_state_scripting(self.state, torch.tensor(list(order), dtype=torch.long))

    def __call__(self, src, terms, nts, start: int):
        """Log-probs over the vocabulary, terminal and non-terminal log-probs at positions
        ``start .. src.size(1) - 1`` (each ``rows x k x .``)."""
        kwargs = {"src_terminals": terms, "src_nonterminals": nts}
        if self.cache:
            if start != self.cached:
                raise RuntimeError(f"cache holds {self.cached} positions, asked for positions from {start}")
            kwargs["incremental_state"] = self.state
        out = self.model(src, **kwargs)
        self.cached = src.size(1)
        k = src.size(1) - start
        if out[0].size(1) < k:
            raise RuntimeError(f"the decoder returned {out[0].size(1)} positions for {k} new ones: its cache computes "
                               "one position per call; score with use_cache=False")
        return _log_probs(self.model, out, k)


def _log_probs(model, out, k: int):
    """LM, terminal and non-terminal log-probs at the last ``k`` positions of a decoder output, in
    float64 (fairseq's ``get_normalized_probs`` works in float32; the beam sums many terms)."""
    logits, extra = out[0][:, -k:], out[1]
    if getattr(getattr(model, "decoder", model), "adaptive_softmax", None) is None:
        lprobs = F.log_softmax(logits.double(), -1)
    else:  # e.g. an adaptive softmax: the model's own normalization
        lprobs = model.get_normalized_probs(out, log_probs=True)[:, -k:].double()
    term = nont = None
    if extra.get("terminal_logits") is not None:
        term = F.log_softmax(extra["terminal_logits"][:, -k:].double(), -1)
        nont = F.log_softmax(extra["nonterminal_logits"][:, -k:].double(), -1)
    return lprobs, term, nont


def _pair_logprobs(term: torch.Tensor, nont: torch.Tensor) -> List[float]:
    """(2,), (5,) log-probs -> the 10 pair log-probs in :data:`PAIRS` order."""
    t, n = term.tolist(), nont.tolist()
    return [t[a] + n[b] for a, b in _PAIR_CLASSES]


@dataclass
class _Hyp:
    pairs: List[int]  # pair index per word so far
    state: int  # prefix state (hexatag.constrained)
    score: float  # log p(x_<=last scored position, T)
    lm: List[float]  # LM log-prob per scored target
    tag_lp: List[float]  # per word
    next_pairs: List[float] = None  # pair log-probs for the next word, from its anchor
    restarts: int = 0


class PrefixTagScorer:
    """Scores single sentences (``tokens`` = ``x_1 .. x_n </s>``) with one tag source.

    ``placement``: the ``hexatag_lm`` task's ``--tag-head-placement`` of the checkpoint;
    ``constrained``: restrict choices to the incremental prefix check (off: any of the 10 pairs,
    as the unconstrained hand reference of issue 12); ``use_cache``: None = use a KV cache when the
    decoder has one (:func:`supports_kv_cache`)."""

    def __init__(self, model, source: str = "self", placement: str = "first_subword", constrained: bool = True,
                 use_cache: Optional[bool] = None, eos: int = 2):
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown tag head placement {placement!r} (expected one of {PLACEMENTS})")
        self.model = model
        self.kind, self.k = parse_tag_source(source)
        self.source = source
        self.placement, self.constrained, self.use_cache, self.eos = placement, constrained, use_cache, eos
        self.sees_tags = accepts_tags(model) and bool(getattr(getattr(model, "decoder", model), "needs_tags", True))
        decoder = getattr(model, "decoder", model)
        self.has_heads = getattr(decoder, "terminal_head", None) is not None
        if self.sees_tags and self.kind != "given" and not self.has_heads:
            raise ValueError(f"tag source {source!r} needs the model's tag heads (trained with --sipe-tag-heads off)")

    # -------------------------------------------------------------------- helpers
    def _allowed(self, state: int) -> Tuple[List[int], int, bool]:
        """(allowed pair indices, state they apply to, restarted)."""
        if not self.constrained:
            return list(range(len(PAIRS))), state, False
        restarted = state == CLOSED
        if restarted:
            state = START
        return [_PAIR_INDEX[p] for p in allowed_pairs(state)], state, restarted

    @staticmethod
    def _next_state(state: int, pair: int) -> int:
        """The prefix state after ``pair``; START when the pair leaves every valid sequence (only
        for unconstrained tags, whose states are not used)."""
        nxt = advance(state, PAIRS[pair])
        return START if nxt is None else nxt

    def _rows(self, tokens, starts, hyp_pairs: Sequence[Sequence[int]], length: int):
        """Inputs ``</s> x_1 ..`` of ``length`` positions with each row's tags on word starts."""
        rows = len(hyp_pairs)
        src = torch.empty(rows, length, dtype=torch.long)
        src[:, 0] = self.eos
        src[:, 1:] = tokens[: length - 1]
        terms = torch.full((rows, length), NOTAG_ID, dtype=torch.long)
        nts = torch.full_like(terms, NOTAG_ID)
        for r, pairs in enumerate(hyp_pairs):
            for w, p in enumerate(pairs):
                pos = starts[w] + 1
                if pos < length:
                    a, b = _PAIR_CLASSES[p]
                    terms[r, pos], nts[r, pos] = FIRST_TAG_ID + a, FIRST_TAG_ID + b
        return src, terms, nts

    def _anchor_offset(self, step_start: int, step_end: int) -> int:
        """Index inside a step's positions of the anchor for the next word's tags."""
        return 0 if self.placement == "first_subword" else step_end - step_start

    @staticmethod
    def _position_types(n: int, starts: Sequence[int]) -> List[str]:
        types = ["continuation"] * n
        for s in starts:
            types[s] = "word_initial"
        types[n - 1] = "eos"
        return types

    # -------------------------------------------------------------------- scoring
    @torch.no_grad()
    def score(self, tokens: torch.Tensor, terminals: Optional[torch.Tensor] = None,
              nonterminals: Optional[torch.Tensor] = None, dictionary=None) -> SentenceScore:
        self.model.eval()
        tokens = tokens.long()
        n = len(tokens)
        if n < 2 or int(tokens[-1]) != self.eos:
            raise ValueError(f"expected tokens x_1 .. x_n </s> with n >= 1, got {tokens.tolist()}")
        starts = word_starts(tokens, terminals, dictionary)
        types = self._position_types(n, starts)
        if not self.sees_tags:
            return self._score_plain(tokens, types)
        if self.kind == "given":
            if terminals is None or nonterminals is None:
                raise ValueError("tag source 'given' needs the sentence's tags")
            given = [_PAIR_INDEX[(TERMINALS[int(terminals[s]) - FIRST_TAG_ID], NONTERMINALS[int(nonterminals[s]) - FIRST_TAG_ID])]
                     for s in starts]
            return self._score_given(tokens, starts, types, given)
        return self._search(tokens, starts, types)

    def _score_given(self, tokens, starts, types, pairs: List[int]) -> SentenceScore:
        """Fixed tags: one forward over the whole sentence; each word's tag log-prob is read at
        its anchor (``q_{w-1} + 1`` or ``q_w``, see the module docstring)."""
        n = len(tokens)
        src, terms, nts = self._rows(tokens, starts, [pairs], n)
        lprobs, term, nont = _log_probs(self.model, self.model(src, src_terminals=terms, src_nonterminals=nts), n)
        lm = lprobs[0].gather(-1, tokens[:, None]).squeeze(-1).tolist()
        bounds = [-1] + list(starts)
        anchors = [bounds[w] + 1 if self.placement == "first_subword" else bounds[w + 1] for w in range(len(starts))]
        tag_lp = [_pair_logprobs(term[0, a], nont[0, a])[p] for a, p in zip(anchors, pairs)]
        tags = [PAIRS[p] for p in pairs]
        return SentenceScore(self.source, sum(lm), lm, types, tags, tag_lp, is_valid(tags), sum(lm) + sum(tag_lp))

    def _score_plain(self, tokens, types) -> SentenceScore:
        src = torch.cat([tokens.new([self.eos]), tokens[:-1]])[None]
        lp = _log_probs(self.model, self.model(src), len(tokens))[0][0].gather(-1, tokens[:, None]).squeeze(-1)
        total = float(lp.sum())
        return SentenceScore(self.source, total, lp.tolist(), types, [], [], False, total)

    def _search(self, tokens, starts, types) -> SentenceScore:
        """One pass over the words: argmax (self) or a beam of K."""
        n, n_words = len(tokens), len(starts)
        bounds = [-1] + list(starts) + [n - 1]  # q_0 .. q_{N+1}
        fwd = _Forward(self.model, self.use_cache)
        beam = self.kind == "beam"
        width = self.k if beam else 1

        # step 0: position 0 (input </s>) predicts x_1 and word 1's tags
        src, terms, nts = self._rows(tokens, starts, [[]], 1)
        lprobs, term, nont = fwd(src, terms, nts, 0)
        lp0 = float(lprobs[0, 0, tokens[0]])
        hyps = [_Hyp([], START, lp0, [lp0], [], _pair_logprobs(term[0, 0], nont[0, 0]))]
        running = [lp0]  # beam: running bound log Z_p per position
        trace = []  # beam: the kept hypotheses (pairs, score) after each word

        for w in range(1, n_words + 1):
            lo, hi = bounds[w] + 1, bounds[w + 1]  # positions that see word w's tags
            parents, cands = [], []
            for h_idx, h in enumerate(hyps):
                allowed, state, restarted = self._allowed(h.state)
                if beam:
                    choice = allowed
                else:  # self: argmax over the allowed pairs (ties: first in PAIRS order)
                    choice = [max(allowed, key=lambda p: (h.next_pairs[p], -p))]
                for p in choice:
                    parents.append(h_idx)
                    cands.append((h, p, state, restarted))
            fwd.reorder(parents)
            src, terms, nts = self._rows(tokens, starts, [h.pairs + [p] for h, p, _, _ in cands], hi + 1)
            lprobs, term, nont = fwd(src, terms, nts, lo)
            targets = tokens[lo:hi + 1]
            tok_lp = lprobs.gather(-1, targets[None, :, None].expand(len(cands), -1, 1)).squeeze(-1)
            a = self._anchor_offset(lo, hi)
            children = []
            for r, (h, p, state, restarted) in enumerate(cands):
                lm = tok_lp[r].tolist()
                tag = h.next_pairs[p]
                children.append(_Hyp(h.pairs + [p], self._next_state(state, p), h.score + tag + sum(lm), h.lm + lm,
                                     h.tag_lp + [tag], _pair_logprobs(term[r, a], nont[r, a]), h.restarts + int(restarted)))
            if beam:
                prev = torch.tensor([h.score for h in hyps], dtype=torch.float64)
                base = torch.tensor([h.score + h.next_pairs[p] for h, p, _, _ in cands], dtype=torch.float64)
                cum = base[:, None] + tok_lp.cumsum(-1)
                z = torch.logsumexp(cum, 0).tolist()
                keep = self._prune(children, last=w == n_words)
                z[-1] = float(torch.logsumexp(torch.tensor([children[i].score for i in keep], dtype=torch.float64), 0))
                zprev = float(torch.logsumexp(prev, 0))
                running.extend(z[j] - (z[j - 1] if j else zprev) for j in range(len(z)))
                hyps = [children[i] for i in keep]
                fwd.reorder(keep)
                trace.append([(list(h.pairs), h.score) for h in hyps])
            else:
                hyps = children
        best = hyps[0]
        tags = [PAIRS[p] for p in best.pairs]
        complete = is_valid(tags)
        joint = sum(best.lm) + sum(best.tag_lp)
        if beam:
            bound = float(torch.logsumexp(torch.tensor([h.score for h in hyps], dtype=torch.float64), 0))
            extra = {"beam": [([PAIRS[p] for p in h.pairs], h.score) for h in hyps], "best_lm": best.lm, "trace": trace}
            return SentenceScore(self.source, bound, running, types, tags, best.tag_lp, complete, joint, 0, extra)
        return SentenceScore(self.source, sum(best.lm), best.lm, types, tags, best.tag_lp, complete, joint, best.restarts)

    def _prune(self, children: List[_Hyp], last: bool) -> List[int]:
        """Indices of the top K children by score (ties: earlier first); before another word, a
        child that no pair can extend (constrained, tree closed by EOS) is dropped."""
        order = sorted(range(len(children)), key=lambda i: -children[i].score)
        if not last and self.constrained:
            order = [i for i in order if children[i].state != CLOSED]
        return order[: self.k]


# ------------------------------------------------------------------------------ corpus level
def score_sentences(model, encoded: Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]], source: str = "self",
                    placement: str = "first_subword", constrained: bool = True, use_cache: Optional[bool] = None,
                    dictionary=None, eos: int = 2) -> List[SentenceScore]:
    """:class:`PrefixTagScorer` over ``(tokens, terminals, nonterminals)`` per sentence."""
    scorer = PrefixTagScorer(model, source, placement, constrained, use_cache, eos)
    return [scorer.score(t, a, b, dictionary) for t, a, b in encoded]


def summarize(scores: Sequence[SentenceScore], given: Optional[Sequence[Sequence[Tuple[str, str]]]] = None
              ) -> Dict[str, float]:
    """Perplexity per token and per word (words + ``</s>``, as ``lm_scores.summarize``) of the
    summed log-probabilities, the position-type breakdown (bits per token), how many sentences'
    tags form a tree, and with ``given`` (the sentences' own tags) the chosen tags' accuracy."""
    nll = -sum(s.logprob for s in scores)
    tokens = sum(s.n_tokens for s in scores)
    words = sum(s.n_words + 1 for s in scores)
    out = {"sentences": len(scores), "tokens": tokens, "words": words, "nll": nll,
           "ppl": math.exp(nll / tokens) if tokens else float("nan"),
           "ppl_per_word": math.exp(nll / words) if words else float("nan"),
           "joint_ppl": math.exp(-sum(s.joint for s in scores) / tokens) if tokens else float("nan"),
           "complete": sum(s.complete for s in scores), "restarts": sum(s.restarts for s in scores)}
    for kind in POSITION_TYPES:
        lp = [x for s in scores for x, k in zip(s.token_logprobs, s.position_types) if k == kind]
        out[f"tokens.{kind}"] = len(lp)
        out[f"bits.{kind}"] = -sum(lp) / len(lp) / math.log(2) if lp else float("nan")
    if given is not None:
        pairs = [(c, g) for s, gs in zip(scores, given) for c, g in zip(s.tags, gs)]
        if pairs:
            out["terminal_acc"] = 100.0 * sum(c[0] == g[0] for c, g in pairs) / len(pairs)
            out["nonterminal_acc"] = 100.0 * sum(c[1] == g[1] for c, g in pairs) / len(pairs)
        out["eos_last_word"] = sum(bool(s.tags) and s.tags[-1][1] == "EOS" for s in scores)
        out["eos_inside"] = sum(sum(t[1] == "EOS" for t in s.tags[:-1]) for s in scores)
    return out


# ------------------------------------------------------------------------------ a data split
def load_split_sentences(task, split: str) -> List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(tokens, terminals, nonterminals)`` per sentence of a ``sipe-preprocess`` split, in file
    order (each sentence ends in ``</s>``, scored alone: no context from earlier sentences)."""
    import os

    from fairseq import utils
    from fairseq.data import data_utils

    from ..data.tag_dictionary import TAG_KINDS
    from ..data.tag_streams import load_tag_streams

    path = utils.split_paths(task.args.data)[0]
    raw = data_utils.load_indexed_dataset(os.path.join(path, split), task.source_dictionary, task.args.dataset_impl)
    if raw is None:
        raise FileNotFoundError(f"{path}: no split {split!r} ({split}.bin/.idx)")
    streams = load_tag_streams(path, split, raw, TAG_KINDS, task.args.dataset_impl)
    return [(raw[i].long(), streams["terminal"][i].long(), streams["nonterminal"][i].long()) for i in range(len(raw))]


def given_tags(encoded) -> List[List[Tuple[str, str]]]:
    """The given tag pairs per word of each ``(tokens, terminals, nonterminals)`` sentence."""
    out = []
    for _, a, b in encoded:
        idx = (a >= FIRST_TAG_ID).nonzero().squeeze(-1).tolist()
        out.append([(TERMINALS[int(a[i]) - FIRST_TAG_ID], NONTERMINALS[int(b[i]) - FIRST_TAG_ID]) for i in idx])
    return out


def score_split_tag_sources(model, task, split: str, sources: Sequence[str], constrained: bool = True,
                            max_sentences: Optional[int] = None, use_cache: Optional[bool] = None,
                            log_every: int = 0) -> Dict[str, Dict[str, float]]:
    """Every sentence of ``split`` scored alone under each tag source (``given``, ``self``,
    ``beam:K``); returns ``{source: summarize(...)}``; ``given`` also gets ``given-joint`` (the
    joint bound ``log p(x, tags)``). ``max_sentences`` scores the first N only (the count is in
    the result). The tag-head placement is the task's (the checkpoint's own setting)."""
    import logging
    import time

    log = logging.getLogger(__name__)
    encoded = load_split_sentences(task, split)
    total = len(encoded)
    if max_sentences is not None:
        encoded = encoded[:max_sentences]
    gold = given_tags(encoded)
    placement = str(getattr(task.args, "tag_head_placement", "first_subword"))
    limit = model.max_positions()
    limit = min(x for x in limit if x is not None) if isinstance(limit, (tuple, list)) else limit
    longer = sum(1 for t, _, _ in encoded if limit is not None and len(t) > limit)
    eos = task.source_dictionary.eos()
    results = {}
    for source in sources:
        scorer = PrefixTagScorer(model, source, placement, constrained, use_cache, eos)
        start, scores = time.time(), []
        for i, (t, a, b) in enumerate(encoded):
            scores.append(scorer.score(t, a, b, task.source_dictionary))
            if log_every and (i + 1) % log_every == 0:
                log.info(f"{source}: {i + 1}/{len(encoded)} sentences, {time.time() - start:.0f} s")
        row = summarize(scores, gold)
        row.update({"split_sentences": total, "longer_than_max_positions": longer, "seconds": time.time() - start,
                    "placement": placement, "constrained": constrained})
        results[source] = row
        if source == "given":
            joint = dict(row)
            nll = -sum(s.joint for s in scores)
            joint.update({"nll": nll, "ppl": math.exp(nll / row["tokens"]), "ppl_per_word": math.exp(nll / row["words"])})
            results["given-joint"] = joint
    return results


def markdown_tag_sources(results: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """One row per checkpoint x tag source: perplexity per token and per word, bits per token by
    position type, tag accuracy, trees."""
    lines = ["| model | tags | ppl/token | ppl/word | bits </s> | bits word-initial | bits continuation | "
             "acc T / NT | valid trees | sentences |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in results.items():
        for source, r in rows.items():
            label = {"given": "given: p(x|tags)", "given-joint": "given: joint bound"}.get(source, source)
            acc = f"{r['terminal_acc']:.1f} / {r['nonterminal_acc']:.1f}" if "terminal_acc" in r and source != "given" else "-"
            lines.append(f"| {name} | {label} | {r['ppl']:.2f} | {r['ppl_per_word']:.2f} | {r['bits.eos']:.3f} | "
                         f"{r['bits.word_initial']:.3f} | {r['bits.continuation']:.3f} | {acc} | {r['complete']} | "
                         f"{r['sentences']}/{r['split_sentences']} |")
    lines.append("\nEvery sentence scored alone. given: the data's tags (whole-sentence parse); self: exact "
                 "perplexity with tags chosen by the model from the prefix; beam:K: bound log p(x) >= logsumexp_beam "
                 "log p(x, T). For beam the position-type bits are the running bound's increments.")
    return "\n".join(lines)
