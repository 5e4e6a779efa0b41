"""Task ``hexatag_lm``: fairseq's ``language_modeling`` plus aligned hexatag streams."""
import logging
import os
import weakref
from dataclasses import dataclass, field
import numpy as np
from fairseq import utils
from fairseq.data import TokenBlockDataset, TruncatedDictionary
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask

from ..data.lm_dataset import (DEFAULT_PLACEMENT, PLACEMENTS, TAG_KINDS, HexatagContextWindowDataset, HexatagLMDataset,
                               HexatagWindowDataset)
from ..data.settings import setting  # the generation options: fairseq's or sipe-generate's
from ..data.tag_dictionary import NOTAG
from ..data.tag_timing import timed_streams
from ..hexatag.timing import TIMINGS
from ..structure.family import StructureOptions
from ..structure.generation import StructuredSequenceGenerator, wrap_for_generation
from ..structure.inference import self_structured_sample
from ..structure.scoring import beyond_positions
from .sipe_data import EvaluationError, OptionError, SiPEDataConfig, SiPEDataMixin

logger = logging.getLogger(__name__)
FAIRSEQ_LOGGER = "fairseq.tasks.language_modeling"  # the logger of fairseq's own dictionary line

@dataclass
class HexatagLMConfig(LanguageModelingConfig, SiPEDataConfig):
    tag_head_placement: ChoiceEnum(list(PLACEMENTS)) = field(
        default=DEFAULT_PLACEMENT, metadata={"help": "where the tag heads predict the next word's tags: at the previous "
                                                   "word's first subword (paper A.1) or just before the word (most context)"})
    tag_timing: ChoiceEnum(list(TIMINGS)) = field(
        default="paper", metadata={"help": "which tags a word carries as input (sipe_fairseq/hexatag/timing.py): paper = "
                                           "its own pair; nt-delay = its terminal and the previous word's non-terminal "
                                           "(word 1: EOS as a start marker; the last word's EOS never enters, so </s> is "
                                           "predicted from the text); delay = the previous word's pair (word 1: none). "
                                           "The heads choose what the word carries"})
    continue_prompt_word: bool = field(
        default=False, metadata={"help": "generation: the first generated token may continue the prompt's last word "
                                         "(default: it starts a new word, so the prompt's words stay whole)"})
    inference_tags: ChoiceEnum(["given", "self"]) = field(
        default="given", metadata={"help": "fairseq-eval-lm: the tags the model reads. given: the data's (a parse of "
                                           "the whole sentence, p(x | tags); gilt_lm: the gold graph); self: chosen by the "
                                           "model itself from the prefix (constrained argmax tags; gilt_lm: the greedy "
                                           "graph; sipe_fairseq/structure), so the perplexity is exact "
                                           "(needs --sample-break-mode eos: every sentence scored alone)"})


