"""One sentence per line -> parses and hexatags with a parser backend (shared by ``sipe-tag`` and
``sipe-preprocess --input-format text|tokenized``).

:class:`LineTagger` parses lines in batches of ``batch_size``, in this process or in ``workers`` spawned
processes (:class:`~sipe_fairseq.hexatag.pool.WorkerPool`) that each load their own backend once, with a progress
bar, and yields one :class:`TaggedLine` per input line, in input order (with ``segment``, one per sentence of a line, by
the backend's sentence boundaries). A line is either parsed (words, heads, the backend's labels and
the hexatags of the tree, non-projective parses lifted) or failed with a message: an empty line,
a sentence the backend refuses (:class:`~sipe_fairseq.parsing.base.ParseError`; a failing batch
is redone line by line so only the bad lines fail), or a parse that cannot be hexatag-encoded.
:func:`tagged_line_conllu` is the CoNLL-U both commands write for a line, so their outputs agree.
"""
import sys
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence, Tuple, Union

from tqdm import tqdm

from ..hexatag import HexatagError, encode_tree
from ..hexatag.conllu_io import conllu_sentence, plain_deprels
from ..hexatag.pool import WorkerPool
from .base import BackendLoadError, ParsedSentence, ParseError
from .registry import DEFAULT_BACKEND, resolve_parser

Result = Union[Tuple[List[str], List[int]], str]  # (words, heads) or an error message
LineResult = Union[List[ParsedSentence], str]  # a line's sentences, or why it failed
EMPTY_LINE = "empty line"


@dataclass
class TaggedLine:
    """One sentence of an input line (the line itself unless sentences are segmented)."""

    lineno: int  # 1-based
    text: str  # the input line without its line break (segmented: the sentence's words, space-joined)
    result: Result  # (words, heads), or why the line failed
    tags: Optional[list] = None  # [(terminal, nonterminal)] per word when parsed
    lifts: int = 0  # arcs lifted to projectivize the parse
    sentence: int = 0  # 1-based position of the sentence in its line when segmented, else 0
    deprels: Optional[List[str]] = None  # the backend's labels, when it gives them
    upos: Optional[List[str]] = None
    xpos: Optional[List[str]] = None
    extra_roots: int = 0  # roots the backend returned beyond the first, attached to it

    @property
    def ok(self) -> bool:
        return not isinstance(self.result, str)

    @property
    def empty(self) -> bool:
        return not self.text.strip()  # such a line always fails with EMPTY_LINE


def _parse(parser, items, pretokenized, segment=False) -> List[LineResult]:
    if hasattr(parser, "analyze"):  # labels (and segmentation) from the backend
        return [list(sents) for sents in parser.analyze(items, pretokenized, segment)]
    if segment:
        raise ValueError(f"backend {parser.spec!r} cannot split sentences")
    if pretokenized:
        return [[ParsedSentence(list(w), list(h))] for w, h in zip(items, parser.parse_words(items))]
    return [[ParsedSentence(list(w), list(h))] for w, h in parser.parse_text(items)]


def _parse_one_by_one(parser, items, pretokenized, segment) -> List[LineResult]:
    out: List[LineResult] = []
    for item in items:
        try:
            out.extend(_parse(parser, [item], pretokenized, segment))
        except (ParseError, HexatagError) as e:
            out.append(str(e))
    return out


def parse_batch(parser, lines: Sequence[str], pretokenized: bool, segment: bool = False) -> List[LineResult]:
    """Parse a batch; on a failure redo it line by line so only the bad lines fail."""
    items: List[Union[str, List[str]]] = [line.split() if pretokenized else line for line in lines]
    ok = [k for k, x in enumerate(items) if (x if pretokenized else x.strip())]
    out: List[LineResult] = [EMPTY_LINE] * len(items)
    try:
        parsed = _parse(parser, [items[k] for k in ok], pretokenized, segment)
    except (ParseError, HexatagError):
        parsed = _parse_one_by_one(parser, [items[k] for k in ok], pretokenized, segment)
    for k, r in zip(ok, parsed):
        out[k] = r
    return out


