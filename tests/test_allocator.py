"""cli/allocator.py: the commands keep freed blocks in the heap (glibc), so a block freed and asked for
again is not faulted in page by page once more. Each case runs in a fresh interpreter: the setting is
process-wide."""
import json
import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import json, resource, sys
import torch
from sipe_fairseq.cli.allocator import keep_freed_memory
torch.set_num_threads(1)
kept = keep_freed_memory()
faults = []
for _ in range(8):  # blocks of 16-64 MiB, written, freed, asked for again (as a search step's tensors are)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for mib in (16, 48, 64):
        x = torch.empty(mib * 2 ** 18, dtype=torch.float32)
        x.fill_(1.0)
        del x
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"kept": kept, "faults": faults}))
"""

glibc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")


def _run(opt_out: bool) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("SIPE_MALLOC", None)
    if opt_out:
        env["SIPE_MALLOC"] = "system"
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@glibc
def test_freed_blocks_are_reused_without_new_page_faults():
    kept, system = _run(opt_out=False), _run(opt_out=True)
    assert kept["kept"] is True and system["kept"] is False
    pages = (16 + 48 + 64) * 2 ** 20 // 4096  # the blocks' pages per round: 32,768
    # glibc's own settings: every round maps the blocks afresh and faults in each of their pages
    assert min(system["faults"][1:]) > pages // 2
    # kept: after the first round the blocks mostly come back from the heap, already faulted in
    assert sum(kept["faults"][1:]) < sum(system["faults"][1:]) // 3


RELEASE = r"""
import json
import torch
from sipe_fairseq.cli.allocator import keep_freed_memory
from sipe_fairseq.structure.memory import release_freed

def rss():
    with open("/proc/self/status") as f:
        return next(int(x.split()[1]) for x in f if x.startswith("VmRSS:")) * 1024

