"""Hexatag streams under masked-LM noise (paper appendix A.1).

fairseq's :class:`~fairseq.data.MaskTokensDataset` selects positions per (seed, epoch, index);
its target view holds the original token at every selected position and pad elsewhere. The tag
streams read that same selection, so they stay deterministic per seed and epoch:

* input view: a selected position's tags become ``<notag>`` (m_p = 0: the tag embedding is masked
  with the token, also where the token was kept or randomly replaced, so no prior leaks);
* target view: the tag heads predict (tau_p, nu_p) at selected positions that carry a tag (first
  subwords), pad everywhere else.
"""
import torch
from fairseq.data import BaseWrapperDataset

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