_worker_parser = None


def _load(spec: str, factory, arg: str, threads: int):
    """The backend ``factory(arg)``; any failure becomes one :class:`BackendLoadError` naming ``spec``."""
    try:
        import torch  # lazy (heavy): the parsing layer needs no torch; a backend that runs on it gets its threads
        torch.set_num_threads(threads)
    except ImportError:
        pass
    try:
        return factory(arg)
    except Exception as e:  # noqa: BLE001  one line for the user, whatever the backend raised
        raise BackendLoadError(f"backend {spec!r}: {e}") from e


def _init_worker(spec: str, factory, arg: str, threads: int) -> None:
    """A spawned worker's backend, loaded once (a failure is raised in the command for the first batch)."""
    global _worker_parser
    _worker_parser = _load(spec, factory, arg, threads)


def _work(job):
    _, lines, pretokenized, segment = job
    return parse_batch(_worker_parser, lines, pretokenized, segment)


class LineTagger:
    """Parses lines with one backend, loaded once (in this process, or in each of ``workers``
    spawned processes) and reused for every :meth:`tag` call; use it as a context manager.
    Raises ``ValueError`` for an unknown backend name and
    :class:`~sipe_fairseq.parsing.base.BackendLoadError` when the backend cannot be loaded
    (from the first batch with workers). The backend is resolved in this process (an unknown name
    fails at once) and its factory, a module-level class, is sent to the workers, so a backend
    registered from a higher layer works there too."""

    def __init__(self, backend: str = DEFAULT_BACKEND, pretokenized: bool = False, batch_size: int = 256,
                 workers: int = 1, threads: int = 1, progress: bool = True, segment: bool = False):
        self.backend, self.pretokenized, self.segment = backend, pretokenized, segment
        self.batch_size, self.workers, self.threads, self.progress = max(1, batch_size), workers, threads, progress
        self._parser = self._pool = None

    def __enter__(self):
        factory, arg = resolve_parser(self.backend)  # ValueError for an unknown name (a usage error)
        if self.segment and not hasattr(factory, "analyze"):
            raise ValueError(f"backend {self.backend!r} cannot split sentences (no sentence boundaries)")
        if self.workers > 1:  # spawned: a backend may run torch threads, which a fork would copy mid-state
            self._pool = WorkerPool(_work, self.workers, start=_init_worker, start_args=(self.backend, factory, arg,
                                                                                        self.threads),
                                    method="spawn", what="parsing")
        else:
            self._parser = _load(self.backend, factory, arg, self.threads)
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._parser = None

    def tag(self, lines: Sequence[str], desc: Optional[str] = None, linenos: Optional[Sequence[int]] = None,
            name: Optional[str] = None) -> Iterator[TaggedLine]:
        """One :class:`TaggedLine` per line, in order (see the module docstring); with ``segment``,
        one per sentence of a parsed line (a failed line gives one). ``linenos``: the lines' numbers
        in their file (default 1, 2, ..). A worker process that dies raises
        :class:`~sipe_fairseq.hexatag.errors.WorkerDiedError` naming its batch's lines (``NAME:LINE`` with the file's
        ``name``, else ``line LINE``)."""
        batches = [lines[i:i + self.batch_size] for i in range(0, len(lines), self.batch_size)]
        if self._pool is not None:  # a worker that dies: WorkerDiedError naming its batch's lines
            jobs = [(k * self.batch_size, b, self.pretokenized, self.segment) for k, b in enumerate(batches)]

            def held(job):
                return list(range(job[0], job[0] + len(job[1])))

            def names(job):
                where = f"{name}:" if name else "line "
                return [f"{where}{linenos[i] if linenos is not None else i + 1}" for i in held(job)]
            results = (r for _, r in self._pool.map(jobs, covers=held, names=names))
        elif self._parser is not None:
            results = (parse_batch(self._parser, b, self.pretokenized, self.segment) for b in batches)
        else:
            raise RuntimeError("LineTagger.tag outside its `with` block")
        numbers = iter(linenos) if linenos is not None else iter(range(1, len(lines) + 1))
        bar = tqdm(total=len(lines), desc=desc, unit=" line", disable=True if not self.progress else None, file=sys.stderr)
        try:
            for batch, parsed in zip(batches, results):
                for text, result in zip(batch, parsed):
                    lineno = next(numbers)
                    if isinstance(result, str):
                        yield TaggedLine(lineno, text, result)
                        continue
                    for k, sent in enumerate(result, 1):
                        yield _tagged(lineno, " ".join(sent.words) if self.segment else text, sent, k if self.segment else 0)
                bar.update(len(batch))
        finally:
            bar.close()


