"""GiLT's structure from the prefix: each new word's arcs to earlier nodes (:class:`ArcPolicy`;
docs/gilt-reference.md sections 2-4).

When word i (the i-th of its sentence) arrives at its first subword x_k, the LM has already paid for
x_k under the graph so far; the arc scorer reads o_i = [h^(L/2+1)_(k-1); h^(L-1)_(k-1); emb(x_k)]
and the features of the graph before word i, and the count head gives pi(c). A candidate is a count
c <= 2i - 1 with the top-c of the 2i - 1 candidate arcs by p_ij (:func:`top_arcs`); its cost is
log pi(c) only, never log p_ij (no tree or acyclicity constraint, pi not renormalized: as the
authors' code). The word's arcs join the hypothesis's graph (:class:`~..data.graph_features.GraphTape`),
whose new tape row gives the features of every query position of word i against every key.

Which counts a beam branches on (``count_rule``):

* ``top-then-allowed`` (default, the authors' rule): the counts among the top ``count_beam`` of all
  30 classes that are allowed (c <= 2i - 1), so an early word may branch on fewer counts; a
  hypothesis with none of its top counts allowed takes its most likely allowed count;
* ``allowed-then-top``: the top ``count_beam`` among the allowed counts, so every word branches on
  ``count_beam`` counts when it may take that many.

``self`` takes the most likely allowed count (the same under both rules). ``given`` forces the
sentence's graph; its cost prices the gold arcs as independent Bernoullis over the word's 2i pairs
(the training loss): a joint score of the training objective, not a probability of the
count-then-top-c model, under which a gold graph that is not some count's top-c has probability 0.
"""
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..data.gilt.arcs import per_word, tree_arcs
from ..data.gilt.graph_features import N_FEATURES, TWO_WAY_RULES, GraphTape
from ..modules.arc_scorer import MAX_COUNT
from .policy import BRANCH, FORCED, GREEDY, SAMPLE, StructurePolicy
from .sentences import Sentence

COUNT_RULES = ("top-then-allowed", "allowed-then-top")
DEFAULT_COUNT_BEAM = 5  # counts each hypothesis branches on (docs/gilt-reference.md section 4: the reference uses 5)


def check_prefix_decodable(model) -> None:
    """ValueError unless a GiLT model can build its graph from the prefix alone: it needs its arc
    scorer, and reads no hexatags (``gilt_transformer_lm --gilt-hexatag-input`` does)."""
    decoder = getattr(model, "decoder", model)
    if getattr(decoder, "arc_scorer", None) is None:
        raise ValueError("this GiLT model has no arc scorer (trained with the flag --gilt-arc-scorer, which turns the "
                         "default-on scorer off): it cannot choose a graph")
    if getattr(decoder, "hexatag_input", False):
        raise ValueError("this gilt_transformer_lm reads hexatags as input (--gilt-hexatag-input, a sipe_transformer_lm "
                         "base): its structure cannot be chosen from the prefix alone")


def arc_order(head: torch.Tensor, dep: torch.Tensor, i: int) -> List[List[int]]:
    """Per row of ``ArcScorer.score_word``'s ``head``/``dep`` logits (E, i+1) for word i: its 2i - 1
    candidate arcs, v -> i (v = 0..i-1) then i -> v (v = 1..i-1), as indices in that order, sorted by
    logit (stable: ties keep this order)."""
    cand = torch.cat([head[:, :i], dep[:, 1:i]], 1)
    return torch.sort(cand, dim=1, descending=True, stable=True).indices.tolist()


def top_arcs(order: List[int], i: int, c: int):
    """Word i's c most likely arcs by p_ij from one row of :func:`arc_order`: (heads among 0..i-1,
    dependents among 1..i-1), ascending."""
    return sorted(v for v in order[:c] if v < i), sorted(v - i + 1 for v in order[:c] if v >= i)


