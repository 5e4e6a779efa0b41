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
"""
import hashlib
import io
import logging
import os
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from multiprocessing import Pool
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from ..hexatag import encode, encode_tree
from ..hexatag.conllu_io import parse_sentence, sentence_blocks
from ..hexatag.errors import ConlluError, HexatagError, NonProjectiveError, TreeError
from ..parsing import DEFAULT_BACKEND, resolve_parser
from ..parsing.line_tagger import LineTagger, conllu_block, read_lines
from .tag_dictionary import (
    FIRST_TAG_ID, NOTAG, NOTAG_ID, TAG_KINDS, build_label_dictionary, build_tag_dictionary, load_tag_dictionary,
    tag_names,
)
from .arc_streams import ARC_SOURCES, sentence_item, write_arc_stream
from .arcs import ArcError, deps_arcs
from .writers import file_digests, sha256_file, tool_versions, write_manifest, write_streams, write_text

logger = logging.getLogger(__name__)

SPACE_MARK = "\u2581"
REFUSAL_REASONS = ("malformed", "invalid-tree", "non-projective", "encoding-error", "parse-failed")
INPUT_FORMATS = ("conllu", "text", "tokenized")
DOCUMENT_MODES = ("none", "blank-lines", "wikitext")
WIKITEXT_HEADING = re.compile(r"^\s*(?:=\s+)+\S.*?(?:\s+=)+\s*$")  # " = Title = ", " = = Section = = "
WIKITEXT_TITLE = re.compile(r"^\s*=\s+[^=\s].*?\s+=\s*$")  # a top-level title: one "=" on each side
_WS = re.compile(r"\s")  # the same notion of whitespace as fairseq's tokenize_line and str.split
_TAG_IDS = {kind: {t: FIRST_TAG_ID + i for i, t in enumerate(tag_names(kind))} for kind in TAG_KINDS}


class PreprocessError(RuntimeError):
    """Preprocessing cannot go on (bad options, missing input, refusals with fail_on_refusal)."""


@dataclass
class PreprocessOptions:
    """Settings of :func:`preprocess` (the ``sipe-preprocess`` options)."""

    train: str
    destdir: str
    valid: Sequence[str] = ()
    test: Sequence[str] = ()
    spm_model: Optional[str] = None
    srcdict: Optional[str] = None  # reuse this dict.txt (and dict.deprel.txt beside it) instead of building
    spm_vocab_size: int = 8000
    spm_model_type: str = "unigram"
    no_split: bool = False
    deprel: bool = False
    strict: bool = False
    fail_on_refusal: bool = False
    keep_text: bool = False
    workers: int = 1
    thresholdsrc: int = 0
    nwordssrc: int = -1
    padding_factor: int = 8
    # text input: format, parser backend (see sipe_fairseq.parsing.line_tagger) and where to keep the CoNLL-U
    input_format: str = "conllu"
    backend: Optional[str] = None  # None: parsing.DEFAULT_BACKEND
    batch_size: int = 256
    threads: int = 1
    save_conllu: Optional[str] = None
    progress: bool = True
    # raw corpora (text input): sentences by the backend's boundaries, document breaks, headings
    segment: bool = False  # a line may hold several sentences (one tree each)
    documents: str = "none"  # none | blank-lines | wikitext: where documents break (an empty </s> sentence)
    drop_headings: bool = False  # drop WikiText heading lines (= Title =, = = Section = =, ..), counted
    arcs: str = "tree"  # GiLT arc stream {split}.arcs from the basic tree or the DEPS graph (data/arc_streams.py)


def split_inputs(train: str, valid: Sequence[str] = (), test: Sequence[str] = ()) -> List[Tuple[str, str]]:
    """``[(split, path)]`` with fairseq's names: train, valid, valid1, .., test, test1, .."""
    out = [("train", train)]
    for base, paths in (("valid", valid), ("test", test)):
        out += [(base + (str(k) if k else ""), p) for k, p in enumerate(paths)]
    return out


# ----------------------------------------------------------------------------- reading


@dataclass
class _Refusal:
    reason: str
    message: str


