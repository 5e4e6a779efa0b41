"""Tag streams under a ``--tag-timing`` (:mod:`sipe_fairseq.hexatag.timing`): the tags each word's
first subword carries, per sentence, so that training, ``fairseq-eval-lm`` and every scorer feed a
decoder what the structure engine feeds it.

A sentence's streams hold the word-aligned pair at each word's first subword (``<notag>`` elsewhere,
and at a word the data leaves untagged: such a word carries nothing under any timing and keeps its
place). The heads' targets follow from the timed streams as they do from the paper's
(:func:`~.lm_dataset.tag_targets`): the heads at a word's anchor predict what that word carries.
The one exception is word 1's ``EOS`` under ``nt-delay``, a fixed start marker that no head
predicts (:func:`fixed_target_positions`).
"""
from typing import Tuple

import torch
from fairseq.data import BaseWrapperDataset

from ..hexatag import NONTERMINALS, TERMINALS
from ..hexatag.timing import check_timing, timed_pairs
from .tag_dictionary import FIRST_TAG_ID, NOTAG_ID

_CLASSES = (TERMINALS, NONTERMINALS)


def time_sentence_streams(terms: torch.Tensor, nts: torch.Tensor, timing: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """One sentence's (terminal, non-terminal) id streams (1-D, one id per token) -> the streams
    under ``timing``. ``paper`` returns them unchanged."""
    if check_timing(timing) == "paper":
        return terms, nts
    words = ((terms >= FIRST_TAG_ID) & (nts >= FIRST_TAG_ID)).nonzero().squeeze(1)
    if words.numel() == 0:
        return terms, nts
    pairs = [(TERMINALS[a - FIRST_TAG_ID], NONTERMINALS[b - FIRST_TAG_ID])
             for a, b in zip(terms[words].tolist(), nts[words].tolist())]
    out = (terms.clone(), nts.clone())
    for pos, unit in zip(words.tolist(), timed_pairs(pairs, timing)):
        for stream, tag, names in zip(out, unit, _CLASSES):
            stream[pos] = NOTAG_ID if tag is None else FIRST_TAG_ID + names.index(tag)
    return out


def sentence_start_inputs(tokens: torch.Tensor, starts) -> torch.Tensor:
    """bool, shaped like ``tokens``: the inputs after which a sentence starts, those equal to one of
    ``starts`` (the ids of ``</s>``, ``<s>``)."""
    out = torch.zeros_like(tokens, dtype=torch.bool)
    for s in starts:
        out |= tokens == s
    return out


def fixed_target_positions(src_tokens: torch.Tensor, starts, timing: str) -> torch.Tensor:
    """(T,) bool for one sample of input tokens: where the non-terminal head's target is a fixed start
    marker, not a choice (``nt-delay``: the sentence starts, the anchors of word 1; none otherwise)."""
    if timing == "nt-delay":
        return sentence_start_inputs(src_tokens, starts)
    return torch.zeros_like(src_tokens, dtype=torch.bool)


class TimedTagStream(BaseWrapperDataset):
    """The ``kind`` stream of a sentence-level pair of tag datasets under ``timing`` (before
    blocking, so that a sentence's words are shifted inside it and never across sentences)."""

    def __init__(self, terminals, nonterminals, kind: str, timing: str):
        super().__init__(terminals if kind == "terminal" else nonterminals)
        self.streams, self.index, self.timing = (terminals, nonterminals), int(kind != "terminal"), check_timing(timing)

    def __getitem__(self, i):
        return time_sentence_streams(self.streams[0][i], self.streams[1][i], self.timing)[self.index]


def timed_streams(streams: dict, timing: str) -> dict:
    """``{kind: stream}`` under ``timing`` (the same dict for ``paper``)."""
    if check_timing(timing) == "paper":
        return streams
    return {kind: TimedTagStream(streams["terminal"], streams["nonterminal"], kind, timing) for kind in streams}
