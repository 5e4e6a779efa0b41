"""Shards across machines (issue 49, item 2): ``--num-shards N --shard-id I`` on ``sipe-eval-lm --tags``,
``sipe-eval blimp`` and ``sipe-eval syntaxgym``, and ``sipe-eval merge``. For each command on the toy inputs, one
shard (N=1) and three shards (N=3), merged, give the report of the unsharded run: per-sentence and per-item numbers
to 1e-12, counts and aggregates equal. That exactness needs every sentence scored in a batch of its own (a batch of
1 sentence, as these tests run): a shard's batches hold other sentences than the run's, and two batchings differ in
float32's last digits (docs/scaling.md), which one test shows at the default batch size (to 1e-6). The merge
refuses overlapping shards, a missing shard, and shards of another checkpoint or other tag sources (exit status 2,
one line)."""
import json
import logging
import math

import pytest

from conftest import STOCK_LM, txl

from sipe_fairseq.cli.eval import main as eval_main
from sipe_fairseq.cli.eval_lm import main as eval_lm_main
from sipe_fairseq.data import toy_grammar as tg
from sipe_fairseq.eval.shards import ShardError, check_shard, interleave, shard_indices

TAGS = "given,self,beam:2,mix:2"
VOLATILE = {"seconds"}  # wall time: each shard's own (the merge sums them)


# ------------------------------------------------------------------------------------------ the share
def test_share_is_round_robin_and_covers_every_item_once():
    assert shard_indices(10, 3, 0) == [0, 3, 6, 9] and shard_indices(10, 3, 2) == [2, 5, 8]
    assert shard_indices(2, 4, 3) == []  # more shards than items: an empty share, still a shard
    for n in (1, 2, 3, 7):
        shares = [shard_indices(20, n, i) for i in range(n)]
        assert sorted(i for s in shares for i in s) == list(range(20))
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert interleave(shares, n) == list(range(20))


@pytest.mark.parametrize("n, i", [(0, 0), (-1, 0), (2, 2), (2, -1)])
def test_bad_shard_options_are_refused(n, i):
    with pytest.raises(ShardError):
        check_shard(n, i)


# ------------------------------------------------------------------------------------------ helpers
def close(a, b, path="report", rel=1e-12):
    """``a`` equals ``b``: floats to ``rel`` (relative), everything else exactly; ``seconds`` not compared."""
    if isinstance(a, dict) and isinstance(b, dict):
        assert set(a) == set(b), f"{path}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            if k not in VOLATILE:
                close(a[k], b[k], f"{path}.{k}", rel)
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{path}: {len(a)} vs {len(b)} items"
        for k, (x, y) in enumerate(zip(a, b)):
            close(x, y, f"{path}[{k}]", rel)
    elif isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, f"{path}: {a} vs {b}"
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=rel, abs=rel), f"{path}: {a} vs {b}"
    else:
        assert a == b, f"{path}: {a!r} vs {b!r}"


@pytest.fixture
def alone(monkeypatch):
    """Every sentence in a batch of its own, full forwards too (``given`` of SiPE, every source of a stock LM: the
    engine batches those by padded positions, which no option sets), so that a shard's batches are the run's."""
    from sipe_fairseq.structure import scoring

    monkeypatch.setattr(scoring, "GIVEN_POSITIONS", 1)


def shards_and_merge(run, argv, out, n, merged_name="merged"):
    """Run ``argv`` as ``n`` shards (``run``: the command's main), merge them; the merged report."""
    paths = []
    for i in range(n):
        paths.append(out / f"{merged_name}.{n}.{i}.json")
        assert run([*argv, "--num-shards", str(n), "--shard-id", str(i), "--json", str(paths[i])]) == 0
        shard = json.loads(paths[i].read_text())
        assert shard["shard"]["id"] == i and shard["shard"]["of"] == n
    merged = out / f"{merged_name}.{n}.json"
    md = out / f"{merged_name}.{n}.md"
    assert eval_main(["merge", *map(str, paths[::-1]), "--json", str(merged), "--markdown", str(md)]) == 0
    return json.loads(merged.read_text()), paths


