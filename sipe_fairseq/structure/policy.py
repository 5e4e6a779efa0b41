"""What a model family tells the structure engine (:mod:`.search`): how its decoder is run one
position at a time, which structures the next word may get and at what cost, and how a hypothesis's
state extends and reorders. Two implementations: hexatag pairs (:mod:`.hexatags`, SiPE) and arcs
(:mod:`.arcs`, GiLT).

Rows are hypotheses; the engine keeps, per row, its sentence, its score and its per-target LM
log-probabilities, and calls the policy with row indices. A policy keeps everything else per row
(the KV cache included) and follows :meth:`StructurePolicy.reorder`.
"""
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder

from .sentences import Sentence

GREEDY, FORCED, BRANCH, SAMPLE = "greedy", "forced", "branch", "sample"  # self, given, beam, generation --sampling


class StructurePolicy:
    """Base of the per-family policies.

    ``prune_before``: where a beam ranks. ``True`` (SiPE): a word's hypotheses are ranked when the
    next word starts, after every position that reads the word's structure has been scored (the
    look-ahead); ``False`` (GiLT): the children are ranked when they are made, by score plus the
    structure's cost (GiLT's count choice is made after the word's first subword is scored).
    ``mass``, ``pair_mass``: :class:`~.family.StructureOptions` ``mass`` and ``pair_mass`` (set by
    :func:`~.family.policy_for`; ``pair_mass`` for SiPE only)."""

    prune_before = True
    use_cache = True
    mass = 1.0  # a beam's ranking keeps the best until their share of the prefix mass reaches this (top_per_group)
    pair_mass = 1.0  # SiPE: a word's children kept until their share of the sentence's children's mass reaches this
    # the toolkit's hook (sipe_fairseq.hub.distributions): when set, :meth:`normalize` hands it the full
    # log-softmax (..., V) whose targets it gathers, before the gather; the numbers it returns are unchanged
    distribution_sink = None

    def __init__(self, model):
        self.model = model
        self.decoder = getattr(model, "decoder", model)
        self.state: dict = {}  # incremental_state: the decoder's KV cache

    # ---------------------------------------------------------------- the decoder
    def begin(self, rows: int, width: int, words: int, given: Optional[list] = None, state: Optional[dict] = None) -> None:
        """Start ``rows`` rows of at most ``width`` inputs and ``words`` words; ``given``: per row the
        forced structure (:meth:`given_of`) or None; ``state``: the dict to keep the KV cache in
        (fairseq's ``incremental_state`` when generating)."""
        self.state = {} if state is None else state
        self.first = torch.ones(rows, dtype=torch.long)  # per row: the number (1-based) of its sentence's first word
        self.decision: Optional[torch.Tensor] = None  # after expand: per expanded row its decision's log-probs (E, D)

    def end(self) -> None:
        """The batch is over: drop its KV cache (the largest thing a batch holds) and its last decision, so that
        their memory is free before the next batch (:func:`.memory.release_freed` gives it back); the next
        :meth:`begin` makes new ones."""
        self.state, self.decision = {}, None

    def boundary(self, rows: torch.Tensor, next_word: torch.Tensor) -> None:
        """Rows ``rows`` read an inner ``</s>`` (a context's sentence ended, :mod:`.sentences`): their next
        word, number ``next_word`` (1-based, over the whole input), starts a new sentence and a new structure.
        Families reset their structure state (and call this)."""
        self.first[rows] = next_word

    def local_words(self, rows: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        """Word numbers ``words`` (1-based, over the whole input) of ``rows`` -> their numbers in their sentence."""
        return words - self.first[rows] + 1

    def given_of(self, sentence: Sentence):
        """The sentence's given structure in this family's form (None: it has none)."""
        return None

    def normalize(self, logits: torch.Tensor, extra: Optional[dict] = None,
                  targets: Optional[torch.Tensor] = None) -> torch.Tensor:
        """LM log-probs (..., V), float64; with ``targets`` (...,) only theirs (...,): the targets'
        entries of one fused log-softmax in the logits' dtype (float32: about 1e-7 per token, no float64
        copy of every row's logits; faster than a log-sum-exp, which makes four passes over the logits).
        A decoder with an adaptive softmax normalizes itself."""
        if getattr(self.decoder, "adaptive_softmax", None) is None:
            if targets is None:
                return F.log_softmax(logits.double(), -1)
            lprobs = F.log_softmax(logits, -1, dtype=torch.promote_types(logits.dtype, torch.float32))
            if self.distribution_sink is not None:
                self.distribution_sink(lprobs)
            return lprobs.gather(-1, targets[..., None].to(logits.device)).squeeze(-1).double().cpu()
        lprobs = self.model.get_normalized_probs((logits, extra), log_probs=True).double()
        if targets is None:
            return lprobs
        if self.distribution_sink is not None:
            self.distribution_sink(lprobs)
        return lprobs.gather(-1, targets[..., None].to(lprobs.device)).squeeze(-1).cpu()

    def step(self, t: int, src: torch.Tensor, starts: torch.Tensor, targets: Optional[torch.Tensor] = None
             ) -> torch.Tensor:
        """Run input position ``t`` of every row (``src`` (R, t+1): the rows' inputs so far;
        ``starts`` (R,) bool: input ``t`` is a word's first subword, or an inner ``</s>``, after which a
        sentence starts (the first word's structure is predicted there, as at ``t == 0``)) and return the LM log-probs of
        target ``t`` (R, V), float64, or with ``targets`` (R,) only theirs (R,) (:meth:`normalize`)."""
        raise NotImplementedError

    def reorder(self, order: torch.Tensor) -> None:
        """The rows become ``order`` (indices into the current rows; repeats allowed, rows may go),
        through fairseq's entry point ``reorder_incremental_state_scripting``; where a decoder keeps
        fairseq's own (which walks every module at every call), the modules that hold a cache are
        found once."""
        if getattr(self, "first", None) is not None:
            self.first = self.first[order.cpu()]
        if not (self.use_cache and self.state):
            return
        own = getattr(type(self.decoder), "reorder_incremental_state_scripting", None)
        if own is not None and own is not FairseqIncrementalDecoder.reorder_incremental_state_scripting:
            self.decoder.reorder_incremental_state_scripting(self.state, order)
            return
        if getattr(self, "_reorderers", None) is None:
            self._reorderers = [m for m in self.decoder.modules() if hasattr(m, "reorder_incremental_state")]
        for module in self._reorderers:
            module.reorder_incremental_state(self.state, order)

    # ---------------------------------------------------------------- structure
    def expand(self, rows: torch.Tensor, words: torch.Tensor, t: int, src: torch.Tensor, mode: str,
               limits: Optional[dict] = None) -> Tuple[torch.Tensor, torch.Tensor, object]:
        """Candidates for word ``words[e]`` (1-based) of the rows ``rows`` (E,), whose first subword
        is input ``t`` (``src`` (E, t+1): their inputs through it). Returns ``(parent (C,)`` positions
        in ``rows``, ``cost (C,)`` float64 log-probabilities, ``payload)``: children grouped by parent
        in parent order; one per row for ``GREEDY``, ``SAMPLE`` and ``FORCED``. ``limits``: the
        generator's per-row constraints (family-specific; None when scoring). Sets :attr:`decision`: per row
        of ``rows`` the log-probabilities (E, D) of the decision the word's structure is (SiPE: the 10
        units; GiLT: the counts), the distribution its candidates' costs are read from."""
        raise NotImplementedError

    def apply(self, rows: torch.Tensor, payload, pick: torch.Tensor, t: int) -> None:
        """Rows ``rows`` (after the reorder to their parents) take the structures ``payload[pick]``."""
        raise NotImplementedError

    def closed(self, rows: torch.Tensor) -> Optional[torch.Tensor]:
        """(len(rows),) bool: rows no further word can extend (a beam drops them when another word
        follows); ``None``: every row can go on."""
        return None

    def result(self, row: int, n_words: int, first: int = 0) -> dict:
        """The structure of ``row`` for its :class:`~.record.SentenceScore`: ``tags``, ``complete``,
        ``restarts``, ``extra``; of its words ``first .. n_words - 1`` (0-based: the text after a context)."""
        raise NotImplementedError

    def labels(self, row: int) -> List:
        """The per-word structure of ``row`` in a comparable form (for the beam trace)."""
        return []


def scatter_logsumexp(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """(size,) ``logsumexp`` of ``values`` grouped by ``index`` (an empty group: -inf)."""
    peak = torch.full((size,), -torch.inf, dtype=values.dtype).scatter_reduce(0, index, values, "amax")
    safe = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = torch.zeros(size, dtype=values.dtype).index_add_(0, index, (values - safe[index]).exp())
    return safe + total.log()


def top_per_group(group: torch.Tensor, value: torch.Tensor, k: int, mass: float = 1.0) -> torch.Tensor:
    """Indices of the ``k`` largest ``value`` in each ``group``: grouped by ascending group, inside a
    group by descending value, ties in index order (a stable sort). ``mass`` P < 1: within each group
    only the best until their share of the group's ``sum exp(value)`` reaches P (at least one, at most
    ``k``); P >= 1 keeps the ``k`` best."""
    if group.numel() == 0:
        return group.new_zeros(0)
    order = torch.sort(value, descending=True, stable=True).indices
    order = order[torch.sort(group[order], stable=True).indices]
    g = group[order]
    idx = torch.arange(len(order))
    first = torch.ones(len(order), dtype=torch.bool)
    first[1:] = g[1:] != g[:-1]
    start = torch.cummax(torch.where(first, idx, torch.zeros_like(idx)), 0).values
    keep = idx - start < k
    if mass < 1.0:
        keep &= (idx == start) | (_share_before(value[order].double(), start) < mass)
    return order[keep]


def _share_before(v: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
    """Values ``v`` in groups of consecutive entries, each group's first (``start``: its index, per
    entry) its largest -> per entry the summed softmax share of the entries before it in its group (1
    in a group of no mass, all ``-inf``)."""
    peak = v[start]
    share = torch.where(torch.isfinite(v), (v - torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))).exp(),
                        torch.zeros_like(v))
    total = torch.zeros(len(v), dtype=v.dtype).index_add_(0, start, share)[start]
    share = torch.where(total > 0, share / total.clamp(min=torch.finfo(v.dtype).tiny), torch.zeros_like(share))
    cum = share.cumsum(0) - share  # exclusive cumulative sum over the whole sequence
    return torch.where(total > 0, cum - cum[start], torch.ones_like(cum))  # no mass at all: the first only
