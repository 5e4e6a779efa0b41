"""CoNLL-U (or raw text and a parser) -> fairseq data directory with aligned hexatag streams
(``sipe-preprocess``).

Layout of the destination directory (splits ``train``, ``valid``, ``valid1``.., ``test``, ``test1``..,
named as ``fairseq-preprocess`` names them)::

    dict.txt              {split}.bin/.idx               subword tokens (+ </s> per sentence)
    dict.terminal.txt     {split}.terminal.bin/.idx      one tag id per token position
    dict.nonterminal.txt  {split}.nonterminal.bin/.idx
    dict.deprel.txt       {split}.deprel.bin/.idx        only with --deprel
                          {split}.arcs.bin/.idx          GiLT arcs, one item per sentence (arc_streams.py; --arcs tree|deps)
    spm.model, spm.vocab                                 unless --no-split
    {split}.tok                                          subword text, only with --keep-text
    manifest.json                                        counts per split, settings, bytes and sha256 per file

*Byte identity.* ``dict.txt`` and the token ``.bin/.idx`` equal what ``fairseq-preprocess
--only-source`` (mmap) writes for the ``{split}.tok`` text, so stock ``language_modeling`` trains a
baseline on the same directory. They are built with fairseq's own pieces: ``Dictionary``
(``add_symbol`` in sorted order and ``finalize``, with one ``</s>`` counted per line as
``add_file_to_dictionary`` does), ``best_fitting_int_dtype`` and the mmap builder. Pieces never
contain whitespace, so fairseq's ``tokenize_line`` of a text line gives back exactly the pieces.

*Syntactic words.* Tags belong to syntactic words: a CoNLL-U multiword token (``3-4 don't``) is
represented by its syntactic words (``do`` ``n't``); its surface line is only counted, as are empty
nodes (``8.1``), which are not part of the basic tree. Whitespace inside a word is replaced by
U+2581 (an empty word becomes U+2581), counted, so one word never becomes two text tokens.

*Alignment* (paper appendix A.1). Each word is tokenized on its own, so pieces never cross words.
A sentence's token sequence is its pieces plus the ``</s>`` that fairseq appends; every tag stream
has exactly one id per position: the word's tag on its first piece, ``<notag>`` on continuation
pieces and on ``</s>`` (see :mod:`sipe_fairseq.data.tag_dictionary`).

*Refusals.* Non-projective trees are lifted (counted), or refused with ``strict``. Sentences that
cannot be processed are refused: logged with ``file:line``, counted per reason in the manifest
(``malformed``, ``invalid-tree``, ``non-projective``, ``encoding-error``, ``parse-failed`` for text
input); nothing is dropped silently, and ``fail_on_refusal`` turns any refusal into an error
before anything is written (but ``save_conllu``, see below).

*Text input* (``input_format`` ``text`` or ``tokenized``). Each line of a split's file is one
sentence, parsed with a backend (:class:`~sipe_fairseq.parsing.line_tagger.LineTagger`, as ``sipe-tag``
parses: ``tokenized`` is ``sipe-tag --pretokenized``) into the CoNLL-U block ``sipe-tag`` would
write for it, and these blocks then go through the CoNLL-U path above, so the directory equals
``sipe-tag`` followed by ``sipe-preprocess`` on its CoNLL-U (only ``manifest.json`` differs: it names
the text files, the input format and the backend). ``save_conllu`` keeps those CoNLL-U files
(``{split}.conllu``, byte-identical to ``sipe-tag -o``). Empty (all-whitespace) lines are skipped:
a data directory holds no empty sentence (a sentence needs at least one word for its tags), unlike
``fairseq-preprocess``, which keeps an empty line as a sentence of just ``</s>``; they are logged
with ``file:line`` and counted (``empty_lines_skipped``). Lines the backend cannot parse (or whose
parse cannot be hexatag-encoded) are refused as ``parse-failed``, logged with ``file:line``. Per split,
``lines_read`` = ``empty_lines_skipped`` + ``sentences_read``, and ``sentences_read`` =
``sentences`` + ``sentences_refused``. Messages about a parsed sentence give the text file and line.

*Raw corpora* (text input; ``segment``, ``documents``, ``drop_headings``). With ``segment`` a line
may hold several sentences: the backend splits it by its own sentence boundaries (spaCy: one tree
per sentence) and each sentence is one tree, its own ``sent_id`` ``LINE-K`` in the saved CoNLL-U.
``documents`` keeps document boundaries for fairseq's ``--sample-break-mode complete_doc``: a
document break is written as an empty sentence (``</s>`` only, every tag ``<notag>``), as
``fairseq-preprocess`` writes an empty line; documents start after a run of blank lines
(``blank-lines``) or at a WikiText title line ``= Title =`` (``wikitext``), and each starts with
``# newdoc`` in the saved CoNLL-U. ``drop_headings`` drops WikiText heading lines (``= Title =``,
``= = Section = =``, ..). Blank lines and dropped headings are counted (``empty_lines_skipped``,
``headings_dropped``), never parsed; ``lines_read`` = ``empty_lines_skipped`` + ``headings_dropped``
+ ``lines_parsed``, and the manifest counts ``document_breaks`` and ``documents``. For every text input the
manifest counts the sentences whose parse had several roots (``root_fixed_sentences``, the extra
roots attached to the first: ``extra_roots``); the saved CoNLL-U keeps the backend's DEPREL, UPOS
and XPOS (spaCy's labels; ``root``/``dep`` and ``_`` for a backend without labels).

*Determinism.* Re-running on the same input gives identical bytes for every file: sentencepiece is
trained single-threaded from memory (the model holds no paths), the manifest has sorted keys and
no timestamps, and worker count does not change the output.

*Modules.* :mod:`.options` (settings, :class:`PreprocessError`, checks before reading),
:mod:`.conllu` (CoNLL-U reading and refusals), :mod:`.text` (raw-text reading through a parser
backend), :mod:`.vocabulary` (sentencepiece, ``dict.txt``, tag dictionaries), :mod:`.writing`
(streams and manifest); the word mark and the word-start rules are :mod:`sipe_fairseq.data.words`.
"""
import logging
import os
import shutil
import tempfile
from typing import Dict, Sequence, Tuple

