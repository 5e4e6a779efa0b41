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
  each (its continuation subwords and the next word's first subword, or ``</s>`` after the last
  word), and the top K by ``log p(x, T)`` so far (LM log-probabilities plus the tag heads'
  log-probabilities of the chosen tags) are kept; ``log p(x) >= logsumexp`` over the final beam of
  ``log p(x, T)`` (a lower bound on the model's marginal ``sum_T p(x, T)``); K = 1 scores
  ``p(x, argmax T)``;
* ``beam-word:K``: the same beam ranked one position earlier: after word ``w``'s own continuation
  subwords, before the next word's first subword (or ``</s>``) is scored under ``w``'s tags. The kept
  hypotheses then carry that position's score too, so the bound is a bound as well; it is looser
  (the ranking has seen less), and with single-subword words K = 1 keeps the heads' argmax (the
  ranking of issue 12's hand reference, which reports 344.5 / 216.6 / 182.8 for K = 1 / 4 / 16).

Positions and anchors (``tasks/hexatag_lm.py``, ``data/lm_dataset.py``). The input is
``</s> x_1 .. x_{n-1}``, the targets ``x_1 .. x_n`` (``x_n = </s>``); a word's tags sit on its first
subword, so the tags of word ``w`` (first subword at target index ``q_w``) enter at input position
``q_w + 1``. Positions ``q_w + 1 .. q_{w+1}`` (``q_{N+1}`` = the index of ``</s>``) are exactly the
predictions that see word ``w``'s tags and not word ``w+1``'s: step ``w`` scores them. The heads
that choose word ``w+1``'s tags run at ``q_w + 1`` (``first_subword``: the input is word ``w``'s
first subword; ``q_0 = -1`` so the sentence start predicts word 1) or at ``q_{w+1}`` (``last_subword``:
the last position before the word), both inside step ``w``. Word starts come from the given tag
stream (a word starts where it has a tag), else from sentencepiece's U+2581 mark; with both, the
sentences where they disagree are counted (``word_start_mismatch``: there the segmentation is not
a function of the prefix; ``sipe-preprocess`` data has none, e.g. 0 of 25,094 EWT test words).

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
from .progress import progress
from .scoring import POSITION_TYPES, accepts_tags

PLACEMENTS = ("first_subword", "last_subword")
WORD_MARK = "\u2581"
_PAIR_INDEX = {p: i for i, p in enumerate(PAIRS)}
# pair index -> (terminal class, non-terminal class)
_PAIR_CLASSES = [(TERMINALS.index(t), NONTERMINALS.index(n)) for t, n in PAIRS]


def parse_tag_source(spec: str) -> Tuple[str, int]:
    """``"given"`` -> ("given", 0), ``"self"`` -> ("self", 1), ``"beam:K"`` -> ("beam", K),
    ``"beam-word:K"`` -> ("beam-word", K);
    raises ``ValueError`` with the accepted forms otherwise."""
    spec = spec.strip()
    if spec in ("given", "self"):
        return spec, 0 if spec == "given" else 1
    kind, sep, k = spec.partition(":")
    if kind in ("beam", "beam-word") and sep and k.isdigit() and int(k) >= 1:
        return kind, int(k)
    raise ValueError(f"tag source {spec!r}: expected given, self, beam:K or beam-word:K with K >= 1")


def parse_tag_sources(spec: str) -> List[str]:
    """``"given,self,beam:4"`` -> ``["given", "self", "beam:4"]`` (each checked by
    :func:`parse_tag_source`, duplicates dropped, order kept); raises ``ValueError``."""
    out = []
    for part in (x.strip() for x in spec.split(",")):
        if not part:
            continue
        parse_tag_source(part)
        if part not in out:
            out.append(part)
    if not out:
        raise ValueError(f"tag sources {spec!r}: expected a comma-separated list of given, self, beam:K, beam-word:K")
    return out


def source_label(name: str, source: str) -> str:
    """The column name of checkpoint ``name`` under tag ``source``: the name alone for ``given``
    (the parser's or the data's tags, today's columns), ``"name [self]"``/``"name [beam:4]"`` otherwise."""
    return name if source == "given" else f"{name} [{source}]"


