"""Task ``hexatag_tagging``: predict each word's hexatag pair from its subwords (a hexatagger).

Reads a ``sipe-preprocess`` directory: ``src_tokens`` are the subword ids of one sentence (with its
``</s>``), ``terminal_target``/``nonterminal_target`` the aligned tag streams (ids >= 5 on a word's
first subword, ``<notag>`` elsewhere; the criterion scores only the tagged positions).

Building a new model resolves ``sipe_tagger``'s ``--init-encoder``/``--encoder-arch`` (see
:meth:`~sipe_fairseq.models.sipe_tagger.SiPETaggerModel.prepare_encoder`); a model rebuilt from a
tagger checkpoint (``from_checkpoint``) does not read the init checkpoint again.
"""
import logging
import os
from dataclasses import dataclass, field

from fairseq.data import IdDataset, NestedDictionaryDataset, NumelDataset, NumSamplesDataset, RightPadDataset
from fairseq.tasks import FairseqTask, register_task

from ..data.tag_dictionary import TAG_KINDS
from ..models.sipe_tagger import SiPETaggerModel
from .sipe_data import EpochShuffledDataset, SiPEDataConfig, SiPEDataMixin, install_command_error_hook

logger = logging.getLogger(__name__)


@dataclass
class HexatagTaggingConfig(SiPEDataConfig):
    data: str = field(default="", metadata={"help": "a sipe-preprocess data directory"})
    max_positions: int = field(default=512, metadata={"help": "longest sentence in subwords (longer ones are skipped)"})
    seed: int = field(default=1, metadata={"help": "shuffling seed"})


@register_task("hexatag_tagging", dataclass=HexatagTaggingConfig)
class HexatagTaggingTask(SiPEDataMixin, FairseqTask):
    def __init__(self, cfg, dictionary, tag_dictionaries):
        super().__init__(cfg)
        self.dictionary = dictionary
        self.tag_dictionaries = tag_dictionaries

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        install_command_error_hook()  # replaces SiPEDataMixin.setup_task
        dictionary = cls.load_dictionary(os.path.join(cfg.data, "dict.txt"))  # a bad line: file and line
        tags = cls.load_tag_dictionaries(cfg.data, TAG_KINDS)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary, tags)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        tokens, streams = self.load_split_streams(self.cfg.data, split, self.dictionary, self.tag_dictionaries,
                                                  combine=combine)
        pad = self.dictionary.pad()
        tag_pad = self.tag_dictionaries["terminal"].pad()
        ds = NestedDictionaryDataset(
            {"id": IdDataset(),
             "net_input": {"src_tokens": RightPadDataset(tokens, pad), "src_lengths": NumelDataset(tokens, reduce=False)},
             **{f"{k}_target": RightPadDataset(streams[k], tag_pad) for k in TAG_KINDS},
             "nsentences": NumSamplesDataset(), "ntokens": NumelDataset(tokens, reduce=True)},
            sizes=[tokens.sizes])
        # training order: by size, ties shuffled per (seed, epoch) when the batches are made (resume-exact)
        self.datasets[split] = EpochShuffledDataset(ds, tokens.sizes) if split == "train" else ds
        logger.info(f"{split}: {len(tokens)} sentences")

    def build_model(self, cfg, from_checkpoint=False):
        init = None if from_checkpoint else SiPETaggerModel.prepare_encoder(cfg, self)
        model = super().build_model(cfg, from_checkpoint)
        if init is not None and init.state:
            model.load_encoder(init)
        return model

    def max_positions(self):
        return self.cfg.max_positions

    @property
    def dictionary_path(self) -> str:
        return os.path.join(self.cfg.data, "dict.txt")

    @property
    def source_dictionary(self):
        return self.dictionary

    @property
    def target_dictionary(self):
        return self.dictionary
