"""Token and hexatag streams kept in step for causal LM training and evaluation.

The tag streams go through the same :class:`~fairseq.data.TokenBlockDataset` as the tokens (same
sizes, same break mode), so blocking, shuffling and batching cannot separate them. Tag targets
(appendix A.1): each tagged position ``q`` of the *target* stream is predicted by exactly one
earlier "anchor" position, and every other position is ignored (pad):

* ``first_subword`` (default): the nearest position ``p <= q`` whose input token is a word's first
  subword or a sentence start (``</s>``/``<s>``); so heads run at first subwords and the sentence
  start predicts the first word's tags;
* ``last_subword``: position ``q`` itself, the last position before the word (most context).
  ``first_subword`` also falls back to ``q`` for a word with no anchor inside its block.

Each anchor predicts at most one target and uses only its left context, so
``-log p(x, tags) = LM loss + tag losses`` is a proper joint score.
"""
import numpy as np
import torch
from fairseq.data import FairseqDataset, LMContextWindowDataset, MonolingualDataset, data_utils

from .settings import task_setting
from .tag_dictionary import FIRST_TAG_ID
from .tag_timing import fixed_target_positions, sentence_start_inputs

TAG_KINDS = ("terminal", "nonterminal")
PLACEMENTS = ("first_subword", "last_subword")  # where the tag heads predict a word's tags (above)
DEFAULT_PLACEMENT = PLACEMENTS[0]  # the default of hexatag_lm's --tag-head-placement, and of every caller


def task_placement(task, default=DEFAULT_PLACEMENT):
    """The ``--tag-head-placement`` of a task's settings; ``default`` for a task that has no such option
    (fairseq's ``language_modeling``, the masked-LM tasks). A task that has it always holds a value:
    fairseq fills a field an older checkpoint lacks with its declared default, :data:`DEFAULT_PLACEMENT`."""
    value = task_setting(task, "tag_head_placement")
    return default if value is None else str(value)


def input_key(kind: str) -> str:
    """``net_input`` key of a tag stream: ``src_terminals`` / ``src_nonterminals``."""
    return f"src_{kind}s"


def tag_targets(src_tokens: torch.Tensor, src_tags: torch.Tensor, future_tags: torch.Tensor,
                starts, pad: int, placement: str = DEFAULT_PLACEMENT) -> torch.Tensor:
    """Tag target ids per position (``pad`` where ignored) for one 1-D sample."""
    targets = torch.full_like(future_tags, pad)
    q = (future_tags >= FIRST_TAG_ID).nonzero().squeeze(-1)
    if q.numel() == 0:
        return targets
    if placement == "last_subword":
        targets[q] = future_tags[q]
        return targets
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown tag head placement {placement!r}")
    anchor = (src_tags >= FIRST_TAG_ID) | sentence_start_inputs(src_tokens, starts)
    idx = torch.arange(len(src_tokens))
    prev = torch.where(anchor, idx, torch.full_like(idx, -1)).cummax(0).values[q]
    # a block that starts mid-sentence has no anchor before its first word: predict it from q
    prev = torch.where(prev >= 0, prev, q)
    targets[prev] = future_tags[q]
    return targets


