"""The one worker pool (sipe_fairseq/hexatag/pool.py) and what runs on it besides the structure search
(tests/test_workers.py): a suite's parse in forked workers (parsing/parallel.py) and ``sipe-tag``'s spawned parser
workers (parsing/line_tagger.py). Every worker that dies must end the run with a WorkerDiedError naming what it
held, never a wait; a parse in workers must equal the parse in one process, counts and refusals included."""
import multiprocessing
import os
import signal
from collections import Counter

import pytest

from sipe_fairseq.hexatag.errors import WorkerDiedError
from sipe_fairseq.hexatag.pool import WorkerPool
from sipe_fairseq.parsing import ParseError
from sipe_fairseq.parsing.cache import CachedParser
from sipe_fairseq.parsing.parallel import CHUNK, ParserWorkers

pytestmark = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="workers need fork")


@pytest.fixture
def alarm():
    """Fails a test that waits more than 60 s (a pool waiting for a dead worker's item forever)."""
    def too_long(*_):
        raise AssertionError("waited for a dead worker")

    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


class Chain:
    """A deterministic backend: words by whitespace, each word headed by the next (the last is the root); a sentence
    "BAD" is refused with its index in the batch, "DIE" kills the process that parses it (as the out-of-memory
    killer would); every third sentence is counted as needing a root fixed."""

    spec = "chain"

    def __init__(self, arg: str = ""):
        self.stats = Counter(sentences=0, root_fixed_sentences=0)
        self.last_extra_roots = []

    def parse_text(self, sentences):
        for k, text in enumerate(sentences):
            if text == "BAD":
                raise ParseError(f"refused {text!r}", k)
            if text == "DIE":
                os.kill(os.getpid(), signal.SIGKILL)
        out = [(t.split(), [i + 2 for i in range(len(t.split()) - 1)] + [0]) for t in sentences]
        self.last_extra_roots = [int(len(t) % 3 == 0) for t in sentences]
        self.stats["sentences"] += len(sentences)
        self.stats["root_fixed_sentences"] += sum(self.last_extra_roots)
        return out

    def parse_words(self, sentences):
        return [heads for _, heads in self.parse_text([" ".join(w) for w in sentences])]


def _sentences(n):
    return [" ".join(f"w{k}" for k in range(1 + i % 7)) + f" s{i}" for i in range(n)]


def test_a_parse_in_workers_equals_the_parse_in_one_process():
    """600 sentences (5 chunks) through 2 forked workers: the same parses in input order as one process, the same
    extra roots per sentence, and the backend's counts summed over the workers."""
    texts = _sentences(5 * CHUNK - 40)
    alone = Chain()
    expected = alone.parse_text(texts)
    with ParserWorkers(Chain(), 2) as workers:
        got = workers.parse_text(texts)
        assert workers._pool is not None and len(workers._pool.processes) == 2  # it did fork
        assert got == expected
        assert workers.last_extra_roots == alone.last_extra_roots
        assert workers.stats == alone.stats
        assert workers.parse_words([t.split() for t in texts]) == [h for _, h in expected]
    assert workers._pool is None


def test_a_small_batch_is_parsed_in_this_process():
    """Fewer than two chunks: no fork (the pool is never made), the same parse."""
    texts = _sentences(2 * CHUNK - 1)
    with ParserWorkers(Chain(), 2) as workers:
        assert workers.parse_text(texts) == Chain().parse_text(texts)
        assert workers._pool is None


def test_a_refused_sentence_is_named_by_its_place_in_the_batch_and_the_workers_go_on():
    """A sentence the backend refuses in a worker raises ParseError with its index in the whole batch, as one process
    does; the next batch is parsed (by a new pool: the old one held answers)."""
    texts = _sentences(4 * CHUNK)
    texts[300] = "BAD"
    with ParserWorkers(Chain(), 2) as workers:
        with pytest.raises(ParseError) as e:
            workers.parse_text(texts)
        assert e.value.index == 300 and "refused 'BAD'" in str(e.value)
        clean = _sentences(3 * CHUNK)
        assert workers.parse_text(clean) == Chain().parse_text(clean)


def test_the_cache_holds_every_parse_the_workers_made(tmp_path):
    """Through the parse cache, the workers' parses are written once by this process: a second cache on the same file
    serves them all without parsing."""
    texts = _sentences(3 * CHUNK)
    path = tmp_path / "cache.jsonl"
    with ParserWorkers(Chain(), 2) as workers:
        first = CachedParser(workers, path).parse_text(texts)
    again = CachedParser(Chain(), path)
    assert again.parse_text(texts) == first == Chain().parse_text(texts)
    assert again.stats["hits"] == len(texts) and again.stats["misses"] == 0


