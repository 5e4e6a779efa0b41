"""SiPE's structure from the prefix: one hexatag pair per word (:class:`HexatagPolicy`).

Anchors (``--tag-head-placement``, ``data/lm_dataset.tag_targets``): the tag heads that choose word
``w``'s pair run at the input that is word ``w-1``'s first subword (``first_subword``; word 1: the
sentence start) or at the input just before word ``w``'s first subword (``last_subword``). Either
anchor lies before the input that carries word ``w``'s tags, so the choice sees only the prefix.
A pair's cost is ``log p(terminal) + log p(non-terminal)`` from the anchor's heads.

The prefix check (``constrained``): only pairs after which the tags can still end as one tree
(:func:`~sipe_fairseq.hexatag.constrained.allowed_pairs`). A word tagged ``EOS`` closes the tree;
``self`` restarts from the empty prefix after it (counted as ``restarts``); a beam drops a closed
hypothesis when another word follows. Unconstrained: any of the 10 pairs, a broken prefix restarts.
``top_pairs`` M > 0 expands each beam hypothesis with its heads' M best allowed pairs only (the
"fast-track" pruning of word-synchronous beams); 0, the default, expands with every allowed pair.

Tag timing (the checkpoint's ``--tag-timing``, :mod:`~sipe_fairseq.hexatag.timing`): what a word carries
and what its anchor's heads choose (a *unit*, written as the pair of fed tags, so that every timing
chooses among the same 10 columns). The prefix check reads the automaton in units
(:func:`~sipe_fairseq.hexatag.timing.advance_unit`); a fixed part costs nothing (``nt-delay``: word 1's
``EOS`` start marker; ``delay``: word 1 carries nothing, :data:`ABSTAINED`).

``abstain`` P > 0 (greedy ``self`` only): a word whose best allowed pair has probability below P is
left ``<notag>`` (no cost; the prefix check skips it), so where the heads are unsure the model reads
no tags (for a model trained with ``--tag-dropout``). Still a function of the prefix: exact.
"""
from typing import Sequence

import torch
import torch.nn.functional as F

from ..data.lm_dataset import DEFAULT_PLACEMENT
from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from ..hexatag.constrained import CLOSED, PAIRS, START, is_valid
from ..hexatag.tags import EOS, NONTERMINALS, TERMINALS
from ..hexatag.timing import advance_unit, can_end, check_timing, timed_pairs, untimed_pairs
from .policy import BRANCH, FORCED, GREEDY, SAMPLE, StructurePolicy
from .sentences import CONTEXT_SOURCES, Sentence

ABSTAINED = -3  # a word left <notag>: by ``abstain``, or a timing that feeds it nothing (delay: word 1)
TERM_CLASS = torch.tensor([TERMINALS.index(t) for t, _ in PAIRS])
NT_CLASS = torch.tensor([NONTERMINALS.index(n) for _, n in PAIRS])
_BROKEN = -2  # no valid sequence continues that way


def pair_logprobs(term_logits: torch.Tensor, nt_logits: torch.Tensor) -> torch.Tensor:
    """(..., 2), (..., 5) head logits -> (..., 10) pair log-probs in ``PAIRS`` order, float64."""
    t = F.log_softmax(term_logits.double(), -1)
    n = F.log_softmax(nt_logits.double(), -1)
    return t[..., TERM_CLASS.to(t.device)] + n[..., NT_CLASS.to(n.device)]


EOS_COLUMN = torch.tensor([n == EOS for _, n in PAIRS])


def fix_start_marker(logprobs: torch.Tensor) -> torch.Tensor:
    """(E, 10) pair log-probs -> the log-probs of units whose non-terminal is the fixed ``EOS`` start
    marker (``nt-delay``, word 1): the terminal's log-prob (the pair's, summed over non-terminals) in
    the ``EOS`` columns, ``-inf`` elsewhere."""
    term = torch.logsumexp(logprobs.view(-1, len(TERMINALS), len(NONTERMINALS)), -1)  # PAIRS: terminal-major
    return torch.where(EOS_COLUMN, term[:, TERM_CLASS], torch.full_like(logprobs, -torch.inf))


def timed_units(pairs, timing: str) -> list:
    """A sentence's pair indices (PAIRS) -> the unit each word carries under ``timing``, as pair
    indices (:data:`ABSTAINED` where the word carries nothing)."""
    units = timed_pairs([PAIRS[p] for p in pairs], timing)
    return [ABSTAINED if u[0] is None else PAIRS.index(u) for u in units]


