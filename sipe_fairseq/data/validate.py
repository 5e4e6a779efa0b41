"""Validation of a SiPE data directory before training or evaluation: one place for every check.

A split is the token stream ``{split}.bin/.idx`` and its tag streams ``{split}.{kind}.bin/.idx``
(:mod:`sipe_fairseq.data.preprocess` documents the layout), for ``--task gilt_lm`` also its arc
stream ``{split}.arcs.bin/.idx`` (:mod:`sipe_fairseq.data.gilt.arc_streams`). :func:`validate_split`
refuses a split with a :class:`DataError` that names the file and, for content errors, the first bad
sentence:

*Structure* (always, every stream): both files present; the ``.idx`` header (fairseq's mmap
magic, version, dtype) and its length (26 + 12 bytes per sentence); pointers that are the running
sum of the sizes; the ``.bin`` holding exactly the tokens its index describes; no empty split
(fairseq cannot mmap an empty file); every tag stream with the token stream's sentence count and
sentence lengths; the arc stream with the token stream's sentence count.

*Content* (the whole split, or for ``fast`` on splits above :data:`FAST_FULL_TOKENS` tokens an
evenly spread sample of :data:`FAST_SAMPLE_SENTENCES` sentences): token ids inside ``dict.txt``
and every sentence ending in ``</s>``; tag ids inside their dictionary (``<notag>`` or a tag;
``<unk>`` too for deprels); ``<notag>`` on ``</s>``; tags only on a word's first subword (a piece
with sentencepiece's U+2581 mark, any piece with ``--no-split``; ``<unk>`` may be either); every
tag stream tagged at the same positions as the terminal stream. For ``sipe-preprocess``
directories also: every sentence's first piece tagged, every word-start piece tagged (up to the
manifest's count of words whose whitespace became U+2581, which split into several marked
pieces), and, when the whole split was read, the number of tagged positions equal to the
manifest's ``tagged_positions``. Arc streams: every sentence's item decodes to exactly its words
(the terminal stream's tagged positions), each word's arcs going to earlier nodes only (an arc
belongs to its later word), and, when the whole split was read, the manifest's count of arcs.

*Manifest files* (``manifest.json`` ``files``: bytes, crc32 and sha256 of every file
``sipe-preprocess`` wrote): ``fast`` compares byte sizes and the crc32 (reads each file once, so
any changed byte is refused), ``full`` also the sha256 (in the same read). A manifest from before
file checksums were recorded is counted (``no_checksum``; the task logs one warning), not refused.

Mode ``none`` skips everything but the structure checks fairseq needs to open the files.
"""
import json
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..hexatag.errors import DataError
from .gilt.arcs import ArcError, decode_words
from .tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from .words import word_start_mask
from .writers import digests

logger = logging.getLogger(__name__)

VALIDATION_MODES = ("fast", "full", "none")
FAST_FULL_TOKENS = 1 << 24     # fast mode reads every token of a split up to this size ...
FAST_SAMPLE_SENTENCES = 20000  # ... and beyond it this many sentences, evenly spread
CHUNK_TOKENS = 1 << 22         # content is checked this many tokens at a time

_IDX_MAGIC = b"MMIDIDX\x00\x00"
_IDX_HEADER = len(_IDX_MAGIC) + 8 + 1 + 8  # magic, version <Q, dtype code <B, count <Q
_IDX_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.double,
               8: np.uint16, 9: np.uint32, 10: np.uint64}  # fairseq.data.indexed_dataset._code_to_dtype
_REBUILD = "rebuild the data directory with sipe-preprocess"


# ----------------------------------------------------------------------------- streams


