"""``sipe-surprisal``: per-token or per-word surprisal of sentences, in lm-zoo's TSV layout.

    sipe-surprisal --path ck/checkpoint_best.pt sentences.txt > surprisals.tsv
    sipe-surprisal --path ck/checkpoint_best.pt --tags given,self,mix:16 --level word sentences.conllu

Input (a file, or ``-``: stdin): one sentence per line (split into words by the commands' tokenizer;
``given`` parses them with ``--parser``), or CoNLL-U (``--format conllu``, the default for a ``.conllu``
file: its words, and its trees as the structure of ``given``). Without ``--tags`` the source is the model's
``default_source``, an exact one (``self`` with structure, ``untagged`` without). Output (stdout or
``--output``): lm-zoo's ``get-surprisals`` layout, a header ``sentence_id	token_id	token	surprisal	kind`` and
one row per token (``--level token``: the model's pieces, ``</s>`` included) or word (``--level word``, the
header ``word``: the word's surprisal with the beginning-of-word correction, docs/python.md), ids 1-based,
surprisal in bits, ``kind`` the kind of number (``conditional``, ``exact``, ``bound``); with several ``--tags``
sources one column per source, ``surprisal[SOURCE]``, then ``kind[SOURCE]``. ``--json`` writes everything
:meth:`sipe_fairseq.hub.LanguageModel.score` returns instead (tokens, words, log-probabilities, the kind of
number and the structure).

``--documents``: the text input holds documents separated by blank lines, and each sentence is scored after the
sentences before it in its document (``LanguageModel.score(context=...)``: only its own tokens counted, the
structure chosen from the whole prefix; ``self``, ``mix:K`` or a model without structure): the most recent whole
sentences that fit the model's positions, the others counted in a last column ``context_dropped`` (never a silent
cut); a first column ``document_id`` (1-based). ``--measures surprisal,structure`` (``--level word``): after the
surprisal, per source, the structure's own numbers per word (``structure_surprisal``, ``structure_entropy``,
``posterior_entropy``, ``lexical_surprisal``, bits; empty under a source that has none; docs/evaluation.md, "The
structure's own surprisal").

The whole input is read and checked first, by the one line reader (:mod:`sipe_fairseq.hexatag.lines`: lines
end at ``\\n`` only, so a form feed, NEL or U+2028 inside a line never shifts a sentence_id): a line that is not
UTF-8, an empty line or a bad CoNLL-U block is named ``FILE:LINE``; then every sentence's length against the
model's positions; then the sentences are scored in chunks (4 batches of ``--tags-batch-sentences``) and
their rows written as they come, so that memory does not grow with the input (stdin is copied to a temporary file to be
read again). ``--output`` is replaced only when everything was written; stdout is streamed.

``--num-shards N --shard-id I`` (as ``sipe-eval-lm --tags``; docs/scaling.md): score the sentences whose 0-based
index ``i`` has ``i % N == I`` (with ``--documents``: the documents, each whole, so that every sentence keeps its
context) and write to ``--output`` (required) a shard file (:mod:`sipe_fairseq.eval.shards`: the ``shard`` block and
fingerprint, and each scored sentence's TSV rows, or ``--json`` records, under its id in the whole input);
``sipe-eval merge SHARD... --output OUT`` joins the shards into the output one run would have written.

Exit status: 0 ok, 1 a score that is not finite (the model's forward pass overflows: one line naming the
sentence; ``--output`` not written, stdout has the rows of the chunks before it) or an output that cannot be
written (disk full, file too large, a closed pipe: one line naming it), 2 usage or input error (an option, an
unreadable or empty input, a line that is not UTF-8, an empty line, a sentence longer than the model's
positions: never cut; ``--num-shards``/``--shard-id`` out of range, one without the other, a shard without
``--output``), 3 the checkpoint or the parser cannot be loaded.
"""
import argparse
import contextlib
import hashlib
import json
import logging
import os
import sys
import textwrap
from typing import Iterable, Iterator, Optional, Sequence, TextIO, Tuple

from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError
from sipe_fairseq.cli import logs
from sipe_fairseq.cli.allocator import keep_freed_memory
from sipe_fairseq.cli.options import (add_device_argument, SPLIT_ONLY, add_dictionary_mismatch_argument, add_shard_arguments,
                                      add_structure_arguments, output_path_problem, shard_problem, structure_options)
