"""The benchmark scripts' ratio bookkeeping: a host process's own speed must cancel in the ratios.

Pure arithmetic on synthetic samples (no model is built), so the test is fast and exact.
"""
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "benchlib.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("benchlib_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def samples(base, cost, host_speed, rounds=5):
    """Train times of one configuration: ``base * cost * host_speed[k] * round drift`` per [round, host]."""
    drift = [1.0, 1.02, 0.97, 1.05, 0.99][:rounds]
    slots = [[r, k] for r in range(rounds) for k in range(len(host_speed))]
    return {"train_wall": [base * cost * host_speed[k] * drift[r] for r, k in slots], "slots": slots}


def test_host_speed_cancels_in_paired_ratio(bench):
    hosts = [1.0, 1.08]  # the second process runs everything 8% slower
    none = samples(1.0, 1.0, hosts)
    inj = samples(1.0, 1.02, hosts)
    assert bench.paired_ratio(inj, none, "train_wall") == pytest.approx(1.02, abs=1e-12)
    assert bench.host_ratios(inj, none, "train_wall") == pytest.approx([1.02, 1.02], abs=1e-12)
    assert bench.process_effect(none, "train_wall") == pytest.approx([1.08], abs=1e-12)


def test_pairs_by_round_and_host_not_by_position(bench):
    """Samples appended in another order (the turn order rotates) still pair with their own slot."""
    hosts = [1.0, 1.3]
    none = samples(1.0, 1.0, hosts)
    inj = samples(1.0, 1.05, hosts)
    order = list(reversed(range(len(inj["slots"]))))
    shuffled = {"train_wall": [inj["train_wall"][i] for i in order], "slots": [inj["slots"][i] for i in order]}
    assert bench.paired_ratios(shuffled, none, "train_wall") == pytest.approx([1.05] * len(order), abs=1e-12)


def test_unpaired_samples_fall_back_to_ratio_of_medians(bench):
    none = {"train_wall": [2.0, 2.0, 2.0]}  # old JSON without slots: pairs by index
    inj = {"train_wall": [2.2, 2.2, 2.2], "slots": [[5, 0], [6, 0], [7, 0]]}  # nothing matches
    assert bench.paired_ratios(inj, none, "train_wall") == []
    assert bench.paired_ratio(inj, none, "train_wall") == pytest.approx(1.1)


def test_host_groups_one_code_version_per_process(bench):
    groups = bench.host_groups(["none", "input", "none@base", "input@base"], 2)
    assert groups == {"w0": ["none", "input"], "w1": ["none", "input"],
                      "base0": ["none@base", "input@base"], "base1": ["none@base", "input@base"]}


def test_paired_times_rotates_and_pairs(bench):
    now, calls = [0.0], []

    def step(name, cost):
        def run():
            calls.append(name)
            now[0] += cost
        return run

    times = bench.paired_times({"a": step("a", 1.0), "b": step("b", 3.0), "c": step("c", 0.5)}, 4, clock=lambda: now[0])
    assert times == {"a": [1.0] * 4, "b": [3.0] * 4, "c": [0.5] * 4}
    assert calls == list("abc" "bca" "cab" "abc")


def test_markdown_table(bench):
    table = bench.markdown_table(["code", "s"], [["before", 1.5], ["after", "0.2"]])
    assert table.splitlines() == ["| code | s |", "|---|---:|", "| before | 1.5 |", "| after | 0.2 |"]


def _load(name):
    import sys
    sys.path.insert(0, str(SCRIPT.parent))  # the scripts import benchlib
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", SCRIPT.parent / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_clocks(costs):
    """Two clocks advanced by the callables: wall by ``costs[name]``, cpu by half of it."""
    now = {"wall": 0.0, "cpu": 0.0}

    def step(name):
        def run():
            now["wall"] += costs[name]
            now["cpu"] += costs[name] / 2
        return run
    return {n: step(n) for n in costs}, {"wall": lambda: now["wall"], "cpu": lambda: now["cpu"]}


def test_paired_runs_slots_and_speed_ratio(bench):
    fns, clocks = fake_clocks({"none": 1.0, "beam": 4.0})
    runs = bench.paired_runs(fns, 3, clocks=clocks)
    assert runs["none"] == {"wall": [1.0] * 3, "cpu": [0.5] * 3, "slots": [[0, 0], [1, 0], [2, 0]]}
    assert runs["beam"]["slots"] == [[0, 0], [1, 0], [2, 0]]
    ratio, rng = bench.speed_ratio(runs["beam"], runs["none"], "cpu")  # throughput: none's time / beam's
    assert ratio == pytest.approx(0.25) and rng == pytest.approx([0.25, 0.25])
    # a slow round slows both sides: paired, the ratio is unchanged
    slow = {"wall": [1.0, 3.0, 1.0], "slots": [[0, 0], [1, 0], [2, 0]]}
    slow_beam = {"wall": [12.0, 4.0, 4.0], "slots": [[1, 0], [0, 0], [2, 0]]}  # another order: pairs by slot
    assert bench.speed_ratio(slow_beam, slow, "wall")[0] == pytest.approx(0.25)
    assert bench.fmt_range([0.00123, 0.0456], ".3g") == " [0.00123-0.0456]" and bench.fmt_range([1, 2]) == " [1.00-2.00]"
    assert bench.fmt_range(None) == ""


