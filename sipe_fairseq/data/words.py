"""The word mark and the word-start rules, in one place.

sentencepiece marks the piece that starts a word with U+2581 (:data:`WORD_MARK`). The plugin's
rules around it:

* a word never holds whitespace (the same notion of whitespace as fairseq's ``tokenize_line`` and
  ``str.split``): :func:`clean_word` replaces it with :data:`WORD_MARK`, and an empty word becomes
  :data:`WORD_MARK`, so one word never becomes two text tokens;
* each word is split into pieces on its own (:func:`segment_words`), so pieces never cross words; a
  word that yields no piece is written as ``[WORD_MARK]``;
* a piece starts a word when it carries the mark (:func:`starts_word`); :func:`word_start_mask` is
  that rule over a whole vocabulary, with one explicit choice for the symbols that are no piece
  (``specials``): for masked-LM whole-word masking and data validation, specials, fairseq's padding
  symbols and ``<mask>`` count as word starts (each is a word of its own) and, with ``--no-split``,
  every piece; for generation none of them starts a word.
"""
import re
from typing import Dict, List, Sequence, Tuple

import torch

WORD_MARK = "\u2581"
WHITESPACE = re.compile(r"\s")  # the same notion of whitespace as fairseq's tokenize_line and str.split


def starts_word(piece: str) -> bool:
    """A sentencepiece piece that starts a word (it carries :data:`WORD_MARK`)."""
    return piece.startswith(WORD_MARK)


def clean_word(word: str) -> Tuple[str, int, int]:
    """``(word with whitespace -> U+2581, 1 if replaced, 1 if empty -> U+2581)``."""
    if not word:
        return WORD_MARK, 0, 1
    if WHITESPACE.search(word):
        return WHITESPACE.sub(WORD_MARK, word), 1, 0
    return word, 0, 0


def segment_words(words: Sequence[str], sp=None, threads: int = 1) -> Tuple[Dict[str, List[str]], int]:
    """Map each distinct word to its pieces (``sp=None``: the word itself). A word that yields no
    piece gets ``[U+2581]``; returns ``(mapping, number of such distinct words)``."""
    uniq = list(dict.fromkeys(words))
    if sp is None:
        return {w: [w] for w in uniq}, 0
    encoded = sp.encode(uniq, out_type=str, enable_sampling=False, emit_unk_piece=False, num_threads=threads)
    out, n_none = {}, 0
    for w, pieces in zip(uniq, encoded):
        if " ".join(pieces).split() != pieces:  # no piece may be empty or hold whitespace
            pieces = [clean_word(p)[0] for p in pieces if p]
        if not pieces:
            pieces, n_none = [WORD_MARK], n_none + 1
        out[w] = pieces
    return out, n_none


def word_start_mask(dictionary, *, specials: bool, no_split: bool = False) -> torch.Tensor:
    """(V,) bool: True where a symbol of ``dictionary`` starts a word: a piece with the U+2581 mark
    (:func:`starts_word`; every symbol with ``no_split``, the ``--no-split`` data).

    The rule for the symbols that are no piece (the dictionary's specials ``<s> <pad> </s> <unk>``,
    fairseq's padding symbols ``madeupword*`` and ``<mask>``) is the caller's, stated at every call:
    ``specials=True`` counts each as a word start, a word of its own (fairseq's ``mask_whole_words``
    for masked-LM whole-word masking, and data validation); ``specials=False`` counts none (generation:
    a word starts only at a marked piece, so ``</s>`` or ``<unk>`` never opens a word)."""
    return torch.tensor([
        no_split or starts_word(sym) or (specials and (i < dictionary.nspecial or sym.startswith("madeupword")
                                                        or sym == "<mask>"))
        for i, sym in enumerate(dictionary.symbols)], dtype=torch.bool)