from sipe_fairseq.data.dictionary import data_directory_problem
from sipe_fairseq.eval.shards import FORMAT, ShardError, fingerprint, shard_block
from sipe_fairseq.cli.output import atomic_open
from sipe_fairseq.hub.interface import load, surprisal_rows
from sipe_fairseq.hexatag.errors import DataError, NonFiniteScoreError, WorkerDiedError
from sipe_fairseq.hexatag.conllu_io import read_conllu_lines
from sipe_fairseq.hexatag.lines import LineInput
from sipe_fairseq.parsing import DEFAULT_BACKEND, BackendLoadError
from sipe_fairseq.structure.sources import parse_source

logger = logging.getLogger(__name__)


# the option of a data split that this command, which scores every sentence of its input, refuses
REFUSED = {"max_sentences": SPLIT_ONLY["max_sentences"]}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-surprisal", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 ok, 1 a score that is not finite or an output that cannot be written, "
                                       "2 usage or input error, 3 checkpoint or parser cannot be loaded.")
    p.add_argument("input", nargs="?", default="-", help="sentences, one per line, or CoNLL-U (default: stdin)")
    p.add_argument("--path", required=True, metavar="CHECKPOINT", help="a decoder checkpoint (SiPE, none, GiLT, stock)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="its sipe-preprocess directory (default: the one saved in the checkpoint)")
    add_dictionary_mismatch_argument(p)
    add_device_argument(p)
    add_structure_arguments(p, "self for a model with structure, untagged for one without (an exact source)",
                            refuse=REFUSED)
    p.add_argument("--level", choices=("token", "word"), default="token", help="rows per token (</s> included) or word")
    p.add_argument("--measures", default="surprisal", metavar="LIST",
                   help="the columns of each source, comma-separated: surprisal (always), structure (--level word: "
                        f"{', '.join(STRUCTURE_COLUMNS)} under self and mix:K, empty under other sources; "
                        "docs/evaluation.md), rank and entropy (--level token, not under beam:K: the scored token's rank "
                        "in the next-token distribution, 1 = the most probable, and that distribution's entropy in bits; "
                        "under mix:K the mixture's)")
    p.add_argument("--documents", action="store_true",
                   help="text input of blank-line-separated documents: each sentence scored after the sentences before "
                        "it in its document (the most recent whole ones that fit the model's positions), under self, "
                        "mix:K or a model without structure; a first column document_id and a last context_dropped")
    p.add_argument("--format", choices=("text", "conllu"), default=None,
                   help="input format (default: conllu for a .conllu file, else text)")
    p.add_argument("--parser", default=DEFAULT_BACKEND, metavar="SPEC",
                   help="parser of text input for given: spacy[:MODEL] or hexatagger:CHECKPOINT (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="write every field of the scores as JSON instead of the TSV")
    p.add_argument("--output", default=None, metavar="FILE", help="write here instead of stdout")
    add_shard_arguments(p, output="output")  # items: the sentences (the documents with --documents)
    return p


EMPTY_LINE = "empty line (one sentence per line)"
# sentences scored together: this many engine batches (--tags-batch-sentences each), which the engine sorts by
# length across, so that a batch is not padded to the longest of random neighbours (scripts/bench_surprisal_memory.py:
# 20,000 lines, peak RSS +19 MB over 20 lines with 1 batch a chunk, +32 MB with 4, +70 MB with 16)
CHUNK_BATCHES = 4


STRUCTURE_COLUMNS = ("structure_surprisal", "structure_entropy", "posterior_entropy", "lexical_surprisal")
MEASURES = ("surprisal", "structure", "rank", "entropy")
TOKEN_MEASURES = ("rank", "entropy")  # per token, from the next-token distribution (hub: score(measures=...))
DOCUMENTS = "documents"  # the input format of --documents
CONTEXT_SENTENCES = 1024  # --documents: the most sentences kept before one (the older are counted as dropped)


def parse_measures(spec: str, level: str) -> Tuple[str, ...]:
    """``--measures``: ``ValueError`` for an unknown measure, or ``structure`` (per word) at ``--level token``."""
    out = tuple(dict.fromkeys(m.strip() for m in spec.split(",") if m.strip()))
    bad = [m for m in out if m not in MEASURES]
    if bad:
        raise ValueError(f"--measures {spec!r}: {', '.join(bad)} is not one of {', '.join(MEASURES)}")
    if "structure" in out and level != "word":
        raise ValueError("--measures structure: the structure's numbers are per word: use --level word")
    per_token = [m for m in out if m in TOKEN_MEASURES]
    if per_token and level != "token":
        raise ValueError(f"--measures {','.join(per_token)}: per token (the next-token distribution): use --level token")
    return out


def check_measures(measures: Sequence[str], sources: Sequence[str]) -> None:
    """``ValueError`` for a per-token measure under a source whose number is a bound (no next-token distribution)."""
    per_token = [m for m in measures if m in TOKEN_MEASURES]
    for spec in sources if per_token else ():
        if parse_source(spec).number == "bound":
            raise ValueError(f"--measures {','.join(per_token)} under {spec}: a bound has no next-token distribution; "
                             "use mix:K (the normalized mixture) or self")


class DocumentSentence(str):
    """A sentence of ``--documents`` input: its text, its document's number (1-based), the sentences before it in
    the document (at most :data:`CONTEXT_SENTENCES`) and how many older ones were left out."""
    document: int = 0
    context: Tuple[str, ...] = ()
    older: int = 0


def document_sentences(source: LineInput) -> Iterator[Tuple[int, "DocumentSentence"]]:
    """``(line, sentence)`` of every sentence of a ``--documents`` input: one per line, documents separated by blank
    lines (any number)."""
    document, before, fresh = 0, [], True
    for line, text in source.lines():
        if not text.strip():
            fresh = True
            continue
        if fresh:
            document, before, fresh = document + 1, [], False
        sentence = DocumentSentence(text)
        sentence.document, sentence.context = document, tuple(before[-CONTEXT_SENTENCES:])
        sentence.older = max(0, len(before) - CONTEXT_SENTENCES)
        before.append(text)
        yield line, sentence


def input_format(name: str, fmt: Optional[str]) -> str:
    return fmt or ("conllu" if name.endswith(".conllu") else "text")


def sentences(source: LineInput, fmt: str) -> Iterator[Tuple[int, object]]:
    """``(line, sentence)`` of every sentence of ``source``, one at a time, read by the one line reader (lines end
    at ``\\n`` only): a line of text, or ``(words, heads)`` of a CoNLL-U block (its first line);
    :class:`~sipe_fairseq.hexatag.errors.InputError` names the file and line of a line that is not UTF-8, an
    empty line or a bad block."""
    if fmt == "conllu":
        for sent in read_conllu_lines(source.texts(errors="surrogateescape"), source.name):
            yield sent.line, (sent.words, sent.heads)
    elif fmt == DOCUMENTS:
        yield from document_sentences(source)
    else:
        yield from source.lines(empty=EMPTY_LINE)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def check_input(source: LineInput, fmt: str) -> int:
    """Read every sentence once and keep none (their number); ``ValueError`` for an input without one."""
    count = sum(1 for _ in sentences(source, fmt))
    if not count:
        raise ValueError(f"{source.name}: empty input: no sentence to score")
    return count


def check_lengths(lm, source: LineInput, fmt: str, size: int) -> None:
    """What scoring would refuse, before any is scored (a sentence longer than the model's positions): ``ValueError``
    naming the sentence by its number in the whole input."""
    first = 1
    for chunk in chunks(sentences(source, fmt), size):
        lm.check([sentence for _, sentence in chunk], first)
        first += len(chunk)


def item_index(sentence_id: int, sentence, fmt: str) -> int:
    """The 0-based index of the item a sentence belongs to, which ``--num-shards`` shares out: the sentence itself,
    or its document with ``--documents`` (a document stays whole, so that each sentence keeps its context)."""
    return sentence.document - 1 if fmt == DOCUMENTS else sentence_id - 1


def numbered(source: LineInput, fmt: str, shard: Optional[Tuple[int, int]] = None) -> Iterator[Tuple[int, object]]:
    """``(sentence_id, sentence)`` of every sentence (ids 1-based, in the whole input), or with ``shard``
    ``(num_shards, shard_id)`` of those whose item (:func:`item_index`) is in the shard's share."""
    for sid, (_, sentence) in enumerate(sentences(source, fmt), 1):
        if shard is None or item_index(sid, sentence, fmt) % shard[0] == shard[1]:
            yield sid, sentence


def count_items(source: LineInput, fmt: str) -> Tuple[int, int]:
    """``(items, sentences)``: the number of items :func:`item_index` numbers (sentences, or documents with
    ``--documents``) and of sentences."""
    items = count = 0
    for count, (_, sentence) in enumerate(sentences(source, fmt), 1):
        items = item_index(count, sentence, fmt) + 1
    return items, count


def scored_chunks(lm, source: LineInput, fmt: str, sources: Sequence[str], size: int,
                  measures: Sequence[str] = (), shard: Optional[Tuple[int, int]] = None) -> Iterator[Tuple[list, list]]:
    """``([the chunk's sentence ids], [results per source])``, chunk by chunk; ``measures``: the per-token ones
    (:data:`TOKEN_MEASURES`) the scores carry; ``shard``: only the share's sentences (:func:`numbered`), under the
    ids of the whole input."""
    measures = tuple(m for m in measures if m in TOKEN_MEASURES)
    for chunk in chunks(numbered(source, fmt, shard), size):
        ids, texts = [sid for sid, _ in chunk], [sentence for _, sentence in chunk]
        if fmt == DOCUMENTS:  # each sentence after its document's earlier ones
            results = [lm.score(texts, tags, measures, context=[t.context for t in texts]) for tags in sources]
            for per_source in results:
                for t, r in zip(texts, per_source):
                    r.document, r.context_dropped = t.document, r.context_dropped + t.older
            yield ids, results
        else:
            yield ids, [lm.score(texts, tags, measures) for tags in sources]


def tsv_header(sources: Sequence[str], level: str = "token", measures: Sequence[str] = ("surprisal",),
               documents: bool = False) -> str:
    """lm-zoo's header (the unit column ``token`` or ``word``); one surprisal column per source, then one ``kind``
    column per source (``conditional``, ``exact`` or ``bound``: what kind of number the surprisal is). ``measures``
    with ``structure``: the :data:`STRUCTURE_COLUMNS` per source after the surprisal; ``documents``: a first column
    ``document_id`` and a last ``context_dropped``."""
    one = len(sources) == 1
    structure = [c if one else f"{c}[{s}]" for c in STRUCTURE_COLUMNS for s in sources] if "structure" in measures else []
    structure += [c if one else f"{c}[{s}]" for c in TOKEN_MEASURES if c in measures for s in sources]
    return "\t".join((["document_id"] if documents else []) + ["sentence_id", "token_id", level]
                     + (["surprisal"] if one else [f"surprisal[{s}]" for s in sources]) + structure
                     + (["kind"] if one else [f"kind[{s}]" for s in sources])
                     + (["context_dropped"] if documents else [])) + "\n"


def tsv_rows(results: Sequence[Sequence], level: str, first=1, measures: Sequence[str] = ("surprisal",),
             documents: bool = False) -> str:
    """lm-zoo's rows of a chunk whose first sentence is ``first`` (or whose sentences' ids are the list ``first``);
    one surprisal column per source (the rows of every source are the same units), then each source's kind of
    number (:func:`tsv_header`'s columns)."""
    ids = first if isinstance(first, (list, tuple, range)) else range(first, first + len(results[0]))
    columns = [surprisal_rows(r, level) for r in results]
    kinds = [[r.kind for r in per_source] for per_source in results]
    lines = []
    for row in zip(*columns):
        sid, tid, unit = row[0][:3]
        scored = [per_source[sid - 1] for per_source in results]
        structure = []
        if "structure" in measures:  # per word (--level word); empty where the source has none
            for c in STRUCTURE_COLUMNS:
                values = [getattr(r, c) for r in scored]
                structure += ["" if v is None else f"{v[tid - 1]:.6f}" for v in values]
        for c in TOKEN_MEASURES:  # per token (--level token)
            if c in measures:
                values = [getattr(r, f"token_{c}") for r in scored]
                structure += [str(v[tid - 1]) if c == "rank" else f"{v[tid - 1]:.6f}" for v in values]
        doc = [str(scored[0].document)] if documents else []
        lines.append("\t".join(doc + [str(ids[sid - 1]), str(tid), unit] + [f"{r[3]:.6f}" for r in row] + structure
                               + [k[sid - 1] for k in kinds]
                               + ([str(scored[0].context_dropped)] if documents else [])) + "\n")
    return "".join(lines)


def write_tsv(out: TextIO, lm, source: LineInput, fmt: str, sources: Sequence[str], size: int, level: str,
              measures: Sequence[str] = ("surprisal",)) -> None:
    """The TSV chunk by chunk; the header with the first chunk's rows (a chunk that fails leaves nothing)."""
    documents = fmt == DOCUMENTS
    for first, (ids, results) in enumerate(scored_chunks(lm, source, fmt, sources, size, measures)):
        out.write((tsv_header(sources, level, measures, documents) if first == 0 else "")
                  + tsv_rows(results, level, ids, measures, documents))
        out.flush()


def json_record(r, sentence_id: int, fmt: str) -> str:
    """One record of :func:`write_json` (a sentence under one source), as written: indented by one space."""
    return textwrap.indent(json.dumps(dict(r.to_dict(), sentence_id=sentence_id, **(
        {"document_id": r.document} if fmt == DOCUMENTS else {})), indent=1), " ")


def write_json(out: TextIO, lm, source: LineInput, fmt: str, sources: Sequence[str], size: int, level: str,
               measures: Sequence[str] = ("surprisal",)) -> None:
    """``json.dumps(records, indent=1)`` written record by record: every sentence under the first source, then
    under the next (the input read once per source)."""
    opened = False
    for tags in sources:
        for ids, (results,) in scored_chunks(lm, source, fmt, [tags], size, measures):
            items = [json_record(r, i, fmt) for i, r in zip(ids, results)]
            out.write((",\n" if opened else "[\n") + ",\n".join(items))
            out.flush()
            opened = True
    out.write("\n]\n")


# --------------------------------------------------------------------------------------------- shards
SHARD_COMMAND = "surprisal"  # the shard file's command (sipe-eval merge)
NOT_FINGERPRINTED = ("input", "output", "json")  # paths (the input compared by content), the output's form (its own key)


def input_sha256(source: LineInput) -> str:
    """The sha256 of the input's lines as read (each with its ``\\n``): its content wherever it is, stdin too."""
    digest = hashlib.sha256()
    for _, text in source.lines(errors="surrogateescape"):
        digest.update(text.encode("utf-8", "surrogateescape") + b"\n")
    return digest.hexdigest()


def shard_fingerprint(args, lm, source: LineInput) -> dict:
    """What a shard's rows depend on (:func:`sipe_fairseq.eval.shards.fingerprint`): the checkpoint, the data
    directory (``--data`` or the checkpoint's), the input's content (named by its file name, or ``<stdin>``), the
    output's form (TSV or ``--json``) and every other option."""
    options = argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in NOT_FINGERPRINTED},
                                 output_form="json" if args.json else "tsv")
    fp = fingerprint(SHARD_COMMAND, options, {"path": args.path}, lm.data)
    fp["inputs"] = [[os.path.basename(source.name), input_sha256(source)]]
    return fp


