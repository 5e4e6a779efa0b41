"""Generation with tags the model chooses as it goes (issue 12, section 4).

fairseq's :class:`~fairseq.sequence_generator.SequenceGenerator` (beam search, ``--sampling``,
forced prefixes) decodes a tagged SiPE decoder through :class:`TagChoosingLM`, a wrapper model
whose decoder builds ``src_terminals``/``src_nonterminals`` for every hypothesis from its own
tokens and the tags it chose:

* Word boundaries come from the pieces: a token whose piece starts with sentencepiece's U+2581
  starts a word (the first generated token always does). A word's first subword carries its tag
  pair; continuation subwords and ``</s>`` carry ``<notag>`` (as ``data/encode.py`` encodes).
* When a word's first subword is fed (input position ``p``), its pair is chosen from the tag heads
  at the word's anchor, the placement the model was trained with (``--tag-head-placement``, see
  ``data/lm_dataset.tag_targets`` and ``eval/prefix_tags.py``): ``first_subword``: the last
  position before ``p`` whose input starts a word (or the sentence start); ``last_subword``:
  position ``p - 1``. Argmax of log p(terminal) + log p(non-terminal), or sampled from those pair
  probabilities with ``sample_tags`` (``--sampling``), over the pairs
  :func:`~sipe_fairseq.hexatag.constrained.allowed_pairs` allows after the row's prefix state.
* The tree must close exactly at ``</s>``: while the tags are open ``</s>`` gets probability 0,
  after a word tagged ``EOS`` a new word does (continuation subwords and ``</s>`` stay). With the
  generator's length limit known (``max_len``), pairs leave only depths the remaining tokens can
  close, and when the remaining tokens are exactly the words still needed, continuation subwords
  are excluded too; so every finished hypothesis's tags decode to one tree. The excluded tokens
  get log-probability ``-inf`` without renormalizing the rest (``get_normalized_probs``): a
  hypothesis's scores are the model's own ``log p(x_t | x_<t, tags)``, which a full forward with
  the chosen tags reproduces.
* A prompt (forced prefix) may bring its own tags (:meth:`TagChoosingDecoder.set_prompt`); a given
  pair is kept when the prefix check accepts it and it does not close the tree (a parse of the
  prompt alone ends in ``EOS``; the model chooses that word's pair instead), else the model
  chooses (counted in ``given_replaced``). Model-chosen prompt words never close the tree.

The per-row tag state (tags so far, automaton state, pair log-probs of the latest anchor) lives in
``incremental_state`` next to the decoder's KV cache and follows ``reorder_incremental_state``.
With ``use_cache=False`` every step runs a full forward over the prefix (same choices, slower).
:class:`~.generation.StructuredSequenceGenerator` passes the length limit and attaches to each
finished hypothesis ``tags`` (pairs per word), ``tag_origin`` (``model``/``prompt`` per word),
``tag_logprobs``, ``word_starts`` (indices into ``tokens``) and ``heads``
(:func:`~sipe_fairseq.hexatag.decode` of the tags, ``None`` if they do not form one tree). What the
model families share (word boundaries, prompts, state reordering, the generator, the dispatch) is
in :mod:`.generation`.
"""
import logging
from typing import List, Optional

import torch
import torch.nn.functional as F

from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from ..hexatag import decode
from ..hexatag.constrained import CLOSED, PAIRS, START, advance, allowed_pairs, is_valid
from ..hexatag.tags import NONTERMINALS, TERMINALS
from .generation import StructureChoosingDecoder, StructureChoosingLM, hypothesis_words

logger = logging.getLogger(__name__)

_PAIR_INDEX = {p: i for i, p in enumerate(PAIRS)}
_TERM_IDX = torch.tensor([TERMINALS.index(t) for t, _ in PAIRS])
_NT_IDX = torch.tensor([NONTERMINALS.index(n) for _, n in PAIRS])
MODEL, PROMPT = 1, 2  # tag origins per position (0: no tag)


def needs_tags(model) -> bool:
    """Whether a decoder LM conditions on hexatags (SiPE with an injection, ``sipe_transformer_lm``)."""
    decoder = getattr(model, "decoder", model)
    if hasattr(decoder, "needs_tags"):
        return bool(decoder.needs_tags)
    return getattr(decoder, "terminal_head", None) is not None and hasattr(decoder.embed_tokens, "tags")


