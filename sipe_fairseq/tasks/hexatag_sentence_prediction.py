"""Task ``hexatag_sentence_prediction``: fairseq's ``sentence_prediction`` plus aligned hexatags.

Reads a ``sipe-glue-preprocess`` directory (fairseq's GLUE layout plus tag streams, see
:mod:`sipe_fairseq.data.glue`) and puts ``src_terminals``/``src_nonterminals`` into ``net_input``,
aligned position by position with ``src_tokens``. Every token transformation of the parent task
is mirrored on the tags: ``--init-token`` and ``--separator-token`` get ``<notag>``, pair inputs
are concatenated in step (``s1 </s> s2 </s>`` with tags ``t1 <notag> t2 <notag>``), and
``--shorten-method`` cuts tokens and tags alike. The task is model-agnostic: it only adds the two
tag tensors to ``net_input``, the model decides what to do with them.

With ``glue.json`` present, ``--num-classes`` defaults to the task's and is checked, as is
``--regression-target``; and fairseq's ``sentence_prediction`` criterion is told to report the
task's GLUE metric (``--report-mcc`` for CoLA, ``--report-acc-and-f1`` for MRPC/QQP,
``--report-pearson-and-spearman`` for STS-B; accuracy is always logged for classification).

Encoders (the RoBERTa recipe): ``--init-token 0 --separator-token 2 --add-mask-symbol`` gives
``<s> s1 </s> </s> s2 </s>`` with tags ``<notag> t1 <notag> <notag> t2 <notag>`` (the ``<s>`` of
``hexatag_mlm`` blocks is ``<notag>`` too) and the masked-LM dictionary (dict.txt + ``<mask>``).
"""
import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
from fairseq.data import (
    ConcatSentencesDataset, IdDataset, NestedDictionaryDataset, NumelDataset, NumSamplesDataset,
    OffsetTokensDataset, PrependTokenDataset, RawLabelDataset, RightPadDataset, SortDataset, StripTokenDataset,
    data_utils,
)
from fairseq.data.shorten_dataset import maybe_shorten_dataset
from fairseq.tasks import register_task
from fairseq.tasks.sentence_prediction import SentencePredictionConfig, SentencePredictionTask
from omegaconf import II, OmegaConf, open_dict

from ..checkpoints.compat import allow_fairseq_checkpoint_globals
from ..data.glue import glue_task, read_glue_info
from ..data.lm_dataset import input_key
from ..data.tag_dictionary import NOTAG_ID, TAG_KINDS
from ..data.validate import read_stream
from .sipe_data import SiPEDataConfig, SiPEDataMixin, install_command_error_hook

logger = logging.getLogger(__name__)

allow_fairseq_checkpoint_globals()  # fine-tune (--restore-file), resume and evaluate fairseq checkpoints

REPORT_FLAGS = {"mcc": "report_mcc", "acc_and_f1": "report_acc_and_f1", "pearson_and_spearman": "report_pearson_and_spearman"}


@dataclass
class HexatagSentencePredictionConfig(SentencePredictionConfig, SiPEDataConfig):
    glue_task: Optional[str] = field(
        default=None, metadata={"help": "GLUE task name (cola, sst-2, mrpc, qqp, sts-b, mnli, qnli, rte, wnli): sets the "
                                        "metric the criterion reports; default: the task in DATA/glue.json"})
    add_mask_symbol: bool = field(
        default=False, metadata={"help": "append <mask> to the dictionary as fairseq's sentence_prediction does (masked-LM "
                                         "encoders); off for hexatag_lm decoders, whose dictionary has none"})
    # decoder configs read these (SiPEDecoderConfig: II("task.tokens_per_sample")); alias of --max-positions
    tokens_per_sample: int = II("task.max_positions")
    max_target_positions: Optional[int] = II("task.max_positions")


