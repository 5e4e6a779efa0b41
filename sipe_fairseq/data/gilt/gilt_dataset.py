"""GiLT training samples: the hexatag LM samples (tokens, word starts) plus the gold graph of every
sentence of the block, teacher-forced (docs/gilt-reference.md sections 1-3).

Blocks must hold whole sentences (``--sample-break-mode eos``, ``complete`` or ``complete_doc``):
a word's arcs reach back to its sentence's first word and the root. Block words are numbered
1..W in order (0: no word). Per sample (``net_input`` unless said):

* ``src_words`` (T,): the block word of each input position (first and continuation subwords), 0
  at ``</s>``/``<s>`` (their features are 0, as keys and as queries);
* ``gilt_pairs`` (W+1, W+1, 3) uint8: attention features, [a, b] = features of word b when word a
  has arrived (same sentence, b <= a; else 0), :func:`.graph_features.pair_features`;
* ``gilt_prev`` (W+1, W+1, 3) uint8: the arc scorer's features, [w, v] = features of node v (0 =
  the root of w's sentence) in the graph *before* w's arcs (row w-1 of the tape; for a first word the
  graph of the root alone), so teacher forcing does not show w's gold arcs to the scorer of w;
* ``gilt_word_pos`` (W+1,): input position of each word's first subword; ``gilt_local`` (W+1,):
  the word's index in its sentence (1-based); ``gilt_sent`` (W+1,): sentence number in the block
  (-1 for index 0 and padding);
* targets ``gilt_head`` / ``gilt_dep`` (W+1, W+1) uint8: [w, v] = 1 when v (0 = root) is a head of w
  with v < w, resp. when w is a head of the earlier word v.
"""
from typing import List

import numpy as np
import torch
from fairseq.data import data_utils

from .arcs import decode_words
from .graph_features import N_FEATURES, TWO_WAY_RULES, sentence_tape
from ..lm_dataset import HexatagLMDataset
from ..tag_dictionary import FIRST_TAG_ID

WHOLE_SENTENCE_BREAK_MODES = ("eos", "complete", "complete_doc")
WORD_KEYS = ("gilt_word_pos", "gilt_local", "gilt_sent")
MATRIX_KEYS = ("gilt_pairs", "gilt_prev")
TARGET_KEYS = ("gilt_head", "gilt_dep")


def block_graph(sentences: List[list], two_way: str = TWO_WAY_RULES[0]) -> dict:
    """Per-sentence (heads, dependents) lists of one block -> the word-level tensors of the module docstring
    (numpy; positions are filled by the caller). ``two_way``: the distance rule of a pair with arcs both
    ways (:mod:`.graph_features`)."""
    n_words = [len(s) for s in sentences]
    total = sum(n_words)
    pairs = np.zeros((total + 1, total + 1, N_FEATURES), np.uint8)
    prev = np.zeros_like(pairs)
    head = np.zeros((total + 1, total + 1), np.uint8)
    dep = np.zeros_like(head)
    local = np.zeros(total + 1, np.int64)
    sent = np.full(total + 1, -1, np.int64)
    off = 0
    for k, words in enumerate(sentences):
        n = len(words)
        if not n:
            continue
        tape = sentence_tape(words, two_way)  # (n, n+1, 3): row w-1 = after word w
        blk = slice(off + 1, off + n + 1)
        pairs[blk, blk] = tape[:, 1:] * np.tril(np.ones((n, n), np.uint8))[:, :, None]
        prev[off + 1, 0, 1] = 1  # first word: only the root exists (depth 1)
        if n > 1:
            prev[off + 2: off + n + 1, 0] = tape[:-1, 0]
            prev[off + 2: off + n + 1, off + 1: off + n + 1] = tape[:-1, 1:]  # row w-1 has only nodes < w
        local[blk] = np.arange(1, n + 1)
        sent[blk] = k
        for w, (heads, deps) in enumerate(words, 1):
            for h in heads:
                head[off + w, 0 if h == 0 else off + h] = 1
            for d in deps:
                dep[off + w, off + d] = 1
        off += n
    return {"gilt_pairs": pairs, "gilt_prev": prev, "gilt_head": head, "gilt_dep": dep, "gilt_local": local, "gilt_sent": sent}


def position_words(src_tokens: torch.Tensor, src_terminals: torch.Tensor, eos: int, bos: int):
    """(block word per input position, first-subword position of each word): a word runs from its
    first subword (terminal tag) to the next word start or sentence boundary."""
    start = src_terminals >= FIRST_TAG_ID
    boundary = (src_tokens == eos) | (src_tokens == bos)
    idx = torch.arange(len(src_tokens))
    last_start = torch.where(start, idx, torch.full_like(idx, -1)).cummax(0).values
    last_bound = torch.where(boundary, idx, torch.full_like(idx, -1)).cummax(0).values
    number = start.long().cumsum(0)
    words = torch.where(last_start > last_bound, number, torch.zeros_like(number))
    return words, idx[start]


class GiltLMDataset(HexatagLMDataset):
    """:class:`HexatagLMDataset` plus the gold graph tensors (module docstring)."""

    def __init__(self, dataset, tag_blocks, tag_pad, arcs, n_words, two_way: str = TWO_WAY_RULES[0], **kwargs):
        super().__init__(dataset, tag_blocks, tag_pad, **kwargs)
        self.arcs, self.n_words, self.two_way = arcs, n_words, two_way

    def __getitem__(self, index):
        item = super().__getitem__(index)
        start, offset, end = (int(v) for v in self.dataset.block_to_dataset_index[index])
        if offset != 0:
            raise ValueError(f"block {index} starts inside sentence {start}: GiLT needs whole sentences "
                             f"(--sample-break-mode {' | '.join(WHOLE_SENTENCE_BREAK_MODES)})")
        sentences = [decode_words(self.arcs[i].tolist(), int(self.n_words[i])) for i in range(start, end + 1)]
        graph = block_graph(sentences, self.two_way)
        words, first = position_words(item["source"], item["src_terminals"], self.vocab.eos(), self.vocab.bos())
        if len(first) != sum(len(s) for s in sentences):
            raise ValueError(f"block {index}: {len(first)} word starts in the tokens, {sum(len(s) for s in sentences)} "
                             "words in the arc stream")
        item["src_words"] = words
        item["gilt_word_pos"] = torch.cat([first.new_zeros(1), first])
        for key, value in graph.items():
            item[key] = torch.from_numpy(value)
        return item

    def collater(self, samples):
        batch = super().collater(samples)
        if not samples:
            return batch
        width = batch["net_input"]["src_tokens"].size(1)
        net = batch["net_input"]
        net["src_words"] = data_utils.collate_tokens([s["src_words"] for s in samples], 0, left_pad=False,
                                                     pad_to_length=width, pad_to_bsz=self.pad_to_bsz)
        n = max(s["gilt_sent"].numel() for s in samples)
        for key in WORD_KEYS:
            net[key] = data_utils.collate_tokens([s[key] for s in samples], -1 if key == "gilt_sent" else 0, left_pad=False,
                                                 pad_to_length=n)
        for key in MATRIX_KEYS + TARGET_KEYS:
            first = samples[0][key]
            out = first.new_zeros((len(samples), n, n) + tuple(first.shape[2:]))
            for b, s in enumerate(samples):
                m = s[key].size(0)
                out[b, :m, :m] = s[key]
            (net if key in MATRIX_KEYS else batch)[key] = out
        return batch
