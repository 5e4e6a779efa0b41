"""Task ``hexatag_lm``: fairseq's ``language_modeling`` plus aligned hexatag streams."""
import logging
import os
from dataclasses import dataclass, field

from fairseq import utils
from fairseq.data import TokenBlockDataset, data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from ..data.lm_dataset import TAG_KINDS, HexatagContextWindowDataset, HexatagLMDataset
from ..data.tag_dictionary import NOTAG, load_tag_dictionary
from ..data.tag_streams import load_tag_streams

logger = logging.getLogger(__name__)


@dataclass
class HexatagLMConfig(LanguageModelingConfig):
    tag_head_placement: ChoiceEnum(["first_subword", "last_subword"]) = field(
        default="first_subword", metadata={"help": "where the tag heads predict the next word's tags: at the previous "
                                                   "word's first subword (paper A.1) or just before the word (most context)"})


@register_task("hexatag_lm", dataclass=HexatagLMConfig)
class HexatagLanguageModelingTask(LanguageModelingTask):
    """Causal LM over a ``sipe-preprocess`` directory; puts ``src_terminals``/``src_nonterminals``
    into ``net_input`` and ``terminal_target``/``nonterminal_target`` into the sample."""

    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        super().__init__(args, dictionary, output_dictionary, targets)
        path = utils.split_paths(args.data)[0]
        self.tag_dictionaries = {k: load_tag_dictionary(os.path.join(path, f"dict.{k}.txt")) for k in TAG_KINDS}

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch, combine, **kwargs)
        if self.args.shorten_method != "none":
            raise ValueError("--shorten-method is not supported by hexatag_lm (it would cut tokens and tags apart)")
        tokens = self.datasets[split]
        paths = utils.split_paths(self.args.data)
        data_path = paths[(epoch - 1) % len(paths)]
        raw = data_utils.load_indexed_dataset(os.path.join(data_path, split), self.dictionary, self.args.dataset_impl, combine=combine)
        streams = load_tag_streams(data_path, split, raw, TAG_KINDS, self.args.dataset_impl)
        tag_pad = self.tag_dictionaries["terminal"].pad()
        blocks = {
            # the value inserted before a block's first sentence is <notag>, as the stream stores
            kind: TokenBlockDataset(ds, ds.sizes, self.args.tokens_per_sample, pad=tag_pad,
                                    eos=self.tag_dictionaries[kind].index(NOTAG), break_mode=self.args.sample_break_mode,
                                    include_targets=True)
            for kind, ds in streams.items()
        }
        self.datasets[split] = HexatagLMDataset(
            tokens.dataset, blocks, tag_pad, self.args.tag_head_placement,
            src_vocab=tokens.vocab, tgt_vocab=tokens.tgt_vocab, add_eos_for_other_targets=tokens.add_eos_for_other_targets,
            shuffle=tokens.shuffle, targets=tokens.targets, add_bos_token=tokens.add_bos_token,
            fixed_pad_length=tokens.fixed_pad_length, pad_to_bsz=tokens.pad_to_bsz)
        logger.info(f"{split}: {len(tokens)} blocks with hexatag streams {list(streams)}")

    def get_batch_iterator(self, dataset, *args, required_batch_size_multiple=1, **kwargs):
        # fairseq's batch_by_size drops the last partial batch when the multiple is > 1 (fairseq
        # issue #5036; default 8): every evaluated block must count, so only training keeps it.
        if required_batch_size_multiple > 1 and dataset is not self.datasets.get("train"):
            logger.info(f"evaluation batches: --required-batch-size-multiple {required_batch_size_multiple} -> 1 "
                        "(fairseq would drop the last partial batch)")
            required_batch_size_multiple = 1
        return super().get_batch_iterator(dataset, *args, required_batch_size_multiple=required_batch_size_multiple, **kwargs)

    def build_dataset_for_inference(self, src_tokens, src_lengths, **kwargs):
        raise NotImplementedError("hexatag_lm scores tagged data: use sipe_fairseq.eval (tags come from a parser)")

    def eval_lm_dataloader(self, dataset, max_tokens=36000, batch_size=None, max_positions=None, num_shards=1,
                           shard_id=0, num_workers=1, data_buffer_size=10, context_window=0):
        if context_window > 0:
            dataset = HexatagContextWindowDataset(dataset, self.args.tokens_per_sample, context_window,
                                                  self.source_dictionary.pad(), dataset.tag_pad)
        return super().eval_lm_dataloader(dataset, max_tokens, batch_size, max_positions, num_shards, shard_id,
                                          num_workers, data_buffer_size, context_window=0)