def test_generate_random_sentences_are_tagged_trees():
    gen = _load("bench_generate")
    from fairseq.data import Dictionary
    from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID
    from sipe_fairseq.structure.sentences import sentence_of, word_starts
    from sipe_fairseq.hexatag.constrained import is_valid

    d = Dictionary()
    for i in range(50):
        d.add_symbol(f"w{i}")
    sents = gen.random_sentences(30, 6, d, seed=1)
    assert len(sents) == 30
    again = gen.random_sentences(30, 6, d, seed=1)
    for (toks, terms, nts), (t2, _, _) in zip(sents, again):
        assert toks.tolist() == t2.tolist()  # seeded
        assert int(toks[-1]) == d.eos() and int(toks[:-1].min()) >= d.nspecial
        starts = word_starts(toks, terms)
        assert 3 <= len(starts) <= 9 and bool((terms[:-1] >= FIRST_TAG_ID).any())
        assert all(b - a <= 3 for a, b in zip(starts, starts[1:] + [len(toks) - 1]))  # 1..3 subwords per word
        assert (nts >= FIRST_TAG_ID).tolist() == (terms >= FIRST_TAG_ID).tolist()
    from sipe_fairseq.hexatag.constrained import PAIRS

    assert all(is_valid([PAIRS[p] for p in sentence_of(i, *s, eos=d.eos()).pairs]) for i, s in enumerate(sents))
    assert len({len(t) for t, _, _ in sents}) > 3  # lengths vary


def test_generate_scoring_rows():
    """Throughput ratios to given paired by round, positions per token and efficiency from the stats."""
    gen = _load("bench_generate")
    slots = [[0, 0], [1, 0], [2, 0]]
    runs = {"given": {"wall": [1.0, 2.0, 1.0], "cpu": [1.0, 1.0, 1.0], "slots": slots},
            "beam:4": {"wall": [10.0, 20.0, 10.0], "cpu": [5.0, 4.0, 5.0], "slots": slots}}
    stats = {"given": {"positions": 100, "ppl": 10.0}, "beam:4": {"positions": 2500, "ppl": 12.5}}
    rows = gen.scoring_rows(runs, [("given", "given", 0), ("beam:4", "beam:4", 0)], 8, 100, stats)
    assert rows[0] == ["given", "8.0", "100", "(reference)", "1.0", "1.00x", "1x", "10.00"]
    # beam: 8 / 5 s = 1.6 sentences/s, 20 tokens/s, 0.2x [0.2-0.25]; 25 positions per token: 500/s vs given's 100/s
    assert rows[1] == ["beam:4", "1.6", "20", "0.2x [0.2-0.25]", "25.0", "5.00x", "0.1x", "12.50"]


def test_generate_scoring_part_runs(capsys):
    """The scoring part end to end at a toy size (plumbing only: no timing is checked)."""
    import argparse
    from fairseq.data import Dictionary

    gen = _load("bench_generate")
    d = Dictionary()
    for i in range(60):
        d.add_symbol(f"w{i}")
    a = argparse.Namespace(embed_dim=16, ffn=32, layers=1, heads=2, vocab=64, tokens=16, seed=0, threads=1,
                           score_sentences=2, score_words=4, score_sources=["self", "beam:2"], score_rounds=2,
                           data=None, path=None, placement="first_subword", score_batch=64, score_top_pairs=[1],
                           score_prune_k=2)
    runs = gen.run_scoring(a, d)
    assert set(runs) == {"given", "self", "beam:2", "beam:2 top 1"}
    assert all(len(r["cpu"]) == 2 for r in runs.values())
    out = capsys.readouterr().out
    assert "| beam:2 | " in out and "| given | " in out and "| beam:2 top 1 | " in out


def test_gilt_parse_beams_and_table():
    gilt = _load("bench_gilt")
    assert gilt.parse_beams(["300:5", "20", "1:1"]) == [(300, 5), (20, 5), (1, 1)]
    for bad in ("0:5", "x", "20:", "20:0"):
        with pytest.raises(ValueError):
            gilt.parse_beams([bad])
    slots = [[0, 0], [1, 0]]
    train = {"none": {"wall": [1.0, 2.0], "cpu": [1.0, 1.0], "slots": slots},
             "gilt": {"wall": [3.0, 6.0], "cpu": [2.0, 2.0], "slots": slots}}
    label = gilt.beam_label(300, 5)
    slots3 = [[0, 0], [1, 0], [2, 0]]
    scoring = {"none": {"wall": [0.1, 0.2, 0.3], "cpu": [0.1] * 3, "slots": slots3},
               label: {"wall": [10.0, 40.0, 10.0], "cpu": [10.0] * 3, "slots": slots3}}
    lines = gilt.table("tiny", 2, train, {"none": 2**20, "gilt": 3 * 2**20}, scoring, 5, 3).splitlines()
    assert lines[0] == "| tiny, batch of 16 blocks x 128 tokens | none | GiLT | ratio |"
    assert lines[2] == "| train step (median of 2 rounds), s | 1.500 | 4.500 | 3.00 [3.00-3.00] (2.00) |"
    assert lines[3] == "| peak training tensor memory, MB | 1.0 | 3.0 | 3.00 |"
    assert lines[4] == (f"| scoring 5 sentences x 3 rounds, sentences/s (GiLT: {label}; none: one forward) | 25.0 | 0.50 | "
                        "0.01 [0.005-0.03] (0.01) |")


@pytest.mark.parametrize("bad", ["given", "beam:0", "nope"])
def test_generate_rejects_bad_score_sources(monkeypatch, capsys, bad):
    gen = _load("bench_generate")
    monkeypatch.setattr("sys.argv", ["bench_generate.py", "--parts", "scoring", "--score-sources", "self", bad])
    with pytest.raises(SystemExit) as exc:
        gen.main()
    assert exc.value.code == 2 and f"--score-sources {bad}" in capsys.readouterr().err
