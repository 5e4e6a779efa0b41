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
    """The kept heap holds a batch's freed blocks (resident); ``memory.release_freed`` (called after every batch)
    gives their pages back, so the next batch starts from what the process holds."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("SIPE_MALLOC", None)
    proc = subprocess.run([sys.executable, "-c", RELEASE], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    mib = 2 ** 20
    assert got["called"] is True
    assert got["kept"] - got["start"] > 100 * mib  # 128 MiB freed, still resident in the kept heap
    assert got["released"] - got["start"] < 16 * mib  # given back: at most a few pages' worth stays


def test_every_batch_gives_its_freed_memory_back(monkeypatch):
    """score_sentences calls ``release_freed`` once after each planned batch."""
    from conftest import tiny_decoder_lm
    from sipe_fairseq.structure import scoring
    from sipe_fairseq.structure.family import StructureOptions
    from test_memory_budget import _sentences

    calls, finished = [], []
    monkeypatch.setattr(scoring, "release_freed", lambda: calls.append(1) or True)
    model = tiny_decoder_lm("sipe")
    options = StructureOptions(workers=1)
    scoring.score_sentences(model, _sentences(7), "beam:4", options, 2, 1, batch_sentences=3,
                            progress=finished.append)
    assert sorted(finished) == [1, 3, 3] and len(calls) == 3


@pytest.mark.parametrize("family,source", [("sipe", "mix:4"), ("gilt", "beam:4")])
def test_a_batch_kv_cache_is_freed_before_the_heap_is_given_back(monkeypatch, family, source):
    """When a batch ends and its freed heap is given back, none of its KV cache's tensors is alive any more
    (a cache held until the next batch's begin would stay resident through the trim)."""
    import weakref

    from conftest import tiny_decoder_lm
    from sipe_fairseq.structure import scoring
    from sipe_fairseq.structure import search as search_module
    from sipe_fairseq.structure.family import StructureOptions
    from test_memory_budget import _sentences

    refs, alive_at_release, advance = [], [], search_module._Search.advance

    def recording(self, t):
        advance(self, t)
        for layer in self.policy.state.values():
            refs.extend(weakref.ref(x) for x in (layer.values() if isinstance(layer, dict) else ()) if torch.is_tensor(x))

    def release():
        alive_at_release.append(sum(r() is not None for r in refs))
        refs.clear()
        return True

    import torch
    monkeypatch.setattr(search_module._Search, "advance", recording)
    monkeypatch.setattr(scoring, "release_freed", release)
    model = tiny_decoder_lm(family)
    scoring.score_sentences(model, _sentences(6), source, StructureOptions(workers=1), 2, 1, batch_sentences=3)
    assert len(alive_at_release) == 2 and all(n == 0 for n in alive_at_release), alive_at_release
