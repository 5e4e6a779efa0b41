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