def split_label(label: str) -> Tuple[str, str]:
    """Inverse of :func:`source_label`: ``"pos [beam:4]"`` -> ("pos", "beam:4"), ``"pos"`` -> ("pos", "given")."""
    if label.endswith("]") and " [" in label:
        name, _, source = label[:-1].rpartition(" [")
        try:
            parse_tag_source(source)
            return name, source
        except ValueError:
            pass
    return label, "given"


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
def _normalize(model, logits: torch.Tensor, extra: dict):
    """LM, terminal and non-terminal log-probs in float64 (fairseq's ``get_normalized_probs``
    works in float32; the beam sums many terms). ``logits``/``extra`` already cut to the positions
    wanted."""
    if getattr(getattr(model, "decoder", model), "adaptive_softmax", None) is None:
        lprobs = F.log_softmax(logits.double(), -1)
    else:  # e.g. an adaptive softmax: the model's own normalization
        lprobs = model.get_normalized_probs((logits, extra), log_probs=True).double()
    term = F.log_softmax(extra["terminal_logits"].double(), -1)
    nont = F.log_softmax(extra["nonterminal_logits"].double(), -1)
    return lprobs, term, nont


class _CachedForward:
    """One hypothesis set through a decoder with a KV cache (``incremental_state``)."""

    def __init__(self, model):
        self.model, self.state, self.cached = model, {}, 0  # cached: positions the cache holds

    def reorder(self, order: Sequence[int]) -> None:
        self.model.decoder.reorder_incremental_state_scripting(self.state, torch.tensor(list(order), dtype=torch.long))

    def __call__(self, src, terms, nts, start: int):
        """Log-probs at positions ``start .. src.size(1) - 1`` (each ``rows x k x .``)."""
        if start != self.cached:
            raise RuntimeError(f"cache holds {self.cached} positions, asked for positions from {start}")
        logits, extra = self.model(src, src_terminals=terms, src_nonterminals=nts, incremental_state=self.state)
        k = src.size(1) - start
        self.cached = src.size(1)
        if logits.size(1) < k:
            raise RuntimeError(f"the decoder returned {logits.size(1)} positions for {k} new ones: its cache computes "
                               "one position per call; score with use_cache=False")
        extra = {key: extra[key][:, -k:] for key in ("terminal_logits", "nonterminal_logits")}
        return _normalize(self.model, logits[:, -k:], extra)


def _batched_forward(model, rows, pad: int, max_tokens: int):
    """Full forward (no cache) of ragged rows ``(src, terms, nts, start)`` (1-D, each its own
    length), right-padded (the decoders are causal) in chunks of at most ``max_tokens`` padded
    positions; returns per row the log-probs at positions ``start ..`` its end."""
    decoder = getattr(model, "decoder", model)
    features = hasattr(decoder, "output_layer") and getattr(decoder, "adaptive_softmax", None) is None
    out, i = [], 0
    while i < len(rows):
        width = len(rows[i][0])
        j = i + 1
        while j < len(rows) and (j + 1 - i) * max(width, len(rows[j][0])) <= max_tokens:
            width = max(width, len(rows[j][0]))
            j += 1
        chunk = rows[i:j]
        src = torch.full((len(chunk), width), pad, dtype=torch.long)
        terms, nts = torch.full_like(src, NOTAG_ID), torch.full_like(src, NOTAG_ID)
        for r, (s, a, b, _) in enumerate(chunk):
            src[r, :len(s)], terms[r, :len(s)], nts[r, :len(s)] = s, a, b
        if features:  # the output projection only where needed
            x, extra = model(src, src_terminals=terms, src_nonterminals=nts, features_only=True)
        else:
            x, extra = model(src, src_terminals=terms, src_nonterminals=nts)
        for r, (s, _, _, start) in enumerate(chunk):
            part = slice(start, len(s))
            logits = decoder.output_layer(x[r:r + 1, part]) if features else x[r:r + 1, part]
            heads = {key: extra[key][r:r + 1, part] for key in ("terminal_logits", "nonterminal_logits")}
            lp, t, n = _normalize(model, logits, heads)
            out.append((lp[0], t[0], n[0]))
        i = j
    return out


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
    next_pairs: Optional[List[float]] = None  # pair log-probs for the next word, from its anchor
    restarts: int = 0