def clean_word(word: str) -> Tuple[str, int, int]:
    """``(word with whitespace -> U+2581, 1 if replaced, 1 if empty -> U+2581)``."""
    if not word:
        return SPACE_MARK, 0, 1
    if _WS.search(word):
        return _WS.sub(SPACE_MARK, word), 1, 0
    return word, 0, 0


def _process_block(item):
    """Worker: one block -> ``(words, deprels, terminal ids, nonterminal ids, counts)`` or a refusal
    (``None``, a document break, stays ``None``)."""
    if item is None:
        return None
    path, start, lines, strict = item
    try:
        sent = parse_sentence(lines, path, start)
    except ConlluError as e:
        return _Refusal("invalid-tree" if isinstance(e.__cause__, TreeError) else "malformed", str(e))
    where = f"{path}:{start}" + (f" (sent_id {sent.sent_id})" if sent.sent_id else "")
    lifts = 0
    try:
        try:
            tags = encode(sent.heads)
        except NonProjectiveError:
            tags, _, lifts = encode_tree(sent.heads, strict=strict)
    except NonProjectiveError as e:
        return _Refusal("non-projective", f"{where}: {e}")
    except HexatagError as e:
        return _Refusal("encoding-error", f"{where}: {e}")
    words, n_ws, n_empty = sent.words, 0, 0
    if not all(words) or _WS.search("".join(words)):  # rare: clean word by word
        cleaned = [clean_word(w) for w in words]
        words = [c[0] for c in cleaned]
        n_ws, n_empty = sum(c[1] for c in cleaned), sum(c[2] for c in cleaned)
    t_ids, n_ids = _TAG_IDS["terminal"], _TAG_IDS["nonterminal"]
    counts = (lifts, len(sent.multiword), sent.empty_nodes, n_ws, n_empty)
    try:
        graph = deps_arcs(lines)  # (DEPS arcs, heads on empty nodes skipped), for --arcs deps
    except ArcError as e:
        graph = (None, f"{where}: DEPS: {e}")
    return words, sent.deprels, [t_ids[t] for t, _ in tags], [n_ids[n] for _, n in tags], counts, (sent.heads, graph)


@dataclass
class SplitData:
    """Sentences kept from one CoNLL-U file, word-level, plus counts."""

    path: str
    words: List[List[str]] = field(default_factory=list)
    deprels: List[List[str]] = field(default_factory=list)
    terminal: List[List[int]] = field(default_factory=list)
    nonterminal: List[List[int]] = field(default_factory=list)
    arcs: List[Optional[tuple]] = field(default_factory=list)  # (heads, (DEPS arcs, skipped)); None: document break
    stats: Counter = field(default_factory=Counter)
    refused: Counter = field(default_factory=Counter)


def read_split(path: str, strict: bool = False, workers: int = 1, desc: str = "", progress: bool = True) -> SplitData:
    """Read, check and hexatag-encode a CoNLL-U file; refusals are logged and counted."""
    data = SplitData(path)
    try:
        with open(path, encoding="utf-8") as f:
            items = ((path, start, lines, strict) for start, lines in sentence_blocks(f))
            _read_blocks(data, items, workers, desc, progress)
    except UnicodeDecodeError as e:
        raise PreprocessError(f"{path}: not UTF-8 text ({e.reason})") from e
    return data


def _read_blocks(data: SplitData, items, workers: int, desc: str, progress: bool) -> None:
    """Add the sentences of ``items`` (``(path, first line, block lines, strict)``, or ``None`` for a
    document break: an empty sentence, ``</s>`` only, as fairseq-preprocess writes an empty line) to ``data``."""
    pool = Pool(workers) if workers > 1 else None
    try:
        results = pool.imap(_process_block, items, chunksize=128) if pool else map(_process_block, items)
        for r in tqdm(results, desc=f"read {desc}".strip(), unit=" sent", disable=None if progress else True):
            if r is None:
                for stream in (data.words, data.deprels, data.terminal, data.nonterminal):
                    stream.append([])
                data.arcs.append(None)
                data.stats["document_breaks"] += 1
                continue
            data.stats["sentences_read"] += 1
            if isinstance(r, _Refusal):
                data.refused[r.reason] += 1
                logger.warning("refused (%s): %s", r.reason, r.message)
                continue
            words, deprels, term, nonterm, (lifts, mwt, empty, n_ws, n_empty), arcs = r
            data.arcs.append(arcs)
            data.words.append(words)
            data.deprels.append(deprels)
            data.terminal.append(term)
            data.nonterminal.append(nonterm)
            st = data.stats
            st["trees_lifted"] += lifts > 0
            st["arcs_lifted"] += lifts
            st["multiword_tokens"] += mwt
            st["empty_nodes_skipped"] += empty
            st["words_whitespace_replaced"] += n_ws
            st["words_empty_replaced"] += n_empty
    finally:
        if pool:
            pool.close()
            pool.join()