class HexatagLMDataset(MonolingualDataset):
    """A :class:`MonolingualDataset` whose samples also carry ``src_{kind}s`` (tags of the input
    tokens, in ``net_input``) and ``{kind}_target`` (tag targets) for kind in terminal/nonterminal,
    plus ``word_start_target`` (1 where the target token is a word's first subword) for scoring
    by position type. ``tag_blocks`` hold the streams as the words carry them under ``timing``
    (:mod:`.tag_timing`); ``word_blocks``, the paper's terminal stream in the same blocks, marks the
    word starts when the timing leaves a word untagged (``delay``: word 1)."""

    def __init__(self, dataset, tag_blocks, tag_pad: int, placement: str = DEFAULT_PLACEMENT, timing: str = "paper",
                 word_blocks=None, **kwargs):
        super().__init__(dataset, dataset.sizes, **kwargs)
        self.tag_blocks, self.tag_pad, self.placement = tag_blocks, tag_pad, placement
        self.timing, self.word_blocks = timing, word_blocks

    def __getitem__(self, index):
        item = super().__getitem__(index)
        src = item["source"]
        starts = (self.vocab.eos(), self.vocab.bos())
        for kind, blocks in self.tag_blocks.items():
            t_src, t_future, _ = blocks[index]
            if self.add_bos_token:
                t_src = torch.cat([t_src.new([self.tag_pad]), t_src])
                t_future = torch.cat([t_future.new([self.tag_pad]), t_future])
            assert len(t_src) == len(src), f"tag block {index} of {kind} is out of step with the tokens"
            item[input_key(kind)] = t_src
            target = tag_targets(src, t_src, t_future, starts, self.tag_pad, self.placement)
            if kind == "nonterminal":  # nt-delay: word 1's EOS is a start marker, not a choice
                target[fixed_target_positions(src, starts, self.timing)] = self.tag_pad
            item[f"{kind}_target"] = target
            item["word_start_target"] = (t_future >= FIRST_TAG_ID).long()
        if self.word_blocks is not None:
            t_future = self.word_blocks[index][1]
            if self.add_bos_token:
                t_future = torch.cat([t_future.new([self.tag_pad]), t_future])
            item["word_start_target"] = (t_future >= FIRST_TAG_ID).long()
        return item

    def _collate_tags(self, samples, key, width):
        return data_utils.collate_tokens([s[key] for s in samples], self.tag_pad, left_pad=False,
                                         pad_to_length=width, pad_to_bsz=self.pad_to_bsz)

    def collater(self, samples):
        batch = super().collater(samples)
        if not samples:
            return batch
        width = batch["net_input"]["src_tokens"].size(1)
        for kind in self.tag_blocks:
            batch["net_input"][input_key(kind)] = self._collate_tags(samples, input_key(kind), width)
            batch[f"{kind}_target"] = self._collate_tags(samples, f"{kind}_target", width)
        batch["word_start_target"] = data_utils.collate_tokens([s["word_start_target"] for s in samples], 0, left_pad=False,
                                                               pad_to_length=width, pad_to_bsz=self.pad_to_bsz)
        return batch


