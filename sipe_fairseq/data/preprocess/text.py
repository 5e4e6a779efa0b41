"""Reading raw text: each line parsed with a backend into the CoNLL-U block ``sipe-tag`` would
write, which then goes through the CoNLL-U reader (see *Text input* and *Raw corpora* in
:mod:`sipe_fairseq.data.preprocess`)."""
import contextlib
import logging
import os
import re
from collections import Counter
from typing import Dict, Sequence, Tuple

from ...hexatag.errors import InputError
from ...hexatag.lines import read_lines
from ...parsing import DEFAULT_BACKEND
from ...parsing.line_tagger import LineTagger, tagged_line_conllu
from ..writers import atomic_open
from .conllu import SplitData, read_blocks
from .options import PreprocessError, PreprocessOptions, raw_corpus

logger = logging.getLogger(__name__)


WIKITEXT_HEADING = re.compile(r"^\s*(?:=\s+)+\S.*?(?:\s+=)+\s*$")  # " = Title = ", " = = Section = = "

WIKITEXT_TITLE = re.compile(r"^\s*=\s+[^=\s].*?\s+=\s*$")  # a top-level title: one "=" on each side


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
            texts[name] = read_lines(path)  # the one reader: lines end at "\n" only, file:line of a byte not UTF-8
        except InputError as e:
            raise PreprocessError(str(e)) from None
    if opts.save_conllu:
        os.makedirs(opts.save_conllu, exist_ok=True)
    raw = raw_corpus(opts)
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
            saved_path = os.path.join(opts.save_conllu, f"{name}.conllu") if opts.save_conllu else None
            with atomic_open(saved_path) if saved_path else contextlib.nullcontext() as saved:  # kept only when whole
                for line in tagger.tag(lines, desc=f"parse {name}", linenos=linenos, name=path):
                    new_doc = line.lineno in doc_lines and line.sentence <= 1
                    if new_doc:
                        doc_lines.discard(line.lineno)
                        if items and items[-1] is not None:
                            items.append(None)  # a document break between two documents
                    if not raw:
                        data.stats["lines_read"] += 1
                    block = tagged_line_conllu(line, newdoc=new_doc)
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
            blocks[name] = (data, items)
    out = {}
    for name, (data, items) in blocks.items():
        read_blocks(data, items, opts.workers, name, opts.progress)
        out[name] = data
    return out