def entered_tags(units, timing: str) -> list:
    """What the words carried (pair indices, negative for nothing) -> each word's pair in the paper's
    layout, ``"-"`` for a tag that never entered (``delay``: the last word's pair)."""
    carried = [PAIRS[p] if p >= 0 else (None, None) for p in units]
    return [tuple("-" if x is None else x for x in pair) for pair in untimed_pairs(carried, timing)]


def tag_ids(pairs: torch.Tensor):
    """Pair indices -> (terminal ids, non-terminal ids) in the tag dictionaries."""
    return FIRST_TAG_ID + TERM_CLASS[pairs], FIRST_TAG_ID + NT_CLASS[pairs]


def transitions(max_depth: int, timing: str = "paper") -> torch.Tensor:
    """(max_depth + 2, 10): the prefix state after each unit (a pair of fed tags) from each state
    ``-1 .. max_depth`` (row ``state + 1``; :data:`CLOSED` = -1), ``-2`` where the automaton refuses it."""
    out = torch.full((max_depth + 2, len(PAIRS)), _BROKEN, dtype=torch.long)
    for state in range(-1, max_depth + 1):
        for p, pair in enumerate(PAIRS):
            nxt = advance_unit(state, pair, timing) if state != CLOSED else None
            out[state + 1, p] = _BROKEN if nxt is None else nxt
    return out


