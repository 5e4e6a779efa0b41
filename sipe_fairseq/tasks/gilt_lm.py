"""Task ``gilt_lm``: causal LM over a ``sipe-preprocess`` directory with GiLT's gold graphs
(``{split}.arcs``), teacher-forced (docs/gilt-reference.md section 1).

A task of its own rather than a structure option on ``hexatag_lm``: the model inputs differ
(word-level graph tensors instead of per-position tags), blocks must hold whole sentences, and
context-window evaluation (which cuts sentences) does not apply; the tag streams are still loaded,
only to place the words (first subwords) in the token stream, so both tasks read the same directory.
"""
import logging
import os
from dataclasses import dataclass, field

import numpy as np
from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.models import ARCH_MODEL_NAME_REGISTRY
from fairseq.tasks import register_task
from omegaconf import open_dict

from ..checkpoints import gilt_init
from ..data.gilt.arc_streams import load_arc_stream
from ..data.gilt.gilt_dataset import WHOLE_SENTENCE_BREAK_MODES, GiltLMDataset
from ..data.gilt.graph_features import TWO_WAY_RULES
from ..data.settings import setting
from ..data.words import WORD_MARK
from ..hexatag.errors import OptionError
from .hexatag_lm import HexatagLanguageModelingTask, HexatagLMConfig

logger = logging.getLogger(__name__)

# Model options whose defaults became the authors' code (docs/gilt-reference.md): per model, the option whose
# absence from a checkpoint's saved configuration marks it as older, and the values it was trained with.
OLD_CHECKPOINT_VALUES = {
    "gilt_txl": ("gilt_embed_scale", {"gilt_embed_scale": "sqrt_d", "gilt_txl_biases": "layer"}),
    "gilt_transformer_lm": ("gilt_tables_lr_group", {"gilt_arc_input_order": "upper_first"}),
}


@dataclass
class GiltLMConfig(HexatagLMConfig):
    gilt_two_way_distance: ChoiceEnum(list(TWO_WAY_RULES)) = field(default=TWO_WAY_RULES[0], metadata={
        "help": "distance feature of two words u < w with arcs both ways: later-head (the authors' code: the arc "
                "w -> u alone sets the costs, w to u 10, u to w 1) or cheaper (both arcs count: 1 each way); the "
                "model records it for the structure engine"})