def _raw_corpus(opts: PreprocessOptions) -> bool:
    return opts.segment or opts.documents != "none" or opts.drop_headings


def _select_lines(lines: Sequence[str], opts: PreprocessOptions, stats: Counter):
    """Raw-corpus options: ``([(lineno, text)] to parse, {index in that list: a document starts there})``;
    blank lines and dropped headings are counted, never parsed."""
    keep, starts, pending = [], set(), False
    for lineno, text in enumerate(lines, 1):
        stats["lines_read"] += 1
        if not text.strip():
            stats["empty_lines_skipped"] += 1
            pending = pending or opts.documents == "blank-lines"
            continue
        if opts.documents == "wikitext" and WIKITEXT_TITLE.match(text):
            pending = True
        if opts.drop_headings and WIKITEXT_HEADING.match(text):
            stats["headings_dropped"] += 1
            continue
        if pending or not keep:
            starts.add(len(keep))
            pending = False
        keep.append((lineno, text))
    stats["lines_parsed"] += len(keep)
    return keep, starts


def read_text_splits(splits: Sequence[Tuple[str, str]], opts: PreprocessOptions) -> Dict[str, SplitData]:
    """Parse each split's text file with the backend and read the parses as CoNLL-U (see *Text
    input* above); with ``opts.save_conllu`` also write them to ``{save_conllu}/{split}.conllu``.
    With the raw-corpus options (``segment``, ``documents``, ``drop_headings``; *Raw corpora* above)
    blank lines and headings are never parsed, a document break becomes an empty sentence, and
    the saved CoNLL-U marks each document with ``# newdoc``."""
    texts = {}
    for name, path in splits:
        try:
            texts[name] = read_lines(path)
        except UnicodeDecodeError as e:
            raise PreprocessError(f"{path}: not UTF-8 text ({e.reason})") from e
    if opts.save_conllu:
        os.makedirs(opts.save_conllu, exist_ok=True)
    raw = _raw_corpus(opts)
    tagger = LineTagger(opts.backend or DEFAULT_BACKEND, opts.input_format == "tokenized", opts.batch_size,
                        max(1, opts.workers), opts.threads, opts.progress, segment=opts.segment)
    blocks = {}
    with tagger:
        for name, path in splits:
            data, items = SplitData(path), []
            if raw:
                keep, starts = _select_lines(texts[name], opts, data.stats)
                doc_lines = {keep[i][0] for i in starts} if opts.documents != "none" else set()
                lines, linenos = [t for _, t in keep], [n for n, _ in keep]
            else:
                doc_lines, lines, linenos = set(), texts[name], None
            saved = open(os.path.join(opts.save_conllu, f"{name}.conllu"), "w", encoding="utf-8",
                         newline="\n") if opts.save_conllu else None
            try:
                for line in tagger.tag(lines, desc=f"parse {name}", linenos=linenos):
                    new_doc = line.lineno in doc_lines and line.sentence <= 1
                    if new_doc:
                        doc_lines.discard(line.lineno)
                        if items and items[-1] is not None:
                            items.append(None)  # a document break between two documents
                    if not raw:
                        data.stats["lines_read"] += 1
                    block = conllu_block(line, newdoc=new_doc)
                    if saved:
                        saved.write(block)
                    if line.empty:
                        data.stats["empty_lines_skipped"] += 1
                        logger.warning("%s:%d: empty line (skipped)", path, line.lineno)
                    elif not line.ok:
                        data.stats["sentences_read"] += 1
                        data.refused["parse-failed"] += 1
                        logger.warning("refused (parse-failed): %s:%d: %s", path, line.lineno, line.result)
                    else:
                        data.stats["root_fixed_sentences"] += int(line.extra_roots > 0)
                        data.stats["extra_roots"] += line.extra_roots
                        items.append((path, line.lineno, block.rstrip("\n").split("\n"), opts.strict))
            finally:
                if saved:
                    saved.close()
            blocks[name] = (data, items)
    out = {}
    for name, (data, items) in blocks.items():
        _read_blocks(data, items, opts.workers, name, opts.progress)
        out[name] = data
    return out