def merge_fails(paths, out, caplog, *match):
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        assert eval_main(["merge", *map(str, paths), "--json", str(out / "refused.json")]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0], errors
    for m in match:
        assert m in errors[0], errors[0]
    assert not (out / "refused.json").exists()


# ------------------------------------------------------------------------------------------ sipe-eval-lm
@pytest.fixture(scope="module")
def checkpoints(train_checkpoint, toy_data):
    sipe, stock = train_checkpoint.many([txl("position"), STOCK_LM])
    return {"data": toy_data, "sipe": sipe, "stock": stock}


def test_eval_lm_shards_merge_to_the_unsharded_report(checkpoints, tmp_path, caplog, alone):
    argv = [str(checkpoints["data"]), "--path", f"sipe={checkpoints['sipe']}", "--tags", TAGS, "--tags-max-sentences",
            "9", "--no-progress", "--tags-batch-sentences", "1"]
    whole = tmp_path / "whole.json"
    assert eval_lm_main([*argv, "--json", str(whole)]) == 0
    whole = json.loads(whole.read_text())
    for n in (1, 3):
        merged, paths = shards_and_merge(eval_lm_main, argv, tmp_path, n)
        close(merged, whole)
        assert merged["sipe"]["tag_sources"]["mix:2"]["sentences"] == 9
        assert merged["sipe"]["lm"] == whole["sipe"]["lm"]  # the split's stream: shard 0's, whole
    # refusals: overlap, a shard missing, another tag source
    merge_fails([paths[0], paths[1], paths[1], paths[2]], tmp_path, caplog, "overlaps")
    merge_fails(paths[:2], tmp_path, caplog, "shard 2 of 3 missing")
    other = tmp_path / "other.json"
    assert eval_lm_main([*argv[:-7], "--tags", "given", *argv[-5:], "--num-shards", "3", "--shard-id", "2",
                         "--json", str(other)]) == 0
    merge_fails([paths[0], paths[1], other], tmp_path, caplog, "different runs", "options")


def test_eval_lm_shards_at_the_default_batch_agree_to_float32_rounding(checkpoints, tmp_path):
    """Batches of many sentences: a shard's batches are not the run's, the numbers agree to float32's rounding
    (a stock LM beside: every source in full forwards)."""
    argv = [str(checkpoints["data"]), "--path", f"sipe={checkpoints['sipe']}", "--path", f"stock={checkpoints['stock']}",
            "--tags", "given,self,mix:2",
            "--tags-max-sentences", "9", "--no-progress"]
    whole = tmp_path / "whole.json"
    assert eval_lm_main([*argv, "--json", str(whole)]) == 0
    merged, _ = shards_and_merge(eval_lm_main, argv, tmp_path, 3)
    close(merged, json.loads(whole.read_text()), rel=1e-6)


def test_eval_lm_shards_of_a_gilt_checkpoint(train_checkpoint, toy_data, tmp_path, alone):
    """GiLT rows (graphs: each sentence's arcs kept in the shard file, the arc F1 recomputed by the merge)."""
    from conftest import PLUGIN

    gilt = train_checkpoint(["--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm", "--arch", "gilt_txl_tiny",
                             "--tokens-per-sample", "64", "--sample-break-mode", "complete", "--gilt-proj-init-std", "0.5"])
    argv = [str(toy_data), "--path", f"gilt={gilt}", "--tags", "given,self,beam:1", "--gilt-count-beam", "1",
            "--tags-max-sentences", "6", "--tags-batch-sentences", "1", "--no-progress"]
    whole = tmp_path / "whole.json"
    assert eval_lm_main([*argv, "--json", str(whole)]) == 0
    whole = json.loads(whole.read_text())
    assert "arc_f1" in whole["gilt"]["tag_sources"]["self"]
    merged, _ = shards_and_merge(eval_lm_main, argv, tmp_path, 2)
    close(merged, whole)