@dataclass
class Stream:
    """One binarized stream: ``prefix`` (.bin/.idx), its dtype and per-sentence sizes/offsets (tokens)."""

    prefix: str
    dtype: np.dtype
    sizes: np.ndarray
    offsets: np.ndarray

    @property
    def bin(self) -> str:
        return self.prefix + ".bin"

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Tokens ``lo:hi`` (flat positions) as int64."""
        if hi <= lo:  # numpy cannot map an empty range
            return np.zeros(0, dtype=np.int64)
        data = np.memmap(self.bin, dtype=self.dtype, mode="r", offset=lo * self.dtype.itemsize, shape=(hi - lo,))
        out = np.asarray(data, dtype=np.int64)
        del data
        return out


def read_stream(prefix: str, what: str = "stream") -> Stream:
    """Open ``prefix.idx``/``prefix.bin`` and check their structure; :class:`DataError` otherwise."""
    idx, binf = prefix + ".idx", prefix + ".bin"
    missing = [p for p in (idx, binf) if not os.path.isfile(p)]
    if missing:
        raise DataError(f"{missing[0]}: no such file ({what})")
    n_bytes = os.path.getsize(idx)
    with open(idx, "rb") as f:
        head = f.read(_IDX_HEADER)
    if len(head) < _IDX_HEADER or head[:len(_IDX_MAGIC)] != _IDX_MAGIC:
        raise DataError(f"{idx}: not a fairseq mmap index ({n_bytes} bytes, bad header); {_REBUILD}")
    (version,) = struct.unpack("<Q", head[9:17])
    code, (count,) = head[17], struct.unpack("<Q", head[18:26])
    if version != 1 or code not in _IDX_DTYPES:
        raise DataError(f"{idx}: unsupported index (version {version}, dtype code {code}); {_REBUILD}")
    expect = _IDX_HEADER + 12 * count
    if n_bytes != expect:
        raise DataError(f"{idx}: {n_bytes} bytes, but its header announces {count} sentences ({expect} bytes): "
                        f"truncated or damaged; {_REBUILD}")
    dtype = np.dtype(_IDX_DTYPES[code])
    sizes = np.fromfile(idx, dtype=np.int32, count=count, offset=_IDX_HEADER).astype(np.int64)
    pointers = np.fromfile(idx, dtype=np.int64, count=count, offset=_IDX_HEADER + 4 * count)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    bad = np.flatnonzero((sizes < 0) | (pointers != offsets[:-1] * dtype.itemsize))
    if bad.size:
        raise DataError(f"{idx}: sentence {int(bad[0])}: size/pointer out of sequence (damaged index); {_REBUILD}")
    data_bytes, want = os.path.getsize(binf), int(offsets[-1]) * dtype.itemsize
    if data_bytes != want:
        raise DataError(f"{binf}: {data_bytes} bytes, but {idx} describes {int(offsets[-1])} tokens of "
                        f"{dtype.itemsize} bytes ({want} bytes): truncated, extended or from another run; {_REBUILD}")
    return Stream(prefix, dtype, sizes, offsets)


# ----------------------------------------------------------------------------- manifest


@dataclass
class Expectations:
    """What a directory's writer guarantees beyond the generic layout."""

    no_split: bool = False                  # every token (but </s>) is a word start
    every_word_tagged: bool = False         # sipe-preprocess: each word's first piece carries its tags
    split_stats: Optional[dict] = None      # manifest.json "splits"[split]
    files: Optional[Dict[str, dict]] = None  # manifest.json "files": name -> {"bytes", "crc32", "sha256"}
    manifest: Optional[str] = None          # path of the manifest read, if any


def read_json(path: str) -> Optional[dict]:
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: not a JSON manifest ({e})") from None


def expectations(data_dir: str, split: str) -> Expectations:
    """From ``manifest.json`` (``sipe-preprocess``) or the parent's ``glue.json`` (a
    ``sipe-glue-preprocess`` input folder); without either, only what the files show."""
    path = os.path.join(data_dir, "manifest.json")
    manifest = read_json(path)
    if manifest is not None:
        settings = manifest.get("settings", {})
        return Expectations(no_split=bool(settings.get("no_split", False)), every_word_tagged=True,
                            split_stats=manifest.get("splits", {}).get(split), files=manifest.get("files"),
                            manifest=path)
    parent = os.path.dirname(os.path.abspath(data_dir))
    glue = os.path.join(parent, "glue.json")
    if os.path.isfile(glue):  # GLUE: pieces from the pre-training spm.model (copied beside glue.json), if any
        return Expectations(no_split=not os.path.isfile(os.path.join(parent, "spm.model")), manifest=glue)
    return Expectations(no_split=not os.path.isfile(os.path.join(data_dir, "spm.model")))


