"""Hexatag streams under masked-LM noise (paper appendix A.1).

fairseq's :class:`~fairseq.data.MaskTokensDataset` selects positions per (seed, epoch, index);
its target view holds the original token at every selected position and pad elsewhere. The tag
streams read that same selection, so they stay deterministic per seed and epoch:

* input view: a selected position's tags become ``<notag>`` (m_p = 0: the tag embedding is masked
  with the token, also where the token was kept or randomly replaced, so no prior leaks);
* target view: the tag heads predict (tau_p, nu_p) at selected positions that carry a tag (first
  subwords), pad everywhere else.

``--mask-whole-words`` hands fairseq a per-vocabulary word-start mask
(:func:`~sipe_fairseq.data.words.word_start_mask`: sentencepiece's U+2581 mark);
:func:`check_word_starts` compares it with the tag streams' word starts over a whole split, so any
disagreement (e.g. an ``<unk>`` continuation piece) is counted.
"""
import os

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset
from fairseq.data.indexed_dataset import MMapIndexedDataset, data_file_path, index_file_path

from .tag_dictionary import FIRST_TAG_ID, NOTAG_ID


class MaskedTagDataset(BaseWrapperDataset):
    """``dataset``: a tag block aligned with the tokens; ``masked_targets``: the masked-LM target
    dataset (``return_masked_tokens=True``) of the same blocks."""

    MODES = ("input", "target")

    def __init__(self, dataset, masked_targets, token_pad: int, tag_pad: int, mode: str):
        super().__init__(dataset)
        if mode not in self.MODES:
            raise ValueError(f"mode must be one of {self.MODES}, got {mode!r}")
        self.masked_targets, self.token_pad, self.tag_pad, self.mode = masked_targets, token_pad, tag_pad, mode

    def __getitem__(self, index):
        tags = self.dataset[index]
        selected = self.masked_targets[index].ne(self.token_pad)
        if selected.shape != tags.shape:
            raise ValueError(f"block {index}: {len(tags)} tags but {len(selected)} tokens (streams out of step)")
        if self.mode == "input":
            return tags.masked_fill(selected, NOTAG_ID)
        return torch.where(selected & (tags >= FIRST_TAG_ID), tags, torch.full_like(tags, self.tag_pad))

    @property
    def can_reuse_epoch_itr_across_epochs(self):
        return True  # only the noise changes with the epoch, not the sizes

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        if hasattr(self.masked_targets, "set_epoch"):
            self.masked_targets.set_epoch(epoch)


def _flat(prefix: str) -> np.ndarray:
    return np.memmap(data_file_path(prefix), dtype=MMapIndexedDataset.Index(index_file_path(prefix)).dtype, mode="r")


def check_word_starts(starts: torch.Tensor, data_path: str, split: str, dictionary) -> dict:
    """Compare the vocabulary's word starts with the tag stream's (tags sit on first subwords) over a
    whole split. Returns counts and, if they differ, the first differing sentence and token."""
    tokens = _flat(os.path.join(data_path, split)).astype(np.int64)
    tagged = _flat(os.path.join(data_path, f"{split}.terminal")) >= FIRST_TAG_ID
    real = tokens != dictionary.eos()
    vocab = starts.numpy().astype(bool)[tokens]
    bad = np.flatnonzero(real & (vocab != tagged))
    out = {"positions": int(real.sum()), "words": int(tagged.sum()), "differ": int(bad.size)}
    if bad.size:
        index = MMapIndexedDataset.Index(index_file_path(os.path.join(data_path, split)))
        sizes = np.array(index.sizes, dtype=np.int64)  # a copy: the index's buffer closes with it
        del index
        starts_at = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        pos = int(bad[0])
        sent = int(np.searchsorted(starts_at, pos, side="right") - 1)
        out["first"] = {"sentence": sent, "token": pos - int(starts_at[sent]), "piece": dictionary[int(tokens[pos])],
                        "tag_stream_says": "word start" if tagged[pos] else "continuation"}
    return out