def write_shard(out: TextIO, lm, source: LineInput, fmt: str, sources: Sequence[str], size: int, level: str,
                measures: Sequence[str], as_json: bool, shard: Tuple[int, int], block: dict, sentences_total: int) -> None:
    """A shard file (:mod:`sipe_fairseq.eval.shards`), streamed: the ``shard`` block, the output's form and the TSV
    header, then per scored sentence ``[sentence_id, rows]``: its TSV rows as one string (the lines one run writes
    for it), or with ``--json`` its records as written, one per source; :func:`merge_shards` joins them."""
    documents = fmt == DOCUMENTS
    head = {"format": FORMAT, "command": SHARD_COMMAND, "shard": block, "output": "json" if as_json else "tsv",
            "header": None if as_json else tsv_header(sources, level, measures, documents),
            "sources": list(sources), "sentences_total": sentences_total}
    out.write(json.dumps(head, indent=1)[:-2] + ',\n "sentences": [')
    opened = False
    for ids, results in scored_chunks(lm, source, fmt, sources, size, measures, shard):
        for k, sid in enumerate(ids):
            if as_json:
                rows = [json_record(per_source[k], sid, fmt) for per_source in results]
            else:
                rows = tsv_rows([[per_source[k]] for per_source in results], level, [sid], measures, documents)
            out.write((",\n  " if opened else "\n  ") + json.dumps([sid, rows]))
            opened = True
    out.write("\n ]\n}\n")