def pair_logprobs(term_logits: torch.Tensor, nt_logits: torch.Tensor) -> torch.Tensor:
    """(..., 2), (..., 5) logits -> (..., 10) pair log-probs in :data:`PAIRS` order (float64)."""
    t = F.log_softmax(term_logits.double(), -1)
    n = F.log_softmax(nt_logits.double(), -1)
    return t[..., _TERM_IDX] + n[..., _NT_IDX]


def tag_ids(pair_index: int):
    """Pair index -> (terminal id, non-terminal id) in the tag dictionaries."""
    t, n = PAIRS[pair_index]
    return FIRST_TAG_ID + TERMINALS.index(t), FIRST_TAG_ID + NONTERMINALS.index(n)


def pair_of_ids(terminal: int, nonterminal: int) -> Optional[int]:
    """(terminal id, non-terminal id) -> pair index, ``None`` for ``<notag>``/pad."""
    if terminal < FIRST_TAG_ID or nonterminal < FIRST_TAG_ID:
        return None
    return _PAIR_INDEX[(TERMINALS[terminal - FIRST_TAG_ID], NONTERMINALS[nonterminal - FIRST_TAG_ID])]


class TagChoosingDecoder(StructureChoosingDecoder):
    """Wraps a tagged decoder; see the module docstring. ``placement``: the task's
    ``--tag-head-placement``; ``sample_tags``: sample each pair (else argmax);
    ``constrained``: the prefix check and the ``</s>``/word-start rules (off: any pair, no masks)."""

    def __init__(self, inner, dictionary, placement: str = "first_subword", sample_tags: bool = False,
                 constrained: bool = True, use_cache: bool = True):
        super().__init__(inner, dictionary)
        if placement not in ("first_subword", "last_subword"):
            raise ValueError(f"unknown tag head placement {placement!r}")
        if getattr(inner, "terminal_head", None) is None:
            raise ValueError("this model has no tag heads (--sipe-tag-heads off): it cannot choose tags to generate with")
        self.placement, self.sample_tags = placement, sample_tags
        self.constrained, self.use_cache = constrained, use_cache

    def set_prompt(self, prefix_tokens: Optional[torch.Tensor], terminals: Optional[torch.Tensor] = None,
                   nonterminals: Optional[torch.Tensor] = None) -> None:
        """The next batch's forced prefix (bsz, P) (pad-padded; ``None``: no prompt) and its tag
        ids (bsz, P) aligned with it (tags on each word's first subword, else ``<notag>``)."""
        self.prompt = None if prefix_tokens is None else (prefix_tokens, terminals, nonterminals)

    def set_prompt_from_sample(self, prompt, sample, bos):
        """The prompt keeps the sample's tags (:func:`prompt_tags_from_sample`)."""
        self.set_prompt(prompt, *prompt_tags_from_sample(sample, prompt, bos))

    # ------------------------------------------------------------------ state
    def _init_state(self, rows: int, device) -> dict:
        st = {"terms": torch.full((rows, 1), NOTAG_ID, dtype=torch.long, device=device),
              "state": torch.full((rows,), START, dtype=torch.long, device=device),
              "anchor": torch.zeros(rows, len(PAIRS), dtype=torch.float64, device=device),
              "tag_lp": torch.zeros(rows, 1, dtype=torch.float64, device=device),
              "origin": torch.zeros(rows, 1, dtype=torch.long, device=device),
              "prompt_len": torch.zeros(rows, dtype=torch.long, device=device)}
        st["nts"] = st["terms"].clone()
        width = 0
        if self.prompt is not None:
            prefix, terms, nts = self.prompt
            if rows % prefix.size(0):
                raise ValueError(f"TagChoosingDecoder: {rows} hypothesis rows for a prompt batch of {prefix.size(0)}")
            beam = rows // prefix.size(0)
            st["prompt_len"] = prefix.ne(self.dictionary.pad()).sum(1).repeat_interleave(beam).to(device)
            width = prefix.size(1)
            given = torch.full((prefix.size(0), width), NOTAG_ID, dtype=torch.long)
            st["given_t"], st["given_n"] = given.clone(), given.clone()
            if terms is not None:
                st["given_t"], st["given_n"] = terms.long().cpu(), nts.long().cpu()
            st["given_t"] = st["given_t"].repeat_interleave(beam, 0).to(device)
            st["given_n"] = st["given_n"].repeat_interleave(beam, 0).to(device)
        if width == 0:
            st["given_t"] = st["given_n"] = torch.zeros(rows, 0, dtype=torch.long, device=device)
        return st

    def _choose(self, st, row: int, pos: int) -> int:
        """The pair index for the word whose first subword is the input at ``pos`` of ``row``."""
        state = int(st["state"][row])
        in_prompt = pos <= int(st["prompt_len"][row])
        if in_prompt and pos - 1 < st["given_t"].size(1):
            given = pair_of_ids(int(st["given_t"][row, pos - 1]), int(st["given_n"][row, pos - 1]))
            if given is not None:
                nxt = advance(state, PAIRS[given])
                if not self.constrained or (nxt is not None and nxt != CLOSED):
                    st["origin"][row, pos] = PROMPT
                    return given
                self.given_replaced += 1
        if not self.constrained:
            allowed = list(range(len(PAIRS)))
        else:
            left = None if self.max_len is None else max(self.max_len - pos, 0)
            allowed = [_PAIR_INDEX[p] for p in allowed_pairs(state, left)]
            if in_prompt:  # the prompt goes on: do not close the tree inside it
                allowed = [p for p in allowed if advance(state, PAIRS[p]) != CLOSED] or allowed
        scores = st["anchor"][row, allowed]
        st["origin"][row, pos] = MODEL
        if self.sample_tags:
            return allowed[int(torch.multinomial(F.softmax(scores, -1), 1))]
        return allowed[int(torch.argmax(scores))]  # ties: first in PAIRS order

    def _mask(self, st, tokens: torch.Tensor) -> torch.Tensor:
        """(B, 1, V) bool: symbols the next position may not produce (see the module docstring)."""
        rows, pos = tokens.size(0), tokens.size(1) - 1
        mask = torch.zeros(rows, 1, len(self.dictionary), dtype=torch.bool, device=tokens.device)
        if not self.constrained or (self.max_len is not None and pos >= self.max_len):
            return mask  # the generator forces </s> from here
        for r in range(rows):
            if pos < int(st["prompt_len"][r]):
                continue  # the prompt's next token is forced anyway
            state = int(st["state"][r])
            if state == CLOSED:
                mask[r, 0] = self.starts_word
                continue
            mask[r, 0, self.eos] = True
            needed = max(state, 1)  # words that close the open tree: depth d needs d, none so far needs 1
            if self.max_len is not None and self.max_len - pos <= needed:
                mask[r, 0] |= ~self.starts_word
        return mask

    # ------------------------------------------------------------------ decoding
    def forward(self, prev_output_tokens, incremental_state=None, **unused):
        if incremental_state is None:
            raise ValueError("TagChoosingDecoder decodes step by step: pass incremental_state (a dict kept across steps)")
        tokens = prev_output_tokens
        rows, pos = tokens.size(0), tokens.size(1) - 1
        st = self.get_state(incremental_state)
        if st is None:
            if pos != 0:
                raise ValueError(f"TagChoosingDecoder: a new incremental_state must start at position 0, got {pos}")
            st = self._init_state(rows, tokens.device)
        else:
            if st["terms"].size(1) != pos or st["terms"].size(0) != rows:
                raise ValueError(f"TagChoosingDecoder: state holds {tuple(st['terms'].shape)} positions, "
                                 f"got {tuple(tokens.shape)}")
            new = torch.full((rows, 1), NOTAG_ID, dtype=torch.long, device=tokens.device)
            for key in ("terms", "nts", "origin"):
                st[key] = torch.cat([st[key], torch.zeros_like(new) if key == "origin" else new], 1)
            st["tag_lp"] = torch.cat([st["tag_lp"], torch.zeros(rows, 1, dtype=torch.float64, device=tokens.device)], 1)
            starts = self.starts_word_at(tokens)
            for r in starts.nonzero().flatten().tolist():
                p = self._choose(st, r, pos)
                st["terms"][r, pos], st["nts"][r, pos] = tag_ids(p)
                st["tag_lp"][r, pos] = st["anchor"][r, p]
                nxt = advance(int(st["state"][r]), PAIRS[p])
                st["state"][r] = START if nxt is None else nxt  # unconstrained: a broken prefix restarts
        if self.use_cache:
            logits, extra = self.inner(tokens, src_terminals=st["terms"], src_nonterminals=st["nts"],
                                       incremental_state=incremental_state)
        else:
            logits, extra = self.inner(tokens, src_terminals=st["terms"], src_nonterminals=st["nts"])
        logits = logits[:, -1:]
        heads = pair_logprobs(extra["terminal_logits"][:, -1], extra["nonterminal_logits"][:, -1])
        if self.placement == "last_subword" or pos == 0:
            st["anchor"] = heads
        else:  # first_subword: anchors are the sentence start and words' first subwords
            is_start = (self.starts_word[tokens[:, pos]] | (pos == 1))[:, None]
            st["anchor"] = torch.where(is_start, heads, st["anchor"])
        self.set_state(incremental_state, st)
        return logits, {"attn": [None], "excluded": self._mask(st, tokens)}

    # ------------------------------------------------------------------ results
    def row_result(self, incremental_state, row: int, length: int) -> dict:
        """The tags of ``row`` over input positions ``1 .. length`` (the generated tokens before
        ``</s>``), as attached to a finished hypothesis."""
        st = self.get_state(incremental_state)
        starts, tags, origin, lps = [], [], [], []
        for pos in range(1, length + 1):
            p = pair_of_ids(int(st["terms"][row, pos]), int(st["nts"][row, pos]))
            if p is not None:
                starts.append(pos - 1)
                tags.append(PAIRS[p])
                origin.append("prompt" if int(st["origin"][row, pos]) == PROMPT else "model")
                lps.append(float(st["tag_lp"][row, pos]))
        return {"tags": tags, "word_starts": starts, "tag_origin": origin, "tag_logprobs": lps,
                "heads": decode(tags) if tags and is_valid(tags) else None}

    def output_lines(self, hypo: dict, dictionary):
        """``TAGS``: ``word/terminal,non-terminal`` per word (``*`` marks prompt tags); ``TREE``: the heads."""
        tags, tree = format_hypothesis(hypo, dictionary)
        return [("TAGS", tags), ("TREE", tree)]