# ----------------------------------------------------------------------------- subwords


def train_spm(sentences, vocab_size: int = 8000, model_type: str = "unigram") -> bytes:
    """Train sentencepiece on space-joined sentences; returns the serialized model (deterministic:
    single thread, trained from memory so the model records no file names)."""
    import sentencepiece as spm

    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
        num_threads=1, hard_vocab_limit=False, minloglevel=1,
    )
    return buf.getvalue()


def spm_vocab_text(sp) -> str:
    """The ``.vocab`` file sentencepiece writes next to a model (``piece<TAB>score``)."""
    return "".join(f"{sp.id_to_piece(i)}\t{sp.get_score(i):g}\n" for i in range(sp.get_piece_size()))


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
            pieces, n_none = [SPACE_MARK], n_none + 1
        out[w] = pieces
    return out, n_none


def build_token_dictionary(words_per_sentence, pieces: Dict[str, List[str]], threshold=0, nwords=-1, padding_factor=8):
    """fairseq's ``build_dictionary`` for the text of these sentences, without the text file:
    piece counts plus one ``</s>`` per line, ``add_symbol`` in sorted order, ``finalize``."""
    from fairseq.data import Dictionary

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


# ----------------------------------------------------------------------------- vocabulary


def load_token_dictionary(path: str):
    """A fairseq ``Dictionary`` from ``path`` (``--srcdict``). Lines are checked first as fairseq reads
    them (``<token> <count> [#fairseq:overwrite]``, no duplicate token), so an error names the line."""
    from fairseq.data import Dictionary

    seen = {}
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            parts = raw.rstrip().rsplit(" ", 1)
            overwrite = len(parts) == 2 and parts[1] == "#fairseq:overwrite"
            if overwrite:
                parts = parts[0].rsplit(" ", 1)
            if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
                raise PreprocessError(f"{path}:{n}: not a fairseq dictionary line '<token> <count> "
                                      f"[#fairseq:overwrite]': {raw.rstrip()!r}")
            if parts[0] in seen and not overwrite:
                raise PreprocessError(f"{path}:{n}: token {parts[0]!r} already on line {seen[parts[0]]}")
            seen[parts[0]] = n
    return Dictionary.load(path)


@dataclass
class Vocabulary:
    """What the streams are written with: the word -> pieces map and the dictionaries."""

    pieces: Dict[str, List[str]]
    tokens: object  # fairseq Dictionary (dict.txt)
    tags: Dict[str, object]  # terminal, nonterminal (and deprel) -> fairseq Dictionary
    spm: Optional[dict] = None  # the manifest's "spm" entry (None with --no-split)


def _subword_model(opts: PreprocessOptions, train: SplitData, dest: str):
    """``(sentencepiece processor or None, manifest entry)``; writes ``spm.model``/``spm.vocab``."""
    if opts.no_split:
        return None, None
    import sentencepiece as spm

    if opts.spm_model:
        with open(opts.spm_model, "rb") as f:
            model = f.read()
    else:
        logger.info("training sentencepiece (%s, %d pieces) on %s", opts.spm_model_type, opts.spm_vocab_size, opts.train)
        model = train_spm((" ".join(s) for s in train.words if s), opts.spm_vocab_size, opts.spm_model_type)
    sp = spm.SentencePieceProcessor(model_proto=model)
    if not opts.spm_model and sp.get_piece_size() < opts.spm_vocab_size:
        logger.warning("sentencepiece: only %d pieces (asked %d): small training data", sp.get_piece_size(), opts.spm_vocab_size)
    with open(os.path.join(dest, "spm.model"), "wb") as f:
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