def branch_counts(count_lp: torch.Tensor, i: int, count_beam: int, rule: str) -> List[int]:
    """The counts one hypothesis of word i branches on, most likely first (module docstring)."""
    return ranked_counts(torch.sort(count_lp, descending=True, stable=True).indices.tolist(), i, count_beam, rule)


def ranked_counts(ranked: List[int], i: int, count_beam: int, rule: str) -> List[int]:
    """:func:`branch_counts` from the counts ``ranked`` most likely first (ties: the smaller count)."""
    allowed = min(2 * i - 1, MAX_COUNT)
    if rule == "top-then-allowed":
        out = [c for c in ranked[:count_beam] if c <= allowed]
        return out or [next(c for c in ranked if c <= allowed)]
    if rule == "allowed-then-top":
        return [c for c in ranked if c <= allowed][:count_beam]
    raise ValueError(f"unknown count rule {rule!r} (expected one of {COUNT_RULES})")


def flat_arcs(per_word: Sequence[Tuple[Sequence[int], Sequence[int]]]) -> List[Tuple[int, int]]:
    """Per word (heads, dependents) -> (head, dependent) pairs in arrival order."""
    out = []
    for i, (heads, deps) in enumerate(per_word, 1):
        out += [(h, i) for h in heads] + [(i, d) for d in deps]
    return out


def is_tree(arcs, n: int) -> bool:
    """Whether ``arcs`` ((head, dependent), 0 = root) over words 1..n form one dependency tree."""
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


def gold_graph(heads: Optional[Sequence[int]]):
    """A tree's HEAD column -> per word (heads, dependents) among earlier nodes, as ``sipe-preprocess``
    writes the arc stream (``--arcs tree``); None without a tree."""
    if heads is None:
        return None
    return per_word(tree_arcs([int(h) for h in heads]), len(heads))