class _Search:
    """One sentence's word-synchronous search: step ``w`` (0 .. N) scores positions
    ``q_w + 1 .. q_{w+1}`` under every candidate (hypothesis, pair for word ``w``)."""

    def __init__(self, scorer: "PrefixTagScorer", tokens, starts, types):
        self.sc, self.tokens, self.starts, self.types = scorer, tokens, list(starts), types
        self.n_words = len(starts)
        self.bounds = [-1] + self.starts + [len(tokens) - 1]  # q_0 .. q_{N+1}
        self.w = 0
        self.hyps = [_Hyp([], START, 0.0, [], [])]
        self.cands = []
        self.running, self.trace = [], []  # beam: running bound increments; kept (pairs, score) per step

    @property
    def done(self) -> bool:
        return self.w > self.n_words

    def expand(self):
        """``(parents, inputs (src, terms, nts) for every candidate, lo, hi)`` of the next step."""
        sc = self.sc
        lo, hi = self.bounds[self.w] + 1, self.bounds[self.w + 1]
        if self.w == 0:
            self.cands = [(0, None, START, False)]
        else:
            self.cands = []
            for h_idx, h in enumerate(self.hyps):
                allowed, state, restarted = sc._allowed(h.state)
                if sc.kind != "beam":  # self: argmax over the allowed pairs (ties: first in PAIRS order)
                    allowed = [max(allowed, key=lambda p: (h.next_pairs[p], -p))]
                self.cands += [(h_idx, p, state, restarted) for p in allowed]
        pairs = [self.hyps[h].pairs + ([] if p is None else [p]) for h, p, _, _ in self.cands]
        return [h for h, _, _, _ in self.cands], sc._rows(self.tokens, self.starts, pairs, hi + 1), lo, hi

    def absorb(self, lprobs, term, nont) -> Optional[List[int]]:
        """Scores of the step's positions (per candidate: ``k x V``, ``k x 2``, ``k x 5``) -> the
        new hypotheses; returns the kept candidates' indices (beam) for a cache to follow."""
        sc = self.sc
        lo, hi = self.bounds[self.w] + 1, self.bounds[self.w + 1]
        targets = self.tokens[lo:hi + 1]
        anchor = 0 if sc.placement == "first_subword" else hi - lo
        children = []
        for (h_idx, p, state, restarted), lp, t, n in zip(self.cands, lprobs, term, nont):
            h = self.hyps[h_idx]
            lm = lp.gather(-1, targets[:, None]).squeeze(-1).tolist()
            tag = 0.0 if p is None else h.next_pairs[p]
            pairs, tag_lp = (h.pairs, h.tag_lp) if p is None else (h.pairs + [p], h.tag_lp + [tag])
            nxt = START if p is None else sc._next_state(state, p)
            children.append(_Hyp(pairs, nxt, h.score + tag + sum(lm), h.lm + lm, tag_lp,
                                 _pair_logprobs(t[anchor], n[anchor]), h.restarts + int(restarted)))
        keep = None
        if sc.kind == "beam":
            base = torch.tensor([self.hyps[h].score + (0.0 if p is None else self.hyps[h].next_pairs[p])
                                 for h, p, _, _ in self.cands], dtype=torch.float64)
            step_lm = torch.tensor([c.lm[len(c.lm) - (hi - lo + 1):] for c in children], dtype=torch.float64)
            cum = base[:, None] + step_lm.cumsum(-1)
            z = torch.logsumexp(cum, 0).tolist()
            # beam-word: rank without the step's last position (the next word's first subword / </s>)
            rank = [c.score - (c.lm[-1] if sc.rank_at_word_end else 0.0) for c in children]
            keep = sc._prune(children, rank, last=self.w == self.n_words)
            z[-1] = float(torch.logsumexp(torch.tensor([children[i].score for i in keep], dtype=torch.float64), 0))
            zprev = float(torch.logsumexp(torch.tensor([h.score for h in self.hyps], dtype=torch.float64), 0))
            self.running.extend(z[j] - (z[j - 1] if j else zprev) for j in range(len(z)))
            children = [children[i] for i in keep]
            self.trace.append([(list(c.pairs), c.score) for c in children])
        self.hyps = children
        self.w += 1
        return keep

    def result(self) -> SentenceScore:
        sc, best = self.sc, self.hyps[0]
        tags = [PAIRS[p] for p in best.pairs]
        joint = sum(best.lm) + sum(best.tag_lp)
        if sc.kind == "beam":
            bound = float(torch.logsumexp(torch.tensor([h.score for h in self.hyps], dtype=torch.float64), 0))
            extra = {"beam": [([PAIRS[p] for p in h.pairs], h.score) for h in self.hyps], "best_lm": best.lm,
                     "trace": self.trace[1:]}  # trace[w - 1]: the beam after word w
            return SentenceScore(sc.source, bound, self.running, self.types, tags, best.tag_lp, is_valid(tags), joint, 0, extra)
        return SentenceScore(sc.source, sum(best.lm), best.lm, self.types, tags, best.tag_lp, is_valid(tags), joint,
                             best.restarts)


