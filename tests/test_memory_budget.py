"""Issue 48: ``--max-memory`` bounds a structure search. The default budget respects the process's own limits
(``RLIMIT_AS``/``RLIMIT_DATA``, a cgroup's ``memory.max``), read from a root that tests fake; under a real
``RLIMIT_AS`` a search that cannot fit is refused in one line (exit 2) instead of failing in the allocator; the
estimate bounds the tensors the search holds. The measured peaks against the budget: scripts/bench_memory.py
(docs/benchmarks.md, "A memory budget that bounds")."""
import os
import resource
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import BIN, ENV, ROOT, tiny_decoder_lm, txl
from sipe_fairseq.structure import memory

GIB, MIB = 2 ** 30, 2 ** 20


def fake_root(tmp_path, meminfo_kb=8 * 2 ** 20, cgroup="0::/\n", files=None, status=None):
    """A fake ``/`` with ``proc/meminfo``, ``proc/self/cgroup``, ``proc/self/status`` and ``files`` (relative path ->
    text) under it."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(f"MemTotal:       {2 * meminfo_kb} kB\nMemAvailable:   {meminfo_kb} kB\n")
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    (tmp_path / "proc/self/status").write_text(status or "VmPeak:  3000000 kB\nVmSize:  2000000 kB\nVmData:  1000000 kB\n")
    for rel, text in (files or {}).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return str(tmp_path)


def test_default_budget_is_half_of_mem_available(tmp_path):
    root = fake_root(tmp_path, meminfo_kb=8 * 2 ** 20)
    assert memory.available_bytes(root) == 8 * GIB
    assert memory.cgroup_headroom(root) is None and memory.rlimit_headroom(root, limits={}) is None
    assert memory.default_budget(root, limits={}) == 4 * GIB


def test_cgroup_v2_limit_lower_than_mem_available(tmp_path):
    """v2: the process's group and every group above it; limit - usage + the reclaimable page cache, the smallest."""
    root = fake_root(tmp_path, cgroup="0::/user.slice/job\n", files={
        "sys/fs/cgroup/user.slice/job/memory.max": "1073741824\n",
        "sys/fs/cgroup/user.slice/job/memory.current": f"{600 * MIB}\n",
        "sys/fs/cgroup/user.slice/job/memory.stat": f"anon 1\ninactive_file {100 * MIB}\nactive_file 5\n",
        "sys/fs/cgroup/user.slice/memory.max": "max\n",
        "sys/fs/cgroup/user.slice/memory.current": f"{5 * GIB}\n"})
    assert memory.cgroup_headroom(root) == 1 * GIB - 600 * MIB + 100 * MIB
    assert memory.default_budget(root, limits={}) == (524 * MIB) // 2


def test_cgroup_v2_parent_limit_applies(tmp_path):
    root = fake_root(tmp_path, cgroup="0::/a/b\n", files={
        "sys/fs/cgroup/a/b/memory.max": "max\n", "sys/fs/cgroup/a/b/memory.current": "1000\n",
        "sys/fs/cgroup/a/memory.max": f"{2 * GIB}\n", "sys/fs/cgroup/a/memory.current": f"{GIB}\n"})
    assert memory.cgroup_headroom(root) == GIB


def test_cgroup_v2_namespace_root(tmp_path):
    """Inside a cgroup namespace the process's group is the mount itself: /sys/fs/cgroup/memory.max."""
    root = fake_root(tmp_path, files={"sys/fs/cgroup/memory.max": f"{GIB}\n",
                                      "sys/fs/cgroup/memory.current": f"{256 * MIB}\n"})
    assert memory.cgroup_headroom(root) == 768 * MIB
    assert memory.default_budget(root, limits={}) == 384 * MIB


def test_cgroup_v1_limit_and_unlimited_parents(tmp_path):
    """v1 (a hybrid hierarchy: the v2 line names no memory controller): memory.limit_in_bytes - usage +
    total_inactive_file; 2^63 rounded to a page is no limit."""
    unlimited = "9223372036854771712\n"
    root = fake_root(tmp_path, cgroup="4:memory:/process_api/abc\n1:cpu:/\n0::/\n", files={
        "sys/fs/cgroup/memory/process_api/abc/memory.limit_in_bytes": f"{3 * GIB}\n",
        "sys/fs/cgroup/memory/process_api/abc/memory.usage_in_bytes": f"{2 * GIB}\n",
        "sys/fs/cgroup/memory/process_api/abc/memory.stat": f"cache 9\ntotal_inactive_file {GIB}\n",
        "sys/fs/cgroup/memory/process_api/memory.limit_in_bytes": unlimited,
        "sys/fs/cgroup/memory/process_api/memory.usage_in_bytes": f"{9 * GIB}\n",
        "sys/fs/cgroup/memory/memory.limit_in_bytes": unlimited,
        "sys/fs/cgroup/memory/memory.usage_in_bytes": f"{9 * GIB}\n"})
    assert memory.cgroup_headroom(root) == 2 * GIB
    assert memory.default_budget(root, limits={}) == GIB