def build_vocabulary(opts: PreprocessOptions, data: Dict[str, SplitData], dest: str) -> Vocabulary:
    """Subword model, word -> pieces map, ``dict.txt`` (built from train, or ``--srcdict``) and the tag
    dictionaries; writes their files into ``dest``."""
    train = data["train"]
    sp, spm_info = _subword_model(opts, train, dest)
    all_words = chain.from_iterable(chain.from_iterable(d.words for d in data.values()))
    pieces, n_nopiece = segment_words(all_words, sp, max(1, opts.workers))
    if n_nopiece:
        logger.warning("%d distinct words have no subword piece; each is written as %s", n_nopiece, SPACE_MARK)
    if spm_info:
        spm_info["distinct_words_without_pieces"] = n_nopiece
    if opts.srcdict:
        tok_dict = load_token_dictionary(opts.srcdict)
        shutil.copyfile(opts.srcdict, os.path.join(dest, "dict.txt"))  # byte for byte, as fairseq-preprocess
        logger.info("dictionary: %s (%d entries, --srcdict)", opts.srcdict, len(tok_dict))
    else:
        tok_dict = build_token_dictionary(train.words, pieces, opts.thresholdsrc, opts.nwordssrc, opts.padding_factor)
        tok_dict.save(os.path.join(dest, "dict.txt"))
    return Vocabulary(pieces, tok_dict, _tag_dictionaries(opts, train, pieces, dest), spm_info)


# ----------------------------------------------------------------------------- streams


def _layout(data: SplitData, pieces: Dict[str, List[str]]):
    """Flat word list and position arithmetic: ``(flat_words, npieces, first_pos, sizes, piece_pos)``."""
    sent_len = np.fromiter((len(w) for w in data.words), dtype=np.int64, count=len(data.words))
    flat_words = list(chain.from_iterable(data.words))
    npieces = np.fromiter((len(pieces[w]) for w in flat_words), dtype=np.int64, count=len(flat_words))
    word_sent = np.repeat(np.arange(len(sent_len)), sent_len)
    first_pos = np.cumsum(npieces) - npieces + word_sent  # +1 per earlier sentence for its </s>
    sizes = np.bincount(word_sent, weights=npieces, minlength=len(sent_len)).astype(np.int64) + 1  # empty: </s> only
    piece_pos = np.arange(int(npieces.sum())) + np.repeat(word_sent, npieces)
    return flat_words, npieces, first_pos, sizes, piece_pos


def _word_stream(total: int, first_pos: np.ndarray, word_ids) -> np.ndarray:
    out = np.full(total, NOTAG_ID, dtype=np.int64)
    out[first_pos] = np.fromiter(word_ids, dtype=np.int64, count=len(first_pos))
    return out