keep_freed_memory()
start = rss()
blocks = [torch.ones(mib * 2 ** 18) for mib in (16, 48, 64)]  # a batch's tensors, written, then freed
del blocks
kept = rss()
called = release_freed()
print(json.dumps({"start": start, "kept": kept, "released": rss(), "called": called}))
"""


@glibc
def test_freed_heap_is_given_back_between_batches():
    """The kept heap holds a batch's freed blocks (resident); ``memory.release_freed`` (called between batches when
    the budget needs it) gives their pages back, so the next batch starts from what the process holds."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("SIPE_MALLOC", None)
    proc = subprocess.run([sys.executable, "-c", RELEASE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    mib = 2 ** 20
    assert got["called"] is True
    assert got["kept"] - got["start"] > 100 * mib  # 128 MiB freed, still resident in the kept heap
    assert got["released"] - got["start"] < 16 * mib  # given back: at most a few pages' worth stays


def test_the_heap_is_given_back_only_when_the_budget_needs_it(monkeypatch):
    """HeapGuard: before a batch, the freed heap is released when what the process holds above its resident set
    before its first batch, plus this batch's estimate, is over the budget; not otherwise."""
    from sipe_fairseq.structure import memory

    rss, calls = [1000], []
    monkeypatch.setattr(memory, "resident_bytes", lambda: rss[0])
    monkeypatch.setattr(memory, "release_freed", lambda: calls.append(rss[0]) or True)
    guard = memory.HeapGuard(budget=100)
    assert guard.before(100) is False  # the first batch: the base is 1000, nothing held
    rss[0] = 1040
    assert guard.before(60) is False  # 40 held + 60 needed = the budget: kept
    rss[0] = 1041
    assert guard.before(60) is True and calls == [1041]  # 41 + 60 > 100: released
    assert guard.before(59) is False  # a smaller batch fits beside what is held (the base did not move)
    assert guard.released == 1
    assert memory.HeapGuard(None).before(10 ** 12) is False and len(calls) == 1  # no budget, no bound


def test_a_search_releases_before_the_batches_that_need_it(monkeypatch):
    """Through score_sentences: with the process holding ``held`` bytes after its first batch, the heap is given
    back before exactly the later batches whose own estimate, added to it, passes the budget; a budget far above
    every batch releases nothing."""
    from conftest import tiny_decoder_lm
    from sipe_fairseq.structure import memory, scoring
    from sipe_fairseq.structure.family import StructureOptions
    from test_memory_budget import _sentences

    model, sentences = tiny_decoder_lm("sipe"), _sentences(7)
    src = memory.parse_source("beam:4")
    planned = scoring.plan(model, sentences, src, StructureOptions(workers=1), 2)
    size = memory.model_size(model)
    peaks = [memory.estimate_bytes(size, src, [sentences[i] for i in b], "hexatags") for b in planned]
    assert len(planned) >= 3 and len(set(peaks[1:])) > 1, peaks  # later batches of different estimates
    budget = max(peaks) + 1
    for held in (0, budget - min(peaks[1:]), budget):
        calls, finished, reads = [], [], []
        monkeypatch.setattr(memory, "release_freed", lambda: calls.append(1) or True)
        # the first read is the base, every later one ``held`` above it
        monkeypatch.setattr(memory, "resident_bytes", lambda: 10 ** 9 + (held if (reads.append(1) or len(reads)) > 1 else 0))
        scoring.score_sentences(model, sentences, src, StructureOptions(workers=1, max_memory=budget), 2, 1,
                                batch_sentences=2, progress=finished.append)
        assert sum(finished) == len(sentences)
        assert len(calls) == sum(held + p > budget for p in peaks[1:]), (held, peaks)
    calls.clear()
    scoring.score_sentences(model, sentences, src, StructureOptions(workers=1, max_memory=2 ** 40), 2, 1,
                            batch_sentences=2)
    assert not calls


@pytest.mark.parametrize("family,source", [("sipe", "mix:4"), ("gilt", "beam:4")])
def test_a_batch_kv_cache_is_freed_before_the_heap_is_given_back(monkeypatch, family, source):
    """When the next batch begins and the freed heap may be given back (``HeapGuard.before``), none of the previous
    batch's KV cache tensors is alive any more (a cache held until the next batch's begin would stay resident
    through the trim)."""
    import weakref

    import torch

    from conftest import tiny_decoder_lm
    from sipe_fairseq.structure import memory, scoring
    from sipe_fairseq.structure import search as search_module
    from sipe_fairseq.structure.family import StructureOptions
    from test_memory_budget import _sentences

    refs, alive_at_release, advance = [], [], search_module._Search.advance

    def recording(self, t):
        advance(self, t)
        for layer in self.policy.state.values():
            refs.extend(weakref.ref(x) for x in (layer.values() if isinstance(layer, dict) else ()) if torch.is_tensor(x))

    def release(self, need):
        alive_at_release.append((bool(refs), sum(r() is not None for r in refs)))
        refs.clear()
        return True

    monkeypatch.setattr(search_module._Search, "advance", recording)
    monkeypatch.setattr(memory.HeapGuard, "before", release)
    model = tiny_decoder_lm(family)
    scoring.score_sentences(model, _sentences(6), source, StructureOptions(workers=1), 2, 1, batch_sentences=3)
    # two batches: before the first nothing was cached; before the second the first's cache was, and is freed
    assert alive_at_release == [(False, 0), (True, 0)], alive_at_release


def test_the_c_library_is_looked_up_once_and_a_missing_function_is_none(monkeypatch):
    """memory.c_function, the one lookup the allocator settings and release_freed share: a function found once is
    the same object after (the CDLL is not loaded again), a name the C library lacks is None, and release_freed
    then does nothing."""
    import ctypes

    from sipe_fairseq.structure import memory

    monkeypatch.setattr(memory, "_C_FUNCTIONS", {})
    loads = []
    real = ctypes.CDLL
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda *a, **k: loads.append(a) or real(*a, **k))
    first = memory.c_function("malloc_trim")
    if first is None:
        pytest.skip("this C library has no malloc_trim (not glibc)")
    assert memory.c_function("malloc_trim") is first and len(loads) == 1
    assert memory.c_function("sipe_no_such_function") is None and len(loads) == 2
    memory._C_FUNCTIONS["malloc_trim"] = None
    assert memory.release_freed() is False
