"""Writing: each split's token and tag streams (and GiLT's arc stream, ``{split}.tok`` with
``keep_text``) with their manifest counts, and the manifest."""
import logging
import os
from itertools import chain
from typing import Dict, List, Sequence, Tuple

import numpy as np
from tqdm import tqdm

from ...parsing import DEFAULT_BACKEND
from ..gilt.arc_streams import sentence_item, write_arc_stream
from ..gilt.arcs import ArcError
from ..tag_dictionary import NOTAG_ID, TAG_KINDS
from ..writers import sha256_file, tool_versions, write_streams, write_text
from .conllu import REFUSAL_REASONS, SplitData
from .options import PreprocessError, PreprocessOptions, raw_corpus
from .vocabulary import PreprocessVocabulary

logger = logging.getLogger(__name__)


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


def write_split(opts: PreprocessOptions, name: str, d: SplitData, vocab: PreprocessVocabulary, dest: str,
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
                    ("headings_dropped", "lines_parsed", "document_breaks") if raw_corpus(opts) else ()):
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


def write_all_splits(opts: PreprocessOptions, data: Dict[str, SplitData], vocab: PreprocessVocabulary,
                     dest: str) -> Dict[str, dict]:
    """Every split's streams; returns the per-split manifest counts."""
    tok_dict = vocab.tokens
    ids = {w: [tok_dict.index(p) for p in ps] for w, ps in vocab.pieces.items()}
    unk_in = {w: n for w, ps in vocab.pieces.items() if (n := sum(p not in tok_dict.indices for p in ps))}
    bar = tqdm(data.items(), desc="write", unit=" split", disable=None if opts.progress else True)
    return {name: write_split(opts, name, d, vocab, dest, ids, unk_in) for name, d in bar}


def build_manifest(opts: PreprocessOptions, splits: Sequence[Tuple[str, str]], vocab: PreprocessVocabulary,
                   stats: Dict[str, dict]) -> dict:
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
