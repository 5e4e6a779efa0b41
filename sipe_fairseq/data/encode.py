"""Encode new tagged sentences exactly as ``sipe-preprocess`` encoded the training data.

Used at evaluation time (BLiMP, SyntaxGym, minimal pairs): words are cleaned and split into
sentencepiece pieces word by word with the data directory's own ``spm.model`` (or kept whole when
the directory was made with ``--no-split``), mapped through ``dict.txt``, and each word's tag pair
is put on its first piece (appendix A.1); continuation pieces and the final ``</s>`` get
``<notag>``.

A directory whose ``manifest.json`` records an ``spm.model`` that is missing or another file is refused
(:func:`~sipe_fairseq.data.fingerprint.spm_problem`: without it every word would be ``<unk>``), as a
:class:`~sipe_fairseq.hexatag.errors.CheckpointError` (exit status 3, as the checkpoints' own data check),
unless ``allow_dictionary_mismatch`` (then one warning, and the words are encoded with what is there).
"""
import logging
import os
from typing import List, Optional, Sequence, Tuple

import sentencepiece as spm
import torch

from ..hexatag import encode_tree
from ..hexatag.errors import CheckpointError, DataError
from .dictionary import data_directory_problem, load_dictionary
from .fingerprint import spm_problem
from .tag_dictionary import FIRST_TAG_ID, NOTAG_ID, TAG_KINDS, tag_names
from .words import clean_word, segment_words

logger = logging.getLogger(__name__)
_TAG_IDS = {kind: {t: FIRST_TAG_ID + i for i, t in enumerate(tag_names(kind))} for kind in TAG_KINDS}


class SentenceEncoder:
    """``encode(words, heads)`` -> token ids, terminal ids, non-terminal ids (all with ``</s>``); a directory
    whose recorded ``spm.model`` is missing or another file: :class:`CheckpointError` (module docstring)."""

    def __init__(self, data_dir: str, dictionary=None, allow_dictionary_mismatch: bool = False):
        problem = spm_problem(data_dir)
        if problem and allow_dictionary_mismatch:
            logger.warning(f"{problem} (--allow-dictionary-mismatch)")
        elif problem:
            raise CheckpointError(f"{problem}; --allow-dictionary-mismatch encodes the words anyway")
        path = os.path.join(data_dir, "dict.txt")
        if dictionary is None and not os.path.isfile(path):  # a missing or empty directory: one DataError line
            raise DataError(data_directory_problem(data_dir) or f"{path}: no such file")
        self.dictionary = dictionary or load_dictionary(path)
        spm_path = os.path.join(data_dir, "spm.model")
        self.sp = None
        if os.path.exists(spm_path):
            self.sp = spm.SentencePieceProcessor(model_file=spm_path)

    def pieces(self, words: Sequence[str]) -> List[List[str]]:
        cleaned = [clean_word(w)[0] for w in words]
        mapping, _ = segment_words(cleaned, self.sp)
        return [mapping[w] for w in cleaned]

    def encode(self, words: Sequence[str], heads: Optional[Sequence[int]] = None,
               tags: Optional[Sequence[Tuple[str, str]]] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, List[int]]:
        """Returns ``(tokens, terminals, nonterminals, first_piece_positions)``; tags come from
        ``tags`` or from ``heads`` (projectivized if needed); with neither, every tag is ``<notag>``."""
        return self._encode(self.pieces(words), heads, tags)[:4]

    def encode_many(self, sentences: Sequence[Tuple[Sequence[str], Optional[Sequence[int]]]]) -> List[tuple]:
        """:meth:`encode` of every ``(words, heads)``, with one sentencepiece call for all their distinct words;
        each result also holds the heads the tags encode (projectivized if needed; None without heads)."""
        cleaned = [[clean_word(w)[0] for w in words] for words, _ in sentences]
        mapping, _ = segment_words([w for ws in cleaned for w in ws], self.sp)
        return [self._encode([mapping[w] for w in ws], heads) for ws, (_, heads) in zip(cleaned, sentences)]

    def _encode(self, pieces: List[List[str]], heads=None, tags=None):
        used = None
        if tags is None and heads is not None:
            tags, used, _ = encode_tree(list(heads))
        toks, terms, nts, firsts = [], [], [], []
        for k, ps in enumerate(pieces):
            firsts.append(len(toks))
            for j, p in enumerate(ps):
                toks.append(self.dictionary.index(p))
                if j == 0 and tags is not None:
                    terms.append(_TAG_IDS["terminal"][tags[k][0]])
                    nts.append(_TAG_IDS["nonterminal"][tags[k][1]])
                else:
                    terms.append(NOTAG_ID)
                    nts.append(NOTAG_ID)
        toks.append(self.dictionary.eos())
        terms.append(NOTAG_ID)
        nts.append(NOTAG_ID)
        as_t = lambda x: torch.tensor(x, dtype=torch.long)  # noqa: E731
        return as_t(toks), as_t(terms), as_t(nts), firsts, used