def check_files(data_dir: str, names: Sequence[str], exp: Expectations, mode: str) -> dict:
    """Compare files with the manifest's record: sizes and crc32 (``fast``), also the sha256
    (``full``), each file read once. Returns counts ``checked`` (sizes), ``crc32`` and ``hashed``
    (checksums compared), ``unrecorded`` (files the manifest does not list) and ``no_checksum``
    (listed without a crc32: a manifest written before it was recorded)."""
    out = {"checked": 0, "crc32": 0, "hashed": 0, "unrecorded": 0, "no_checksum": 0}
    changed = f"the file changed after sipe-preprocess wrote it; {_REBUILD}"
    for name in names:
        rec = (exp.files or {}).get(name)
        if rec is None:
            out["unrecorded"] += 1
            continue
        path = os.path.join(data_dir, name)
        size = os.path.getsize(path)
        if size != rec.get("bytes"):
            raise DataError(f"{path}: {size} bytes, {exp.manifest} records {rec.get('bytes')}: {changed}")
        out["checked"] += 1
        want_crc, want_sha = rec.get("crc32") is not None, mode == "full"
        out["no_checksum"] += int(not want_crc)
        if not (want_crc or want_sha):
            continue
        got = digests(path, sha256=want_sha, crc32=want_crc)
        if want_crc:
            if got["crc32"] != rec["crc32"]:
                raise DataError(f"{path}: crc32 {int(got['crc32']):08x} differs from the {int(rec['crc32']):08x} "
                                f"{exp.manifest} records (same size, other bytes): {changed}")
            out["crc32"] += 1
        if want_sha:
            if got["sha256"] != rec.get("sha256"):
                raise DataError(f"{path}: sha256 differs from {exp.manifest}: {changed}")
            out["hashed"] += 1
    return out


# ----------------------------------------------------------------------------- content


@dataclass
class DictionaryLimits:
    """What the content checks need from the dictionaries."""

    size: int                       # token ids must be < size
    eos: int
    unk: int
    word_start: np.ndarray          # bool per token id: the piece starts a word
    tag_sizes: Dict[str, int]       # kind -> dictionary size
    tag_unk_ok: Tuple[str, ...] = ("deprel",)  # kinds whose streams may hold <unk> (unknown labels)


def dictionary_limits(dictionary, tag_dictionaries: Mapping[str, object], no_split: bool) -> DictionaryLimits:
    """A :class:`DictionaryLimits` from fairseq dictionaries (token, and kind -> tag dictionary)."""
    starts = word_start_mask(dictionary, specials=True, no_split=no_split).numpy()  # the masked-LM whole-word rule
    starts[[dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()]] = False  # </s>, <unk>: checked apart
    return DictionaryLimits(len(dictionary), dictionary.eos(), dictionary.unk(), starts,
                      {k: len(d) for k, d in tag_dictionaries.items()})


@dataclass
class _Scope:
    """Sentences whose content is checked: ``ranges`` of sentence indices ``[a, b)``."""

    ranges: List[Tuple[int, int]] = field(default_factory=list)
    whole: bool = True

    def describe(self, n: int) -> str:
        k = sum(b - a for a, b in self.ranges)
        return f"all {n} sentences" if self.whole else f"a sample of {k} of {n} sentences"


def _scope(tokens: Stream, mode: str) -> _Scope:
    n = len(tokens.sizes)
    if mode == "full" or int(tokens.offsets[-1]) <= FAST_FULL_TOKENS or n <= FAST_SAMPLE_SENTENCES:
        bounds, ranges, a = tokens.offsets, [], 0  # chunks of about CHUNK_TOKENS tokens
        while a < n:
            b = int(np.searchsorted(bounds, bounds[a] + CHUNK_TOKENS, side="right")) - 1
            b = min(max(b, a + 1), n)
            ranges.append((a, b))
            a = b
        return _Scope(ranges, True)
    picks = np.unique(np.linspace(0, n - 1, FAST_SAMPLE_SENTENCES).astype(np.int64))
    return _Scope([(int(i), int(i) + 1) for i in picks], False)