def write_split(opts: PreprocessOptions, name: str, d: SplitData, vocab: Vocabulary, dest: str,
                ids: Dict[str, List[int]], unk_in: Dict[str, int]) -> dict:
    """Write one split's token and tag streams (and ``.tok`` with ``keep_text``); returns its manifest counts."""
    text_input = opts.input_format != "conllu"
    pieces, tok_dict = vocab.pieces, vocab.tokens
    flat_words, npieces, first_pos, sizes, piece_pos = _layout(d, pieces)
    total = int(sizes.sum())
    tokens = np.full(total, tok_dict.eos(), dtype=np.int64)
    tokens[piece_pos] = np.fromiter(chain.from_iterable(ids[w] for w in flat_words), np.int64, len(piece_pos))
    n_unk = sum(unk_in.get(w, 0) for w in flat_words)  # as fairseq's "replaced" count
    prefix = os.path.join(dest, name)
    streams = {"": (tokens, len(tok_dict))}
    for kind in TAG_KINDS:
        streams["." + kind] = (_word_stream(total, first_pos, chain.from_iterable(getattr(d, kind))), len(vocab.tags[kind]))
    n_bad_deprel = 0
    if opts.deprel:
        dd = vocab.tags["deprel"]
        dep_ids = [dd.index(r) for r in chain.from_iterable(d.deprels)]
        n_bad_deprel = sum(i == dd.unk() for i in dep_ids)
        streams[".deprel"] = (_word_stream(total, first_pos, dep_ids), len(dd))
    write_streams(prefix, sizes, streams)
    arc_stats = _write_arcs(opts, prefix, d)
    if opts.keep_text:
        write_text(prefix + ".tok", "".join(" ".join(chain.from_iterable(pieces[w] for w in s)) + "\n" for s in d.words))
    st = dict(d.stats)
    st.update(
        sentences=sum(1 for w in d.words if w), words=len(flat_words), subwords=total, tagged_positions=len(flat_words),
        notag_positions=total - len(flat_words), unk_tokens=n_unk,
        refused={r: d.refused.get(r, 0) for r in REFUSAL_REASONS},
    )
    st["sentences_refused"] = sum(d.refused.values())
    st["arcs"] = arc_stats
    if opts.deprel:
        st["deprels_unknown"] = n_bad_deprel
    for key in ("sentences_read", "trees_lifted", "arcs_lifted", "multiword_tokens", "empty_nodes_skipped",
                "words_whitespace_replaced", "words_empty_replaced") + (
                    ("lines_read", "empty_lines_skipped", "root_fixed_sentences", "extra_roots") if text_input else ()) + (
                    ("headings_dropped", "lines_parsed", "document_breaks") if _raw_corpus(opts) else ()):
        st[key] = int(st.get(key, 0))
    if opts.documents != "none":
        st["documents"] = st["document_breaks"] + 1 if st["sentences"] else 0
    logger.info(
        "[%s] %s: %d sents, %d tokens, %d unk, %d lifted trees, %d refused%s%s", name, d.path, st["sentences"], total,
        n_unk, st["trees_lifted"], st["sentences_refused"], f", {n_bad_deprel} unknown deprels" if opts.deprel else "",
        f", {st['empty_lines_skipped']} empty lines skipped" if text_input else "",
    )
    return st


def _write_arcs(opts: PreprocessOptions, prefix: str, d: SplitData) -> dict:
    """GiLT's arc stream ``{prefix}.arcs`` (one item per sentence, :mod:`.arc_streams`); its manifest counts."""
    items = []
    for a in d.arcs:
        if a is not None and opts.arcs == "deps" and a[1][0] is None:
            raise PreprocessError(f"--arcs deps: {a[1][1]}")
        try:
            items.append([] if a is None else sentence_item(a[0], a[1][0], opts.arcs))
        except ArcError as e:
            raise PreprocessError(f"--arcs {opts.arcs}: {d.path}, sentence {len(items) + 1}: {e}") from None
    st = write_arc_stream(prefix, items, [len(w) for w in d.words])
    st["source"] = opts.arcs
    if opts.arcs == "deps":
        st["deps_heads_on_empty_nodes_skipped"] = sum(a[1][1] for a in d.arcs if a is not None)
    return st


def write_all_splits(opts: PreprocessOptions, data: Dict[str, SplitData], vocab: Vocabulary, dest: str) -> Dict[str, dict]:
    """Every split's streams; returns the per-split manifest counts."""
    tok_dict = vocab.tokens
    ids = {w: [tok_dict.index(p) for p in ps] for w, ps in vocab.pieces.items()}
    unk_in = {w: n for w, ps in vocab.pieces.items() if (n := sum(p not in tok_dict.indices for p in ps))}
    bar = tqdm(data.items(), desc="write", unit=" split", disable=None if opts.progress else True)
    return {name: write_split(opts, name, d, vocab, dest, ids, unk_in) for name, d in bar}


# ----------------------------------------------------------------------------- manifest