@register_task("hexatag_lm", dataclass=HexatagLMConfig)
class HexatagLanguageModelingTask(SiPEDataMixin, LanguageModelingTask):
    """Causal LM over a ``sipe-preprocess`` directory; puts ``src_terminals``/``src_nonterminals``
    into ``net_input`` and ``terminal_target``/``nonterminal_target`` into the sample."""

    def __init__(self, args, dictionary, output_dictionary=None, targets=None):
        super().__init__(args, dictionary, output_dictionary, targets)
        path = utils.split_paths(args.data)[0]
        self.tag_dictionaries = self.load_tag_dictionaries(path, TAG_KINDS)

    @classmethod
    def setup_dictionary(cls, args, **kwargs):
        """``language_modeling``'s, with ``dict.txt`` read by :meth:`load_dictionary` (a malformed line: one line
        naming the file and the line)."""
        if not args.data:
            return None, None
        dictionary = cls.load_dictionary(os.path.join(utils.split_paths(args.data)[0], "dict.txt"))
        logging.getLogger(FAIRSEQ_LOGGER).info(f"dictionary: {len(dictionary)} types")  # where fairseq logged it
        if args.output_dictionary_size >= 0:
            return dictionary, TruncatedDictionary(dictionary, args.output_dictionary_size)
        return dictionary, dictionary

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        if self.args.shorten_method != "none":
            raise ValueError("--shorten-method is not supported by hexatag_lm (it would cut tokens and tags apart)")
        paths = utils.split_paths(self.args.data)
        data_path = paths[(epoch - 1) % len(paths)]
        _, streams = self.load_split_streams(data_path, split, self.dictionary, self.tag_dictionaries,
                                             self.args.dataset_impl, combine)
        super().load_dataset(split, epoch, combine, **kwargs)
        tokens = self.datasets[split]
        tag_pad = self.tag_dictionaries["terminal"].pad()
        timing = str(self.args.tag_timing)

        def block(kind, ds):  # the value inserted before a block's first sentence is <notag>, as the stream stores
            return TokenBlockDataset(ds, ds.sizes, self.args.tokens_per_sample, pad=tag_pad,
                                     eos=self.tag_dictionaries[kind].index(NOTAG), break_mode=self.args.sample_break_mode,
                                     include_targets=True)

        blocks = {kind: block(kind, ds) for kind, ds in timed_streams(streams, timing).items()}
        word_blocks = None if timing == "paper" else block("terminal", streams["terminal"])
        self.datasets[split] = HexatagLMDataset(
            tokens.dataset, blocks, tag_pad, self.args.tag_head_placement, timing=timing, word_blocks=word_blocks,
            src_vocab=tokens.vocab, tgt_vocab=tokens.tgt_vocab, add_eos_for_other_targets=tokens.add_eos_for_other_targets,
            shuffle=tokens.shuffle, targets=tokens.targets, add_bos_token=tokens.add_bos_token,
            fixed_pad_length=tokens.fixed_pad_length, pad_to_bsz=tokens.pad_to_bsz)
        logger.info(f"{split}: {len(tokens)} blocks with hexatag streams {list(streams)}")

    def build_model(self, cfg, from_checkpoint=False):
        model = super().build_model(cfg, from_checkpoint)
        self._inference_model = weakref.ref(model)  # --inference-tags self: the model that chooses the tags
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """fairseq's step; a criterion with a schedule (``--tag-sampling-warmup``) is told the update first
        (fairseq 0.12's trainer tells only the model)."""
        if hasattr(criterion, "set_num_updates"):
            criterion.set_num_updates(update_num)
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def build_dataset_for_inference(self, src_tokens, src_lengths, **kwargs):
        """Prompts for ``fairseq-interactive`` (as ``language_modeling``; no tags or arcs: the model
        chooses the prompt's structure too, see :mod:`sipe_fairseq.structure.generation`)."""
        return super().build_dataset_for_inference(src_tokens, src_lengths, **kwargs)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        """Models that read structure generate through a wrapper that chooses it per word as the words
        are generated (:func:`~sipe_fairseq.structure.generation.wrap_for_generation`: tags for a tagged
        SiPE decoder, arcs for ``gilt_txl``); plain ones as ``language_modeling``."""
        if setting(args, "score_reference", False):  # scoring the data's sentences: with their own tags
            return super().build_generator(models, args, seq_gen_cls, extra_gen_cls_kwargs, **kwargs)
        try:
            continue_word = bool(setting(args, "continue_word", False) or self.args.continue_prompt_word)
            models, wrapped = wrap_for_generation(models, self.target_dictionary, str(self.args.tag_head_placement),
                                                  bool(setting(args, "sampling", False)), continue_word=continue_word)
        except ValueError as e:  # a model that cannot choose what it reads: one line (USER_ERRORS), no traceback
            raise OptionError(f"generation: {e}") from e
        if wrapped and len(models) > 1:
            raise OptionError("generation with model-chosen tags or arcs takes one model, not an ensemble")
        if wrapped and seq_gen_cls is None:
            seq_gen_cls = StructuredSequenceGenerator
        return super().build_generator(models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs,
                                       **kwargs)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        """``language_modeling``'s step; the prompt keeps the structure the sample brings (a tagged
        model: the data's tags). Each hypothesis carries the structure the model chose (see
        :mod:`sipe_fairseq.structure.generation`), and its lines are logged (INFO, this module's logger;
        under ``fairseq-generate`` and ``fairseq-interactive`` on stderr): ``TAGS-<id>``/``TREE-<id>``
        (SiPE) or ``ARCS-<id>`` and one ``GRAPH-<id>`` row per word (GiLT)
        (``generator.log_structure = False``: not logged). Nothing is printed."""
        if not isinstance(generator, StructuredSequenceGenerator):
            return super().inference_step(generator, models, sample, prefix_tokens, constraints)
        bos = self.source_dictionary.bos() if getattr(self.args, "add_bos_token", False) else self.source_dictionary.eos()
        prompt = prefix_tokens
        if prompt is None and sample["net_input"]["src_tokens"].nelement():
            src = sample["net_input"]["src_tokens"]
            prompt = src[:, 1:] if bool(src[:, 0].eq(bos).all()) else src
        wrapper = generator.wrappers()[0]
        wrapper.set_prompt_from_sample(prompt, sample, bos)
        try:
            hypos = super().inference_step(generator, models, sample, prefix_tokens, constraints)
        except ValueError as e:  # a prompt with no room left (prompts are never cut): one line (USER_ERRORS)
            if str(e).startswith("generation:"):
                raise OptionError(str(e)) from e
            raise
        if getattr(generator, "log_structure", True):
            for i, beam in enumerate(hypos):
                sid = int(sample["id"][i]) if "id" in sample else i
                for j, hypo in enumerate(beam):
                    tag = f"{sid}" if len(beam) == 1 else f"{sid}.{j}"
                    for kind, text in wrapper.output_lines(hypo, self.target_dictionary):
                        logger.info(f"{kind}-{tag}\t{text}")
        return hypos

    no_window_reason = None  # blocks longer than the model's positions: scored in windows unless a subclass says why not

    def eval_lm_dataloader(self, dataset, max_tokens=36000, batch_size=None, max_positions=None, num_shards=1,
                           shard_id=0, num_workers=1, data_buffer_size=10, context_window=0):
        """fairseq's eval-lm batches, with every token scored: blocks longer than the model's
        positions are scored in windows with left context (:class:`HexatagWindowDataset`; with
        ``--context-window C``, in pieces of ``positions - C`` that the context-window dataset
        extends by up to C tokens), and the iterator reports at its end how many of the split's
        tokens were scored -- an :class:`EvaluationError` if none was (or if ``context_window`` < 0)."""
        if context_window < 0:  # fairseq accepts any integer; a negative one shortened nothing and left tokens out
            raise EvaluationError(f"--context-window {context_window}: expected an integer >= 0 (tokens of left "
                                  "context before each scored piece)")
        split = next((k for k, v in self.datasets.items() if v is dataset), "?")
        total, rows = int(np.sum(dataset.sizes)), dataset
        limit = max_positions if isinstance(max_positions, int) else None
        longest = int(np.max(dataset.sizes)) if len(dataset) else 0
        source = str(self.args.inference_tags)
        if source != "given" and context_window == 0 and limit is not None and longest > limit:
            max_positions = limit = self._whole_sentences(dataset.sizes, split, source)
        if limit is not None:
            room = limit - context_window
            if room <= 0:
                raise EvaluationError(f"--context-window {context_window} leaves no room in the model's {limit} positions")
            if context_window == 0 and longest > limit and not dataset.add_bos_token and not self.no_window_reason:
                rows = HexatagWindowDataset(dataset, limit, limit // 2)
                logger.info(f"{split}: {rows.windowed_blocks} of {len(dataset)} blocks are longer than the model's {limit} "
                            f"positions (longest {longest}): scored in windows of {limit} tokens, each new one after "
                            f"{limit // 2} tokens of left context ({len(rows)} rows)")
            elif context_window > 0 and longest > room and not dataset.add_bos_token:
                rows = HexatagWindowDataset(dataset, room, 0)
                logger.info(f"{split}: blocks cut into pieces of at most {room} tokens, so that with the "
                            f"{context_window} tokens of --context-window each row fits the model's {limit} positions")
        if context_window > 0:
            tps = min(self.args.tokens_per_sample, room) if limit is not None else self.args.tokens_per_sample
            rows = HexatagContextWindowDataset(rows, tps, context_window, self.source_dictionary.pad(), dataset.tag_pad)
        itr = super().eval_lm_dataloader(rows, max_tokens, batch_size, max_positions, num_shards, shard_id,
                                         num_workers, data_buffer_size, context_window=0)
        if source != "given":
            itr = self._prefix_tagged(itr, source, rows is not dataset or context_window > 0)
        too_long = f"blocks longer than the model's {limit} positions"
        if self.no_window_reason:
            too_long += f" (not windowed: {self.no_window_reason})"
        if dataset.add_bos_token:
            too_long += " (not windowed with --add-bos-token)"
        return ScoredTokens(itr, split, total, self.target_dictionary, dataset.add_bos_token, too_long, num_shards)


    def _whole_sentences(self, sizes, split: str, source: str) -> None:
        """--inference-tags self/...: sentences longer than the model's positions are scored whole, in one pass, as
        ``sipe-eval-lm --tags`` scores them (:func:`~sipe_fairseq.structure.scoring.beyond_positions`; a model with
        learned positions refuses them there and here); returns the limit the batches then have (None)."""
        model = getattr(self, "_inference_model", lambda: None)()
        if model is None:
            raise EvaluationError(f"--inference-tags {source}: the task built no model (load it with this task)")
        count, limit, refusal = beyond_positions(model, [int(n) for n in sizes])
        if refusal:
            raise EvaluationError(f"split {split!r}: --inference-tags {source}: {refusal}")
        logger.info(f"{split}: {count} of {len(sizes)} sentences are longer than the model's {limit} positions: scored "
                    f"whole, in one pass (as sipe-eval-lm --tags {source})")
        return None

    def _prefix_tagged(self, itr, source: str, windowed: bool) -> "PrefixTagged":
        if str(self.args.sample_break_mode) != "eos" or windowed:
            raise EvaluationError(f"--inference-tags {source} scores every sentence alone: use --sample-break-mode eos, "
                                  "no --context-window, and sentences within the model's positions")
        model = getattr(self, "_inference_model", lambda: None)()
        if model is None:
            raise EvaluationError(f"--inference-tags {source}: the task built no model (load it with this task)")
        options = StructureOptions(placement=str(self.args.tag_head_placement))
        return PrefixTagged(itr, lambda sample: self_structured_sample(model, sample, self.source_dictionary, options))


class _WrappedBatches:
    """An eval-lm batch iterator around another: fairseq-eval-lm reads its length and position."""

    itr = None

    def __len__(self):
        return len(self.itr)

    @property
    def n(self):
        return getattr(self.itr, "n", 0)


class PrefixTagged(_WrappedBatches):
    """An eval-lm batch iterator whose samples' input tags are replaced (``--inference-tags``)."""

    def __init__(self, itr, retag):
        self.itr, self.retag = itr, retag

    def __iter__(self):
        for sample in self.itr:
            if isinstance(sample, dict) and "net_input" in sample:
                try:
                    sample = self.retag(sample)
                except ValueError as e:  # e.g. a model without tag heads: one line (USER_ERRORS), no traceback
                    raise EvaluationError(f"--inference-tags: {e}") from e
            yield sample


class ScoredTokens(_WrappedBatches):
    """An eval-lm batch iterator that counts the targets it hands out and, once exhausted, logs
    how many of the split's tokens were scored and how many were left out (raising
    :class:`EvaluationError` when none was scored: a perplexity of 1.00 from nothing)."""

    def __init__(self, itr, split, total, dictionary, bos: bool, reason: str, num_shards=1):
        self.itr, self.split, self.total, self.reason, self.num_shards = itr, split, total, reason, num_shards
        self.pad, self.bos = dictionary.pad(), dictionary.bos() if bos else None
        self.scored = 0

    def __iter__(self):
        for sample in self.itr:
            target = sample.get("target") if isinstance(sample, dict) else None
            if target is not None:
                keep = target.ne(self.pad)
                if self.bos is not None:
                    keep &= target.ne(self.bos)
                self.scored += int(keep.sum())
            yield sample
        self.finish()

    def finish(self):
        where = f"split {self.split!r}" + (f" (this shard of {self.num_shards})" if self.num_shards > 1 else "")
        if self.scored == 0:
            raise EvaluationError(f"{where}: no token scored of {self.total}, so no perplexity (left out: {self.reason}; "
                                  "see --tokens-per-sample, --sample-break-mode)")
        left = self.total - self.scored
        note = "none left out" if left == 0 or self.num_shards > 1 else f"{left} left out: {self.reason}"
        logger.info(f"{where}: scored {self.scored} of {self.total} tokens; {note}")