def merge_shards(shards: Sequence[dict]) -> str:
    """The output one run would have written, from its shard files (checked by
    :func:`~sipe_fairseq.eval.shards.check_shards`, in any order): every sentence's rows in input order.
    :class:`~sipe_fairseq.eval.shards.ShardError` unless the shards hold each sentence of the input exactly once."""
    total = shards[0]["sentences_total"]
    scored = sorted(((sid, rows) for s in shards for sid, rows in s["sentences"]), key=lambda item: item[0])
    ids = [sid for sid, _ in scored]
    if ids != list(range(1, total + 1)):  # the item counts agree (check_shards): a file edited by hand
        twice = next((a for a, b in zip(ids, ids[1:]) if a == b), None)
        what = f"sentence {twice} twice" if twice is not None else f"{len(ids)} sentences, ids out of range"
        raise ShardError(f"the shards do not hold the {total} sentences of the input once each ({what})")
    if shards[0]["output"] == "json":
        records = [rows[k] for k in range(len(shards[0]["sources"])) for _, rows in scored]
        return "[\n" + ",\n".join(records) + "\n]\n"
    return shards[0]["header"] + "".join(rows for _, rows in scored)


def score_input(args, lm, source: LineInput, fmt: str, sources: Sequence[str]) -> None:
    """Check every sentence's length, then score in chunks of :data:`CHUNK_BATCHES` batches and write as they come
    (``--output``: replaced only once everything was written; stdout: streamed). A shard (``--num-shards``) scores
    its share and writes its shard file to ``--output``."""
    size = lm.options.batch_sentences * CHUNK_BATCHES
    check_lengths(lm, source, fmt, size)
    measures = parse_measures(args.measures, args.level)
    shard = None if args.num_shards is None else (args.num_shards, args.shard_id)
    if shard:
        fp = shard_fingerprint(args, lm, source)
        total, count = count_items(source, fmt)
        items = len(range(args.shard_id, total, args.num_shards))
        block = shard_block(args.shard_id, args.num_shards, items, total, fp)
        with atomic_open(args.output) as out:
            write_shard(out, lm, source, fmt, sources, size, args.level, measures, args.json, shard, block, count)
        logger.info("shard %d of %d: %d of %d %s written to %s (join the shards with sipe-eval merge)", args.shard_id,
                    args.num_shards, items, total, "documents" if fmt == DOCUMENTS else "sentences", args.output)
        return
    with contextlib.ExitStack() as files:
        out = files.enter_context(atomic_open(args.output)) if args.output else sys.stdout
        (write_json if args.json else write_tsv)(out, lm, source, fmt, sources, size, args.level, measures)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    keep_freed_memory()
    logs.configure("WARNING", "sipe-surprisal: %(levelname)s: %(message)s", plugin_level=logging.WARNING)
    sources = args.tags  # None: the model's default source (hub: LanguageModel.default_source), once it is loaded
    problem = output_path_problem(args, ("output",)) or shard_problem(args, output="output")
    if problem:
        logger.error(problem)
        return 2
    problem = data_directory_problem(args.data) if args.data is not None else None  # missing, empty, bad dict.txt
    if problem:
        logger.error(problem)
        return 2
    with LineInput(args.input) as source:
        return _run(args, source, sources)