@register_task("hexatag_sentence_prediction", dataclass=HexatagSentencePredictionConfig)
class HexatagSentencePredictionTask(SiPEDataMixin, SentencePredictionTask):
    """Sentence (pair) classification or regression with hexatag streams in ``net_input``."""

    def __init__(self, cfg, data_dictionary, label_dictionary, tag_dictionaries, glue_info=None, spec=None):
        super().__init__(cfg, data_dictionary, label_dictionary)
        self.tag_dictionaries = tag_dictionaries
        self.glue_info, self.spec = glue_info, spec  # glue.json and the GlueTask (None without one)
        self.tag_pad = tag_dictionaries["terminal"].pad()

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        install_command_error_hook()  # replaces SiPEDataMixin.setup_task
        data = cfg.data
        info = read_glue_info(data)
        name = cfg.glue_task or (info or {}).get("task")
        spec = glue_task(name) if name else None
        if spec is not None:
            if cfg.num_classes <= 0:
                with open_dict(cfg) if OmegaConf.is_config(cfg) else contextlib.ExitStack():
                    cfg.num_classes = spec.num_classes
                logger.info(f"--num-classes {cfg.num_classes} ({spec.folder})")
            if cfg.num_classes != spec.num_classes:
                raise ValueError(f"{data}: {spec.folder} has {spec.num_classes} classes, got --num-classes {cfg.num_classes}")
            if bool(cfg.regression_target) != spec.regression:
                fix = "pass --regression-target" if spec.regression else "drop --regression-target"
                raise ValueError(f"{data}: {spec.folder} is a {'regression' if spec.regression else 'classification'} "
                                 f"task: {fix} (criterion sentence_prediction)")
        if cfg.num_classes <= 0:
            raise ValueError(f"{data}: no glue.json: set --num-classes (and --glue-task for the metric)")
        path = os.path.join(data, "input0", "dict.txt")
        if not os.path.exists(path):
            raise FileNotFoundError(f"{path} not found: {data} is not a sipe-glue-preprocess directory")
        data_dict = cls.load_dictionary(path)  # a bad line: one line naming file and line (SiPEDataMixin)
        if cfg.add_mask_symbol:
            data_dict.add_symbol("<mask>")
        logger.info(f"[input] dictionary: {len(data_dict)} types")
        label_dict = data_dict
        if not cfg.regression_target:
            label_dict = cls.load_dictionary(os.path.join(data, "label", "dict.txt"))
            logger.info(f"[label] dictionary: {len(label_dict)} types")
        tags = cls.load_tag_dictionaries(os.path.join(data, "input0"), TAG_KINDS)
        return cls(cfg, data_dict, label_dict, tags, info, spec)

    # ------------------------------------------------------------------ data
    def _streams(self, key: str, split: str, combine: bool):
        """Token dataset and ``{kind: tag dataset}`` of ``{key}/{split}``, or (None, None)."""
        folder = os.path.join(self.cfg.data, key)
        return self.load_split_streams(folder, split, self.source_dictionary, self.tag_dictionaries, combine=combine,
                                       required=False)

    def _assemble(self, in0, in1, init, sep, split):
        """The parent task's token pipeline, for tokens or (with <notag> as init/sep) for tags."""
        if init is not None:
            in0 = PrependTokenDataset(in0, init)
        ds = in0
        if in1 is not None:
            if sep is not None:
                in1 = PrependTokenDataset(in1, sep)
            ds = ConcatSentencesDataset(in0, in1)
        return maybe_shorten_dataset(ds, split, self.cfg.shorten_data_split_list, self.cfg.shorten_method,
                                     self.max_positions(), self.cfg.seed)

    def load_dataset(self, split, combine=False, **kwargs):
        if self.cfg.d2v2_multi or self.cfg.add_prev_output_tokens:
            raise ValueError("hexatag_sentence_prediction supports neither --d2v2-multi nor --add-prev-output-tokens")
        tok0, tags0 = self._streams("input0", split, combine)
        if tok0 is None:
            raise FileNotFoundError(f"could not find dataset: {os.path.join(self.cfg.data, 'input0', split)}")
        tok1, tags1 = self._streams("input1", split, combine)
        if tok1 is not None and len(tok1) != len(tok0):
            raise ValueError(f"{self.cfg.data}: input1/{split} has {len(tok1)} examples, input0/{split} {len(tok0)}")
        tag_init = None if self.cfg.init_token is None else NOTAG_ID
        tag_sep = None if self.cfg.separator_token is None else NOTAG_ID
        src_tokens = self._assemble(tok0, tok1, self.cfg.init_token, self.cfg.separator_token, split)
        src_tags = {k: self._assemble(tags0[k], None if tok1 is None else tags1[k], tag_init, tag_sep, split) for k in TAG_KINDS}
        for k, ds in src_tags.items():  # load_tag_streams checked each file; this checks the assembled pipeline
            assert np.array_equal(np.asarray(ds.sizes), np.asarray(src_tokens.sizes)), f"{k} tags out of step in {split}"

        net_input = {
            "src_tokens": RightPadDataset(src_tokens, pad_idx=self.source_dictionary.pad()),
            "src_lengths": NumelDataset(src_tokens, reduce=False),
            **{input_key(k): RightPadDataset(ds, pad_idx=self.tag_pad) for k, ds in src_tags.items()},
        }
        dataset = {
            "id": IdDataset(), "net_input": net_input, "nsentences": NumSamplesDataset(),
            "ntokens": NumelDataset(src_tokens, reduce=True),
        }
        target = self._labels(split, combine)
        if target is not None:
            if len(target) != len(tok0):
                raise ValueError(f"{self.cfg.data}: label/{split} has {len(target)} labels for {len(tok0)} examples")
            dataset["target"] = target
        nested = NestedDictionaryDataset(dataset, sizes=[src_tokens.sizes])
        if self.cfg.no_shuffle:
            ds = nested
        else:
            with data_utils.numpy_seed(self.cfg.seed):
                shuffle = np.random.permutation(len(src_tokens))
            ds = SortDataset(nested, sort_order=[shuffle])
        logger.info(f"Loaded {split} with #samples: {len(ds)} (hexatag streams {list(TAG_KINDS)}"
                    f"{', pairs' if tok1 is not None else ''})")
        self.datasets[split] = ds
        return ds

    def _labels(self, split, combine):
        prefix = os.path.join(self.cfg.data, "label", split)
        if not self.cfg.regression_target:
            if os.path.exists(prefix + ".idx") or os.path.exists(prefix + ".bin"):
                read_stream(prefix, f"labels of split {split!r}")  # structure: .idx header, .bin size
            labels = data_utils.load_indexed_dataset(prefix, self.label_dictionary, combine=combine)
            if labels is None:
                return None
            return OffsetTokensDataset(StripTokenDataset(labels, id_to_strip=self.label_dictionary.eos()),
                                       offset=-self.label_dictionary.nspecial)
        path = prefix + ".label"
        if not os.path.exists(path):
            return None
        values = []
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                parts = line.split()
                if len(parts) != self.cfg.num_classes:
                    raise ValueError(f"{path}:{lineno}: expected {self.cfg.num_classes} regression value(s), "
                                     f"found {line.strip()!r}")
                try:
                    values.append([float(x) for x in parts])
                except ValueError:
                    raise ValueError(f"{path}:{lineno}: not a number: {line.strip()!r}") from None
        return RawLabelDataset(values)

    # ------------------------------------------------------------------ criterion
    def build_criterion(self, cfg, from_checkpoint=False):
        """Turn on the criterion's report flag of this GLUE task's metric (sentence_prediction)."""
        metric = self.spec.metric if self.spec is not None else None
        flag = REPORT_FLAGS.get(metric)
        if flag and flag in cfg and not cfg[flag]:
            with open_dict(cfg):
                cfg[flag] = True
            logger.info(f"{self.spec.folder}: --{flag.replace('_', '-')} (GLUE metric: {metric})")
        return super().build_criterion(cfg, from_checkpoint)