def build_manifest(opts: PreprocessOptions, splits: Sequence[Tuple[str, str]], vocab: Vocabulary, stats: Dict[str, dict]) -> dict:
    text_input = opts.input_format != "conllu"
    return {
        "format": "sipe-preprocess/1",
        "inputs": {name: {"path": path, "sha256": sha256_file(path)} for name, path in splits},
        "settings": {
            "alignment": "first-subword", "dataset_impl": "mmap", "deprel": opts.deprel, "arcs": opts.arcs,
            "no_split": opts.no_split,
            "strict": opts.strict, "thresholdsrc": opts.thresholdsrc, "nwordssrc": opts.nwordssrc,
            "padding_factor": opts.padding_factor, "spm": vocab.spm, "input_format": opts.input_format,
            "srcdict": {"path": opts.srcdict, "sha256": sha256_file(opts.srcdict)} if opts.srcdict else None,
            **({"backend": opts.backend or DEFAULT_BACKEND} if text_input else {}),
        },
        "dictionaries": {"dict.txt": len(vocab.tokens), **{f"dict.{k}.txt": len(d) for k, d in vocab.tags.items()}},
        "splits": stats,
        "versions": tool_versions(),
    }


# ----------------------------------------------------------------------------- main entry


def check_options(opts: PreprocessOptions) -> List[Tuple[str, str]]:
    """Refuse inconsistent options and missing inputs before anything is read; returns the splits."""
    if opts.no_split and opts.spm_model:
        raise PreprocessError("--no-split and --spm-model exclude each other")
    if opts.spm_model_type not in ("unigram", "bpe"):
        raise PreprocessError(f"--spm-model-type must be unigram or bpe, got {opts.spm_model_type!r}")
    if opts.input_format not in INPUT_FORMATS:
        raise PreprocessError(f"--input-format must be one of {', '.join(INPUT_FORMATS)}, got {opts.input_format!r}")
    text_input = opts.input_format != "conllu"
    if not text_input and (opts.backend or opts.save_conllu):
        raise PreprocessError("a backend and --save-conllu need --input-format text or tokenized")
    if opts.arcs not in ARC_SOURCES:
        raise PreprocessError(f"--arcs must be one of {', '.join(ARC_SOURCES)}, got {opts.arcs!r}")
    if opts.documents not in DOCUMENT_MODES:
        raise PreprocessError(f"--documents must be one of {', '.join(DOCUMENT_MODES)}, got {opts.documents!r}")
    if not text_input and _raw_corpus(opts):
        raise PreprocessError("--segment-sentences, --documents and --drop-headings need --input-format text or tokenized")
    if text_input:
        try:
            factory, _ = resolve_parser(opts.backend or DEFAULT_BACKEND)
        except ValueError as e:
            raise PreprocessError(str(e)) from e
        if opts.segment and not hasattr(factory, "analyze"):
            raise PreprocessError(f"--segment-sentences: backend {opts.backend!r} cannot split sentences")
    if opts.srcdict:
        if not (opts.spm_model or opts.no_split):
            raise PreprocessError("--srcdict needs the sentencepiece model its pieces come from (--spm-model, e.g. "
                                  "the spm.model beside it) or --no-split")
        fixed = [o for o, v, default in (("--thresholdsrc", opts.thresholdsrc, 0), ("--nwordssrc", opts.nwordssrc, -1))
                 if v != default]
        if fixed:
            raise PreprocessError(f"{', '.join(fixed)}: the dictionary is fixed by --srcdict")
    splits = split_inputs(opts.train, opts.valid, opts.test)
    for name, path in splits + [(n, v) for n, v in (("spm-model", opts.spm_model), ("srcdict", opts.srcdict)) if v]:
        if not os.path.isfile(path):
            raise PreprocessError(f"{name}: no such file: {path}")
    if os.path.exists(os.path.join(opts.destdir, "dict.txt")):
        raise FileExistsError(f"{os.path.join(opts.destdir, 'dict.txt')} exists; use a new --destdir")
    return splits


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
    vocab = build_vocabulary(opts, data, opts.destdir)
    stats = write_all_splits(opts, data, vocab, opts.destdir)
    manifest = build_manifest(opts, splits, vocab, stats)
    manifest["files"] = file_digests(opts.destdir)
    write_manifest(os.path.join(opts.destdir, "manifest.json"), manifest)
    logger.info("wrote %s", opts.destdir)
    return manifest
