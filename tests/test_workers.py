"""Issue 49: batches dealt to worker processes give the numbers of one process, in input order.

Every per-sentence total and every token's log-probability under ``given``, ``self`` and ``mix:K``, SiPE and
GiLT, with 2 and 3 forked workers equals the one-process result to 1e-12 (the same batches, one torch thread
in both); a budget split between workers changes the batches, not the numbers; the worker count follows the
cores, the batches and the budget; a worker's exception reaches the caller as it would from one process."""
import pytest
import torch

from conftest import tiny_decoder_lm
from sipe_fairseq.hexatag import encode
from sipe_fairseq.hexatag import pool as pool_module
from sipe_fairseq.structure import workers as workers_module
from sipe_fairseq.structure.arcs import gold_graph
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import plan, plan_workers, score_sentences
from sipe_fairseq.structure.sentences import PAIR_INDEX, Sentence
from test_context_hub import lms  # noqa: F401

pytestmark = pytest.mark.skipif(not pool_module.can_fork(), reason="workers need the fork start method")


def _sentences(count, family, seed=3):
    """Random sentences of 3-14 words of 1-2 pieces, with a given structure: the chain tree (each word headed by
    the one before it) as SiPE pairs or as GiLT's graph."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        words = int(torch.randint(3, 15, (1,), generator=g))
        pieces = torch.randint(1, 3, (words,), generator=g)
        tokens = torch.randint(4, 60, (int(pieces.sum()) + 1,), generator=g)
        tokens[-1] = 2
        starts = (torch.cumsum(pieces, 0) - pieces).tolist()
        heads = list(range(words))  # word 1 is the root, word w is headed by word w - 1
        if family == "gilt":
            out.append(Sentence(tokens, starts, arcs=gold_graph(heads)))
        else:
            out.append(Sentence(tokens, starts, pairs=[PAIR_INDEX[p] for p in encode(heads)]))
    return out


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the workers' own setting: the same kernels, the same numbers
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("family", ["sipe", "gilt"])
@pytest.mark.parametrize("source", ["given", "self", "mix:4"])
def test_workers_give_the_numbers_of_one_process(family, source):
    model, sentences = tiny_decoder_lm(family), _sentences(23, family)
    budget = 2 ** 40  # no budget cut: the same batches in every run
    one = score_sentences(model, sentences, source, StructureOptions(max_memory=budget, workers=1), batch_sentences=4)
    for n in (2, 3):
        options = StructureOptions(max_memory=budget, workers=n)
        batches, count = plan_workers(model, sentences, source, options, 4)
        assert count == n and len(batches) == 6
        many = score_sentences(model, sentences, source, options, batch_sentences=4)
        assert len(many) == len(one)
        for a, b in zip(one, many):  # input order: the same sentence at the same index
            assert len(a.token_logprobs) == len(b.token_logprobs)
            assert abs(a.logprob - b.logprob) <= 1e-12 and abs(a.joint - b.joint) <= 1e-12
            assert max(abs(x - y) for x, y in zip(a.token_logprobs, b.token_logprobs)) <= 1e-12
            assert a.tags == b.tags


def test_a_split_budget_changes_the_batches_not_the_numbers():
    """Batches that do not fit half of the budget are planned again within it, for two workers: other batches,
    every sentence once, shortest first; the numbers as equal as any two batchings (float32)."""
    model, sentences = tiny_decoder_lm("sipe"), _sentences(16, "sipe")
    from sipe_fairseq.structure import memory

    size, src = memory.model_size(model), memory.parse_source("mix:4")
    order = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    budget = memory.estimate_bytes(size, src, [sentences[i] for i in order[-8:]], "hexatags")  # 8 of the longest
    # without shared prefixes: batches cut shortest first, each estimated without a shared prefix's copies
    one_opts = StructureOptions(max_memory=budget, workers=1, share_prefixes="none")
    two_opts = StructureOptions(max_memory=budget, workers=2, share_prefixes="none")
    single = plan(model, sentences, "mix:4", one_opts, 8)
    split, count = plan_workers(model, sentences, "mix:4", two_opts, 8)
    assert count == 2 and len(split) > len(single)  # each worker plans within half of the budget
    assert all(memory.estimate_bytes(size, src, [sentences[i] for i in b], "hexatags") <= budget // 2 for b in split)
    assert [i for b in split for i in b] == order  # every sentence once, shortest first
    a = score_sentences(model, sentences, "mix:4", one_opts, batch_sentences=8)
    b = score_sentences(model, sentences, "mix:4", two_opts, batch_sentences=8)
    assert max(abs(x.logprob - y.logprob) / abs(x.logprob) for x, y in zip(a, b)) < 1e-6  # float32's batchings


def test_batches_that_fit_the_share_are_kept():
    """A budget whose share holds every planned batch: the one-process batches, dealt as they are."""
    model, sentences = tiny_decoder_lm("sipe"), _sentences(16, "sipe")
    options = StructureOptions(max_memory=2 ** 40, workers=2)
    assert plan_workers(model, sentences, "mix:4", options, 4) == (plan(model, sentences, "mix:4", options, 4), 2)


def test_workers_drop_until_a_sentence_fits_its_share():
    """A budget that one sentence fits whole but not halved: one worker, not a refusal."""
    model, sentences = tiny_decoder_lm("sipe"), _sentences(6, "sipe")
    from sipe_fairseq.structure import memory

    size = memory.model_size(model)
    longest = max(sentences, key=lambda s: s.n)
    budget = memory.estimate_bytes(size, memory.parse_source("mix:4"), [longest], "hexatags", shared=True)
    batches, count = plan_workers(model, sentences, "mix:4", StructureOptions(max_memory=budget, workers=2), 1)
    assert count == 1 and len(batches) == len(sentences)


def test_worker_count_follows_cores_and_batches(monkeypatch):
    monkeypatch.setattr(workers_module, "available_cores", lambda root="/": 8)
    assert workers_module.worker_count(0, 3) == 3  # no more workers than batches
    assert workers_module.worker_count(0, 100) == 8
    assert workers_module.worker_count(2, 100) == 2
    assert workers_module.worker_count(5, 1) == 1


def test_cgroup_cpu_quota(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text("0::/a/b\n")
    quota = tmp_path / "sys/fs/cgroup/a/cpu.max"
    quota.parent.mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/a/b").mkdir()
    (tmp_path / "sys/fs/cgroup/a/b/cpu.max").write_text("max 100000\n")
    assert pool_module.cgroup_cpus(str(tmp_path)) is None
    quota.write_text("150000 100000\n")  # 1.5 CPUs above the process's group
    assert pool_module.cgroup_cpus(str(tmp_path)) == 1.5
    assert pool_module.available_cores(str(tmp_path)) == 1


def test_a_workers_error_reaches_the_caller():
    """A non-finite score found in a worker's batch is refused naming the sentence, as in one process."""
    model, sentences = tiny_decoder_lm("sipe"), _sentences(8, "sipe")
    with torch.no_grad():
        model.decoder.embed_tokens.weight[int(sentences[5].tokens[0])] = float("inf")
    from sipe_fairseq.hexatag.errors import NonFiniteScoreError

    errors = []
    for n in (1, 2):
        with pytest.raises(NonFiniteScoreError) as e:
            score_sentences(model, sentences, "self", StructureOptions(max_memory=2 ** 40, workers=n), batch_sentences=2)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and errors[0].startswith("sentence ")