def _first(mask: np.ndarray, offsets: np.ndarray, lo: int) -> Tuple[int, int, int]:
    """(sentence, position in sentence, count) of the first True of ``mask`` (flat from ``lo``)."""
    bad = np.flatnonzero(mask)
    pos = lo + int(bad[0])
    sent = int(np.searchsorted(offsets, pos, side="right")) - 1
    return sent, pos - int(offsets[sent]), int(bad.size)


def _tag_name(kind: str) -> str:
    return {"terminal": "terminal tag", "nonterminal": "non-terminal tag"}.get(kind, f"{kind} label")


def check_content(tokens: Stream, tags: Mapping[str, Stream], vocab: DictionaryLimits, exp: Expectations,
                  scope: _Scope) -> dict:
    """The content checks of the module docstring over ``scope``; returns counts."""
    counts = {"tokens": 0, "tagged": 0, "untagged_word_starts": 0}
    allowance = int((exp.split_stats or {}).get("words_whitespace_replaced", 0) or 0)
    first_untagged = None
    reference = "terminal" if "terminal" in tags else next(iter(tags), None)
    for a, b in scope.ranges:
        lo, hi = int(tokens.offsets[a]), int(tokens.offsets[b])
        where = lambda m: _first(m, tokens.offsets, lo)  # noqa: E731
        t = tokens.read(lo, hi)
        counts["tokens"] += hi - lo
        ends = tokens.offsets[a + 1:b + 1] - lo - 1
        starts = tokens.offsets[a:b] - lo
        bad = (t < 0) | (t >= vocab.size)
        if bad.any():
            s, j, n = where(bad)
            raise DataError(f"{tokens.bin}: sentence {s}, position {j}: token id {int(t[bad][0])} outside dict.txt "
                            f"({vocab.size} entries); {n} such ids in this part; {_REBUILD}")
        end_ok = np.zeros(hi - lo, dtype=bool)
        end_ok[ends] = t[ends] != vocab.eos
        if end_ok.any():
            s, j, _ = where(end_ok)
            raise DataError(f"{tokens.bin}: sentence {s} does not end with </s> (id {vocab.eos}); {_REBUILD}")
        is_eos = np.zeros(hi - lo, dtype=bool)
        is_eos[ends] = True
        start_piece = vocab.word_start[t]
        maybe_start = start_piece | (t == vocab.unk)
        ref_tagged = None
        for kind, stream in tags.items():
            g = stream.read(lo, hi)
            size = vocab.tag_sizes[kind]
            tagged = (g >= FIRST_TAG_ID) & (g < size)
            if kind in vocab.tag_unk_ok:
                tagged |= g == vocab.unk  # a label unknown to the dictionary still marks a word
            ok = tagged | (g == NOTAG_ID)
            if not ok.all():
                s, j, n = where(~ok)
                raise DataError(f"{stream.bin}: sentence {s}, position {j}: id {int(g[~ok][0])} is not a {_tag_name(kind)} "
                                f"id (<notag> = {NOTAG_ID}, tags {FIRST_TAG_ID}..{size - 1}); {n} such ids in this part; "
                                f"{_REBUILD}")
            bad = tagged & is_eos
            if bad.any():
                s, j, _ = where(bad)
                raise DataError(f"{stream.bin}: sentence {s}: a {_tag_name(kind)} on </s> (position {j}); </s> carries "
                                f"<notag>; {_REBUILD}")
            bad = tagged & ~maybe_start
            if bad.any():
                s, j, n = where(bad)
                raise DataError(f"{stream.bin}: sentence {s}, position {j}: a {_tag_name(kind)} on a continuation piece "
                                f"(tags belong on a word's first subword); {n} such positions in this part; {_REBUILD}")
            if ref_tagged is None:
                ref_tagged = tagged
            elif not np.array_equal(tagged, ref_tagged):
                s, j, n = where(tagged != ref_tagged)
                raise DataError(f"{stream.bin}: sentence {s}, position {j}: tagged where {reference} is not (or the "
                                f"reverse); the streams must be tagged at the same positions ({n} differ in this part); "
                                f"{_REBUILD}")
        if ref_tagged is None:
            continue
        counts["tagged"] += int(ref_tagged.sum())
        if exp.every_word_tagged:
            ref_bin = tags[reference].bin
            bad = np.zeros(hi - lo, dtype=bool)
            bad[starts] = ~ref_tagged[starts]
            if bad.any():
                s, _, n = where(bad)
                raise DataError(f"{ref_bin}: sentence {s}: its first piece carries no tag (every sentence starts with "
                                f"a word); {n} such sentences in this part; {_REBUILD}")
            untagged = start_piece & ~ref_tagged
            k = int(untagged.sum())
            if k and first_untagged is None:
                first_untagged = where(untagged)[:2]
            counts["untagged_word_starts"] += k
            if counts["untagged_word_starts"] > allowance:
                s, j = first_untagged
                raise DataError(f"{ref_bin}: sentence {s}, position {j}: a word-start piece without a tag; "
                                f"{counts['untagged_word_starts']} such positions, more than the "
                                f"{allowance} words with inner whitespace the manifest counts; {_REBUILD}")
    return counts