def test_eval_lm_shard_usage_errors(checkpoints, tmp_path, caplog):
    base = [str(checkpoints["data"]), "--path", str(checkpoints["stock"]), "--no-progress"]
    for extra, what in [(["--tags", "given", "--num-shards", "2", "--shard-id", "2"], "--shard-id 2"),
                        (["--tags", "given", "--num-shards", "0", "--shard-id", "0"], "--num-shards 0"),
                        (["--tags", "given", "--num-shards", "2", "--shard-id", "-1"], "--shard-id -1"),
                        (["--tags", "given", "--num-shards", "2"], "go together"),
                        (["--tags", "given", "--num-shards", "2", "--shard-id", "0"], "needs --json"),
                        (["--num-shards", "2", "--shard-id", "0", "--json", str(tmp_path / "x.json")], "give --tags")]:
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            assert eval_lm_main([*base, *extra]) == 2
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and what in errors[0], errors
    assert not (tmp_path / "x.json").exists()


# ------------------------------------------------------------------------------------------ sipe-eval blimp
@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shard-blimp")
    rows = tg.minimal_pairs(16, seed=7)
    rows.append({**rows[0], "pairID": "dup-text"})  # a sentence in two pairs (two shards): counted once
    rows.append({**rows[1], "pairID": "empty", "sentence_bad": "  "})  # a skipped pair
    for uid in tg.PAIR_UIDS:
        tg.write_jsonl([p for p in rows if p["UID"] == uid], folder / f"{uid}.jsonl")
    return folder


def test_blimp_shards_merge_to_the_unsharded_report(checkpoints, pairs, tmp_path, caplog, alone):
    def blimp(argv):
        return eval_main(["blimp", *argv])

    argv = ["--data", str(checkpoints["data"]), "--path", f"sipe={checkpoints['sipe']}", "--blimp", str(pairs),
            "--parser", "none", "--tags", "given,self,mix:2",
            "--batch-size", "1", "--no-progress"]
    whole = tmp_path / "whole.json"
    assert blimp([*argv, "--json", str(whole)]) == 0
    whole = json.loads(whole.read_text())
    assert whole["overall"]["skipped"] == 1
    for n in (1, 3):
        merged, paths = shards_and_merge(blimp, argv, tmp_path, n)
        close(merged, whole)
        assert (tmp_path / f"merged.{n}.md").read_text().startswith("| paradigm (UID)")
    merge_fails([paths[0], paths[2]], tmp_path, caplog, "shard 1 of 3 missing")
    merge_fails([*paths, paths[0]], tmp_path, caplog, "overlaps")
    other = tmp_path / "other-checkpoint.json"  # the same names, another checkpoint behind one of them
    assert blimp([*argv[:2], "--path", f"sipe={checkpoints['stock']}", *argv[4:], "--num-shards", "3", "--shard-id", "1",
                  "--json", str(other)]) == 0
    merge_fails([paths[0], other, paths[2]], tmp_path, caplog, "different runs", "checkpoints")


# ------------------------------------------------------------------------------------------ sipe-eval syntaxgym
def write_suite(path, name, items):
    data = {"meta": {"name": name, "metric": "sum"}, "region_meta": {"1": "subject", "2": "verb"},
            "predictions": [{"type": "formula", "formula": "(2;%good%) < (2;%bad%)"},
                            {"type": "formula", "formula": "(1;%good%) = (1;%bad%)"}],
            "items": [{"item_number": k + 1, "conditions": [
                {"condition_name": c, "regions": [{"region_number": r + 1, "content": t} for r, t in enumerate(regs)]}
                for c, regs in conds.items()]} for k, conds in enumerate(items)]}
    path.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def suites(tmp_path_factory):
    folder = tmp_path_factory.mktemp("shard-suites")
    pairs = tg.minimal_pairs(10, seed=3)
    items = []
    for p in pairs:
        good, bad = p["sentence_good"].rstrip(" ."), p["sentence_bad"].rstrip(" .")
        cut = next(k for k, (a, b) in enumerate(zip(good.split(), bad.split())) if a != b)
        items.append({"good": [" ".join(good.split()[:cut]), " ".join(good.split()[cut:])],
                      "bad": [" ".join(bad.split()[:cut]), " ".join(bad.split()[cut:])]})
    write_suite(folder / "agree.json", "agree", items[:6])
    write_suite(folder / "more.json", "more", items[6:] + [{"good": ["", ""], "bad": ["the", "dog"]}])  # unscored
    return folder


