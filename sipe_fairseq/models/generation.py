"""Generation with structure the model chooses as it goes: what the model families share (issues 12, 13).

fairseq's :class:`~fairseq.sequence_generator.SequenceGenerator` (beam search, ``--sampling``, forced
prefixes) decodes a model wrapped in a :class:`StructureChoosingLM`, whose decoder (a
:class:`StructureChoosingDecoder`) keeps, per hypothesis row, the structure it chose for the row's
words next to the model's KV cache, and runs the model with it. One wrapper per family:

* SiPE (hexatag decoders): :class:`~.tag_generation.TagChoosingDecoder` chooses each word's tag pair;
* GiLT (``gilt_txl``): :class:`~.gilt_generation.ArcChoosingDecoder` chooses each word's arcs.

Shared here, one place each: word boundaries (a token whose piece starts with sentencepiece's U+2581
starts a word, and so does the first generated token: :meth:`StructureChoosingDecoder.starts_word_at`),
the prompt handed to the wrapper before a batch, the per-row state in ``incremental_state`` following
fairseq's ``reorder_incremental_state``, log-probabilities with excluded tokens at ``-inf`` (no
renormalisation), the generator that passes the length limit and attaches each family's results to
every finished hypothesis (:class:`StructuredSequenceGenerator`), the printed lines per hypothesis
(:meth:`StructureChoosingDecoder.output_lines`, ``TAGS-``/``TREE-`` or ``ARCS-``/``GRAPH-``) and the
dispatch on the model family (:func:`wrap_for_generation`).
"""
import logging
import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.models import FairseqIncrementalDecoder, FairseqLanguageModel
from fairseq.sequence_generator import SequenceGenerator

from ..data.preprocess import SPACE_MARK as WORD_MARK  # sentencepiece's word-start mark

logger = logging.getLogger(__name__)


def word_start_mask(dictionary) -> torch.Tensor:
    """(V,) bool: the symbols whose piece starts a word (U+2581)."""
    return torch.tensor([dictionary[i].startswith(WORD_MARK) for i in range(len(dictionary))], dtype=torch.bool)


def hypothesis_words(hypo: dict, dictionary) -> List[str]:
    """The words of a finished hypothesis (pieces joined at its ``word_starts``, U+2581 removed)."""
    pieces = [dictionary[int(t)] for t in hypo["tokens"]]
    bounds = hypo["word_starts"] + [len(pieces) - 1]
    return ["".join(pieces[a:b]).replace(WORD_MARK, "") or "_" for a, b in zip(bounds[:-1], bounds[1:])]


class StructureChoosingDecoder(FairseqIncrementalDecoder):
    """Base of the per-family wrappers (module docstring). A subclass implements ``forward`` (choose
    the structure of the words that start at the newest input position, run ``self.inner`` with it),
    :meth:`set_prompt_from_sample`, :meth:`row_result` and :meth:`output_lines`; its per-row state is
    one dict under :meth:`get_state`/:meth:`set_state`, reordered by :meth:`reorder_state`."""

    def __init__(self, inner, dictionary):
        super().__init__(dictionary)
        self.inner = inner
        self.register_buffer("starts_word", word_start_mask(dictionary), persistent=False)
        self.eos = dictionary.eos()
        self.max_len: Optional[int] = None  # set per batch by StructuredSequenceGenerator
        self.prompt = None  # the next batch's prompt, family-specific; reset after the batch
        self.given_replaced = 0  # prompt structure the wrapper could not keep (counted by the family)
        self.last_state = None  # the incremental_state of the latest step, read by finalize_hypos

    def starts_word_at(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B,) bool: whether the input at the newest position of ``tokens`` (B, T) starts a word."""
        pos = tokens.size(1) - 1
        return self.starts_word[tokens[:, pos]] | (pos == 1)

    def get_state(self, incremental_state) -> Optional[dict]:
        return self.get_incremental_state(incremental_state, "structure")

    def set_state(self, incremental_state, state: dict) -> None:
        self.set_incremental_state(incremental_state, "structure", state)
        self.last_state = incremental_state

    def reorder_state(self, state: dict, new_order: torch.Tensor) -> dict:
        """The state of rows ``new_order`` (default: every value a tensor with rows first)."""
        return {k: v.index_select(0, new_order) for k, v in state.items()}

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        lprobs = F.log_softmax(net_output[0].float() if net_output[0].dtype == torch.half else net_output[0], -1)
        excluded = (net_output[1] or {}).get("excluded")
        if excluded is not None:
            lprobs = lprobs.masked_fill(excluded, -math.inf)
        return lprobs if log_probs else lprobs.exp()

    def reorder_incremental_state_scripting(self, incremental_state, new_order):
        st = self.get_state(incremental_state)
        if st is not None:
            self.set_incremental_state(incremental_state, "structure", self.reorder_state(st, new_order))
        self.inner.reorder_incremental_state_scripting(incremental_state, new_order)

    def reorder_incremental_state(self, incremental_state, new_order):
        self.reorder_incremental_state_scripting(incremental_state, new_order)

    def max_positions(self):
        return self.inner.max_positions()

    # ------------------------------------------------------------------ per family
    def set_prompt_from_sample(self, prompt: Optional[torch.Tensor], sample: dict, bos: int) -> None:
        """The next batch's forced prefix (bsz, P) and whatever structure ``sample`` brings for it."""
        raise NotImplementedError

    def row_result(self, incremental_state, row: int, length: int) -> dict:
        """What a finished hypothesis of ``row`` gets attached (its ``length`` tokens before ``</s>``)."""
        raise NotImplementedError

    def output_lines(self, hypo: dict, dictionary) -> List[Tuple[str, str]]:
        """``(kind, text)`` lines printed for a finished hypothesis (``KIND-<id>\\ttext``)."""
        raise NotImplementedError