def check_arc_content(arcs: Stream, terminal: Stream, scope: _Scope) -> int:
    """Every sentence of ``scope``: its arc item decodes to exactly as many words as ``terminal``
    tags (:func:`~sipe_fairseq.data.gilt.arcs.decode_words`: counts inside the item, each word's heads
    among nodes 0..w-1 and dependents among words 1..w-1, as an arc belongs to its later word);
    returns the number of arcs."""
    n_arcs = 0
    for a, b in scope.ranges:
        lo, hi = int(terminal.offsets[a]), int(terminal.offsets[b])
        tagged = np.concatenate([[0], np.cumsum(terminal.read(lo, hi) != NOTAG_ID)])
        words = tagged[terminal.offsets[a + 1:b + 1] - lo] - tagged[terminal.offsets[a:b] - lo]
        alo = int(arcs.offsets[a])
        flat = arcs.read(alo, int(arcs.offsets[b])).tolist()
        for k, i in enumerate(range(a, b)):
            item = flat[int(arcs.offsets[i]) - alo:int(arcs.offsets[i + 1]) - alo]
            n = int(words[k])
            try:
                decoded = decode_words(item, n)
            except ArcError as e:
                raise DataError(f"{arcs.bin}: sentence {i}: {e} (the sentence has {n} words in {terminal.bin}): the arc "
                                f"stream is damaged or out of step with the words; {_REBUILD}") from None
            n_arcs += sum(len(h) + len(d) for h, d in decoded)
    return n_arcs


# ----------------------------------------------------------------------------- one split


def split_files(split: str, kinds: Sequence[str], arcs: bool = False) -> List[str]:
    """The files a split is read from: its streams (with ``arcs``, the arc stream too) and the dictionaries."""
    suffixes = [""] + [f".{k}" for k in kinds] + ([".arcs"] if arcs else [])
    streams = [f"{split}{suffix}.{ext}" for suffix in suffixes for ext in ("idx", "bin")]
    return streams + ["dict.txt"] + [f"dict.{k}.txt" for k in kinds]