class HexatagWindowDataset(FairseqDataset):
    """Evaluation rows of at most ``max_len`` positions from :class:`HexatagLMDataset` blocks of any
    length, so that no block is dropped for being longer than the model's positions.

    A block that fits is one row, unchanged. A longer block is scored in windows: the first row
    scores its first ``max_len`` tokens, each next row the following ``max_len - context`` tokens
    with the ``context`` tokens before them (from the same block) as left context. Token, tag and
    word-start targets over a row's context are pad (0 for word starts) and ``start_indices`` marks
    where its scored part begins, as fairseq's context-window evaluation does, so every token and
    every tag target is scored exactly once. ``context=0`` cuts long blocks into consecutive pieces
    (for :class:`HexatagContextWindowDataset`, which adds context across rows)."""

    def __init__(self, dataset: HexatagLMDataset, max_len: int, context: int):
        if not 0 <= context < max_len:
            raise ValueError(f"window context must be in [0, {max_len}), got {context}")
        self.dataset, self.max_len, self.context = dataset, max_len, context
        sizes = np.asarray(dataset.sizes, dtype=np.int64)
        stride = max_len - context
        count = np.where(sizes <= max_len, 1, 1 + -(-(sizes - max_len) // stride))
        self.block = np.repeat(np.arange(len(sizes)), count)
        j = np.arange(len(self.block)) - np.repeat(np.cumsum(count) - count, count)  # window number in its block
        self.hi = np.minimum(sizes[self.block], max_len + j * stride)
        self.start = np.where(j == 0, 0, max_len + (j - 1) * stride)  # first scored position
        self.lo = np.maximum(self.hi - max_len, 0)
        self.sizes = self.hi - self.lo
        self.windowed_blocks = int((count > 1).sum())

    @property
    def tag_blocks(self):
        return self.dataset.tag_blocks

    @property
    def tag_pad(self):
        return self.dataset.tag_pad

    def __len__(self):
        return len(self.block)

    def __getitem__(self, index):
        item = self.dataset[int(self.block[index])]
        lo, hi, skip = int(self.lo[index]), int(self.hi[index]), int(self.start[index] - self.lo[index])
        if (lo, hi) == (0, len(item["source"])):
            item["window_start"] = 0
            return item
        fills = {"target": self.dataset.tgt_vocab.pad(), "word_start_target": 0,
                 **{f"{k}_target": self.tag_pad for k in self.tag_blocks}}
        out = {"id": item["id"], "window_start": skip}
        for key, value in item.items():
            if key == "id" or value is None:
                continue
            value = value[lo:hi].clone()
            if key in fills:
                value[:skip] = fills[key]
            out[key] = value
        return out

    def collater(self, samples):
        starts = [s.pop("window_start") for s in samples]
        batch = self.dataset.collater(samples)
        if samples:
            batch["start_indices"] = starts
            batch["ntokens"] = int(batch["target"].ne(self.dataset.tgt_vocab.pad()).sum())  # scored, not context
        return batch

    def num_tokens(self, index):
        return int(self.sizes[index])

    def num_tokens_vec(self, indices):
        return self.sizes[indices]

    def size(self, index):
        return int(self.sizes[index])

    def ordered_indices(self):
        return np.arange(len(self), dtype=np.int64)  # block order: rows of a block stay together

    def set_epoch(self, epoch):
        super().set_epoch(epoch)
        self.dataset.set_epoch(epoch)


class HexatagContextWindowDataset(LMContextWindowDataset):
    """fairseq's context-window evaluation, with the tags carried along the same context.

    Every position of the prepended context has its token target and tag targets set to pad, so
    each token (and tag) is scored exactly once, with up to ``context_window`` extra tokens of left
    context and their tags."""

    def __init__(self, dataset, tokens_per_sample, context_window, pad_idx, tag_pad):
        super().__init__(dataset, tokens_per_sample, context_window, pad_idx)
        self.tag_pad = tag_pad
        self.kinds = list(dataset.tag_blocks)
        self.prev = np.empty([0, 1 + len(self.kinds)], dtype=np.int64)  # columns: token, tags...

    def collater(self, samples):
        sample = self.dataset.collater(samples)
        if not samples:
            return sample
        window, max_len = self.context_window, self.tokens_per_sample + self.context_window
        net = sample["net_input"]
        # inputs get the previous context prepended; targets get fill values over the context
        inputs = [("src_tokens", self.pad_idx)] + [(input_key(k), self.tag_pad) for k in self.kinds]
        targets = [("target", self.pad_idx), ("word_start_target", 0)] + [(f"{k}_target", self.tag_pad) for k in self.kinds]
        bsz, tsz = net["src_tokens"].shape
        new_in = {k: np.full([bsz, tsz + window], f, dtype=np.int64) for k, f in inputs}
        new_tgt = {k: np.full([bsz, tsz + window], f, dtype=np.int64) for k, f in targets}
        lengths = net["src_tokens"].ne(self.pad_idx).long().sum(dim=1)
        starts = []
        for i in range(bsz):
            n = int(lengths[i])
            extra = len(self.prev) + n - max_len
            if extra > 0:
                self.prev = self.prev[extra:]
            c = len(self.prev)
            for s, (key, _) in enumerate(inputs):
                new_in[key][i, :c] = self.prev[:, s]
                new_in[key][i, c:c + tsz] = net[key][i].numpy()
            for key, _ in targets:
                new_tgt[key][i, c:c + tsz] = sample[key][i].numpy()
            starts.append(c)
            net["src_lengths"][i] += c
            cur = np.stack([net[key][i, :n].numpy() for key, _ in inputs], axis=1)
            self.prev = np.concatenate([self.prev, cur])[-window:]
        for key, _ in inputs:
            net[key] = torch.from_numpy(new_in[key])
        for key, _ in targets:
            sample[key] = torch.from_numpy(new_tgt[key])
        sample["start_indices"] = starts
        return sample