from ..words import WORD_MARK, clean_word, segment_words
from ..writers import file_digests, write_manifest
from .conllu import REFUSAL_REASONS, SplitData, read_split
from .options import INPUT_FORMATS, PreprocessError, PreprocessOptions, check_options, split_inputs
from .text import read_text_splits
from .vocabulary import PreprocessVocabulary, build_token_dictionary, build_vocabulary, load_token_dictionary, train_spm
from .writing import build_manifest, write_all_splits

logger = logging.getLogger(__name__)


__all__ = [
    "PreprocessOptions", "PreprocessError", "preprocess", "check_options", "read_inputs", "split_inputs",
    "read_split", "read_text_splits", "SplitData", "build_vocabulary", "PreprocessVocabulary", "train_spm",
    "build_token_dictionary", "load_token_dictionary", "write_all_splits", "build_manifest", "clean_word",
    "segment_words", "WORD_MARK", "REFUSAL_REASONS", "INPUT_FORMATS",
]


def read_inputs(opts: PreprocessOptions, splits: Sequence[Tuple[str, str]]) -> Dict[str, SplitData]:
    """Every split read (CoNLL-U, or text through the backend), refusals checked against
    ``fail_on_refusal``; a training split without a usable sentence is an error."""
    if opts.input_format != "conllu":
        data = read_text_splits(splits, opts)
    else:
        data = {name: read_split(path, opts.strict, opts.workers, name, opts.progress) for name, path in splits}
    for name, d in data.items():
        if not any(d.words):
            logger.warning("[%s] %s: no sentence kept; the split will be empty (fairseq cannot load it)", name, d.path)
    refused = {name: sum(d.refused.values()) for name, d in data.items() if d.refused}
    if refused and opts.fail_on_refusal:
        detail = ", ".join(f"{n}: {dict(sorted(data[n].refused.items()))}" for n in refused)
        raise PreprocessError(f"refused sentences ({detail}); nothing written (--fail-on-refusal)")
    if not any(data["train"].words):
        raise PreprocessError(f"{opts.train}: no usable training sentence")
    return data


def preprocess(opts: PreprocessOptions) -> dict:
    """Build the data directory described in the module docstring; returns the manifest.
    Steps: read -> vocabulary -> streams -> manifest."""
    splits = check_options(opts)
    data = read_inputs(opts, splits)
    os.makedirs(opts.destdir, exist_ok=True)
    stage = tempfile.mkdtemp(prefix=".partial-", dir=opts.destdir)
    try:
        vocab = build_vocabulary(opts, data, stage)
        stats = write_all_splits(opts, data, vocab, stage)
        manifest = build_manifest(opts, splits, vocab, stats)
        manifest["files"] = file_digests(stage)
        write_manifest(os.path.join(stage, "manifest.json"), manifest)
        publish(stage, opts.destdir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    logger.info("wrote %s", opts.destdir)
    return manifest


def publish(stage: str, destdir: str) -> None:
    """The files written into ``stage`` (a hidden folder inside ``destdir``, so that a rename never crosses file
    systems) moved into ``destdir``: the old ``manifest.json`` removed first and the new one moved last. A run
    stopped before (Ctrl-C, a full disk, a refusal) leaves ``destdir`` as it was; one stopped while the renames
    run leaves no manifest: never a manifest beside another run's files. Other files of ``destdir`` are left
    alone."""
    target = os.path.join(destdir, "manifest.json")
    if os.path.lexists(target):
        os.remove(target)
    names = sorted(os.listdir(stage))
    for name in [n for n in names if n != "manifest.json"] + ["manifest.json"]:
        os.replace(os.path.join(stage, name), os.path.join(destdir, name))