def _tagged(lineno: int, text: str, sent: ParsedSentence, position: int) -> TaggedLine:
    out = TaggedLine(lineno, text, (list(sent.words), list(sent.heads)), sentence=position, deprels=sent.deprels,
                     upos=sent.upos, xpos=sent.xpos, extra_roots=sent.extra_roots)
    try:
        out.tags, _, out.lifts = encode_tree(out.result[1])
    except HexatagError as e:
        out.result = f"cannot encode the parse: {e}"
    return out


def tagged_line_conllu(line: TaggedLine, newdoc: bool = False) -> str:
    """The CoNLL-U block for one sentence: ``# newdoc`` (``newdoc``), ``# sent_id`` = line number
    (``LINE-K`` for the K-th sentence of a segmented line), ``# text``, and the words with their
    heads, the backend's DEPREL (``root`` on the head-0 word), UPOS and XPOS when it gives them (else
    ``root``/``dep`` and ``_``),
    or only comments with ``# sipe_tag_error`` for a failed line."""
    comments = [("newdoc", None)] if newdoc else []
    comments.append(("sent_id", f"{line.lineno}{f'-{line.sentence}' if line.sentence else ''}"))
    if line.text.strip():
        comments.append(("text", " ".join(line.text.split())))
    if not line.ok:
        comments.append(("sipe_tag_error", " ".join(line.result.split())))
        return conllu_sentence([], comments=comments)
    words, heads = line.result
    labels = line.deprels or plain_deprels(heads)
    deprels = ["root" if h == 0 else _field(d) for h, d in zip(heads, labels)]  # CoNLL-U: root iff head 0
    return conllu_sentence(words, heads, deprels, comments, upos=_fields(line.upos), xpos=_fields(line.xpos))


def _field(value: str) -> str:
    """A CoNLL-U column value: no whitespace (empty: the writer's ``_``)."""
    return "".join(value.split())


def _fields(values: Optional[List[str]]) -> Optional[List[str]]:
    return [_field(v) for v in values] if values else None


BACKEND_BATCH_SIZE = 256  # --batch-size: sentences per backend call
BACKEND_THREADS = 1  # --threads: torch threads per worker


def add_backend_arguments(p, workers: bool = True, default: Optional[str] = DEFAULT_BACKEND, note: str = "") -> None:
    """The backend options: ``--backend``/``--parser``, ``--batch-size``, ``--threads``,
    ``--no-progress`` and (``workers``) ``--workers``. ``note`` is appended to each help text."""
    g = p.add_argument_group("parser backend")
    g.add_argument("--backend", "--parser", dest="backend", default=default, metavar="SPEC",
                   help=f"spacy[:MODEL] or hexatagger:CHECKPOINT (default: {default or DEFAULT_BACKEND}){note}")
    g.add_argument("--batch-size", type=int, default=BACKEND_BATCH_SIZE, metavar="N", help=f"sentences per backend call{note}")
    if workers:
        g.add_argument("--workers", type=int, default=1, metavar="N", help="worker processes, each with its own backend")
    g.add_argument("--threads", type=int, default=BACKEND_THREADS, metavar="N",
                   help=f"torch threads per worker (hexatagger backend){note}")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
