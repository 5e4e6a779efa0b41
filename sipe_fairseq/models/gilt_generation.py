"""Generation with a ``gilt_txl`` model predicting each new word's arcs as it goes (issue 13;
gilt-facts.md sections 2-4).

fairseq's generator (beam search, ``--sampling``, forced prefixes; shared machinery in
:mod:`.generation`) decodes a GiLT decoder through :class:`ArcChoosingLM`. Per hypothesis row the
wrapper keeps, next to the model's KV cache, the row's graph (:class:`~..data.graph_features.GraphTape`),
the word inputs o_w and the arcs chosen so far:

* When the input at position k is a word's first subword x_k (the i-th word: U+2581 piece, or the
  first generated token), the arc scorer sees o_i = [h^(L/2+1)_(k-1); h^(L-1)_(k-1); emb(x_k)] and
  the features of the graph before word i (section 2); the count c is the argmax of pi over the
  counts c <= min(2i - 1, 29) (sampled from pi restricted to those with ``sample_counts``,
  ``--sampling``), and the word's arcs are the top-c candidates by p_ij (section 4, :func:`~.gilt_lm.top_arcs`;
  no tree or acyclicity constraint, so a word may get several heads or none).
* The arcs join the row's graph, whose new tape row gives the features of x_k's query row (section 3):
  every key position gets the newest row's value of its word (0 for ``</s>``), and the word's
  continuation subwords keep that row. So a hypothesis's scores are the model's own
  log p(x_t | x_<t, G_<t), which a full forward with the chosen arcs as the gold graph reproduces,
  and its arcs are those the greedy graph search (``eval/gilt_scoring.py`` with beam 1 and count beam 1)
  finds on the same sentence: both are prefix-determined.
* ``<s>`` is never generated (log-probability ``-inf``, the others not renormalised): in the
  training data it is a sentence boundary, a position of no word.
* The beam is fairseq's, over tokens, ranked by the LM log-probabilities; log pi(c) is reported
  per word (``arc_count_logprobs``), not added (GiLT's own beam over graphs is ``eval/gilt_scoring.py``).
* A prompt's words get their arcs from the model too, unless the prompt brings arcs
  (``sample["prompt_arcs"]``: per sentence, per word (heads, dependents) among earlier nodes, e.g.
  a parse of the prompt, ``sipe-generate --prompt-tags``); the model chooses for a word the given
  arcs do not cover, and for a word whose given arcs reach a node that is not yet there (counted in
  ``given_replaced``).

Each finished hypothesis gets ``word_starts`` (indices into ``tokens``), ``arcs`` (per word: heads
among 0..i-1, dependents among 1..i-1), ``arc_origin`` (``model``/``prompt``), ``arc_counts`` and
``arc_count_logprobs`` (log pi(c) per word). Printed (``fairseq-generate``/``-interactive``):
``ARCS-<id>`` (per word ``word/h->d,...``, ``-`` for a word without arcs, ``*`` after a prompt
word's arcs) and, per word, ``GRAPH-<id>`` with a CoNLL-U-like row (:func:`graph_rows`).
"""
import logging
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..data.graph_features import N_FEATURES, GraphTape
from ..modules.arc_scorer import MAX_COUNT
from .generation import StructureChoosingDecoder, StructureChoosingLM, hypothesis_words
from .gilt_lm import check_prefix_decodable, top_arcs

logger = logging.getLogger(__name__)

MODEL, PROMPT = 1, 2  # arc origins per word
WordArcs = Tuple[List[int], List[int]]  # (heads among 0..i-1, dependents among 1..i-1)