def test_commands_take_workers():
    """--workers is generated with the other structure options on every command that takes --tags."""
    import argparse

    from sipe_fairseq.cli.options import add_structure_arguments, structure_options

    p = argparse.ArgumentParser()
    add_structure_arguments(p, "self")
    assert structure_options(p.parse_args(["--workers", "3"])).workers == 3
    assert structure_options(p.parse_args([])).workers == 0


@pytest.mark.parametrize("name,tags", [("sipe", "mix:4"), ("gilt", "self"), ("none", "untagged")])
def test_the_python_interface_with_workers(lms, name, tags):  # noqa: F811
    """``LanguageModel.score(workers=2)``: the scores and what the observer reads of the distributions (ranks,
    entropies, the word-boundary masses of the corrected word surprisals) come back from the workers equal to one
    process's."""
    from dataclasses import replace

    lm = lms[name]
    before = lm.options
    lm.options = replace(before, batch_sentences=2, max_memory=2 ** 40)  # 4 batches of these 7 sentences
    try:
        texts = ["the dog sees a cat", "a cat runs", "the bell is old .", "the door is old .", "a dog runs",
                 "the cat sees the dog", "a bell"]
        one = lm.score(texts, tags, ("rank", "entropy"), workers=1)
        two = lm.score(texts, tags, ("rank", "entropy"), workers=2)
    finally:
        lm.options = before
    for a, b in zip(one, two):
        assert a.text == b.text and a.token_rank == b.token_rank
        for field in ("token_logprobs", "word_surprisal", "token_entropy"):
            assert max(abs(x - y) for x, y in zip(getattr(a, field), getattr(b, field))) <= 1e-12, field