def test_unlimited_cgroup_is_no_bound(tmp_path):
    root = fake_root(tmp_path, cgroup="4:memory:/x\n", files={
        "sys/fs/cgroup/memory/x/memory.limit_in_bytes": "9223372036854771712\n",
        "sys/fs/cgroup/memory/x/memory.usage_in_bytes": "1\n"})
    assert memory.cgroup_headroom(root) is None


def test_address_space_limit(tmp_path):
    """RLIMIT_AS minus VmSize, RLIMIT_DATA minus VmData, less the kept heap's pad; the smallest headroom wins."""
    root = fake_root(tmp_path, status="VmSize:  2097152 kB\nVmData:  1048576 kB\n")  # 2 GiB, 1 GiB
    pad = memory.HEAP_PAD
    assert memory.rlimit_headroom(root, limits={"AS": 3 * GIB}) == GIB - pad
    assert memory.rlimit_headroom(root, limits={"AS": 3 * GIB, "DATA": GIB + 512 * MIB}) == 512 * MIB - pad
    assert memory.rlimit_headroom(root, limits={"AS": 2 * GIB}) == 0
    assert memory.default_budget(root, limits={"AS": 3 * GIB}) == (GIB - pad) // 2
    assert memory.default_budget(root, limits={"AS": 64 * GIB}) == 4 * GIB  # MemAvailable is lower


def test_heap_pad_is_the_allocators():
    from sipe_fairseq.cli import allocator

    assert dict(allocator.SETTINGS)[allocator.M_TOP_PAD] == memory.HEAP_PAD


def test_sipe_pairs_is_the_most_a_prefix_allows():
    """A SiPE beam's rows per hypothesis: the most pairs any prefix state allows (the constrained automaton)."""
    from sipe_fairseq.structure.hexatags import transitions

    assert int((transitions(40) != -2).sum(1).max()) == memory.SIPE_PAIRS


# ------------------------------------------------------------------ the estimate bounds the tensors held
def _sentences(count, seed=1):
    from sipe_fairseq.structure.sentences import Sentence

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        pieces = torch.randint(1, 3, (int(torch.randint(6, 40, (1,), generator=g)),), generator=g)
        tokens = torch.randint(4, 60, (int(pieces.sum()) + 1,), generator=g)
        tokens[-1] = 2
        out.append(Sentence(tokens, (torch.cumsum(pieces, 0) - pieces).tolist()))
    return out


def _cache_bytes(state) -> int:
    storages = {}
    for layer in state.values():
        for t in (layer.values() if isinstance(layer, dict) else ()):
            if torch.is_tensor(t) and t.numel():
                storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


@pytest.mark.parametrize("family,source", [("sipe", "beam:4"), ("sipe", "mix:16"), ("gilt", "beam:8")])
def test_estimate_bounds_the_kv_cache(monkeypatch, family, source):
    """After every decoder step of every batch, the KV cache's storages (its live buffers, spares and shared
    prefixes; positions past 48 included, where the cache shares prefixes) are within the batch's estimate."""
    from sipe_fairseq.structure import search as search_module
    from sipe_fairseq.structure.family import StructureOptions, structure_of
    from sipe_fairseq.structure.scoring import plan, score_sentences

    model, sentences = tiny_decoder_lm(family), _sentences(24)
    size, fam = memory.model_size(model), structure_of(model)
    longest = sorted(sentences, key=lambda s: s.n)[-3:]
    options = StructureOptions(max_memory=memory.estimate_bytes(size, memory.parse_source(source), longest, fam), workers=1)
    batches = plan(model, sentences, source, options)  # the longest three a batch, more of the shorter ones
    assert len(batches) > 1  # the budget cuts the batches
    held, advance = [], search_module._Search.advance

    def recording(self, t):
        advance(self, t)
        held.append(_cache_bytes(self.policy.state))

    monkeypatch.setattr(search_module._Search, "advance", recording)
    for b in batches:
        held.clear()
        batch = [sentences[i] for i in b]
        score_sentences(model, batch, source, options)
        estimate = memory.estimate_bytes(size, memory.parse_source(source), batch, fam)
        assert 0 < max(held) <= estimate <= options.max_memory, (max(held), estimate)