def test_syntaxgym_shards_merge_to_the_unsharded_report(checkpoints, suites, tmp_path, caplog, alone):
    def syntaxgym(argv):
        return eval_main(["syntaxgym", *argv])

    argv = ["--data", str(checkpoints["data"]), "--path", f"sipe={checkpoints['sipe']}", "--suites", str(suites),
            "--parser", "none", "--batch-size", "1",
            "--tags", "given,self,beam:2", "--no-progress"]
    whole = tmp_path / "whole.json"
    assert syntaxgym([*argv, "--json", str(whole)]) == 0
    whole = json.loads(whole.read_text())
    assert len(whole["items"]) == 11 and whole["suites"]["more"]["scores"]["sipe"]["unscored_items"] == 1
    for n in (1, 3):
        merged, paths = shards_and_merge(syntaxgym, argv, tmp_path, n)
        close(merged, whole)
    merge_fails(paths[1:], tmp_path, caplog, "shard 0 of 3 missing")
    other = tmp_path / "other-sources.json"
    assert syntaxgym([*argv[:-3], "--tags", "given", "--no-progress", "--num-shards", "3", "--shard-id", "0",
                      "--json", str(other)]) == 0
    merge_fails([other, *paths[1:]], tmp_path, caplog, "different runs", "options")
    # shards of another command are refused too
    blimp_shard = json.loads(paths[0].read_text())
    blimp_shard["shard"]["fingerprint"]["command"] = "blimp"
    (tmp_path / "relabelled.json").write_text(json.dumps(blimp_shard))
    merge_fails([tmp_path / "relabelled.json", *paths[1:]], tmp_path, caplog, "different runs", "command")


def test_merge_refuses_a_file_that_is_no_shard(tmp_path, caplog):
    (tmp_path / "report.json").write_text(json.dumps({"models": []}))
    (tmp_path / "broken.json").write_text("{")
    merge_fails([tmp_path / "report.json"], tmp_path, caplog, "not a shard file")
    merge_fails([tmp_path / "broken.json"], tmp_path, caplog, "not JSON")
    merge_fails([tmp_path / "absent.json"], tmp_path, caplog, "cannot read")


@pytest.mark.parametrize("command", ["blimp", "syntaxgym"])
@pytest.mark.parametrize("n, i, what", [("2", "2", "--shard-id 2"), ("0", "0", "--num-shards 0"),
                                        ("2", "-1", "--shard-id -1")])
def test_suite_commands_refuse_bad_shards_before_any_work(command, n, i, what, tmp_path, caplog):
    inputs = "--blimp" if command == "blimp" else "--suites"
    with caplog.at_level(logging.ERROR):
        assert eval_main([command, "--data", str(tmp_path / "no-data"), "--path", str(tmp_path / "no.pt"), inputs,
                          str(tmp_path / "none"), "--num-shards", n, "--shard-id", i, "--json", str(tmp_path / "s.json")]) == 2
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and what in errors[0], errors


def test_a_shard_with_no_item_writes_an_empty_share(checkpoints, suites, tmp_path):
    out = tmp_path / "empty.json"
    assert eval_main(["syntaxgym", "--data", str(checkpoints["data"]), "--path", f"sipe={checkpoints['sipe']}", "--suites",
                      str(suites), "--parser", "none", "--no-progress", "--num-shards", "12", "--shard-id", "11",
                      "--json", str(out)]) == 0
    shard = json.loads(out.read_text())
    assert shard["shard"]["items"] == 0 and shard["shard"]["total"] == 11 and shard["records"]["report"]["items"] == []