class PrefixTagScorer:
    """Scores sentences (``tokens`` = ``x_1 .. x_n </s>``) with one tag source.

    ``placement``: the ``hexatag_lm`` task's ``--tag-head-placement`` of the checkpoint;
    ``constrained``: restrict choices to the incremental prefix check (off: any of the 10 pairs,
    as the unconstrained hand reference of issue 12); ``use_cache``: None = use a KV cache when the
    decoder has one (:func:`supports_kv_cache`). Without a cache, :meth:`score_batch` runs the
    sentences' hypothesis sets together (``max_tokens`` padded positions per forward pass); with
    one, sentence by sentence (one cache per hypothesis set)."""

    def __init__(self, model, source: str = "self", placement: str = "first_subword", constrained: bool = True,
                 use_cache: Optional[bool] = None, eos: int = 2, pad: int = 1, max_tokens: int = 16384):
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown tag head placement {placement!r} (expected one of {PLACEMENTS})")
        self.model = model
        kind, self.k = parse_tag_source(source)
        self.kind, self.rank_at_word_end = ("beam", kind == "beam-word") if kind.startswith("beam") else (kind, False)
        if getattr(model, "decoder", None) is None:
            raise ValueError(f"tag source {source!r} needs a left-to-right decoder; {type(model).__name__} is not one "
                             "(masked-LM encoders are scored with given tags only)")
        self.source = source
        self.placement, self.constrained, self.eos, self.pad, self.max_tokens = placement, constrained, eos, pad, max_tokens
        self.cache = supports_kv_cache(model) if use_cache is None else bool(use_cache)
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

    @staticmethod
    def _position_types(n: int, starts: Sequence[int]) -> List[str]:
        types = ["continuation"] * n
        for s in starts:
            types[s] = "word_initial"
        types[n - 1] = "eos"
        return types

    def _prune(self, children: List[_Hyp], rank: Sequence[float], last: bool) -> List[int]:
        """Indices of the top K children by ``rank`` (ties: earlier first); before another word, a
        child that no pair can extend (constrained, tree closed by EOS) is dropped."""
        order = sorted(range(len(children)), key=lambda i: -rank[i])
        if not last and self.constrained:
            order = [i for i in order if children[i].state != CLOSED]
        return order[: self.k]

    # -------------------------------------------------------------------- scoring
    def score(self, tokens: torch.Tensor, terminals: Optional[torch.Tensor] = None,
              nonterminals: Optional[torch.Tensor] = None, dictionary=None) -> SentenceScore:
        return self.score_batch([(tokens, terminals, nonterminals)], dictionary)[0]

    @torch.no_grad()
    def score_batch(self, encoded, dictionary=None) -> List[SentenceScore]:
        """:class:`SentenceScore` per ``(tokens, terminals, nonterminals)`` (tags may be None when
        ``dictionary`` marks word starts with U+2581 and the source is not ``given``)."""
        self.model.eval()
        results: List[Optional[SentenceScore]] = [None] * len(encoded)
        searches, mismatches = [], {}
        for i, (tokens, terminals, nonterminals) in enumerate(encoded):
            tokens = tokens.long()
            n = len(tokens)
            if n < 2 or int(tokens[-1]) != self.eos:
                raise ValueError(f"sentence {i}: expected tokens x_1 .. x_n </s> with n >= 1, got {tokens.tolist()}")
            starts = word_starts(tokens, terminals, dictionary)
            # the tag stream's word starts must be readable from the tokens themselves (U+2581),
            # or the segmentation would be information from the whole sentence: counted
            start_set = set(starts)
            mismatch = terminals is not None and dictionary is not None and any(
                dictionary[int(tokens[q])].startswith(WORD_MARK) != (q in start_set) for q in range(n - 1))
            types = self._position_types(n, starts)
            mismatches[i] = mismatch
            if not self.sees_tags:
                results[i] = self._score_plain(tokens, types)
            elif self.kind == "given":
                if terminals is None or nonterminals is None:
                    raise ValueError("tag source 'given' needs the sentence's tags")
                given = [_PAIR_INDEX[(TERMINALS[int(terminals[q]) - FIRST_TAG_ID],
                                      NONTERMINALS[int(nonterminals[q]) - FIRST_TAG_ID])] for q in starts]
                results[i] = self._score_given(tokens, starts, types, given)
            else:
                searches.append((i, _Search(self, tokens, starts, types)))
        if self.cache:
            for _, s in searches:
                self._run_cached(s)
        elif searches:
            self._run_batched([s for _, s in searches])
        for i, s in searches:
            results[i] = s.result()
        for i, m in mismatches.items():
            results[i].extra["word_start_mismatch"] = m
        return results

    def _run_batched(self, searches: List[_Search]) -> None:
        while True:
            active = [s for s in searches if not s.done]
            if not active:
                return
            rows, spans = [], []
            for s in active:
                _, (src, terms, nts), lo, _ = s.expand()
                spans.append(len(src))
                rows += [(src[r], terms[r], nts[r], lo) for r in range(len(src))]
            out = _batched_forward(self.model, rows, self.pad, self.max_tokens)
            k = 0
            for s, m in zip(active, spans):
                part = out[k:k + m]
                k += m
                s.absorb([o[0] for o in part], [o[1] for o in part], [o[2] for o in part])

    def _run_cached(self, s: _Search) -> None:
        fwd = _CachedForward(self.model)
        while not s.done:
            parents, (src, terms, nts), lo, _ = s.expand()
            if s.w > 0:
                fwd.reorder(parents)
            lprobs, term, nont = fwd(src, terms, nts, lo)
            keep = s.absorb(lprobs, term, nont)
            if keep is not None:
                fwd.reorder(keep)

    def _score_given(self, tokens, starts, types, pairs: List[int]) -> SentenceScore:
        """Fixed tags: one forward over the whole sentence; each word's tag log-prob is read at
        its anchor (``q_{w-1} + 1`` or ``q_w``, see the module docstring)."""
        n = len(tokens)
        src, terms, nts = self._rows(tokens, starts, [pairs], n)
        logits, extra = self.model(src, src_terminals=terms, src_nonterminals=nts)
        lprobs, term, nont = _normalize(self.model, logits, extra)
        lm = lprobs[0].gather(-1, tokens[:, None]).squeeze(-1).tolist()
        bounds = [-1] + list(starts)
        anchors = [bounds[w] + 1 if self.placement == "first_subword" else bounds[w + 1] for w in range(len(starts))]
        tag_lp = [_pair_logprobs(term[0, a], nont[0, a])[p] for a, p in zip(anchors, pairs)]
        tags = [PAIRS[p] for p in pairs]
        return SentenceScore(self.source, sum(lm), lm, types, tags, tag_lp, is_valid(tags), sum(lm) + sum(tag_lp))

    def _score_plain(self, tokens, types) -> SentenceScore:
        src = torch.cat([tokens.new([self.eos]), tokens[:-1]])[None]
        logits = self.model(src)[0]
        lm = F.log_softmax(logits[0].double(), -1).gather(-1, tokens[:, None]).squeeze(-1).tolist()
        return SentenceScore(self.source, sum(lm), lm, types, [], [], False, sum(lm))


