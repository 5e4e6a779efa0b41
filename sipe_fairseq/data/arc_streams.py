"""Writing and loading the GiLT arc stream ``{split}.arcs.bin/.idx`` (encoding: :mod:`.arcs`).

One item per sentence (document breaks: an empty item), so the stream has as many items as the
token stream; each item decodes to exactly as many words as the sentence has first-subword
positions (terminal tag not ``<notag>``), which :func:`load_arc_stream` checks for every sentence.
"""
import os
from collections import Counter
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .arcs import ArcError, check_arcs, decode_words, encode_arcs, tree_arcs
from .tag_dictionary import NOTAG_ID
from .writers import write_stream

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


def load_arc_stream(data_path: str, split: str, token_dataset, terminal_dataset, dataset_impl=None):
    """Load ``{split}.arcs`` and check it against the tokens and the terminal tag stream: returns
    ``(indexed dataset, words per sentence)``. Raises ``FileNotFoundError`` (no stream: how to make
    one) or ``ValueError`` naming the split and the first sentence that is out of step."""
    from fairseq.data import data_utils

    prefix = os.path.join(data_path, f"{split}.arcs")
    ds = data_utils.load_indexed_dataset(prefix, None, dataset_impl)
    if ds is None:
        raise FileNotFoundError(f"{data_path} has no arc stream {split}.arcs (.bin/.idx): rebuild it with a "
                                "sipe-preprocess that writes arcs (GiLT)")
    if len(ds) != len(token_dataset):
        raise ValueError(f"split {split!r}: the arc stream has {len(ds)} sentences, the token stream {len(token_dataset)}; "
                         f"rebuild {data_path} with sipe-preprocess")
    n_words = np.array([int((terminal_dataset[i] != NOTAG_ID).sum()) for i in range(len(terminal_dataset))], dtype=np.int64)
    for i in range(len(ds)):
        try:
            decode_words(ds[i].tolist(), int(n_words[i]))
        except ArcError as e:
            raise ValueError(f"split {split!r}: the arc stream is not aligned with the words of sentence {i} "
                             f"({int(n_words[i])} words): {e}; rebuild {data_path} with sipe-preprocess") from None
    return ds, n_words


__all__ = ["ARC_SOURCES", "check_arcs", "load_arc_stream", "sentence_item", "write_arc_stream"]