def _run(args, source: LineInput, sources: Sequence[str]) -> int:
    """Read and check the whole input, load the model, check every sentence's length, then score and write."""
    fmt = input_format(source.name, args.format)
    try:
        parse_measures(args.measures, args.level)
    except ValueError as e:
        logger.error(str(e))
        return 2
    if args.documents:
        if fmt == "conllu":
            logger.error("--documents reads text (one sentence per line, blank lines between documents), not CoNLL-U")
            return 2
        fmt = DOCUMENTS
    try:
        check_input(source, fmt)
    except OSError as e:
        logger.error(f"{source.name}: {e.strerror or e}")
        return 2
    except ValueError as e:  # InputError (file:line): not UTF-8, an empty line, a bad CoNLL-U block; an empty input
        logger.error(str(e))
        return 2
    try:
        lm = load(args.path, args.data, device=args.device, parser=args.parser,
                  allow_dictionary_mismatch=args.allow_dictionary_mismatch,
                  **vars(structure_options(args)))
        check_measures(parse_measures(args.measures, args.level), sources or [lm.default_source])
        score_input(args, lm, source, fmt, sources or [lm.default_source])
    except (CheckpointError, BackendLoadError) as e:
        logger.error(str(e))
        return CHECKPOINT_EXIT_STATUS
    except (NonFiniteScoreError, WorkerDiedError) as e:  # a score that came out NaN or infinite, a worker process
        # killed: --output not written (exit status 1)
        logger.error(f"{source.name}: {e}")
        return 1
    except DataError as e:  # the checkpoint's own data directory (no --data) with a malformed dict.txt
        logger.error(str(e))
        return 2
    except ValueError as e:  # an empty sentence, one longer than the model's positions, a source the model cannot take
        logger.error(f"{source.name}: {e}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
