"""Writing and loading the GiLT arc stream ``{split}.arcs.bin/.idx`` (encoding: :mod:`.arcs`).

One item per sentence (document breaks: an empty item), so the stream has as many items as the
token stream; each item decodes to exactly as many words as the sentence has first-subword
positions (terminal tag not ``<notag>``). The tasks check the stream at load with the other streams
(:func:`~sipe_fairseq.data.validate.validate_split` with ``arcs=True``: structure, sentence count,
every item, the manifest's sizes and checksums); :func:`load_arc_stream` checks every item itself
when that validation did not (``--validate-data none``, a sample of a large split).
"""
import os
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from fairseq.data import data_utils

from .arcs import ArcError, check_arcs, decode_words, encode_arcs, tree_arcs
from ..tag_dictionary import NOTAG_ID
from ..validate import DataError
from ..writers import write_stream

ARC_SOURCES = ("tree", "deps")


def sentence_item(heads: Sequence[int], deps: Optional[List[Tuple[int, int]]], source: str) -> List[int]:
    """One sentence's item from its basic tree (``heads``) or its DEPS graph."""
    n = len(heads)
    if source == "tree":
        return encode_arcs(tree_arcs(heads), n)
    if source == "deps":
        return encode_arcs(deps or [], n)
    raise ValueError(f"unknown arc source {source!r}, expected one of {ARC_SOURCES}")


def write_arc_stream(prefix: str, items: Sequence[List[int]], n_words: Sequence[int]) -> Dict[str, int]:
    """Write ``{prefix}.arcs.bin/.idx`` from per-sentence items; returns the manifest counts
    (``arcs``, ``root_arcs``, ``words_with_several_heads``, ``words_without_head``, ``max_arcs_per_word``)."""
    flat = np.fromiter((v for it in items for v in it), dtype=np.int64)
    sizes = np.array([len(it) for it in items], dtype=np.int64)
    write_stream(prefix + ".arcs", flat, sizes, int(flat.max(initial=0)) + 1)
    c = Counter()
    for it, n in zip(items, n_words):
        for heads, deps in decode_words(it, n):
            c["arcs"] += len(heads) + len(deps)
            c["root_arcs"] += heads.count(0)
            c["max_arcs_per_word"] = max(c["max_arcs_per_word"], len(heads) + len(deps))
    # heads per word over the whole sentence (a word's later heads belong to the later word)
    for it, n in zip(items, n_words):
        n_heads = Counter(d for h, d in _arcs(it, n))
        c["words_with_several_heads"] += sum(1 for v in n_heads.values() if v > 1)
        c["words_without_head"] += n - len(n_heads)
    return {k: int(c[k]) for k in ("arcs", "root_arcs", "words_with_several_heads", "words_without_head", "max_arcs_per_word")}


def _arcs(item, n):
    out = []
    for w, (heads, deps) in enumerate(decode_words(item, n), 1):
        out += [(h, w) for h in heads] + [(w, d) for d in deps]
    return out


def load_arc_stream(data_path: str, split: str, token_dataset, terminal_dataset, dataset_impl=None, check: bool = True):
    """Load ``{split}.arcs`` and check it against the tokens and the terminal tag stream: returns
    ``(indexed dataset, words per sentence)``. With ``check`` every item is decoded (skip it only when
    :func:`~sipe_fairseq.data.validate.validate_split` checked them all). Raises
    :class:`~sipe_fairseq.data.validate.DataError` naming the file (and the first sentence that is out
    of step), also for a missing stream (with how to make one)."""
    prefix = os.path.join(data_path, f"{split}.arcs")
    ds = data_utils.load_indexed_dataset(prefix, None, dataset_impl)
    if ds is None:
        raise DataError(f"{prefix}.bin/.idx: no arc stream for split {split!r} (--task gilt_lm reads the gold graphs): "
                        f"rebuild {data_path} with a sipe-preprocess that writes arcs")
    if len(ds) != len(token_dataset):
        raise DataError(f"{prefix}.idx: {len(ds)} sentences, the token stream {len(token_dataset)}: the arc stream "
                        f"does not belong to split {split!r}; rebuild {data_path} with sipe-preprocess")
    n_words = np.array([int((terminal_dataset[i] != NOTAG_ID).sum()) for i in range(len(terminal_dataset))], dtype=np.int64)
    for i in range(len(ds)) if check else ():
        try:
            decode_words(ds[i].tolist(), int(n_words[i]))
        except ArcError as e:
            raise DataError(f"{prefix}.bin: sentence {i}: {e} (the sentence has {int(n_words[i])} words): the arc "
                            f"stream is damaged or out of step with the words; rebuild {data_path} with "
                            "sipe-preprocess") from None
    return ds, n_words


__all__ = ["ARC_SOURCES", "check_arcs", "load_arc_stream", "sentence_item", "write_arc_stream"]
