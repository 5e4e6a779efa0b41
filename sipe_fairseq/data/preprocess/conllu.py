"""Reading CoNLL-U: each sentence block checked and hexatag-encoded, word by word (see *Syntactic
words* and *Refusals* in :mod:`sipe_fairseq.data.preprocess`). A sentence that cannot be used is
refused: logged with ``file:line`` and counted per reason (:data:`REFUSAL_REASONS`)."""
import logging
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from typing import List, Optional

from tqdm import tqdm

from ...hexatag import encode, encode_tree
from ...hexatag.conllu_io import parse_sentence, sentence_blocks
from ...hexatag.lines import iter_lines
from ...hexatag.errors import ConlluError, HexatagError, InputError, NonProjectiveError, TreeError
from ...hexatag.pool import WorkerPool
from ..gilt.arcs import ArcError, deps_arcs
from ..tag_dictionary import FIRST_TAG_ID, TAG_KINDS, tag_names
from ..words import WHITESPACE, clean_word
from .options import PreprocessError

logger = logging.getLogger(__name__)


REFUSAL_REASONS = ("malformed", "invalid-tree", "non-projective", "encoding-error", "parse-failed")

_TAG_IDS = {kind: {t: FIRST_TAG_ID + i for i, t in enumerate(tag_names(kind))} for kind in TAG_KINDS}


@dataclass
class _Refusal:
    reason: str
    message: str


CHUNK = 128  # blocks per worker job


def _chunks(items, size: int):
    it = iter(items)
    while True:
        chunk = list(islice(it, size))
        if not chunk:
            return
        yield chunk


def _process_chunk(chunk):
    return [_process_block(item) for item in chunk]


def _block_names(chunk) -> List[str]:
    """``file:line`` of each sentence of a chunk (a document break: ``document break``)."""
    return [f"{item[0]}:{item[1]}" if item is not None else "document break" for item in chunk]


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
    if not all(words) or WHITESPACE.search("".join(words)):  # rare: clean word by word
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
    try:  # the one reader (lines end at "\n" only); a byte that is not UTF-8 refuses the file, naming its line
        blocks = sentence_blocks(text for _, text in iter_lines(path))
        read_blocks(data, ((path, start, lines, strict) for start, lines in blocks), workers, desc, progress)
    except InputError as e:
        raise PreprocessError(str(e)) from None
    return data


def read_blocks(data: SplitData, items, workers: int, desc: str, progress: bool) -> None:
    """Add the sentences of ``items`` (``(path, first line, block lines, strict)``, or ``None`` for a
    document break: an empty sentence, ``</s>`` only, as fairseq-preprocess writes an empty line) to ``data``."""
    pool = WorkerPool(_process_chunk, workers, method=None, what="reading") if workers > 1 else None
    try:
        if pool:  # chunks of blocks, read from the stream as the workers take them; a worker that dies names its lines
            chunks = pool.map(_chunks(items, CHUNK), covers=lambda chunk: list(range(len(chunk))), names=_block_names)
            results = (r for _, rs in chunks for r in rs)
        else:
            results = map(_process_block, items)
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
    finally:  # Ctrl-C or an error: the rest of the file is not read, the workers are ended
        if pool:
            pool.close()
