"""Issue 37: a search knows its memory, a checkpoint knows its data, a result is finite or refused.
Each reproducer runs as the user runs it (tests/launcher.py): exact exit status, one line, no traceback."""
import json
import subprocess
import sys
import textwrap

import pytest

import launcher
from conftest import BIN, ENV, ROOT, txl


def _cli(cmd, stdin=None, timeout=300):
    proc = launcher.run([str(c) for c in cmd], env=ENV, timeout=timeout, input=stdin)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc


def _last_error(proc) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def lm_checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))


# ------------------------------------------------------------------ 1. memory-aware search
def test_search_that_cannot_fit_is_refused_before_it_runs(toy_data, lm_checkpoint):
    """Issue 37.1: mix:100000 grew to 22 GB and was killed (exit 137); now the estimate is compared with the
    budget before the search allocates anything: exit 2, one line with both."""
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--tags", "mix:100000",
                 "--tags-max-sentences", "3", "--max-memory", "64M"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = _last_error(proc)
    assert "tag source mix:100000: one sentence of" in line and "over the memory budget of 64.0 MiB" in line, line
    assert "MiB" in line.split("needs about", 1)[1].split("(")[0]  # the estimate, over the budget
    assert proc.stdout == ""


def test_max_memory_is_a_size(toy_data, lm_checkpoint):
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--tags", "self", "--max-memory", "lots"])
    assert proc.returncode == 2 and "argument --max-memory: 'lots': expected a size > 0" in _last_error(proc)


def test_batches_shrink_to_the_budget_with_the_same_scores(toy_data, lm_checkpoint):
    """A budget of about three sentences' beams: every planned batch fits it, there are more batches than
    without a budget, and the scores are those of one large batch (the numbers do not depend on the batch)."""
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.eval.prefix_scores import load_split_sentences
    from sipe_fairseq.structure import memory
    from sipe_fairseq.structure.family import StructureOptions, structure_of
    from sipe_fairseq.structure.scoring import score_sentences

    model, task = load_lm(str(lm_checkpoint), str(toy_data))
    sentences = load_split_sentences(task, "valid")[0][:12]
    size, family = memory.model_size(model), structure_of(model)
    one = [memory.estimate_bytes(size, memory.parse_source("beam:4"), [s], family) for s in sentences]
    budget = 3 * max(one)
    order = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    planned = list(memory.plan_batches(order, sentences, "beam:4", size, family, budget, 256))
    assert len(planned) > 1 and sorted(i for b in planned for i in b) == list(range(len(sentences)))
    assert all(memory.estimate_bytes(size, memory.parse_source("beam:4"), [sentences[i] for i in b], family) <= budget
               for b in planned)
    d = task.source_dictionary
    small = score_sentences(model, sentences, "beam:4", StructureOptions(max_memory=budget), d.eos(), d.pad())
    large = score_sentences(model, sentences, "beam:4", StructureOptions(max_memory=2 ** 40), d.eos(), d.pad())
    for a, b in zip(small, large):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    with pytest.raises(memory.MemoryBudgetError, match="over the memory budget"):
        score_sentences(model, sentences, "beam:4", StructureOptions(max_memory=min(one) // 2), d.eos(), d.pad())


_MEASURE = textwrap.dedent("""
    import gc, json, sys
    import torch
    torch.set_num_threads(1)
    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.eval.prefix_scores import load_split_sentences
    from sipe_fairseq.structure import memory
    from sipe_fairseq.structure.family import StructureOptions, structure_of
    from sipe_fairseq.structure.scoring import score_sentences

    def status(key):
        for line in open("/proc/self/status"):
            if line.startswith(key):
                return int(line.split()[1]) * 1024

    ckpt, data, source = sys.argv[1:4]
    model, task = load_lm(ckpt, data)
    sentences = load_split_sentences(task, "valid")[0] * 4
    d = task.source_dictionary
    options = StructureOptions(max_memory=2 ** 40)
    score_sentences(model, sentences[:2], source, options, d.eos(), d.pad())  # warm-up: lazy allocations
    gc.collect()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the high-water mark starts again from the current resident size
    before = status("VmRSS")
    score_sentences(model, sentences, source, options, d.eos(), d.pad(), 256)
    peak = status("VmHWM") - before
    size, family = memory.model_size(model), structure_of(model)
    order = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    src = memory.parse_source(source)
    estimate = max(memory.estimate_bytes(size, src, [sentences[i] for i in b], family)
                   for b in memory.plan_batches(order, sentences, source, size, family, None, 256))
    print(json.dumps({"peak": peak, "estimate": estimate}))
""")


@pytest.mark.parametrize("source", ["beam:4", "mix:16"])
def test_memory_estimate_within_2x_of_the_measured_peak(toy_data, lm_checkpoint, tmp_path, source):
    """The estimate against the resident-memory growth of the search in a fresh process (its high-water mark,
    reset after the model is loaded and a warm-up ran): 160 sentences in one batch, a peak of 100-600 MiB, far
    above the allocator's noise."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pytest.skip("no /proc/self/clear_refs: the peak resident size cannot be reset here")
    script = tmp_path / "measure.py"
    script.write_text(_MEASURE)
    proc = subprocess.run([sys.executable, str(script), str(lm_checkpoint), str(toy_data), source], capture_output=True,
                          text=True, env=dict(ENV, PYTHONPATH=str(ROOT)), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["peak"] > 32 * 2 ** 20, got  # large enough to measure
    assert 0.5 <= got["estimate"] / got["peak"] <= 2.0, got