class HexatagPolicy(StructurePolicy):
    prune_before = True

    def __init__(self, model, placement: str = DEFAULT_PLACEMENT, constrained: bool = True, use_cache: bool = True,
                 top_pairs: int = 0, abstain: float = 0.0):
        """The values come from a :class:`~.options.StructureOptions`, which checked their ranges."""
        super().__init__(model)
        self.abstain = abstain
        self.placement, self.constrained, self.use_cache, self.top_pairs = placement, constrained, use_cache, top_pairs
        self.has_heads = getattr(self.decoder, "terminal_head", None) is not None
        self.timing = check_timing(str(getattr(self.decoder, "tag_timing", "paper")))
        # word-aware heads (--sipe-tag-head-input word): the anchor keeps the prefix state, and the pair is
        # chosen from it and the word's first subword when the word starts
        self.word_aware = getattr(self.decoder, "tag_head_input", None) is not None
        if self.word_aware and placement != "last_subword":
            raise ValueError("word-aware tag heads choose from the state just before each word: placement last_subword")
        self.eos = self.decoder.dictionary.eos()
        self.device = next(model.parameters()).device

    # ---------------------------------------------------------------- the decoder
    def given_of(self, sentence: Sentence):
        return sentence.pairs

    def begin(self, rows, width, words, given=None, state=None):
        super().begin(rows, width, words, given, state)
        self.terms = torch.full((rows, width), NOTAG_ID, dtype=torch.long, device=self.device)
        self.nts = torch.full_like(self.terms, NOTAG_ID)
        self.depth = torch.full((rows,), START, dtype=torch.long)
        self.anchor = torch.zeros(rows, len(PAIRS), dtype=torch.float64)
        if self.word_aware:
            self.anchor_state = torch.zeros(rows, self.decoder.cfg.decoder_embed_dim, device=self.device)
        self.pairs = torch.full((rows, words), -1, dtype=torch.long)
        self.restarts = torch.zeros(rows, dtype=torch.long)
        self.given = torch.full((rows, words), -1, dtype=torch.long)
        for i, g in enumerate(given or ()):
            if g is not None and len(g):
                self.given[i, : len(g)] = torch.as_tensor(timed_units(list(g), self.timing)[:words])
        self.table = transitions(words + 1, self.timing)

    def step(self, t, src, starts, targets=None):
        terms, nts = self.terms[:, : t + 1], self.nts[:, : t + 1]
        if self.use_cache:
            logits, extra = self.model(src, src_terminals=terms, src_nonterminals=nts, incremental_state=self.state)
        else:
            logits, extra = self.model(src, src_terminals=terms, src_nonterminals=nts)
        if self.has_heads:
            # the anchors: first_subword, the sentence start and every word's first subword; last_subword,
            # every position (the one before a word's first subword is the latest when the word starts)
            if self.placement == "first_subword":
                rows = (starts.cpu() | (t == 0)).nonzero().squeeze(1)
            else:
                rows = torch.arange(len(src))
            if len(rows) and self.word_aware:  # every position (last_subword)
                self.anchor_state = extra["tag_state"][:, -1]
            elif len(rows):
                dev = rows.to(self.device)
                heads = pair_logprobs(extra["terminal_logits"][dev, -1], extra["nonterminal_logits"][dev, -1]).cpu()
                self.anchor[rows] = heads
        return self.normalize(logits[:, -1:], extra, None if targets is None else targets[:, None])[:, 0]

    def reorder(self, order):
        super().reorder(order)
        cpu = order.cpu()
        dev = order.to(self.device)
        self.terms, self.nts = self.terms[dev], self.nts[dev]
        self.depth, self.anchor, self.pairs, self.restarts, self.given = (
            self.depth[cpu], self.anchor[cpu], self.pairs[cpu], self.restarts[cpu], self.given[cpu])
        if self.word_aware:
            self.anchor_state = self.anchor_state[dev]

    # ---------------------------------------------------------------- structure
    def allowed(self, rows, limits=None):
        """(E, 10) bool: the pairs the next word of each row may take, the state they apply to and
        whether it restarts a closed tree. ``limits`` (generation): ``words_left`` (E,) long, at
        most that many words after this one (a pair may leave only depths that can close in time),
        and ``keep_open`` (E,) bool, do not close the tree (unless nothing else is allowed)."""
        E = len(rows)
        depth = self.depth[rows]
        if not self.constrained:
            return torch.ones(E, len(PAIRS), dtype=torch.bool), torch.zeros(E, dtype=torch.bool)
        restarted = depth == CLOSED
        state = torch.where(restarted, torch.full_like(depth, START), depth)
        nxt = self.table[state + 1]
        allowed = nxt != _BROKEN
        if limits is not None:
            left = limits.get("words_left")
            if left is not None and self.timing == "paper":
                allowed &= (nxt == CLOSED) | (nxt <= left[:, None])
            elif left is not None:  # the end is implicit: depth d closes after d - 1 more words
                allowed &= nxt - 1 <= left[:, None]
            keep_open = limits.get("keep_open")
            if keep_open is not None:
                opened = allowed & (nxt != CLOSED)
                use = keep_open & opened.any(1)
                allowed = torch.where(use[:, None], opened, allowed)
        return allowed, restarted

    def heads_at(self, rows, src):
        """(E, 10) pair log-probs of the next word of ``rows`` (``src`` (E, t+1): their inputs so far, the
        last one the word's first subword): the anchor's heads, or word-aware from its state and that subword."""
        if not self.word_aware:
            return self.anchor[rows]
        dev = rows.to(self.device)
        term, nt = self.decoder.word_tag_logits(self.anchor_state[dev], src[:, -1].to(self.device))
        return pair_logprobs(term, nt).cpu()

    def units_at(self, rows, words, src):
        """(E, 10) log-probs of the units the next word of ``rows`` may carry (:meth:`heads_at` with the
        timing's fixed parts) and (E,) bool, the rows whose word carries nothing (``delay``: word 1)."""
        anchor = self.heads_at(rows, src)
        first = (self.local_words(rows.cpu(), words.cpu()) == 1)  # a sentence's word 1 (after a context: its own)
        empty = first if self.timing == "delay" else torch.zeros_like(first)
        if self.timing == "nt-delay" and bool(first.any()):
            anchor[first] = fix_start_marker(anchor[first])
        if bool(empty.any()):  # one placeholder unit, column 0, at no cost
            anchor[empty] = torch.full_like(anchor[empty], -torch.inf).index_fill_(1, torch.tensor([0]), 0.0)
        return anchor, empty

    def expand(self, rows, words, t, src, mode, limits=None):
        E = len(rows)
        anchor, empty = self.units_at(rows, words, src)
        self.decision = anchor
        if mode == FORCED:
            pair = self.given[rows, words - 1]
            if bool((pair.masked_fill(empty, 0) < 0).any()):
                raise ValueError("tag source 'given' needs the sentence's tags")
            cost = anchor.gather(1, pair.clamp(min=0)[:, None]).squeeze(1).masked_fill(empty, 0.0)
            return torch.arange(E), cost, {
                "pair": pair.masked_fill(empty, ABSTAINED), "restarted": torch.zeros(E, dtype=torch.bool), "word": words - 1}
        allowed, restarted = self.allowed(rows, limits)
        if bool(empty.any()):
            allowed[empty] = EOS_COLUMN.new_zeros(len(PAIRS)).index_fill_(0, torch.tensor([0]), True)
            restarted = restarted & ~empty
        masked = anchor.masked_fill(~allowed, -torch.inf)
        if mode in (GREEDY, SAMPLE):  # GREEDY: argmax over the allowed pairs, ties: the first in PAIRS order
            pair = masked.argmax(1) if mode == GREEDY else torch.multinomial(F.softmax(masked, -1), 1).squeeze(1)
            cost = anchor.gather(1, pair[:, None]).squeeze(1)
            if mode == GREEDY and self.abstain > 0:
                unsure = cost < torch.log(torch.tensor(self.abstain, dtype=cost.dtype))
                pair = torch.where(unsure, torch.full_like(pair, ABSTAINED), pair)
                cost = cost.masked_fill(unsure, 0.0)
                restarted = restarted & ~unsure
            pair = pair.masked_fill(empty, ABSTAINED)
            return torch.arange(E), cost, {"pair": pair, "restarted": restarted, "word": words - 1}
        assert mode == BRANCH
        if self.top_pairs:
            best = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, : self.top_pairs]
            allowed = allowed & torch.zeros_like(allowed).scatter_(1, best, True)
        parent, pair = allowed.nonzero(as_tuple=True)  # by parent, then in PAIRS order
        cost = anchor[parent, pair]
        pair = pair.masked_fill(empty[parent], ABSTAINED)
        return parent, cost, {"pair": pair, "restarted": restarted[parent], "word": (words - 1)[parent]}

    def boundary(self, rows, next_word):
        """A new sentence after an inner ``</s>``: the prefix automaton starts from the empty prefix (not a
        restart: training gave every sentence its own tree)."""
        super().boundary(rows, next_word)
        self.depth[rows] = START

    def apply(self, rows, payload, pick, t):
        pair = payload["pair"][pick]
        skip = pair == ABSTAINED  # left <notag>: no tags, the prefix check does not move
        a, b = tag_ids(pair.clamp(min=0))
        a, b = a.masked_fill(skip, NOTAG_ID), b.masked_fill(skip, NOTAG_ID)
        dev = rows.to(self.device)
        self.terms[dev, t], self.nts[dev, t] = a.to(self.device), b.to(self.device)
        depth = self.depth[rows]
        state = torch.where(depth < 0, torch.full_like(depth, START), depth)  # a closed (or broken) prefix restarts
        nxt = self.table[state + 1, pair.clamp(min=0)]
        moved = torch.where(nxt == _BROKEN, torch.full_like(nxt, START), nxt)
        self.depth[rows] = torch.where(skip, depth, moved)
        self.restarts[rows] += payload["restarted"][pick].long()
        self.pairs[rows, payload["word"][pick]] = pair

    # ---------------------------------------------------------------- generation
    def accept_given(self, rows, words):
        """(has, ok) (E,) bool: the row has a given pair for the word, and the prefix check takes it
        without closing the tree (a parse of a prompt alone ends in EOS; the model chooses instead)."""
        pair = self.given[rows, words - 1]
        has = pair >= 0
        if not self.constrained:
            return has, has
        state = self.depth[rows].clamp(min=START)
        nxt = self.table[state + 1, pair.clamp(min=0)]
        return has, has & (nxt != _BROKEN) & (nxt != CLOSED) & (self.depth[rows] != CLOSED)

    def generation_mask(self, t, max_len, prompt_len, starts_word):
        """(R, V) bool, the tokens input ``t + 1`` may not be: the tree must close exactly at ``</s>``.
        After a word tagged EOS no new word starts; while the tree is open ``</s>`` is excluded; when
        the positions left are exactly the words the open tree still needs, continuations are too."""
        R, V = len(self.depth), len(starts_word)
        mask = torch.zeros(R, V, dtype=torch.bool)
        if not self.constrained or (max_len is not None and t >= max_len):
            return mask  # the generator forces </s> from here
        free = t >= prompt_len  # the next token is generated, not the prompt's
        closed = (self.depth == CLOSED) & free
        mask[closed] = starts_word.cpu()
        if self.timing == "paper":
            open_ = (self.depth != CLOSED) & free
        else:  # the end is implicit: </s> once the last word's EOS (delay: its last pair) can close the tree
            ends = (self.depth == 1) | ((self.depth == START) & (self.timing == "delay"))
            open_ = ~ends & free
        mask[open_, self.eos] = True
        if max_len is not None:
            # words that close the open tree (paper: none so far, one; the others close with the last word)
            needed = self.depth.clamp(min=1) if self.timing == "paper" else (self.depth - 1).clamp(min=0)
            tight = open_ & (max_len - t <= needed)
            mask[tight] |= ~starts_word.cpu()
        return mask

    def closed(self, rows):
        return self.depth[rows] == CLOSED if self.constrained else None

    def labels(self, row):
        return [p for p in self.pairs[row].tolist() if p >= 0 or p == ABSTAINED]

    def result(self, row, n_words, first=0):
        """Tags per word in the paper's layout (an abstained word, or a tag that never entered: ``"-"``);
        complete when the tagged words form one tree (``nt-delay``/``delay``: once the end fills in the
        last word's EOS, and under ``delay`` its last pair)."""
        chosen = self.pairs[row, first:n_words].tolist()
        n_words -= first
        if self.timing == "paper":
            tags = [PAIRS[p] if p >= 0 else ("-", "-") for p in chosen]
            complete = is_valid([PAIRS[p] for p in chosen if p >= 0])
        else:
            tags = entered_tags(chosen, self.timing)
            complete = self.constrained and can_end(int(self.depth[row]), self.timing, n_words)
        info = {"tags": tags, "complete": bool(complete), "restarts": int(self.restarts[row]), "extra": {}}
        abstained = chosen.count(ABSTAINED) - int(self.timing == "delay" and n_words > 0)
        if abstained:
            info["extra"]["abstained"] = abstained
        if self.timing != "paper":  # what each word carried (None: nothing), for --inference-tags self
            info["extra"]["fed"] = [PAIRS[p] if p >= 0 else None for p in chosen]
        return info

    # ---------------------------------------------------------------- given: one forward
    def forced_full(self, batch: Sequence[Sentence], eos: int, pad: int, untagged: bool = False):
        """``given`` in one forward of the whole batch (the tags are known): per sentence the LM
        log-probs per target and each word's tag cost at its anchor. ``untagged``: every word <notag>,
        no tag cost (the model as a plain LM); so is a sentence that has no given tags (a tree source that
        gives none, ``--parser none``: its words read <notag>, as such a sentence's data stream holds)."""
        if any(s.context_end or s.counted_from for s in batch):
            raise ValueError(CONTEXT_SOURCES)
        width = max(s.n for s in batch)
        S = len(batch)
        src = torch.full((S, width), pad, dtype=torch.long)
        terms = torch.full_like(src, NOTAG_ID)
        nts = torch.full_like(src, NOTAG_ID)
        units = []
        for i, s in enumerate(batch):
            src[i, 0] = eos
            src[i, 1:s.n] = s.tokens[:-1]
            units.append(None)
            if untagged or s.pairs is None:
                continue
            units[-1] = torch.tensor(timed_units(s.pairs, self.timing))
            fed = units[-1] >= 0
            a, b = tag_ids(units[-1][fed])
            pos = (torch.tensor(s.starts) + 1)[fed]
            terms[i, pos], nts[i, pos] = a, b
        dev = self.device
        logits, extra = self.model(src.to(dev), src_terminals=terms.to(dev), src_nonterminals=nts.to(dev))
        targets = torch.cat([src[:, 1:], torch.full((S, 1), pad, dtype=torch.long)], 1)
        for i, s in enumerate(batch):
            targets[i, s.n - 1] = s.tokens[-1]
        lprobs = self.normalize(logits, extra, targets)
        out = []
        for i, s in enumerate(batch):
            lm = lprobs[i, : s.n].tolist()
            if units[i] is None:
                out.append((lm, [], {"tags": [], "complete": False, "restarts": 0}))
                continue
            bounds = [-1] + list(s.starts)
            anchors = [bounds[w] + 1 if self.placement == "first_subword" else bounds[w + 1] for w in range(len(s.starts))]
            heads = pair_logprobs(extra["terminal_logits"][i, anchors], extra["nonterminal_logits"][i, anchors]).cpu()
            unit = units[i]
            if self.timing == "nt-delay":
                heads[:1] = fix_start_marker(heads[:1])
            cost = heads.gather(1, unit.clamp(min=0)[:, None]).squeeze(1).masked_fill(unit < 0, 0.0).tolist()
            tags = [PAIRS[p] for p in s.pairs]
            complete = is_valid(tags)
            if self.timing != "paper":
                tags = entered_tags(unit.tolist(), self.timing)
            out.append((lm, cost, {"tags": tags, "complete": complete, "restarts": 0}))
        return out