@register_task("gilt_lm", dataclass=GiltLMConfig)
class GiltLanguageModelingTask(HexatagLanguageModelingTask):
    """Samples of :class:`~sipe_fairseq.data.gilt.gilt_dataset.GiltLMDataset` (gold graph tensors in ``net_input``,
    gold arcs as ``gilt_head``/``gilt_dep`` targets)."""

    validates_arcs = True  # {split}.arcs checked at load with the tag streams (data/validate.py)

    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        if str(args.sample_break_mode) not in WHOLE_SENTENCE_BREAK_MODES:
            raise OptionError(f"--task gilt_lm needs whole sentences per block: --sample-break-mode "
                             f"{' | '.join(WHOLE_SENTENCE_BREAK_MODES)} (got {args.sample_break_mode})")
        super().__init__(args, dictionary, output_dictionary, targets)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch, combine, **kwargs)
        ds = self.datasets[split]
        paths = utils.split_paths(self.args.data)
        data_path = paths[(epoch - 1) % len(paths)]
        raw = data_utils.load_indexed_dataset(os.path.join(data_path, split), self.dictionary, self.args.dataset_impl)
        terminal = data_utils.load_indexed_dataset(os.path.join(data_path, f"{split}.terminal"), None, self.args.dataset_impl)
        report = self.validate_split(data_path, split, self.dictionary, self.tag_dictionaries)  # done once: cached
        arcs, n_words = load_arc_stream(data_path, split, raw, terminal, self.args.dataset_impl,
                                        check=not report.get("arcs_checked"))
        self.datasets[split] = GiltLMDataset(
            ds.dataset, ds.tag_blocks, ds.tag_pad, arcs, n_words, placement=ds.placement, src_vocab=ds.vocab,
            tgt_vocab=ds.tgt_vocab, add_eos_for_other_targets=ds.add_eos_for_other_targets, shuffle=ds.shuffle,
            targets=ds.targets, add_bos_token=ds.add_bos_token, fixed_pad_length=ds.fixed_pad_length, pad_to_bsz=ds.pad_to_bsz,
            two_way=self.two_way_distance)
        logger.info(f"{split}: {len(ds)} blocks with gold graphs ({int(n_words.sum())} words)")

    def build_model(self, cfg, from_checkpoint=False):
        """A new model with ``--gilt-init-from CKPT`` (``gilt_transformer_lm``) takes the checkpoint's
        architecture and weights (:mod:`sipe_fairseq.checkpoints.gilt_init`); a model rebuilt from its own
        checkpoint does not read it again."""
        if from_checkpoint:
            self._as_trained(cfg)
        path = "" if from_checkpoint else setting(cfg, "gilt_init_from", "")  # gilt_transformer_lm's only
        base = gilt_init.read_base(path) if path else None
        if base is not None:
            gilt_init.apply_architecture(cfg, base)
        model = super().build_model(cfg, from_checkpoint)
        if base is not None:
            gilt_init.copy_base(model, base, len(self.target_dictionary))
        model.decoder.two_way_distance = self.two_way_distance  # the graphs the engine builds use the same rule
        return model

    def _as_trained(self, cfg) -> None:
        """A checkpoint written before the authors' defaults (:data:`OLD_CHECKPOINT_VALUES`) gets the values
        it was trained with: fairseq fills options missing from a saved configuration with today's defaults,
        and ``--model-overrides`` cannot set them."""
        name = str(getattr(cfg, "_name", None) or getattr(cfg, "arch", None) or "")
        marker, values = OLD_CHECKPOINT_VALUES.get(ARCH_MODEL_NAME_REGISTRY.get(name, name), (None, {}))
        if marker is None or (marker in cfg if hasattr(cfg, "keys") else hasattr(cfg, marker)):
            return
        if hasattr(cfg, "keys"):
            with open_dict(cfg):
                for key, value in values.items():
                    cfg[key] = value
        else:
            for key, value in values.items():
                setattr(cfg, key, value)
        logger.warning(f"checkpoint of {name} from before the authors' defaults: built as it was trained, with "
                       + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in values.items())
                       + " (docs/gilt-reference.md); its graphs had --gilt-two-way-distance cheaper"
                       + ("" if self.two_way_distance == "cheaper" else ", this task's is " + self.two_way_distance))

    @property
    def two_way_distance(self) -> str:
        return str(self.args.gilt_two_way_distance)

    def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
        """fairseq's filter, but a block too long for the model in a split that may not skip it (a
        validation or test split without ``--skip-invalid-size-inputs-valid-test``) is one line
        (:class:`OptionError`, naming the split, the sentence, its length and both remedies) instead
        of fairseq's traceback: blocks hold whole sentences, which are never cut to fit. Training
        splits: fairseq skips such blocks with a warning."""
        if not ignore_invalid_inputs and isinstance(max_positions, int) and isinstance(dataset, GiltLMDataset):
            _, ignored = dataset.filter_indices_by_size(indices, max_positions)
            if len(ignored):
                raise OptionError(self._too_long(dataset, ignored, max_positions))
        return super().filter_indices_by_size(indices, dataset, max_positions, ignore_invalid_inputs)

    def _too_long(self, dataset, ignored, max_positions: int) -> str:
        split = next((name for name, ds in self.datasets.items() if ds is dataset), "?")
        sizes = np.asarray([dataset.size(int(i)) for i in ignored])
        block = int(ignored[int(np.argmin(ignored))])
        sentence = int(dataset.dataset.block_to_dataset_index[block][0])
        tokens = dataset.dataset.dataset[sentence]
        text = self.dictionary.string(tokens[tokens != self.dictionary.eos()])
        if WORD_MARK in text:  # sentencepiece pieces: words start at the mark
            text = text.replace(" ", "").replace(WORD_MARK, " ").strip()
        if len(text) > 60:
            text = text[:57].rstrip() + "..."
        # a block longer than the model's positions holds one sentence (whole-sentence break modes)
        longest = int(sizes.max())
        others = (f"; {len(ignored)} sentences of {split!r} are too long, the longest has {longest} tokens"
                  if len(ignored) > 1 else "")
        return (f"{os.path.join(utils.split_paths(self.args.data)[0], split)}: sentence {sentence} (\"{text}\") has "
                f"{dataset.size(block)} tokens, more than the model's {max_positions} positions (--tokens-per-sample "
                f"{self.args.tokens_per_sample}{others}). --task gilt_lm keeps sentences whole: raise --tokens-per-sample "
                f"to at least {longest}, or leave these sentences out with --skip-invalid-size-inputs-valid-test")

    # a block longer than the model's positions is left out whole, its tokens counted beside the perplexity
    no_window_reason = "a window would cut a sentence out of its graph"

    def eval_lm_dataloader(self, dataset, max_tokens=36000, batch_size=None, max_positions=None, num_shards=1,
                           shard_id=0, num_workers=1, data_buffer_size=10, context_window=0):
        if context_window > 0:
            raise ValueError("--task gilt_lm scores whole sentences: --context-window is not supported")
        return super().eval_lm_dataloader(dataset, max_tokens, batch_size, max_positions, num_shards, shard_id,
                                          num_workers, data_buffer_size, context_window=0)