class TagChoosingLM(StructureChoosingLM):
    """A tagged decoder LM seen by fairseq's generator as an incremental decoder that chooses its tags."""

    decoder_cls = TagChoosingDecoder


def prompt_tags_from_sample(sample, prefix_tokens: Optional[torch.Tensor], bos: int):
    """The prompt's tags (bsz, P) from a ``hexatag_lm`` sample (``src_terminals``/``src_nonterminals``
    aligned with ``src_tokens``, which starts with ``bos``); ``(None, None)`` without tag streams."""
    net = sample["net_input"]
    if prefix_tokens is None or "src_terminals" not in net:
        return None, None
    src = net["src_tokens"]
    off = 1 if bool(src[:, 0].eq(bos).all()) else 0
    width = prefix_tokens.size(1)
    terms = net["src_terminals"][:, off:off + width]
    nts = net["src_nonterminals"][:, off:off + width]
    if terms.size(1) < width:  # shorter source than prefix: no tags for the rest
        pad = torch.full((terms.size(0), width - terms.size(1)), NOTAG_ID, dtype=terms.dtype, device=terms.device)
        terms, nts = torch.cat([terms, pad], 1), torch.cat([nts, pad], 1)
    return terms, nts


def format_hypothesis(hypo: dict, dictionary) -> List[str]:
    """``word/terminal,non-terminal`` per word (``*`` marks prompt tags) and the tree's heads."""
    words = hypothesis_words(hypo, dictionary)
    tags = " ".join(f"{w}/{t},{n}{'*' if o == 'prompt' else ''}"
                    for w, (t, n), o in zip(words, hypo["tags"], hypo["tag_origin"]))
    heads = hypo["heads"]
    tree = " ".join(f"{i + 1}->{h}" for i, h in enumerate(heads)) if heads is not None else "(tags do not form one tree)"
    return [tags, tree]