class ArcChoosingDecoder(StructureChoosingDecoder):
    """Wraps a :class:`~.gilt_lm.GiltDecoder`; see the module docstring. ``sample_counts``: sample
    each word's arc count from pi (else argmax)."""

    def __init__(self, inner, dictionary, sample_counts: bool = False):
        super().__init__(inner, dictionary)
        check_prefix_decodable(inner)
        self.sample_counts = sample_counts

    def set_prompt(self, prefix_tokens: Optional[torch.Tensor], arcs: Optional[Sequence[Optional[Sequence[WordArcs]]]] = None):
        """The next batch's forced prefix (bsz, P) (pad-padded; ``None``: no prompt) and, per sentence,
        the arcs of its prompt words (``None``: the model chooses them)."""
        self.prompt = None if prefix_tokens is None else (prefix_tokens, arcs)

    def set_prompt_from_sample(self, prompt, sample, bos):
        self.set_prompt(prompt, sample.get("prompt_arcs"))

    # ------------------------------------------------------------------ state
    def _init_state(self, rows: int, device) -> dict:
        d = self.inner.arc_dim
        dtype = self.inner.embed_tokens.weight.dtype
        st = {"words": torch.zeros(rows, dtype=torch.long, device=device),  # words so far
              "wpos": torch.zeros(rows, 1, dtype=torch.long, device=device),  # word of each input position
              "table": torch.zeros(rows, 1, N_FEATURES, dtype=torch.long, device=device),  # newest tape row by word
              "o": torch.zeros(rows, 1, 3 * d, dtype=dtype, device=device),  # o_w by word (0: unused)
              "count": torch.zeros(rows, 1, dtype=torch.long, device=device),
              "count_lp": torch.zeros(rows, 1, dtype=torch.float64, device=device),
              "origin": torch.zeros(rows, 1, dtype=torch.long, device=device),
              "prompt_len": torch.zeros(rows, dtype=torch.long, device=device),
              "tapes": [GraphTape() for _ in range(rows)], "arcs": [[] for _ in range(rows)],
              "given": [None] * rows}
        if self.prompt is not None:
            prefix, arcs = self.prompt
            if rows % prefix.size(0):
                raise ValueError(f"ArcChoosingDecoder: {rows} hypothesis rows for a prompt batch of {prefix.size(0)}")
            beam = rows // prefix.size(0)
            st["prompt_len"] = prefix.ne(self.dictionary.pad()).sum(1).repeat_interleave(beam).to(device)
            if arcs is not None:
                st["given"] = [arcs[r // beam] for r in range(rows)]
        return st

    def reorder_state(self, state: dict, new_order: torch.Tensor) -> dict:
        order = new_order.tolist()
        out = {k: v.index_select(0, new_order) for k, v in state.items() if torch.is_tensor(v)}
        seen, tapes = set(), []
        for j in order:  # a hypothesis kept twice gets its own copy of the graph
            tapes.append(state["tapes"][j].copy() if j in seen else state["tapes"][j])
            seen.add(j)
        out["tapes"] = tapes
        out["arcs"] = [list(state["arcs"][j]) for j in order]
        out["given"] = [state["given"][j] for j in order]
        return out

    def _given(self, st, row: int, pos: int, i: int) -> Optional[WordArcs]:
        """The prompt's arcs for word i of ``row`` (first subword at input ``pos``), if any fit."""
        given = st["given"][row]
        if given is None or pos > int(st["prompt_len"][row]):
            return None
        if i > len(given):  # more words in the prompt's tokens than in its arcs: the model chooses
            return None
        heads, deps = given[i - 1]
        if all(0 <= h < i for h in heads) and all(1 <= v < i for v in deps):
            return sorted(set(heads)), sorted(set(deps))
        self.given_replaced += 1
        return None

    def _add_word(self, st, row: int, pos: int, tokens: torch.Tensor) -> None:
        """Word i = words + 1 starts at input ``pos`` of ``row`` (``tokens``: the row's inputs 0..pos):
        choose its arcs, grow the graph."""
        dec = self.inner
        i = int(st["words"][row]) + 1
        dt = torch.float64 if dec.embed_tokens.weight.dtype == torch.float64 else torch.float32
        emb = dec.arc_embedding(tokens[None])[0]
        o_w = torch.cat([st["last"][row, 0], st["last"][row, 1], emb])
        o_nodes = torch.cat([st["o"][row, :i], o_w[None]])[None]  # (1, i+1, 3d), node 0: the root
        tape = st["tapes"][row]
        prev = torch.from_numpy(tape.row()).T.to(o_w.device)  # (i, 3): nodes 0..i-1 before word i's arcs
        prev = torch.cat([prev, prev.new_zeros(1, N_FEATURES)])[None]
        head, dep, count_logits = dec.arc_scorer.score_word(o_nodes, prev)
        count_lp = F.log_softmax(count_logits[0].to(dt), -1)
        given = self._given(st, row, pos, i)
        if given is not None:
            heads, deps = given
            c, origin = len(heads) + len(deps), PROMPT
        else:
            allowed = min(2 * i - 1, MAX_COUNT) + 1
            if self.sample_counts:
                c = int(torch.multinomial(F.softmax(count_lp[:allowed], -1), 1))
            else:
                c = int(torch.argmax(count_lp[:allowed]))
            heads, deps = top_arcs(head[0], dep[0], i, c)
            origin = MODEL
        row_values = torch.from_numpy(tape.add_word(heads, deps)).T  # (i+1, 3) over nodes 0..i
        st["table"][row, 1:i + 1] = row_values[1:].to(st["table"].device)
        st["o"][row, i] = o_w
        st["count"][row, i] = c
        st["count_lp"][row, i] = count_lp[min(c, MAX_COUNT)].double()
        st["origin"][row, i] = origin
        st["words"][row] = i
        st["arcs"][row].append((heads, deps))

    # ------------------------------------------------------------------ decoding
    def forward(self, prev_output_tokens, incremental_state=None, **unused):
        if incremental_state is None:
            raise ValueError("ArcChoosingDecoder decodes step by step: pass incremental_state (a dict kept across steps)")
        tokens = prev_output_tokens
        rows, pos = tokens.size(0), tokens.size(1) - 1
        st = self.get_state(incremental_state)
        if st is None:
            if pos != 0:
                raise ValueError(f"ArcChoosingDecoder: a new incremental_state must start at position 0, got {pos}")
            st = self._init_state(rows, tokens.device)
        else:
            if st["wpos"].size(1) != pos or st["wpos"].size(0) != rows:
                raise ValueError(f"ArcChoosingDecoder: state holds {tuple(st['wpos'].shape)} positions, "
                                 f"got {tuple(tokens.shape)}")
            for key in ("table", "o", "count", "count_lp", "origin"):  # room for one more word
                st[key] = torch.cat([st[key], st[key].new_zeros((rows, 1) + st[key].shape[2:])], 1)
            new = tokens[:, pos]
            starts = self.starts_word_at(tokens) & new.ne(self.eos) & new.ne(self.dictionary.pad())
            for r in starts.nonzero().flatten().tolist():
                self._add_word(st, r, pos, tokens[r, :pos + 1])
            st["wpos"] = torch.cat([st["wpos"], st["words"][:, None]], 1)
        # the new query row: each key position's word's value in the row's newest tape row (0: no word)
        feats = st["table"].gather(1, st["wpos"][:, :, None].expand(-1, -1, N_FEATURES))[:, None]
        logits, extra = self.inner(tokens, gilt_features=feats, incremental_state=incremental_state)
        st["last"] = self.inner.arc_states(extra)
        self.set_state(incremental_state, st)
        excluded = torch.zeros(rows, 1, logits.size(-1), dtype=torch.bool, device=logits.device)
        excluded[..., self.dictionary.bos()] = True  # a boundary inside a sentence: no word there (data/gilt_dataset.py)
        return logits[:, -1:], {"attn": [None], "excluded": excluded}

    # ------------------------------------------------------------------ results
    def row_result(self, incremental_state, row: int, length: int) -> dict:
        """The arcs of ``row``'s words over input positions ``1 .. length`` (before ``</s>``)."""
        st = self.get_state(incremental_state)
        wpos = st["wpos"][row, :length + 1].tolist()
        starts = [p - 1 for p in range(1, length + 1) if wpos[p] != wpos[p - 1]]
        n = len(starts)
        return {"word_starts": starts, "arcs": [(list(h), list(d)) for h, d in st["arcs"][row][:n]],
                "arc_origin": ["prompt" if int(o) == PROMPT else "model" for o in st["origin"][row, 1:n + 1].tolist()],
                "arc_counts": st["count"][row, 1:n + 1].tolist(),
                "arc_count_logprobs": st["count_lp"][row, 1:n + 1].tolist()}

    def output_lines(self, hypo: dict, dictionary):
        words = hypothesis_words(hypo, dictionary)
        lines = [("ARCS", format_arcs(words, hypo))]
        return lines + [("GRAPH", r) for r in graph_rows(words, hypo)]


class ArcChoosingLM(StructureChoosingLM):
    """A GiLT decoder LM seen by fairseq's generator as an incremental decoder that chooses its arcs."""

    decoder_cls = ArcChoosingDecoder


def format_arcs(words: List[str], hypo: dict) -> str:
    """Per word ``word/h->d,...`` (arcs in arrival order: heads, then dependents; ``-``: none;
    ``*``: the prompt's arcs)."""
    out = []
    for i, (w, (heads, deps), origin) in enumerate(zip(words, hypo["arcs"], hypo["arc_origin"]), 1):
        arcs = [f"{h}->{i}" for h in heads] + [f"{i}->{d}" for d in deps]
        out.append(f"{w}/{','.join(arcs) or '-'}{'*' if origin == 'prompt' else ''}")
    return " ".join(out)


def word_heads(arcs: Sequence[WordArcs]) -> List[List[int]]:
    """Per word, all its heads (0 = root), from the arcs as they arrived (a word's dependents among
    earlier words make it a head of those)."""
    heads = [list(h) for h, _ in arcs]
    for i, (_, deps) in enumerate(arcs, 1):
        for d in deps:
            heads[d - 1].append(i)
    return [sorted(h) for h in heads]


def graph_rows(words: List[str], hypo: dict) -> List[str]:
    """The finished graph as CoNLL-U-like rows (10 tab-separated columns), one per word. A GiLT graph
    is not a tree: HEAD holds the head only when the word has exactly one (DEPREL ``root`` for the
    root, else ``dep``), else ``_``; DEPS lists every head (``h:dep``, ``0:root``, ``|``-joined; ``_``:
    no head); MISC holds ``Heads=`` (their number), ``ArcCount=`` (the count chosen when the word
    arrived) and ``ArcOrigin=model|prompt``."""
    rows = []
    for i, (w, heads) in enumerate(zip(words, word_heads(hypo["arcs"])), 1):
        one = len(heads) == 1
        head = str(heads[0]) if one else "_"
        rel = ("root" if heads[0] == 0 else "dep") if one else "_"
        deps = "|".join(f"{h}:{'root' if h == 0 else 'dep'}" for h in heads) or "_"
        misc = f"Heads={len(heads)}|ArcCount={hypo['arc_counts'][i - 1]}|ArcOrigin={hypo['arc_origin'][i - 1]}"
        rows.append(f"{i}\t{w}\t_\t_\t_\t_\t{head}\t{rel}\t{deps}\t{misc}")
    return rows