# ------------------------------------------------------------------------------ corpus level
def score_sentences(model, encoded: Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]], source: str = "self",
                    placement: str = "first_subword", constrained: bool = True, use_cache: Optional[bool] = None,
                    dictionary=None, eos: int = 2, pad: int = 1, batch_sentences: int = 64, log_every: int = 0
                    ) -> List[SentenceScore]:
    """:class:`PrefixTagScorer` over ``(tokens, terminals, nonterminals)`` per sentence, in input
    order; sentences are run ``batch_sentences`` at a time, grouped by length."""
    import logging
    import time

    scorer = PrefixTagScorer(model, source, placement, constrained, use_cache, eos, pad)
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i][0]))
    out: List[Optional[SentenceScore]] = [None] * len(encoded)
    start, done = time.time(), 0
    bar = progress(desc=f"tags {source}", unit=" sent", total=len(encoded))
    for b in range(0, len(order), batch_sentences):
        idx = order[b:b + batch_sentences]
        for i, score in zip(idx, scorer.score_batch([encoded[i] for i in idx], dictionary)):
            out[i] = score
        done += len(idx)
        bar.update(len(idx))
        if log_every and (done // log_every) != ((done - len(idx)) // log_every):
            logging.getLogger(__name__).info(f"{source}: {done}/{len(encoded)} sentences, {time.time() - start:.0f} s")
    bar.close()
    return out


def joint_token_logprobs(score: SentenceScore) -> List[float]:
    """Per target, ``log p(x, tags)`` split over positions: the LM log-prob plus, at each word's
    first subword, the tag heads' log-prob of that word's tags (they sum to ``score.joint``)."""
    out = list(score.token_logprobs)
    firsts = [q for q, k in enumerate(score.position_types) if k == "word_initial"]
    for q, lp in zip(firsts, score.tag_logprobs):
        out[q] += lp
    return out


def tag_source_logprob_fn(source: str, dictionary, placement: str = "first_subword", constrained: bool = True):
    """A ``logprob_fn(model, encoded, eos, pad, batch_size) -> [per-token log-probs]`` (the
    signature of :func:`~sipe_fairseq.eval.scoring.token_logprobs`, which SyntaxGym takes) scoring
    under ``source``: the :class:`SentenceScore` ``token_logprobs`` (for beam the increments of the
    running bound, summing to the sentence's bound)."""
    def fn(model, encoded, eos, pad, batch_size):
        scores = score_sentences(model, [tuple(e[:3]) for e in encoded], source, placement, constrained,
                                 dictionary=dictionary, eos=eos, pad=pad, batch_sentences=batch_size)
        return [torch.tensor(s.token_logprobs, dtype=torch.float64) for s in scores]
    return fn


def summarize(scores: Sequence[SentenceScore], given: Optional[Sequence[Sequence[Tuple[str, str]]]] = None,
              joint: bool = False) -> Dict[str, float]:
    """Perplexity per token and per word (words + ``</s>``, as ``scoring.summarize``) of the
    summed log-probabilities, the position-type breakdown (bits per token), how many sentences'
    tags form a tree, and with ``given`` (the sentences' own tags) the chosen tags' accuracy.
    ``joint``: of ``log p(x, tags)`` instead (:func:`joint_token_logprobs`: a word's tag cost is
    in its word-initial position's bits). ``bits.tags_per_word``: the tag heads' NLL of the
    tags (given, chosen or the best hypothesis's) per word, in bits."""
    if joint:
        scores = [SentenceScore(s.source, s.joint, joint_token_logprobs(s), s.position_types, s.tags, s.tag_logprobs,
                                s.complete, s.joint, s.restarts, s.extra) for s in scores]
    nll = -sum(s.logprob for s in scores)
    tokens = sum(s.n_tokens for s in scores)
    words = sum(s.n_words + 1 for s in scores)
    out = {"sentences": len(scores), "tokens": tokens, "words": words, "nll": nll,
           "ppl": math.exp(nll / tokens) if tokens else float("nan"),
           "ppl_per_word": math.exp(nll / words) if words else float("nan"),
           "joint_ppl": math.exp(-sum(s.joint for s in scores) / tokens) if tokens else float("nan"),
           "complete": sum(s.complete for s in scores), "restarts": sum(s.restarts for s in scores),
           "word_start_mismatch": sum(bool(s.extra.get("word_start_mismatch")) for s in scores)}
    n_tags = sum(len(s.tag_logprobs) for s in scores)
    out["bits.tags_per_word"] = -sum(x for s in scores for x in s.tag_logprobs) / n_tags / math.log(2) if n_tags \
        else float("nan")
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
                            batch_sentences: int = 64, log_every: int = 0) -> Dict[str, Dict[str, float]]:
    """Every sentence of ``split`` scored alone under each tag source (``given``, ``self``,
    ``beam:K``); returns ``{source: summarize(...)}``; ``given`` also gets ``given-joint`` (the
    joint bound ``log p(x, tags)``). ``max_sentences`` scores the first N only (the count is in
    the result). The tag-head placement is the task's (the checkpoint's own setting)."""
    import time

    encoded = load_split_sentences(task, split)
    total = len(encoded)
    if max_sentences is not None:
        encoded = encoded[:max_sentences]
    gold = given_tags(encoded)
    placement = str(getattr(task.args, "tag_head_placement", "first_subword"))
    limit = model.max_positions()
    limit = min(x for x in limit if x is not None) if isinstance(limit, (tuple, list)) else limit
    longer = sum(1 for t, _, _ in encoded if limit is not None and len(t) > limit)
    d = task.source_dictionary
    results = {}
    for source in sources:
        start = time.time()
        scores = score_sentences(model, encoded, source, placement, constrained, use_cache, d, d.eos(), d.pad(),
                                 batch_sentences, log_every)
        row = summarize(scores, gold)
        row.update({"split_sentences": total, "longer_than_max_positions": longer, "seconds": time.time() - start,
                    "placement": placement, "constrained": constrained})
        results[source] = row
        if source == "given":
            joint = summarize(scores, gold, joint=True)
            joint.update({k: row[k] for k in ("split_sentences", "longer_than_max_positions", "seconds", "placement",
                                               "constrained")})
            results["given-joint"] = joint
    return results