def validate_split(data_dir: str, split: str, dictionary, tag_dictionaries: Mapping[str, object],
                   mode: str = "fast", exp: Optional[Expectations] = None, arcs: bool = False) -> dict:
    """Check ``{data_dir}/{split}`` and its tag streams (kinds: the keys of ``tag_dictionaries``), with
    ``arcs`` also its arc stream (GiLT; needs the terminal stream); raises :class:`DataError` on the
    first problem, returns a report (counts) otherwise (``arcs_checked``: the content of every
    sentence's arcs was checked)."""
    if mode not in VALIDATION_MODES:
        raise ValueError(f"validation mode must be one of {VALIDATION_MODES}, got {mode!r}")
    exp = exp or expectations(data_dir, split)
    prefix = os.path.join(data_dir, split)
    if not any(os.path.isfile(prefix + ext) for ext in (".idx", ".bin")):
        raise DataError(f"{prefix}.bin/.idx: no split {split!r} in {data_dir}")
    tokens = read_stream(prefix, f"token stream of split {split!r}")
    n = len(tokens.sizes)
    if n == 0:
        raise DataError(f"{tokens.bin}: split {split!r} has no sentence (fairseq cannot load an empty split): give "
                        f"the split sentences, or leave it out (--valid-subset / --disable-validation)")
    tags = {}
    for kind in tag_dictionaries:
        p = f"{prefix}.{kind}"
        if not any(os.path.isfile(p + ext) for ext in (".idx", ".bin")):
            raise missing_stream(p, kind, split, data_dir)
        s = read_stream(p, f"{kind} stream of split {split!r}")
        check_alignment(s.sizes, tokens.sizes, p + ".idx", prefix + ".idx", kind, split)
        tags[kind] = s
    arc_stream = read_arc_stream(prefix, split, data_dir, n) if arcs else None
    report = {"split": split, "sentences": n, "tokens": int(tokens.offsets[-1]), "mode": mode,
              "streams": list(tags) + (["arcs"] if arcs else []), "arcs_checked": False}
    if mode == "none":
        return report
    vocab = dictionary_limits(dictionary, tag_dictionaries, exp.no_split)
    scope = _scope(tokens, mode)
    counts = check_content(tokens, tags, vocab, exp, scope)
    report.update(checked=scope.describe(n), tagged=counts["tagged"], untagged_word_starts=counts["untagged_word_starts"])
    expected = (exp.split_stats or {}).get("tagged_positions")
    if scope.whole and expected is not None and tags and counts["tagged"] != expected:
        ref = tags.get("terminal", next(iter(tags.values())))
        raise DataError(f"{ref.bin}: {counts['tagged']} tagged positions, {exp.manifest} counts {expected} words "
                        f"for split {split!r}; {_REBUILD}")
    if arc_stream is not None:
        if "terminal" not in tags:
            raise ValueError("validating an arc stream needs the terminal stream (its words)")
        n_arcs = check_arc_content(arc_stream, tags["terminal"], scope)
        expected = ((exp.split_stats or {}).get("arcs") or {}).get("arcs")
        if scope.whole and expected is not None and n_arcs != expected:
            raise DataError(f"{arc_stream.bin}: {n_arcs} arcs, {exp.manifest} counts {expected} for split {split!r}; "
                            f"{_REBUILD}")
        report.update(arcs=n_arcs, arcs_checked=scope.whole)
    files = split_files(split, list(tags), arcs)
    report["files"] = check_files(data_dir, files, exp, mode) if exp.files is not None else None
    return report


def read_arc_stream(prefix: str, split: str, data_dir: str, n_sentences: int) -> Stream:
    """``{prefix}.arcs``'s structure (:func:`read_stream`) and its sentence count against the tokens'."""
    p = f"{prefix}.arcs"
    if not any(os.path.isfile(p + ext) for ext in (".idx", ".bin")):
        raise DataError(f"{p}.bin/.idx: no arc stream for split {split!r} (--task gilt_lm reads the gold graphs): "
                        f"rebuild {data_dir} with a sipe-preprocess that writes arcs")
    s = read_stream(p, f"arc stream of split {split!r}")
    if len(s.sizes) != n_sentences:
        raise DataError(f"{p}.idx: {len(s.sizes)} sentences, the token stream {prefix}.idx {n_sentences}: the arc "
                        f"stream does not belong to split {split!r}; {_REBUILD}")
    return s


def missing_stream(prefix: str, kind: str, split: str, data_dir: str) -> DataError:
    return DataError(f"{prefix}.bin/.idx: no {kind} stream for split {split!r}: {data_dir} is not a SiPE data "
                     f"directory; make one from CoNLL-U with `sipe-preprocess --train FILE ... --destdir DIR`")


def check_alignment(sizes: Sequence[int], token_sizes: Sequence[int], path: str, token_path: str, kind: str,
                    split: str) -> None:
    """A tag stream (index ``path``) holds one id per token: same sentence count, same length per sentence."""
    sizes, token_sizes = np.asarray(sizes), np.asarray(token_sizes)
    if len(sizes) != len(token_sizes):
        raise DataError(f"{path}: {len(sizes)} sentences, the token stream {token_path} {len(token_sizes)}: the "
                        f"{kind} stream does not belong to split {split!r}; {_REBUILD}")
    bad = np.flatnonzero(sizes != token_sizes)
    if bad.size:
        i = int(bad[0])
        raise DataError(f"{path}: sentence {i} has {int(sizes[i])} {kind} ids but {int(token_sizes[i])} tokens "
                        f"({bad.size} sentences differ): not aligned with the tokens; {_REBUILD}")