def test_a_parser_worker_that_dies_names_its_chunk(alarm):
    """A forked parser worker killed by SIGKILL: WorkerDiedError naming the chunk's sentences (input sentence 257..)
    and the cause, no wait, and no worker of the pool left running."""
    texts = _sentences(4 * CHUNK)
    texts[2 * CHUNK + 5] = "DIE"
    before = set(multiprocessing.active_children())
    with ParserWorkers(Chain(), 2) as workers:
        with pytest.raises(WorkerDiedError) as e:
            workers.parse_text(texts)
    assert e.value.indices == list(range(2 * CHUNK, 3 * CHUNK)) and e.value.what == "parsing"
    assert str(e.value).startswith("a worker process was killed by SIGKILL") and "while parsing 128 sentences" in str(e.value)
    assert f"(input sentence {2 * CHUNK + 1};" in str(e.value)
    assert not set(multiprocessing.active_children()) - before


def _square(x):
    return x * x


def _dies_on_three(x):
    if x == 3:
        os._exit(7)
    return x


def test_a_spawned_pool_streams_in_order_and_names_a_dead_workers_item(alarm):
    """Spawned workers (what sipe-tag uses): a generator's items come back in order; a worker that exits on item 3
    raises WorkerDiedError with the names the caller gives, and closes the pool."""
    with WorkerPool(_square, 2, method="spawn") as pool:
        assert [r for _, r in pool.map(x for x in range(10))] == [x * x for x in range(10)]
    with WorkerPool(_dies_on_three, 2, method="spawn", what="parsing") as pool:
        with pytest.raises(WorkerDiedError) as e:
            list(pool.map(range(6), names=lambda x: [f"line {x + 1}"]))
        assert not pool.processes  # closed: its other worker held an answer that will never be read
        with pytest.raises(RuntimeError):
            list(pool.map(range(2)))
    assert e.value.indices == [3] and e.value.names == ["line 4"] and "exited with status 7" in str(e.value)
    assert str(e.value).endswith("(line 4): the run stopped and nothing is written")


def test_sipe_tags_spawned_workers_parse_as_one_process_and_name_a_dead_workers_lines(alarm):
    """``LineTagger`` (sipe-tag, sipe-preprocess) with 2 spawned workers: the lines come back as one process tags
    them; a worker killed on line 5 raises WorkerDiedError naming its batch's lines as FILE:LINE and the cause."""
    from sipe_fairseq.parsing.line_tagger import LineTagger
    from sipe_fairseq.parsing.registry import PARSERS, register_parser

    register_parser("chain_test")(Chain)
    try:
        lines = _sentences(9)
        with LineTagger("chain_test", batch_size=3, workers=1, progress=False) as one:
            alone = [(t.lineno, t.result, t.tags) for t in one.tag(lines)]
        with LineTagger("chain_test", batch_size=3, workers=2, progress=False) as two:
            assert [(t.lineno, t.result, t.tags) for t in two.tag(lines)] == alone
        lines[4] = "DIE"
        with LineTagger("chain_test", batch_size=3, workers=2, progress=False) as two:
            with pytest.raises(WorkerDiedError) as e:
                list(two.tag(lines, name="in.txt"))
    finally:
        PARSERS.pop("chain_test", None)
    assert e.value.names == ["in.txt:4", "in.txt:5", "in.txt:6"] and "was killed by SIGKILL" in str(e.value)
    assert "while parsing 3 sentences (in.txt:4; in.txt:5; in.txt:6): the run stopped" in str(e.value)


def test_conllu_readers_read_as_one_process_and_name_a_dead_workers_sentences(alarm, monkeypatch):
    """sipe-preprocess --workers 2 reads CoNLL-U blocks in forked workers (chunks of 128): the same sentences and
    counts as one process; a worker killed on a block raises WorkerDiedError naming its chunk's blocks FILE:LINE."""
    from sipe_fairseq.data.preprocess import conllu

    def block(i):
        words = [f"w{i}", "runs", "."]
        return ("x.conllu", 1 + 5 * i, [f"{k + 1}\t{w}\t_\t_\t_\t_\t{2 if k != 1 else 0}\t{'root' if k == 1 else 'dep'}\t_\t_"
                                        for k, w in enumerate(words)], True)

    items = [block(i) for i in range(300)]
    one, two = conllu.SplitData("x.conllu"), conllu.SplitData("x.conllu")
    conllu.read_blocks(one, iter(items), 1, "x", False)
    conllu.read_blocks(two, iter(items), 2, "x", False)
    assert one.words == two.words and one.terminal == two.terminal and one.stats == two.stats and len(one.words) == 300
    real = conllu._process_block

    def dies_on_200(item):
        if item[1] == 1 + 5 * 200:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(item)

    monkeypatch.setattr(conllu, "_process_block", dies_on_200)  # the workers fork after it
    with pytest.raises(WorkerDiedError) as e:
        conllu.read_blocks(conllu.SplitData("x.conllu"), iter(items), 2, "x", False)
    assert e.value.names[0] == "x.conllu:641" and len(e.value.names) == 128 and "x.conllu:1001" in e.value.names
    assert "while reading 128 sentences" in str(e.value)