class ArcPolicy(StructurePolicy):
    prune_before = False

    def __init__(self, model, count_beam: int = DEFAULT_COUNT_BEAM, count_rule: str = COUNT_RULES[0]):
        super().__init__(model)
        check_prefix_decodable(model)  # count_beam, count_rule: checked by StructureOptions
        self.count_beam, self.count_rule = count_beam, count_rule
        # the distance rule of the graphs the model was trained on (set by task gilt_lm's build_model)
        self.two_way = str(getattr(self.decoder, "two_way_distance", TWO_WAY_RULES[0]))
        weight = self.decoder.embed_tokens.weight
        self.device, self.dtype = weight.device, weight.dtype

    def given_of(self, sentence: Sentence):
        return sentence.arcs

    def begin(self, rows, width, words, given=None, state=None):
        super().begin(rows, width, words, given, state)
        d = self.decoder.arc_dim
        self.words = torch.zeros(rows, dtype=torch.long)  # words so far
        self.wpos = torch.zeros(rows, width, dtype=torch.long)  # word of each input position (0: </s>, no word)
        self.table = torch.zeros(rows, words + 1, N_FEATURES, dtype=torch.long)  # the newest tape row, by word
        self.o = torch.zeros(rows, words + 1, 3 * d, dtype=self.dtype, device=self.device)  # o_w by word (0: unused)
        self.counts = torch.zeros(rows, words, dtype=torch.long)
        self.count_lp = torch.zeros(rows, words, dtype=torch.float64)
        self.local = torch.zeros(rows, words, dtype=torch.long)  # each word's number in its sentence (a context's)
        self.tapes = [GraphTape(two_way=self.two_way) for _ in range(rows)]
        self.arcs: List[list] = [[] for _ in range(rows)]
        self.given = list(given) if given is not None else [None] * rows
        self.last = None

    def step(self, t, src, starts, targets=None):
        self.wpos[:, t] = self.words
        keys = self.wpos[:, : t + 1]
        feats = self.table.gather(1, keys[:, :, None].expand(-1, -1, N_FEATURES))[:, None]
        logits, extra = self.decoder.cached_step(src, feats.to(self.device), self.state)
        self.last = self.decoder.arc_states(extra)
        return self.normalize(logits[:, -1:], extra, None if targets is None else targets[:, None])[:, 0]

    def reorder(self, order):
        super().reorder(order)
        cpu = order.cpu().tolist()
        idx = order.cpu()
        self.table, self.counts, self.count_lp = self.table[idx], self.counts[idx], self.count_lp[idx]
        self.local = self.local[idx]
        self.words, self.wpos = self.words[idx], self.wpos[idx]
        self.given = [self.given[j] for j in cpu]
        self.o = self.o[order.to(self.device)]
        if self.last is not None:
            self.last = self.last[order.to(self.last.device)]
        self.tapes = [self.tapes[j] for j in cpu]  # shared until a word is added (apply copies)
        self.arcs = [self.arcs[j] for j in cpu]

    def expand(self, rows, words, t, src, mode, limits=None):
        dec = self.decoder
        parents, costs, items = [], [], []
        local = self.local_words(rows.cpu(), words.cpu())  # i: the word's number in its sentence
        self.decision = torch.zeros(len(rows), MAX_COUNT + 1, dtype=torch.float64)
        for i in torch.unique(local).tolist():
            at = (local == i).nonzero().squeeze(1)
            sub = rows[at]
            dev = sub.to(self.device)
            emb = dec.arc_embedding(src[at].to(self.device))
            o_w = torch.cat([self.last[dev, 0], self.last[dev, 1], emb], -1)
            o_nodes = torch.cat([self.o[dev, :i], o_w[:, None]], 1)
            prev = torch.stack([torch.from_numpy(self.tapes[r].row()).T for r in sub.tolist()])  # nodes 0..i-1
            prev = torch.cat([prev, prev.new_zeros(len(sub), 1, N_FEATURES)], 1)
            head, dep, count_logits = dec.arc_scorer.score_word(o_nodes, prev.to(self.device))
            head, dep = head.cpu(), dep.cpu()
            count_lp = F.log_softmax(count_logits.double(), -1).cpu()
            self.decision[at] = count_lp
            chosen = None if mode == FORCED else self.choices(head, dep, count_lp, i, mode)
            for e, (pos, r) in enumerate(zip(at.tolist(), sub.tolist())):
                if mode == FORCED:
                    given = self.given[r]
                    if given is None:
                        raise ValueError("tag source 'given' for a GiLT model needs the sentence's graph (a data "
                                         "directory's arcs, or trees from a parser: --parser/--trees)")
                    heads, deps = given[i - 1]
                    cand = torch.cat([head[e, :i], dep[e, 1:i]]).double()
                    labels = torch.tensor([float(v in heads) for v in range(i)] + [float(v in deps) for v in range(1, i)],
                                          dtype=torch.float64)
                    cost = float(-F.binary_cross_entropy_with_logits(cand, labels, reduction="sum")
                                 - F.binary_cross_entropy_with_logits(head[e, i].double(), torch.zeros((), dtype=torch.float64)))
                    c = len(heads) + len(deps)
                    choices = [(c, list(heads), list(deps), cost)]
                else:
                    choices = chosen[e]
                for c, heads, deps, cost in choices:
                    parents.append(pos)
                    costs.append(cost)
                    items.append((i, c, float(count_lp[e, min(c, MAX_COUNT)]), heads, deps, o_w[e], int(words[pos])))
        order = sorted(range(len(parents)), key=lambda j: parents[j])  # stable: by parent, then count order
        return (torch.tensor([parents[j] for j in order], dtype=torch.long),
                torch.tensor([costs[j] for j in order], dtype=torch.float64), [items[j] for j in order])

    def choices(self, head: torch.Tensor, dep: torch.Tensor, count_lp: torch.Tensor, i: int, mode: str) -> List[list]:
        """Per hypothesis of word ``i`` (``head``/``dep`` (E, i+1) arc logits, ``count_lp`` (E, 30)) its
        candidates ``(c, heads, deps, log pi(c))`` under ``mode`` (GREEDY, SAMPLE, BRANCH): the rows' arcs
        and counts sorted once for all their counts (:func:`arc_order`, :func:`ranked_counts`)."""
        allowed = min(2 * i - 1, MAX_COUNT)
        if mode == GREEDY:
            counts = [[c] for c in count_lp[:, : allowed + 1].argmax(1).tolist()]
        elif mode == SAMPLE:
            counts = [[int(torch.multinomial(F.softmax(row, -1), 1))] for row in count_lp[:, : allowed + 1]]
        else:
            assert mode == BRANCH
            ranked = torch.sort(count_lp, dim=1, descending=True, stable=True).indices.tolist()
            counts = [ranked_counts(r, i, self.count_beam, self.count_rule) for r in ranked]
        lp = count_lp.tolist()
        return [[(c, *top_arcs(o, i, c), lp[e][c]) for c in cs] for e, (o, cs) in enumerate(zip(arc_order(head, dep, i), counts))]

    def boundary(self, rows, next_word):
        """A new sentence after an inner ``</s>``: a new graph with its own root; the positions so far (the
        earlier sentences and this ``</s>``) carry no graph features, as queries and as keys (a training
        block's other sentences and its ``</s>``)."""
        super().boundary(rows, next_word)
        for r in rows.tolist():
            self.tapes[r] = GraphTape(two_way=self.two_way)
        self.words[rows] = 0
        self.wpos[rows] = 0
        self.table[rows] = 0
        self.o[rows.to(self.device)] = 0

    def apply(self, rows, payload, pick, t):
        for r, j in zip(rows.tolist(), pick.tolist()):
            i, c, lpc, heads, deps, o_w, g = payload[j]
            tape = self.tapes[r].copy()
            values = torch.from_numpy(tape.add_word(heads, deps)).T  # (i+1, 3) over nodes 0..i
            self.tapes[r] = tape
            self.table[r, 1:i + 1] = values[1:]
            self.o[r, i] = o_w
            self.counts[r, g - 1] = c
            self.count_lp[r, g - 1] = lpc
            self.local[r, g - 1] = i
            self.arcs[r] = self.arcs[r] + [(heads, deps)]
            self.words[r] = i

    # ---------------------------------------------------------------- generation
    def accept_given(self, rows, words):
        """(has, ok) (E,) bool: the row has given arcs for the word, and they reach existing nodes
        only (heads among 0..i-1, dependents among 1..i-1)."""
        has, ok = [], []
        for r, i in zip(rows.tolist(), words.tolist()):
            given = self.given[r]
            arcs = given[i - 1] if given is not None and i <= len(given) else None
            has.append(arcs is not None)
            ok.append(arcs is not None and all(0 <= h < i for h in arcs[0]) and all(1 <= v < i for v in arcs[1]))
        return torch.tensor(has, dtype=torch.bool), torch.tensor(ok, dtype=torch.bool)

    def generation_mask(self, t, max_len, prompt_len, starts_word):
        """``<s>`` is never generated: in the training data it is a sentence boundary, a position of no word."""
        mask = torch.zeros(len(self.words), len(starts_word), dtype=torch.bool)
        mask[:, self.decoder.dictionary.bos()] = True
        return mask

    def labels(self, row):
        return self.row_arcs(row, 0, len(self.arcs[row]))

    def row_arcs(self, row: int, first: int, n_words: int) -> List[Tuple[int, int]]:
        """The arcs of words ``first .. n_words - 1`` of ``row`` as (head, dependent) pairs in arrival order, each
        word numbered in its sentence (:func:`flat_arcs` when the row holds one sentence)."""
        arcs = []
        for i, (heads, deps) in zip(self.local[row, first:n_words].tolist(), self.arcs[row][first:n_words]):
            arcs += [(h, i) for h in heads] + [(i, d) for d in deps]
        return arcs

    def result(self, row, n_words, first=0):
        arcs = self.row_arcs(row, first, n_words)
        return {"tags": [], "complete": is_tree(arcs, n_words - first),
                "extra": {"arcs": arcs, "counts": self.counts[row, first:n_words].tolist(),
                          "count_logprobs": self.count_lp[row, first:n_words].tolist()}}
