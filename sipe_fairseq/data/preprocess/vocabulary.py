"""The vocabulary the streams are written with: the sentencepiece model (trained, or
``--spm-model``), each word's pieces (:func:`~sipe_fairseq.data.words.segment_words`), ``dict.txt``
(built as ``fairseq-preprocess`` builds it, or ``--srcdict``) and the tag dictionaries."""
import hashlib
import io
import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from typing import Dict, List, Optional

import sentencepiece as spm
from fairseq.data import Dictionary

from ...hexatag.errors import DataError
from ..dictionary import load_dictionary
from ..tag_dictionary import (
    FIRST_TAG_ID, NOTAG, TAG_KINDS, build_label_dictionary, build_tag_dictionary, load_tag_dictionary, tag_names,
)
from ..words import WORD_MARK, segment_words
from ..writers import atomic_open, write_text
from .conllu import SplitData
from .options import PreprocessError, PreprocessOptions

logger = logging.getLogger(__name__)


def train_spm(sentences, vocab_size: int = 8000, model_type: str = "unigram") -> bytes:
    """Train sentencepiece on space-joined sentences; returns the serialized model (deterministic:
    single thread, trained from memory so the model records no file names)."""
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
        num_threads=1, hard_vocab_limit=False, minloglevel=1,
    )
    return buf.getvalue()


def spm_vocab_text(sp) -> str:
    """The ``.vocab`` file sentencepiece writes next to a model (``piece<TAB>score``)."""
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


def build_token_dictionary(words_per_sentence, pieces: Dict[str, List[str]], threshold=0, nwords=-1, padding_factor=8):
    """fairseq's ``build_dictionary`` for the text of these sentences, without the text file:
    piece counts plus one ``</s>`` per line, ``add_symbol`` in sorted order, ``finalize``."""
    d = Dictionary()
    word_counts = Counter(chain.from_iterable(words_per_sentence))
    counter = Counter()
    for w, c in word_counts.items():
        for p in pieces[w]:
            counter[p] += c
    counter[d.eos_word] += len(words_per_sentence)
    for sym, c in sorted(counter.items()):
        d.add_symbol(sym, c)
    d.finalize(threshold=threshold, nwords=nwords, padding_factor=padding_factor)
    return d


def load_token_dictionary(path: str):
    """A fairseq ``Dictionary`` from ``path`` (``--srcdict``), read by
    :func:`~sipe_fairseq.data.dictionary.load_dictionary` (as fairseq reads it: ``<token> <count>
    [#fairseq:overwrite]``, no duplicate token), so an error names the line."""
    try:
        return load_dictionary(path)
    except DataError as e:
        raise PreprocessError(str(e)) from None


@dataclass
class PreprocessVocabulary:
    """What the streams are written with: the word -> pieces map and the dictionaries."""

    pieces: Dict[str, List[str]]
    tokens: object  # fairseq Dictionary (dict.txt)
    tags: Dict[str, object]  # terminal, nonterminal (and deprel) -> fairseq Dictionary
    spm: Optional[dict] = None  # the manifest's "spm" entry (None with --no-split)


def _subword_model(opts: PreprocessOptions, train: SplitData, dest: str):
    """``(sentencepiece processor or None, manifest entry)``; writes ``spm.model``/``spm.vocab``."""
    if opts.no_split:
        return None, None
    if opts.spm_model:
        with open(opts.spm_model, "rb") as f:
            model = f.read()
    else:
        logger.info("training sentencepiece (%s, %d pieces) on %s", opts.spm_model_type, opts.spm_vocab_size, opts.train)
        model = train_spm((" ".join(s) for s in train.words if s), opts.spm_vocab_size, opts.spm_model_type)
    sp = spm.SentencePieceProcessor(model_proto=model)
    if not opts.spm_model and sp.get_piece_size() < opts.spm_vocab_size:
        logger.warning("sentencepiece: only %d pieces (asked %d): small training data", sp.get_piece_size(), opts.spm_vocab_size)
    with atomic_open(os.path.join(dest, "spm.model"), binary=True) as f:
        f.write(model)
    write_text(os.path.join(dest, "spm.vocab"), spm_vocab_text(sp))
    return sp, {
        "source": opts.spm_model or "trained", "pieces": sp.get_piece_size(),
        "sha256": hashlib.sha256(model).hexdigest(),
        "model_type": None if opts.spm_model else opts.spm_model_type,
        "vocab_size": None if opts.spm_model else opts.spm_vocab_size,
    }