def test_batches_are_dealt_most_costly_first_and_come_back_in_order():
    """The batches are handed out by decreasing cost (ties in planned order), and run_batches yields the workers'
    results in the planned order."""
    batches = [[0], [1, 2], [3, 4, 5], [6], [7, 8, 9, 10]]
    assert pool_module.dealing_order(batches, len) == [4, 2, 1, 0, 3]
    assert pool_module.dealing_order(batches) == [0, 1, 2, 3, 4]
    got = list(workers_module.run_batches(lambda batch: [i * 10 for i in batch], batches, 2, cost=len))
    assert [b for b, _ in got] == batches and [r for _, r in got] == [[i * 10 for i in b] for b in batches]


def _touch(mib):
    """A job whose batch ``[k]`` holds ``mib * k`` MiB of fresh pages, every page written, while it runs: an anonymous
    mapping of its own (a heap block could reuse freed pages the fork inherited, already resident)."""
    import mmap

    def job(batch):
        size = mib * batch[0] * 2 ** 20
        block = mmap.mmap(-1, size)
        try:
            for offset in range(0, size, mmap.PAGESIZE):
                block[offset] = 1
        finally:
            block.close()
        return [size]
    return job


@pytest.mark.skipif(workers_module._reset_peak() is None, reason="the resident peak cannot be reset here")
def test_each_workers_peak_is_measured_and_logged(caplog):
    """Two workers, batches that hold 48 and 96 MiB: the logged peaks above the forked parent are at least what
    each worker held, the larger at least 96 MiB, and not far above (Python's and the allocator's slack)."""
    import logging
    import re

    with caplog.at_level(logging.INFO, logger=workers_module.logger.name):
        got = list(workers_module.run_batches(_touch(48), [[1], [2]], 2))
    assert [r for _, r in got] == [[48 * 2 ** 20], [96 * 2 ** 20]]
    [line] = [r.getMessage() for r in caplog.records if "peak resident memory" in r.getMessage()]
    sizes = [int(x.replace(",", "")) for x in re.search(r"per worker: ([\d, ]+) MiB", line).group(1).split(", ")]
    total = int(re.search(r"sum ([\d,]+) MiB", line).group(1).replace(",", ""))
    assert len(sizes) in (1, 2) and total == pytest.approx(sum(sizes), abs=len(sizes))
    assert 96 <= sizes[0] <= 96 + 32, line  # one worker may have run both: its peak is the larger batch's
    if len(sizes) == 2:
        assert 48 <= sizes[1] <= 48 + 32, line


def _dies_on(k, how):
    """A job whose batch ``[k]`` ends its worker process (``how``: ``"kill"``, SIGKILL as the out-of-memory killer
    sends it; ``"exit"``, status 3), the others returned as they are."""
    import os
    import signal

    def job(batch):
        if batch[0] == k:
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        return batch
    return job


@pytest.mark.parametrize("how,cause", [("kill", "was killed by SIGKILL (what the system's out-of-memory killer"),
                                       ("exit", "exited with status 3")])
def test_a_worker_that_dies_stops_the_search_naming_its_batch(how, cause):
    """A worker process that ends without returning its batch (killed, or exited) stops the search with one line
    naming that batch's sentences (1-based) and the cause, instead of waiting for the batch forever (a process pool
    does); no worker process is left behind."""
    import multiprocessing
    import signal

    from sipe_fairseq.hexatag.errors import EvaluationError, WorkerDiedError

    def too_long(*_):
        raise AssertionError("the search waited for a dead worker's batch")

    others = set(multiprocessing.active_children())  # children of other tests in this process, if any
    previous = signal.signal(signal.SIGALRM, too_long)
    signal.alarm(60)
    try:
        with pytest.raises(WorkerDiedError) as e:
            list(workers_module.run_batches(_dies_on(5, how), [[k] for k in range(8)], 2))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert isinstance(e.value, EvaluationError) and e.value.indices == [5] and e.value.cause.startswith(cause)
    assert str(e.value).startswith(f"a worker process {cause}") and "scoring 1 sentences (input sentence 6)" in str(e.value)
    assert "\n" not in str(e.value) and not set(multiprocessing.active_children()) - others
