"""Generation with structure the model chooses as it goes, for every family: fairseq's
:class:`~fairseq.sequence_generator.SequenceGenerator` (beam search, ``--sampling``, forced prefixes)
decodes a model wrapped in :class:`StructureChoosingLM`.

Its decoder keeps the family's :class:`~.policy.StructurePolicy` (the same one that scores) in
``incremental_state``, next to the model's KV cache, and follows fairseq's reorder. At every step:

* the newest input starts a word when its piece starts with U+2581, and the first generated token
  always does; such a word gets its structure from the policy: the argmax (``self``), or a sample
  with ``sample_structure`` (``--sampling``: tags from the pair probabilities, GiLT's count from pi);
* a prompt (forced prefix) may bring its structure (:meth:`StructureChoosingDecoder.set_prompt`);
  a word's given structure is kept when the family accepts it (SiPE: the prefix check takes the pair
  without closing the tree; GiLT: its arcs reach existing nodes), else the model chooses (counted in
  ``given_replaced``); SiPE never closes the tree inside the prompt;
* the prompt's words stay whole: the first generated token starts a new word
  (``continue_word=True`` lets it continue the prompt's last word);
* the family excludes tokens (log-probability ``-inf``, the rest not renormalized, so a hypothesis's
  scores are the model's own ``log p(x_t | x_<t, S)``): SiPE's tree closes exactly at ``</s>`` (with
  the generator's length limit known, only depths that can close in time), GiLT never emits ``<s>``.

Each finished hypothesis gets ``word_starts`` (indices into ``tokens``) and, per word, its structure
and origin (``model``/``prompt``): SiPE ``tags``, ``tag_origin``, ``tag_logprobs`` and ``heads`` (the
tree, None if the tags do not form one); GiLT ``arcs``, ``arc_origin``, ``arc_counts``,
``arc_count_logprobs``. :meth:`StructureChoosingDecoder.output_lines` formats them
(``TAGS-``/``TREE-`` or ``ARCS-``/``GRAPH-`` lines).
"""
import logging
import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder, FairseqLanguageModel
from fairseq.sequence_generator import SequenceGenerator

from ..data.tag_dictionary import FIRST_TAG_ID
from ..data.words import WORD_MARK, word_start_mask
from ..hexatag import decode
from ..hexatag.conllu_io import conllu_lines, plain_deprels
from ..hexatag.errors import NonFiniteScoreError
from ..hexatag.constrained import is_valid
from ..hexatag.tags import NONTERMINALS, TERMINALS
from .family import StructureOptions, policy_for, structure_of
from .policy import FORCED, GREEDY, SAMPLE
from .sentences import PAIR_INDEX

logger = logging.getLogger(__name__)
MODEL, PROMPT = 1, 2  # structure origin per word


def hypothesis_words(hypo: dict, dictionary) -> List[str]:
    """The words of a finished hypothesis (pieces joined at its ``word_starts``, U+2581 removed)."""
    pieces = [dictionary[int(t)] for t in hypo["tokens"]]
    bounds = hypo["word_starts"] + [len(pieces) - 1]
    return ["".join(pieces[a:b]).replace(WORD_MARK, "") or "_" for a, b in zip(bounds[:-1], bounds[1:])]


def pair_of_ids(terminal: int, nonterminal: int) -> Optional[int]:
    """(terminal id, non-terminal id) -> pair index, ``None`` for ``<notag>``/pad."""
    if terminal < FIRST_TAG_ID or nonterminal < FIRST_TAG_ID:
        return None
    return PAIR_INDEX[(TERMINALS[terminal - FIRST_TAG_ID], NONTERMINALS[nonterminal - FIRST_TAG_ID])]