# tag source -> (label, whether the row pays for its tags: the tag bits per word are part of its score)
SOURCE_LABELS = {"given": ("given: p(x\\|tags) (conditional)", False), "given-joint": ("given: joint bound p(x,tags)", True),
                 "self": ("self: exact q(x)", False)}


SHORT_LABELS = (("given", "given p(x\\|tags)"), ("given-joint", "given joint"), ("self", "self exact"))


def _source_label(source: str) -> Tuple[str, bool]:
    if source in SOURCE_LABELS:
        return SOURCE_LABELS[source]
    return f"{source}: bound on p(x)", True


def markdown_tag_sources(results: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """Per checkpoint, one row per tag source (given conditional, given joint bound, self,
    beam:K): perplexity per token and per word, bits per token by position type (``</s>``,
    word-initial, continuation), the tags' bits per word where the score pays for them, tag
    accuracy against the given tags, valid trees; then a side-by-side summary (one column per
    checkpoint x source)."""
    lines = ["| model | tags | ppl/token | ppl/word | bits </s> | bits word-initial | bits continuation | tag bits/word | "
             "acc T / NT | valid trees | sentences |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in results.items():
        for source, r in rows.items():
            label, pays = _source_label(source)
            shows_acc = "terminal_acc" in r and "given" not in source
            acc = f"{r['terminal_acc']:.1f} / {r['nonterminal_acc']:.1f}" if shows_acc else "-"
            if "arc_f1" in r:  # a GiLT model: its graph (greedy or best hypothesis) against the gold arcs
                acc = f"arc F1 {r['arc_f1']:.1f}"
            tag_bits = r.get("bits.tags_per_word", float("nan"))
            tag_bits = f"{tag_bits:.3f}" if pays and not math.isnan(tag_bits) else "-"
            lines.append(f"| {name} | {label} | {r['ppl']:.2f} | {r['ppl_per_word']:.2f} | {r['bits.eos']:.3f} | "
                         f"{r['bits.word_initial']:.3f} | {r['bits.continuation']:.3f} | {tag_bits} | {acc} | "
                         f"{r['complete']} | {r['sentences']}/{r['split_sentences']} |")
    cols = [(name, source) for name, rows in results.items() for source in rows]
    if cols:
        lines += ["", "| score | " + " | ".join(f"{n} {dict(SHORT_LABELS).get(s, s)}" for n, s in cols) + " |",
                  "|---|" + "---:|" * len(cols)]
        for key, label, fmt in (("ppl", "ppl per token", "{:.2f}"), ("ppl_per_word", "ppl per word", "{:.2f}"),
                                ("bits.eos", "bits/token at </s>", "{:.3f}"),
                                ("bits.word_initial", "bits/token word-initial", "{:.3f}"),
                                ("bits.continuation", "bits/token continuation", "{:.3f}")):
            lines.append(f"| {label} | " + " | ".join(fmt.format(results[n][s][key]) for n, s in cols) + " |")
        if any("arc_f1" in results[n][s] for n, s in cols):
            lines.append("| arc F1 vs gold (GiLT) | " + " | ".join(
                f"{results[n][s]['arc_f1']:.1f}" if "arc_f1" in results[n][s] else "-" for n, s in cols) + " |")
    lines.append("\nEvery sentence scored alone. given: the data's tags (whole-sentence parse), conditional p(x|tags) "
                 "and the joint bound -log p(x, tags) (a word's tag bits counted at its word-initial subword); self: "
                 "exact perplexity with tags chosen by the model from the prefix; beam:K: bound log p(x) >= "
                 "logsumexp_beam log p(x, T). For beam the position-type bits are the running bound's increments "
                 "(tag costs included). GiLT models (gilt_txl, gilt_transformer_lm): given = the gold graph "
                 "({split}.arcs; joint: the gold arcs paid for, their bits per word in the tag column), self = the "
                 "greedy graph (exact), beam:K = the beam over graphs (section 4 of gilt-facts.md; count bits of the "
                 "best hypothesis in the tag column); "
                 "'valid trees' counts graphs that form one tree; arc F1 against the gold graph.")
    return "\n".join(lines)


# ------------------------------------------------------------------------------ fairseq-eval-lm
@torch.no_grad()
def self_tagged_sample(model, sample: dict, dictionary, placement: str = "first_subword", constrained: bool = True) -> dict:
    """``fairseq-eval-lm --task hexatag_lm --inference-tags self``: ``sample`` (one sentence per
    row, ``--sample-break-mode eos``: input ``</s> x_1 .. x_{n-1}``, right-padded) with its input
    tags replaced by the ``self`` source's choices (:class:`PrefixTagScorer`); the data's tags only
    mark word starts. fairseq's ``SequenceScorer`` then runs the model once on these tags: as they
    depend on the prefix only, its per-token scores are the exact ``log q(x_t | x_<t)``."""
    net = sample["net_input"]
    src, target = net["src_tokens"], sample["target"]
    if "src_terminals" not in net:
        return sample
    eos, pad = dictionary.eos(), dictionary.pad()
    scorer = PrefixTagScorer(model, "self", placement, constrained, eos=eos, pad=pad)
    if not scorer.sees_tags:
        return sample
    encoded, lengths = [], []
    for i in range(len(src)):
        n = int(target[i].ne(pad).sum())
        tokens = target[i, :n].cpu()
        if n < 1 or int(src[i, 0]) != eos or int(tokens[-1]) != eos or int(tokens.eq(eos).sum()) != 1 \
                or bool(target[i, n:].ne(pad).any()):
            raise ValueError(f"--inference-tags self: row {i} of sample {sample.get('id', ['?'])[i]} is not one sentence "
                             "(</s> x_1 .. x_n </s>); use --sample-break-mode eos")
        terms, nts = torch.full_like(tokens, NOTAG_ID), torch.full_like(tokens, NOTAG_ID)
        terms[:n - 1], nts[:n - 1] = net["src_terminals"][i, 1:n].cpu(), net["src_nonterminals"][i, 1:n].cpu()
        encoded.append((tokens, terms, nts))
        lengths.append(n)
    new_terms, new_nts = net["src_terminals"].clone(), net["src_nonterminals"].clone()
    for i, ((tokens, terms, _), score) in enumerate(zip(encoded, scorer.score_batch(encoded, dictionary))):
        starts = word_starts(tokens, terms, dictionary)
        _, a, b = scorer._rows(tokens, starts, [[_PAIR_INDEX[p] for p in score.tags]], lengths[i])
        new_terms[i, :lengths[i]], new_nts[i, :lengths[i]] = a[0].to(new_terms.device), b[0].to(new_nts.device)
    return dict(sample, net_input=dict(net, src_terminals=new_terms, src_nonterminals=new_nts))
