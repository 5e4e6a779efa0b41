"""A suite's parse on every core: :class:`ParserWorkers` deals a parser's batches to forked worker processes
(:class:`~sipe_fairseq.hexatag.pool.WorkerPool`), the suites' ``--workers`` (``sipe-eval blimp``, ``syntaxgym``).

The parse cache (:class:`~.cache.CachedParser`) wraps it, so only the sentences the cache does not hold reach the
workers, and a warm cache forks nothing. A batch is cut into chunks of :data:`CHUNK` sentences in order; each worker
parses its chunks with its own copy of the backend (forked from this process: a backend this process already loaded
is shared, one not yet loaded is loaded once per worker), and the parses come back in input order, as one process
returns them (the same parser, the same sentences: the same trees). The backend's counts (``stats``) and each
sentence's extra roots (``last_extra_roots``) are the sum and the concatenation of the workers'. A sentence the
backend refuses raises :class:`~.base.ParseError` with its index in the batch, as one process does; a worker that
dies raises :class:`~sipe_fairseq.hexatag.errors.WorkerDiedError` naming the chunk's sentences.
"""
import sys
from collections import Counter
from typing import List, Optional, Sequence

from ..hexatag.pool import WorkerPool, available_cores, can_fork
from .base import Parse, ParseError

CHUNK = 128  # sentences per worker job: small enough that two workers finish a batch together
_PARSER = []  # the backend a forked worker parses with (set by _adopt in the worker)


class ParserWorkers:
    """``parser`` (a backend: ``parse_text``, ``parse_words``, ``spec``) run in ``workers`` forked processes (0: the
    cores available; one where processes cannot be forked); one process parses batches smaller than two chunks.
    Close it (:meth:`close`, or a ``with`` block) when the parse is done: the workers then return."""

    def __init__(self, parser, workers: int = 0):
        self.parser = parser
        self.spec = parser.spec
        self.workers = (available_cores() if not workers else max(1, int(workers))) if can_fork() else 1
        self.stats = Counter(getattr(parser, "stats", {}))
        self.last_extra_roots: List[int] = []
        self._pool: Optional[WorkerPool] = None

    @property
    def version(self) -> str:
        return str(getattr(self.parser, "version", "") or "")

    def __enter__(self) -> "ParserWorkers":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def parse_text(self, sentences: Sequence[str]) -> List[Parse]:
        return self._parse("parse_text", sentences)

    def parse_words(self, sentences: Sequence[Sequence[str]]) -> List[List[int]]:
        return self._parse("parse_words", sentences)

    def _parse(self, method: str, sentences: Sequence) -> list:
        if self.workers <= 1 or len(sentences) < 2 * CHUNK:
            before = Counter(getattr(self.parser, "stats", {}))
            out = getattr(self.parser, method)(sentences)
            self.stats.update(Counter(getattr(self.parser, "stats", {})) - before)
            self.last_extra_roots = list(getattr(self.parser, "last_extra_roots", []))
            return out
        if self._pool is None or not self._pool.processes:
            self._pool = WorkerPool(_parse_chunk, self.workers, start=_adopt, start_args=(self.parser,), method="fork",
                                    what="parsing")
        jobs = [(start, method, list(sentences[start:start + CHUNK])) for start in range(0, len(sentences), CHUNK)]
        out, extra = [], []
        for (start, _, _), (parsed, roots, counts, refused) in self._pool.map(
                jobs, covers=lambda job: list(range(job[0], job[0] + len(job[2])))):
            if refused is not None:  # the batch's index of the sentence, as one process gives it
                raise ParseError(refused[0], None if refused[1] is None else start + refused[1])
            out.extend(parsed)
            extra.extend(roots)
            self.stats.update(counts)
        self.last_extra_roots = extra
        return out


def _adopt(parser) -> None:
    torch = sys.modules.get("torch")  # a backend that runs on torch (forked: one thread per worker)
    if torch is not None:
        torch.set_num_threads(1)
    _PARSER[:] = [parser]


def _parse_chunk(job):
    """A worker's job: ``(parses, extra roots per sentence, the backend's counts it added, None)``, or a refused
    sentence's ``(message, index in the chunk)`` in the last place."""
    _, method, sentences = job
    parser = _PARSER[0]
    before = Counter(getattr(parser, "stats", {}))
    try:
        parsed = getattr(parser, method)(sentences)
    except ParseError as e:
        return [], [], Counter(), (str(e), e.index)
    counts = Counter(getattr(parser, "stats", {})) - before
    return parsed, list(getattr(parser, "last_extra_roots", [])) or [0] * len(parsed), counts, None