def _tag_dictionaries(opts: PreprocessOptions, train: SplitData, pieces: Dict[str, List[str]], dest: str) -> Dict[str, object]:
    """Tag dictionaries from train (the ``<notag>`` count: continuation pieces and ``</s>``), and with
    ``--deprel`` the deprel one (reused from beside ``--srcdict`` when there is one); writes them."""
    n_words = sum(len(s) for s in train.words)
    train_notag = sum(len(pieces[w]) for w in chain.from_iterable(train.words)) + len(train.words) - n_words
    dicts = {}
    for kind in TAG_KINDS:
        counts = Counter(tag_names(kind)[i - FIRST_TAG_ID] for i in chain.from_iterable(getattr(train, kind)))
        counts[NOTAG] = train_notag
        dicts[kind] = build_tag_dictionary(kind, counts)
    deprel_src = os.path.join(os.path.dirname(os.path.abspath(opts.srcdict)), "dict.deprel.txt") if opts.srcdict else None
    reuse_deprel = bool(opts.deprel and deprel_src and os.path.isfile(deprel_src))
    if reuse_deprel:
        load_token_dictionary(deprel_src)  # line-level checks
        try:
            dicts["deprel"] = load_tag_dictionary(deprel_src, "deprel")
        except ValueError as e:
            raise PreprocessError(str(e)) from e
        logger.info("deprel dictionary: %s (beside --srcdict)", deprel_src)
    elif opts.deprel:
        if deprel_src:
            logger.warning("--deprel: no %s beside --srcdict; building the deprel dictionary from %s", deprel_src, opts.train)
        dicts["deprel"] = build_label_dictionary(Counter(chain.from_iterable(train.deprels)), train_notag)
    for kind, d in dicts.items():
        if kind == "deprel" and reuse_deprel:
            shutil.copyfile(deprel_src, os.path.join(dest, "dict.deprel.txt"))
        else:
            d.save(os.path.join(dest, f"dict.{kind}.txt"))
    return dicts


def build_vocabulary(opts: PreprocessOptions, data: Dict[str, SplitData], dest: str) -> PreprocessVocabulary:
    """Subword model, word -> pieces map, ``dict.txt`` (built from train, or ``--srcdict``) and the tag
    dictionaries; writes their files into ``dest``."""
    train = data["train"]
    sp, spm_info = _subword_model(opts, train, dest)
    all_words = chain.from_iterable(chain.from_iterable(d.words for d in data.values()))
    pieces, n_nopiece = segment_words(all_words, sp, max(1, opts.workers))
    if n_nopiece:
        logger.warning("%d distinct words have no subword piece; each is written as %s", n_nopiece, WORD_MARK)
    if spm_info:
        spm_info["distinct_words_without_pieces"] = n_nopiece
    if opts.srcdict:
        tok_dict = load_token_dictionary(opts.srcdict)
        shutil.copyfile(opts.srcdict, os.path.join(dest, "dict.txt"))  # byte for byte, as fairseq-preprocess
        logger.info("dictionary: %s (%d entries, --srcdict)", opts.srcdict, len(tok_dict))
    else:
        tok_dict = build_token_dictionary(train.words, pieces, opts.thresholdsrc, opts.nwordssrc, opts.padding_factor)
        tok_dict.save(os.path.join(dest, "dict.txt"))
    return PreprocessVocabulary(pieces, tok_dict, _tag_dictionaries(opts, train, pieces, dest), spm_info)