class StructureChoosingDecoder(FairseqIncrementalDecoder):
    """See the module docstring. ``model``: the decoder LM; ``options``: how the policy chooses
    (placement, constraint); ``sample_structure``: sample instead of the argmax."""

    def __init__(self, model, dictionary, options: Optional[StructureOptions] = None, sample_structure: bool = False,
                 continue_word: bool = False):
        super().__init__(dictionary)
        self.model = model
        self.inner = getattr(model, "decoder", model)
        self.options = options or StructureOptions()
        self.structure = structure_of(model)
        if self.structure == "none":
            raise ValueError("this model reads no structure: generate with it directly")
        policy_for(model, self.options)  # ValueError now (no tag heads, no arc scorer), not at the first step
        self.sample_structure, self.continue_word = sample_structure, continue_word
        self.register_buffer("starts_word", word_start_mask(dictionary, specials=False), persistent=False)
        self.eos = dictionary.eos()
        self.max_len: Optional[int] = None  # set per batch by StructuredSequenceGenerator
        self.prompt = None  # the next batch's (prefix tokens, per sentence per word given structure)
        self.given_replaced = 0
        self.last_state = None

    # ------------------------------------------------------------------ the prompt
    def set_prompt(self, prefix_tokens: Optional[torch.Tensor], given: Optional[Sequence] = None) -> None:
        """The next batch's forced prefix (bsz, P) (pad-padded; ``None``: no prompt) and, per sentence,
        its words' structure (None, or a list with one entry per prompt word, None where the model
        chooses): SiPE pair indices (:data:`~sipe_fairseq.hexatag.constrained.PAIRS`), GiLT (heads, dependents)."""
        self.prompt = None if prefix_tokens is None else (prefix_tokens, given)

    def prompt_words(self, tokens: torch.Tensor) -> List[int]:
        """Positions (0-based) of the prompt tokens that start words, by the generation rule."""
        return [p for p in range(len(tokens)) if p == 0 or bool(self.starts_word[int(tokens[p])])]

    def set_prompt_from_sample(self, prompt: Optional[torch.Tensor], sample: dict, bos: int) -> None:
        """The prompt keeps the structure the sample brings: SiPE the ``hexatag_lm`` tags aligned with
        ``src_tokens`` (a word's pair read at its first subword), GiLT ``sample["prompt_arcs"]``."""
        if prompt is None:
            return self.set_prompt(None)
        if self.structure == "arcs":
            arcs = sample.get("prompt_arcs")
            given = None if arcs is None else [None if a is None else [(sorted(set(h)), sorted(set(d))) for h, d in a]
                                               for a in arcs]
            return self.set_prompt(prompt, given)
        net = sample["net_input"]
        if "src_terminals" not in net:
            return self.set_prompt(prompt)
        src = net["src_tokens"]
        off = 1 if bool(src[:, 0].eq(bos).all()) else 0
        given = []
        for r in range(prompt.size(0)):
            toks = prompt[r][prompt[r].ne(self.dictionary.pad())]
            terms = net["src_terminals"][r, off:off + len(toks)].tolist()
            nts = net["src_nonterminals"][r, off:off + len(toks)].tolist()
            given.append([pair_of_ids(terms[p], nts[p]) if p < len(terms) else None for p in self.prompt_words(toks)])
        self.set_prompt(prompt, given)

    # ------------------------------------------------------------------ state
    def _begin(self, rows: int, device, incremental_state) -> dict:
        width = (self.max_len or self.inner.max_positions() or 1024) + 2
        policy = policy_for(self.model, self.options)
        prompt_len = torch.zeros(rows, dtype=torch.long)
        given = [None] * rows
        if self.prompt is not None:
            prefix, per_sentence = self.prompt
            if rows % prefix.size(0):
                raise ValueError(f"{rows} hypothesis rows for a prompt batch of {prefix.size(0)}")
            beam = rows // prefix.size(0)
            prompt_len = prefix.ne(self.dictionary.pad()).sum(1).repeat_interleave(beam).cpu()
            width = max(width, prefix.size(1) + 2)
            if per_sentence is not None:
                given = [per_sentence[r // beam] for r in range(rows)]
        if self.structure == "hexatags":  # pair indices, -1 where the model chooses
            given = [None if g is None else [-1 if p is None else p for p in g] for g in given]
        policy.begin(rows, width, width, given, state=incremental_state)
        return {"policy": policy, "prompt_len": prompt_len, "words": torch.zeros(rows, dtype=torch.long),
                "start": torch.zeros(rows, width, dtype=torch.bool), "origin": torch.zeros(rows, width, dtype=torch.long),
                "cost": torch.zeros(rows, width, dtype=torch.float64)}

    def get_state(self, incremental_state) -> Optional[dict]:
        return self.get_incremental_state(incremental_state, "structure")

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        st = self.get_state(incremental_state)
        if st is None:
            return
        st["policy"].reorder(new_order)
        cpu = new_order.cpu()
        for key in ("prompt_len", "words", "start", "origin", "cost"):
            st[key] = st[key][cpu]
        self.set_incremental_state(incremental_state, "structure", st)

    def reorder_incremental_state(self, incremental_state, new_order):
        self.reorder_incremental_state_scripting(incremental_state, new_order)

    def max_positions(self):
        return self.inner.max_positions()

    # ------------------------------------------------------------------ decoding
    def forward(self, prev_output_tokens, incremental_state=None, **unused):
        if incremental_state is None:
            raise ValueError("a structure-choosing decoder decodes step by step: pass incremental_state")
        tokens = prev_output_tokens
        rows, t = tokens.size(0), tokens.size(1) - 1
        st = self.get_state(incremental_state)
        if st is None:
            if t != 0:
                raise ValueError(f"a new incremental_state must start at position 0, got {t}")
            st = self._begin(rows, tokens.device, incremental_state)
        elif len(st["words"]) != rows:
            raise ValueError(f"state holds {len(st['words'])} rows, got {rows}")
        policy = st["policy"]
        new = tokens[:, t].cpu()
        starts = torch.zeros(rows, dtype=torch.bool)
        if t > 0:
            starts = (self.starts_word.cpu()[new] | (t == 1)) & new.ne(self.eos) & new.ne(self.dictionary.pad())
            self._choose(st, starts.nonzero().squeeze(1), t, tokens)
        lp = policy.step(t, tokens, starts)
        self.set_incremental_state(incremental_state, "structure", st)
        self.last_state = incremental_state
        excluded = policy.generation_mask(t, self.max_len, st["prompt_len"], self.starts_word)
        if not self.continue_word:  # the prompt's words stay whole: the first generated token starts a word
            first = (st["prompt_len"] > 0) & (t == st["prompt_len"])
            excluded[first] |= ~self.starts_word.cpu() & ~F.one_hot(torch.tensor(self.eos), len(self.dictionary)).bool()
        return lp[:, None].to(self.inner_dtype()), {"attn": [None], "excluded": excluded[:, None].to(tokens.device)}

    def inner_dtype(self):
        weight = getattr(self.inner, "embed_tokens", None)
        return weight.weight.dtype if weight is not None else torch.float32

    def _choose(self, st: dict, rows: torch.Tensor, t: int, tokens: torch.Tensor) -> None:
        """Structure for the words that start at input ``t`` in ``rows``."""
        if not len(rows):
            return
        policy = st["policy"]
        words = st["words"][rows] + 1
        in_prompt = t <= st["prompt_len"][rows]
        has, ok = policy.accept_given(rows, words)
        forced = ok & in_prompt
        self.given_replaced += int((has & ~ok & in_prompt).sum())
        for mask, mode in ((forced, FORCED), (~forced, SAMPLE if self.sample_structure else GREEDY)):
            sub = rows[mask]
            if not len(sub):
                continue
            limits = None
            if self.structure == "hexatags" and self.options.constrained:
                left = None if self.max_len is None else (self.max_len - t) * torch.ones(len(sub), dtype=torch.long)
                limits = {"words_left": None if left is None else left.clamp(min=0), "keep_open": in_prompt[mask]}
            parent, cost, payload = policy.expand(sub, words[mask], t, tokens[sub.to(tokens.device), : t + 1], mode, limits)
            policy.apply(sub, payload, torch.arange(len(sub)), t)
            st["cost"][sub, words[mask] - 1] = cost
            st["origin"][sub, words[mask] - 1] = PROMPT if mode == FORCED else MODEL
        st["words"][rows] = words
        st["start"][rows, t] = True

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        lprobs = F.log_softmax(net_output[0].float() if net_output[0].dtype == torch.half else net_output[0], -1)
        excluded = (net_output[1] or {}).get("excluded")
        if excluded is not None:
            lprobs = lprobs.masked_fill(excluded, -math.inf)
        return lprobs if log_probs else lprobs.exp()

    # ------------------------------------------------------------------ results
    def row_result(self, incremental_state, row: int, length: int) -> dict:
        """What a finished hypothesis of ``row`` (``length`` tokens before ``</s>``) gets attached."""
        st = self.get_state(incremental_state)
        starts = [p - 1 for p in range(1, length + 1) if bool(st["start"][row, p])]
        n = len(starts)
        policy = st["policy"]
        origin = ["prompt" if int(o) == PROMPT else "model" for o in st["origin"][row, :n].tolist()]
        costs = st["cost"][row, :n].tolist()
        if self.structure == "hexatags":
            tags = policy.result(row, n)["tags"]
            return {"word_starts": starts, "tags": tags, "tag_origin": origin, "tag_logprobs": costs,
                    "heads": decode(tags) if tags and is_valid(tags) else None}
        arcs = [(list(h), list(d)) for h, d in policy.arcs[row][:n]]
        counts = policy.counts[row, :n].tolist()
        count_lp = policy.count_lp[row, :n].tolist()
        return {"word_starts": starts, "arcs": arcs, "arc_origin": origin, "arc_counts": counts,
                "arc_count_logprobs": count_lp}

    def output_lines(self, hypo: dict, dictionary) -> List[Tuple[str, str]]:
        """``(kind, text)`` lines logged for a finished hypothesis (``KIND-<id>\\ttext``)."""
        words = hypothesis_words(hypo, dictionary)
        if self.structure == "arcs":
            return [("ARCS", format_arcs(words, hypo))] + [("GRAPH", r) for r in graph_rows(words, hypo)]
        tags, tree = format_tags_and_tree(words, hypo)
        return [("TAGS", tags), ("TREE", tree)]


class StructureChoosingLM(FairseqLanguageModel):
    """A decoder LM seen by fairseq's generator as an incremental decoder that chooses its structure."""

    def __init__(self, model, dictionary, **kwargs):
        super().__init__(StructureChoosingDecoder(model, dictionary, **kwargs))

    def forward(self, src_tokens, **kwargs):
        return self.decoder(src_tokens, **kwargs)

    def max_positions(self):
        return self.decoder.max_positions()


def refuse_non_finite(generator: SequenceGenerator) -> SequenceGenerator:
    """``generator`` (fairseq's, over any model) raising :class:`~sipe_fairseq.hexatag.errors.NonFiniteScoreError`
    at the first step whose next-token log-probabilities hold a NaN or ``+inf`` (finite weights that overflow in
    the forward pass). fairseq turns NaN into ``-inf`` and never finishes a hypothesis whose score is ``-inf``, so
    such a model ran to the length limit and stopped on ``AssertionError: step < max_len``. Idempotent; returns
    ``generator``."""
    ensemble = generator.model
    if getattr(ensemble, "refuses_non_finite", False):
        return generator
    forward_decoder = ensemble.forward_decoder

    def checked(tokens, *args, **kwargs):
        lprobs, attn = forward_decoder(tokens, *args, **kwargs)
        bad = torch.isnan(lprobs) | torch.isposinf(lprobs)
        if bool(bad.any()):
            step = tokens.size(1) - 1
            what = (f"generation step {step}: a next-token log-probability is {float(lprobs[bad][0])} (a non-finite "
                    "score: the model's forward pass overflows; nothing is written)")
            raise NonFiniteScoreError(what, None, "generation", f"at {what}")
        return lprobs, attn

    ensemble.forward_decoder = checked
    ensemble.refuses_non_finite = True
    return generator


class StructuredSequenceGenerator(SequenceGenerator):
    """fairseq's generator over :class:`StructureChoosingLM` models: passes each batch's length limit
    to the wrappers, resets their prompt after the batch and attaches
    :meth:`~StructureChoosingDecoder.row_result` to every finished hypothesis; a non-finite next-token
    log-probability is refused (:func:`refuse_non_finite`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        refuse_non_finite(self)

    def wrappers(self) -> List[StructureChoosingDecoder]:
        return [m.decoder for m in self.model.models if isinstance(getattr(m, "decoder", None), StructureChoosingDecoder)]

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        """``--max-len-b`` counts the tokens generated after the prompt (fairseq's own limit counts the
        forced prompt too, which cut long prompts); a prompt with no room left in the model's positions
        is refused, naming the sample."""
        src_len = sample["net_input"]["src_tokens"].size(1)
        prompt = 0 if prefix_tokens is None else int(prefix_tokens.ne(self.pad).sum(1).max())
        if prompt and prompt + 1 > self.max_len - 1:
            ids = sample.get("id")
            which = f"sample {int(ids[0])}" if ids is not None and len(ids) == 1 else "a prompt of this batch"
            raise ValueError(f"generation: {which} is {prompt} tokens; the model's {self.max_len} positions leave no "
                             "room for a continuation (prompts are never cut)")
        max_len = min(prompt + int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        saved, self.max_len_a, self.max_len_b = (self.max_len_a, self.max_len_b), 0, max_len
        for w in self.wrappers():
            w.max_len = max_len
        try:
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        finally:
            self.max_len_a, self.max_len_b = saved
            for w in self.wrappers():  # a prompt is for one batch
                w.prompt = None

    def finalize_hypos(self, step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn,
                       src_lengths, max_len):
        wrappers = self.wrappers()
        before = [len(f) for f in finalized]
        state = wrappers[0].last_state if wrappers else None
        toks = tokens.index_select(0, bbsz_idx)[:, 1:step + 2].clone()
        toks[:, step] = self.eos
        out = super().finalize_hypos(step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size, attn,
                                     src_lengths, max_len)
        if state is None:
            return out
        used = set()
        for sent, f in enumerate(finalized):
            for entry in f[before[sent]:]:
                for i in range(len(bbsz_idx)):  # the row that produced it: same tokens and score
                    if i not in used and torch.equal(toks[i], entry["tokens"]) and float(eos_scores[i]) == float(entry["score"]):
                        used.add(i)
                        entry.update(wrappers[0].row_result(state, int(bbsz_idx[i]), step))
                        break
        return out


def wrap_for_generation(models, dictionary, placement: str, sample_structure: bool, constrained: bool = True,
                        use_cache: bool = True, continue_word: bool = False):
    """Each model that reads structure wrapped in :class:`StructureChoosingLM`; a plain LM unchanged.
    Returns ``(models, any_wrapped)``."""
    options = StructureOptions(placement=placement, constrained=constrained, use_cache=use_cache)
    out = [m if structure_of(m) == "none" else
           StructureChoosingLM(m, dictionary, options=options, sample_structure=sample_structure, continue_word=continue_word)
           for m in models]
    return out, any(isinstance(m, StructureChoosingLM) for m in out)


# ---------------------------------------------------------------------- text forms
def format_tags_and_tree(words: List[str], hypo: dict) -> List[str]:
    """``word/terminal,non-terminal`` per word (``*`` marks prompt tags) and the tree's heads."""
    tags = " ".join(f"{w}/{t},{n}{'*' if o == 'prompt' else ''}"
                    for w, (t, n), o in zip(words, hypo["tags"], hypo["tag_origin"]))
    heads = hypo["heads"]
    tree = " ".join(f"{i + 1}->{h}" for i, h in enumerate(heads)) if heads is not None else "(tags do not form one tree)"
    return [tags, tree]


def format_arcs(words: List[str], hypo: dict) -> str:
    """Per word ``word/h->d,...`` (heads, then dependents; ``-``: none; ``*``: the prompt's arcs)."""
    out = []
    for i, (w, (heads, deps), origin) in enumerate(zip(words, hypo["arcs"], hypo["arc_origin"]), 1):
        arcs = [f"{h}->{i}" for h in heads] + [f"{i}->{d}" for d in deps]
        out.append(f"{w}/{','.join(arcs) or '-'}{'*' if origin == 'prompt' else ''}")
    return " ".join(out)


def word_heads(arcs) -> List[List[int]]:
    """Per word, all its heads (0 = root), from the arcs as they arrived."""
    heads = [list(h) for h, _ in arcs]
    for i, (_, deps) in enumerate(arcs, 1):
        for d in deps:
            heads[d - 1].append(i)
    return [sorted(h) for h in heads]


def graph_columns(hypo: dict) -> dict:
    """The finished graph's CoNLL-U columns (per-word lists, keywords of
    :func:`~sipe_fairseq.hexatag.conllu_io.conllu_lines`): HEAD only for a word with exactly one head
    (DEPREL ``root``/``dep``), else ``_``; DEPS lists every head; MISC ``Heads=``, ``ArcCount=``
    (the count chosen when the word arrived) and ``ArcOrigin=model|prompt``."""
    all_heads = word_heads(hypo["arcs"])
    one = [h[0] if len(h) == 1 else None for h in all_heads]
    return {"heads": one, "deprels": [None if h is None else plain_deprels([h])[0] for h in one],
            "deps": ["|".join(f"{h}:{rel}" for h, rel in zip(heads, plain_deprels(heads))) for heads in all_heads],
            "misc": [f"Heads={len(heads)}|ArcCount={count}|ArcOrigin={origin}"
                     for heads, count, origin in zip(all_heads, hypo["arc_counts"], hypo["arc_origin"])]}


def graph_rows(words: List[str], hypo: dict) -> List[str]:
    """The finished graph as CoNLL-U rows, one per word (:func:`graph_columns`)."""
    return conllu_lines(words, **graph_columns(hypo))