class StructureChoosingLM(FairseqLanguageModel):
    """A decoder LM seen by fairseq's generator as an incremental decoder that chooses its structure;
    ``decoder_cls``: the family's :class:`StructureChoosingDecoder`."""

    decoder_cls = StructureChoosingDecoder

    def __init__(self, model, dictionary, **kwargs):
        super().__init__(self.decoder_cls(getattr(model, "decoder", model), dictionary, **kwargs))

    def forward(self, src_tokens, **kwargs):
        return self.decoder(src_tokens, **kwargs)

    def max_positions(self):
        return self.decoder.max_positions()


class StructuredSequenceGenerator(SequenceGenerator):
    """fairseq's generator over :class:`StructureChoosingLM` models: passes each batch's length limit
    to the wrappers, resets their prompt after the batch and attaches :meth:`~StructureChoosingDecoder.row_result`
    to every finished hypothesis."""

    def wrappers(self) -> List[StructureChoosingDecoder]:
        return [m.decoder for m in self.model.models if isinstance(getattr(m, "decoder", None), StructureChoosingDecoder)]

    def _generate(self, sample, prefix_tokens=None, constraints=None, bos_token=None):
        src_len = sample["net_input"]["src_tokens"].size(1)
        max_len = min(int(self.max_len_a * src_len + self.max_len_b), self.max_len - 1)
        for w in self.wrappers():
            w.max_len = max_len
        try:
            return super()._generate(sample, prefix_tokens, constraints, bos_token)
        finally:
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
                        use_cache: bool = True):
    """Each model wrapped for its family: a GiLT model (``gilt_txl``, ``gilt_transformer_lm``) in
    :class:`~.gilt_generation.ArcChoosingLM`, a tagged decoder in :class:`~.tag_generation.TagChoosingLM`;
    a plain LM unchanged. ``placement``: the task's ``--tag-head-placement`` (SiPE); ``sample_structure``:
    sample the tags / arc counts (else argmax); ``constrained``, ``use_cache``: SiPE's options.
    Returns ``(models, any_wrapped)``."""
    from .gilt_generation import ArcChoosingLM
    from .gilt_lm import is_gilt
    from .tag_generation import TagChoosingLM, needs_tags

    out = []
    for m in models:
        if is_gilt(m):
            out.append(ArcChoosingLM(m, dictionary, sample_counts=sample_structure))
        elif needs_tags(m):
            out.append(TagChoosingLM(m, dictionary, placement=placement, sample_tags=sample_structure,
                                     constrained=constrained, use_cache=use_cache))
        else:
            out.append(m)
    return out, any(isinstance(m, StructureChoosingLM) for m in out)
