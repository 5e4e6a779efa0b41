"""Task ``hexatag_mlm``: fairseq's ``masked_lm`` plus aligned hexatag (and deprel) streams.

Tags go through the same blocking and ``<s>`` prepending as the tokens, then through the token
mask (see :mod:`sipe_fairseq.data.mlm_dataset`): ``net_input`` gets ``src_terminals``,
``src_nonterminals`` (and ``src_deprels`` with ``--deprel-stream``) with m_p = 0 at masked
positions; the sample gets ``terminal_target``/``nonterminal_target`` at masked first subwords.
"""
import logging
import os
from dataclasses import dataclass, field

import numpy as np
from fairseq import utils
from fairseq.data import (
    IdDataset, MaskTokensDataset, NestedDictionaryDataset, NumelDataset, NumSamplesDataset, PrependTokenDataset,
    RightPadDataset, SortDataset, TokenBlockDataset, data_utils,
)
from fairseq.tasks import register_task
from fairseq.tasks.masked_lm import MaskedLMConfig, MaskedLMTask

from ..data.lm_dataset import input_key
from ..data.mlm_dataset import MaskedTagDataset, check_word_starts
from ..data.tag_dictionary import NOTAG_ID, TAG_KINDS
from ..data.validate import expectations
from ..data.words import word_start_mask
from .sipe_data import SiPEDataConfig, SiPEDataMixin

logger = logging.getLogger(__name__)
FAIRSEQ_LOGGER = "fairseq.tasks.masked_lm"  # the logger of fairseq's own dictionary line


@dataclass
class HexatagMLMConfig(MaskedLMConfig, SiPEDataConfig):
    deprel_stream: bool = field(
        default=False, metadata={"help": "also load the deprel stream (data from sipe-preprocess --deprel) as "
                                         "src_deprels, for the DEPREL input strategies (Table 12)"})


@register_task("hexatag_mlm", dataclass=HexatagMLMConfig)
class HexatagMaskedLMTask(SiPEDataMixin, MaskedLMTask):
    """Masked LM over a ``sipe-preprocess`` directory with the tags masked alongside the tokens."""

    def __init__(self, cfg, dictionary=None):
        super().__init__(cfg, dictionary)
        path = utils.split_paths(cfg.data)[0]
        self.kinds = TAG_KINDS + (("deprel",) if cfg.deprel_stream else ())
        self.tag_dictionaries = self.load_tag_dictionaries(path, self.kinds)
        self.deprel_dictionary = self.tag_dictionaries.get("deprel")

    @classmethod
    def load_dict(cls, cfg):
        """``masked_lm``'s, with ``dict.txt`` read by :meth:`load_dictionary` (a malformed line: one line naming
        the file and the line)."""
        dictionary = cls.load_dictionary(os.path.join(utils.split_paths(cfg.data)[0], "dict.txt"))
        logging.getLogger(FAIRSEQ_LOGGER).info(f"dictionary: {len(dictionary)} types")  # where fairseq logged it
        return dictionary

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if self.cfg.shorten_method != "none":
            raise ValueError("--shorten-method is not supported by hexatag_mlm (it would cut tokens and tags apart)")
        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        raw, streams = self.load_split_streams(data_path, split, self.source_dictionary, self.tag_dictionaries,
                                               combine=combine)
        tag_pad = self.tag_dictionaries["terminal"].pad()

        def blocks(ds, pad, eos, bos):
            block = TokenBlockDataset(ds, ds.sizes, self.cfg.tokens_per_sample - 1, pad=pad, eos=eos,
                                      break_mode=self.cfg.sample_break_mode)
            return PrependTokenDataset(block, bos)

        d = self.source_dictionary
        whole_words = self.whole_word_mask(data_path, split) if self.cfg.mask_whole_words else None
        tokens = blocks(raw, d.pad(), d.eos(), d.bos())
        src, tgt = MaskTokensDataset.apply_mask(
            tokens, d, pad_idx=d.pad(), mask_idx=self.mask_idx, seed=self.cfg.seed, mask_prob=self.cfg.mask_prob,
            leave_unmasked_prob=self.cfg.leave_unmasked_prob, random_token_prob=self.cfg.random_token_prob,
            freq_weighted_replacement=self.cfg.freq_weighted_replacement, mask_whole_words=whole_words,
            mask_multiple_length=self.cfg.mask_multiple_length, mask_stdev=self.cfg.mask_stdev,
            skip_masking=self.cfg.skip_masking)
        net_input = {"src_tokens": RightPadDataset(src, pad_idx=d.pad()), "src_lengths": NumelDataset(src, reduce=False)}
        sample = {}
        for kind, ds in streams.items():
            tag_blocks = blocks(ds, tag_pad, NOTAG_ID, NOTAG_ID)
            net_input[input_key(kind)] = RightPadDataset(MaskedTagDataset(tag_blocks, tgt, d.pad(), tag_pad, "input"), tag_pad)
            if kind in TAG_KINDS:
                sample[f"{kind}_target"] = RightPadDataset(MaskedTagDataset(tag_blocks, tgt, d.pad(), tag_pad, "target"), tag_pad)
        dataset = NestedDictionaryDataset({
            "id": IdDataset(), "net_input": net_input, "target": RightPadDataset(tgt, pad_idx=d.pad()),
            "nsentences": NumSamplesDataset(), "ntokens": NumelDataset(src, reduce=True), **sample,
        }, sizes=[src.sizes])
        with data_utils.numpy_seed(self.cfg.seed):
            shuffle = np.random.permutation(len(src))
        self.datasets[split] = SortDataset(dataset, sort_order=[shuffle, src.sizes])
        logger.info(f"{split}: {len(src)} blocks with streams {list(streams)} (tags masked with their tokens)")

    def whole_word_mask(self, data_path, split):
        """``--mask-whole-words``: word starts from the vocabulary (sentencepiece's U+2581; every token
        for ``--no-split`` data, read from manifest.json), checked against the split's tag streams."""
        starts = word_start_mask(self.source_dictionary, specials=True, no_split=expectations(data_path, split).no_split).byte()
        check = check_word_starts(starts, data_path, split, self.source_dictionary)
        if check["differ"]:
            logger.warning(f"{split}: --mask-whole-words: at {check['differ']} of {check['positions']} positions the "
                           f"vocabulary's word starts differ from the tag streams' (first: {check['first']}); fairseq "
                           "masks by the vocabulary there")
        else:
            logger.info(f"{split}: --mask-whole-words over {check['words']} words; word starts agree with the tag "
                        f"streams at all {check['positions']} positions")
        return starts