@pytest.mark.parametrize("family,source", [("sipe", "self"), ("gilt", "self"), ("sipe", "mix:4")])
def test_estimate_bounds_the_kv_cache_of_shared_contexts(monkeypatch, family, source):
    """Texts after one long context (60 tokens, past the 48 positions where the cache shares prefixes): the search
    runs the context once and copies its rows to each text (search.shared_forks), a reorder that repeats rows;
    after every decoder step the KV cache's storages are within the estimate planned for sharing."""
    from sipe_fairseq.structure import search as search_module
    from sipe_fairseq.structure.family import StructureOptions, structure_of
    from sipe_fairseq.structure.scoring import plan, score_sentences
    from sipe_fairseq.structure.sentences import with_context

    model = tiny_decoder_lm(family)
    context = [s for s in _sentences(12, seed=3) if s.n < 30]
    while sum(s.n for s in context) > 60:
        context.pop()
    texts = [with_context(t, context) for t in _sentences(10, seed=4) if t.n < 30]
    size, fam = memory.model_size(model), structure_of(model)
    options = StructureOptions(workers=1)
    held, advance = [], search_module._Search.advance

    def recording(self, t):
        advance(self, t)
        held.append(_cache_bytes(self.policy.state))

    monkeypatch.setattr(search_module._Search, "advance", recording)
    for b in plan(model, texts, source, options):
        held.clear()
        batch = [texts[i] for i in b]
        scores = score_sentences(model, batch, source, options)
        assert sum(1 for s in scores if s.extra.get("shared_positions")) == len(batch) - 1  # one run of the context
        estimate = memory.estimate_bytes(size, memory.parse_source(source), batch, fam, shared=True)
        assert 0 < max(held) <= estimate, (max(held), estimate)


# ------------------------------------------------------------------ a real RLIMIT_AS
_PEAK = textwrap.dedent("""
    import atexit, sys
    def report():
        for line in open("/proc/self/status"):
            if line.startswith("VmPeak:"):
                print("VMPEAK", int(line.split()[1]) * 1024, file=sys.stderr)
    atexit.register(report)
    from sipe_fairseq.cli.eval_lm import main
    sys.exit(main(sys.argv[1:]))
""")


@pytest.fixture(scope="module")
def lm_checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))


def _limited(cmd, limit):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=dict(ENV, PYTHONPATH=str(ROOT)),
                          preexec_fn=set_limit if limit else None, timeout=600)


def test_address_space_limit_refuses_in_one_line(toy_data, lm_checkpoint, tmp_path):
    """Under ``ulimit -v`` a little above what ``self`` needs, ``mix:1000`` with the default budget was planned for
    half of MemAvailable and ended in the allocator's traceback; now the budget is half of what the limit leaves:
    ``self`` still runs, ``mix:1000`` is refused before anything is scored (exit 2, one line)."""
    script = tmp_path / "peak.py"
    script.write_text(_PEAK)
    args = [toy_data, "--path", lm_checkpoint, "--no-progress"]
    free = _limited([sys.executable, script, *args, "--tags", "self"], None)
    assert free.returncode == 0, free.stderr[-2000:]
    peak = int(next(line.split()[1] for line in free.stderr.splitlines() if line.startswith("VMPEAK")))
    limit = peak + memory.HEAP_PAD + 128 * MIB
    ok = _limited([BIN / "sipe-eval-lm", *args, "--tags", "self"], limit)
    assert ok.returncode == 0 and "Traceback" not in ok.stderr, ok.stderr[-2000:]
    refused = _limited([BIN / "sipe-eval-lm", *args, "--tags", "mix:1000"], limit)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    line = refused.stderr.strip().splitlines()[-1]
    assert "tag source mix:1000: one sentence of" in line and "over the memory budget of" in line, line
    assert refused.stdout == ""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="no /proc")
def test_real_root_reads():
    """On this machine: MemAvailable is read, and the default budget is at most half of it."""
    free = memory.available_bytes()
    assert free is not None and 0 < memory.default_budget() <= free // 2 + 1
