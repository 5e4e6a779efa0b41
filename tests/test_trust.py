"""Issue 37: a search knows its memory, a checkpoint knows its data, a result is finite or refused.
Each reproducer runs as the user runs it (tests/launcher.py): exact exit status, one line, no traceback."""
import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch

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
    assert re.fullmatch(r" [\d.]+ [MGT]iB ", line.split("needs about", 1)[1].split("(")[0])  # the estimate
    assert proc.stdout == "" and "scored" not in proc.stderr  # refused before anything was scored


def test_suite_search_that_cannot_fit_is_refused(toy_data, lm_checkpoint, tmp_path):
    """The suites' tag sources (sipe-eval blimp here; syntaxgym and report take the same --max-memory) are bounded
    by the same estimate."""
    from sipe_fairseq.data import toy_grammar as tg

    pairs = tg.minimal_pairs(6, seed=7)
    for uid in tg.PAIR_UIDS:
        tg.write_jsonl([p for p in pairs if p["UID"] == uid], tmp_path / f"{uid}.jsonl")
    proc = _cli([BIN / "sipe-eval", "blimp", "--data", toy_data, "--path", lm_checkpoint, "--blimp", tmp_path,
                 "--tags", "mix:100000", "--max-memory", "64M"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "tag source mix:100000: one sentence of" in _last_error(proc)
    assert _last_error(proc).endswith("over the memory budget of 64.0 MiB; lower K or raise --max-memory")


def test_max_memory_is_a_size(toy_data, lm_checkpoint):
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--tags", "self", "--max-memory", "lots"])
    assert proc.returncode == 2 and "argument --max-memory: 'lots': expected a size > 0" in _last_error(proc)


def test_batches_shrink_to_the_budget_with_the_same_scores(toy_data, lm_checkpoint):
    """A budget of the three longest sentences' beams: every planned batch fits it, there are more batches than
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
    budget = memory.estimate_bytes(size, memory.parse_source("beam:4"), sorted(sentences, key=lambda s: s.n)[-3:], family)
    order = sorted(range(len(sentences)), key=lambda i: sentences[i].n)
    planned = memory.plan_batches(order, sentences, "beam:4", size, family, budget, 256)
    assert len(planned) > 1 and sorted(i for b in planned for i in b) == list(range(len(sentences)))
    # each batch's peak, kept from planning (what the workers' split and the heap guard read), is the estimate
    # of the batch made anew from its sentences
    anew = [memory.estimate_bytes(size, memory.parse_source("beam:4"), [sentences[i] for i in b], family) for b in planned]
    assert planned.peaks == anew and planned.largest == max(anew) and all(e <= budget for e in anew)
    assert memory.plan_batches(order, sentences, "beam:4", size, family, None, 256).largest is None
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
    # each sentence four times: with shared prefixes three copies would cost almost nothing (tests/test_shared_prefixes.py)
    options = StructureOptions(max_memory=2 ** 40, workers=1, share_prefixes="none")
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
def test_memory_estimate_bounds_the_measured_peak(toy_data, lm_checkpoint, tmp_path, source):
    """The estimate against the resident-memory growth of the search in a fresh process (its high-water mark,
    reset after the model is loaded and a warm-up ran): 160 sentences, a peak of 100-600 MiB, far above the
    allocator's noise. The estimate is a bound (issue 48: the peak within it, 10% for the machine's noise) and
    not far above the peak (6x: it counts the cache's buffers whole, 8 pairs a word and K hypotheses at
    every word, where the toy model's sentences keep fewer, measured 3.1x for mix:16 in one batch of 160; and
    since FREED_CACHE, one buffer more than the two it counted, up to 1.5x that: 4.0x measured)."""
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
    assert got["peak"] <= 1.1 * got["estimate"] <= 6 * got["peak"], got


# ------------------------------------------------------------------ 2. a checkpoint knows its data
@pytest.fixture(scope="module")
def other_data(tmp_path_factory, toy_corpus):
    """Two data directories the checkpoint was not trained on: ``same_size``, another corpus's sentencepiece
    model with the same vocabulary size (dict.txt of as many symbols, other ones); ``smaller``, the same corpus
    with a vocabulary of 150 pieces."""
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar

    root = tmp_path_factory.mktemp("other-data")
    toy_grammar.make_corpus(root / "toy", n_train=300, n_valid=40, n_test=40, seed=4)
    out = {}
    for name, corpus, vocab in (("same_size", root / "toy", "200"), ("smaller", toy_corpus, "150")):
        out[name] = root / name
        assert preprocess_main(["--train", str(corpus / "train.conllu"), "--valid", str(corpus / "valid.conllu"),
                                "--test", str(corpus / "test.conllu"), "--destdir", str(out[name]),
                                "--spm-vocab-size", vocab]) == 0
    return out


def _sha(path):
    from sipe_fairseq.data.writers import sha256_file

    return sha256_file(str(path))


def test_checkpoint_records_its_data(toy_data, lm_checkpoint):
    state = torch.load(str(lm_checkpoint), map_location="cpu", weights_only=False)
    saved = state["task_state"]["sipe_data"]
    manifest = json.loads((toy_data / "manifest.json").read_text())
    assert saved["dictionary_sha256"] == manifest["files"]["dict.txt"]["sha256"] == _sha(toy_data / "dict.txt")
    assert saved["spm_sha256"] == manifest["settings"]["spm"]["sha256"] == _sha(toy_data / "spm.model")
    assert saved["tag_layout"]["nonterminal"] == [ln.split()[0] for ln in
                                                  (toy_data / "dict.nonterminal.txt").read_text().splitlines()]
    assert saved["data"] == str(toy_data.resolve())


def _mismatch_line(line, toy_data, other):
    assert f"dict.txt differs: sha256 {_sha(toy_data / 'dict.txt')} (checkpoint) vs {_sha(other / 'dict.txt')} (data)" \
        in line, line
    assert f"trained on {toy_data.resolve()}, the data directory is {other.resolve()}" in line, line


@pytest.mark.parametrize("command", ["sipe-eval-lm", "sipe-generate", "fairseq-eval-lm"])
def test_other_dictionary_of_the_same_size_is_refused(toy_data, lm_checkpoint, other_data, command):
    """Issue 37.2: a dictionary of the same size with other symbols printed perplexity 500 instead of 145, exit 0."""
    other = other_data["same_size"]
    if command == "sipe-eval-lm":
        cmd = [BIN / command, other, "--path", lm_checkpoint]
    elif command == "sipe-generate":
        cmd = [BIN / command, "--data", other, "--path", lm_checkpoint]
    else:
        cmd = [BIN / command, other, "--path", lm_checkpoint, "--user-dir", ROOT / "sipe_fairseq", "--task", "hexatag_lm"]
    proc = _cli(cmd, stdin="the dog\n")
    assert proc.returncode == 3, proc.stderr[-2000:]
    _mismatch_line(_last_error(proc), toy_data, other)
    assert "perplexity" not in proc.stdout.lower()


@pytest.mark.parametrize("command", ["sipe-eval-lm", "fairseq-eval-lm"])
def test_allow_dictionary_mismatch_loads_with_a_warning(lm_checkpoint, other_data, command):
    extra = ["--user-dir", ROOT / "sipe_fairseq", "--task", "hexatag_lm"] if command == "fairseq-eval-lm" else []
    proc = _cli([BIN / command, other_data["same_size"], "--path", lm_checkpoint, "--allow-dictionary-mismatch", *extra])
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = proc.stdout + proc.stderr
    assert "dict.txt differs" in log and "(--allow-dictionary-mismatch)" in log


def test_dictionary_of_another_size_is_one_line(lm_checkpoint, other_data, tmp_path):
    """Issue 37.5: a size mismatch was a RuntimeError traceback (exit 1) with a GLUE-only hint; a checkpoint that
    records no data (as before this change) reaches it, with --allow-dictionary-mismatch too."""
    for cmd in ([BIN / "sipe-eval-lm", other_data["smaller"], "--path", lm_checkpoint, "--allow-dictionary-mismatch"],
                [BIN / "sipe-generate", "--data", other_data["smaller"], "--path", lm_checkpoint,
                 "--allow-dictionary-mismatch"]):
        proc = _cli(cmd, stdin="the dog\n")
        assert proc.returncode == 3, proc.stderr[-2000:]
        line = _last_error(proc)
        assert "decoder.embed_tokens.weight has shape [200, 64] in the checkpoint but [152, 64] in the model built " \
               "for this data directory" in line and "use the data directory the checkpoint was trained on" in line, line
        assert "glue" not in line.lower()


def test_old_checkpoint_without_fingerprint_loads_with_one_warning(toy_data, lm_checkpoint, tmp_path, monkeypatch):
    from sipe_fairseq.tasks import sipe_data

    # the commands run in a fork of this process (tests/launcher.py): an earlier test of this worker that loaded
    # an old checkpoint on toy_data already warned once, and the fork would inherit that
    monkeypatch.setattr(sipe_data, "_WARNED_MANIFESTS", set())
    state = torch.load(str(lm_checkpoint), map_location="cpu", weights_only=False)
    del state["task_state"]["sipe_data"]
    old = tmp_path / "old.pt"
    torch.save(state, str(old))
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", f"a={old}", "--path", f"b={old}", "--tags", "self"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("records no data fingerprint") == 1, proc.stderr


# ------------------------------------------------------------------ 3. finite or refused
def _damaged(lm_checkpoint, tmp_path, name, edit):
    state = torch.load(str(lm_checkpoint), map_location="cpu", weights_only=False)
    edit(state["model"])
    path = tmp_path / name
    torch.save(state, str(path))
    return path


def _nan_inside(weights):
    weights["decoder.layers.1.attn.qkv.weight"].view(-1)[100:1124] = float("nan")  # 4 KiB of float32


@pytest.mark.parametrize("command", ["sipe-eval-lm", "sipe-generate", "fairseq-eval-lm"])
def test_non_finite_weights_are_refused_at_load(toy_data, lm_checkpoint, tmp_path, command):
    """Issue 37.3: NaN in one weight tensor scored every perplexity as nan with exit 0 (sipe-generate: an
    AssertionError traceback); now exit 3 naming the first such tensor."""
    path = _damaged(lm_checkpoint, tmp_path, "nan.pt", _nan_inside)
    cmd = {"sipe-eval-lm": [BIN / command, toy_data, "--path", path],
           "sipe-generate": [BIN / command, "--data", toy_data, "--path", path],
           "fairseq-eval-lm": [BIN / command, toy_data, "--path", path, "--user-dir", ROOT / "sipe_fairseq",
                               "--task", "hexatag_lm"]}[command]
    proc = _cli(cmd, stdin="the dog\n")
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "tensor decoder.layers.1.attn.qkv.weight holds 1024 non-finite values (NaN or inf)" in _last_error(proc)
    assert "nan" not in proc.stdout.lower()


def test_non_finite_score_is_an_error_not_a_number(toy_data, lm_checkpoint, tmp_path):
    """Finite weights whose logits overflow: the scores are NaN; exit 1, no table, no --json written."""
    def huge(weights):
        weights["decoder.embed_tokens.weight"] *= 1e30

    path = _damaged(lm_checkpoint, tmp_path, "huge.pt", huge)
    out = tmp_path / "scores.json"
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", f"huge={path}", "--json", out])
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert _last_error(proc).endswith("split 'valid': a score is not finite (huge / lm / nll = nan): nothing reported")
    assert proc.stdout == "" and not out.exists()


def _strict_json(path):
    def refuse(name):
        raise AssertionError(f"{path}: {name} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_json_has_null_for_what_does_not_apply(toy_data, train_checkpoint, tmp_path):
    """A model without tags: its tag bits per word do not apply (NaN before, invalid JSON); now null."""
    out = tmp_path / "none.json"
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", f"none={train_checkpoint(txl('none'))}", "--tags", "given",
                 "--json", out])
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _strict_json(out)["none"]["tag_sources"]
    assert rows["given"]["bits.tags_per_word"] is None and rows["given"]["ppl"] > 1


def test_reports_are_written_atomically(tmp_path):
    """A report that fails while it is written leaves the old file whole and no temporary file behind."""
    from sipe_fairseq.cli.output import write_json

    path = tmp_path / "report.json"
    write_json(str(path), {"ppl": 12.5, "bits": float("nan")}, indent=2)
    assert _strict_json(path) == {"ppl": 12.5, "bits": None}
    with pytest.raises(TypeError):
        write_json(str(path), {"ppl": object()})
    assert _strict_json(path) == {"ppl": 12.5, "bits": None} and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_no_report_is_written_with_a_plain_open():
    """Every report of eval/ and cli/ goes through cli/output.py (temporary file, then os.replace)."""
    import re

    plain = re.compile(r"open\([^)]*[\"']w[\"']|\.write_text\(|json\.dump\(")
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("eval", "cli/eval_commands") for p in (ROOT / "sipe_fairseq" /
             folder).glob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1) if plain.search(line)]
    found += [f"cli/eval_lm.py:{i}" for i, line in enumerate((ROOT / "sipe_fairseq/cli/eval_lm.py").read_text()
                                                           .splitlines(), 1) if plain.search(line)]
    assert found == []


# ------------------------------------------------------------------ 4. sipe-eval seeds checks what it averages
def test_seeds_refuses_rows_scored_on_other_splits(toy_data, lm_checkpoint, train_checkpoint, tmp_path):
    """Issue 37.4: p-s1 (position, test) and p-s2 (none, valid) were averaged into one row, exit 0."""
    s1, s2 = tmp_path / "p-s1.json", tmp_path / "p-s2.json"
    for out, ckpt, split in ((s1, lm_checkpoint, "test"), (s2, train_checkpoint(txl("none")), "valid")):
        proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", f"p={ckpt}", "--gen-subset", split, "--json", out])
        assert proc.returncode == 0, proc.stderr[-2000:]
    run = _strict_json(s1)["p"]["run"]
    assert isinstance(run.pop("parameters"), int)  # the model's size (sipe-eval scale)
    assert run == {"split": "test", "sentences": 40, "data": str(toy_data.resolve()), "arch": "sipe_txl_tiny",
                   "injection": "position"}
    proc = _cli([BIN / "sipe-eval", "seeds", s1, s2])
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert _last_error(proc).endswith("group 'p': split differs between rows 'p-s1' (test) and 'p-s2' (valid): not "
                                      "averaged (--allow-mixed averages them anyway)"), proc.stderr
    proc = _cli([BIN / "sipe-eval", "seeds", s1, s2, "--allow-mixed"])
    assert proc.returncode == 0 and "(n=2)" in proc.stdout and "averaged anyway (--allow-mixed)" in proc.stderr


def _report(path, name, run=None, ppl=100.0, sentences=None):
    row = {"lm": {"ppl": ppl}, "lm.per_word": {"ppl": 2 * ppl}}
    if run is not None:
        row["run"] = run
    if sentences is not None:
        row["tag_sources"] = {"self": {"ppl": ppl, "ppl_per_word": 2 * ppl, "sentences": sentences}}
    path.write_text(json.dumps({name: row}))
    return path


RUN = {"split": "valid", "sentences": 50, "data": "/d", "arch": "sipe_txl", "injection": "position"}


@pytest.mark.parametrize("field, other", [("sentences", 20), ("data", "/e"), ("arch", "sipe_rope"),
                                          ("injection", "none")])
def test_seeds_names_the_field_that_differs(tmp_path, field, other):
    a = _report(tmp_path / "a.json", "m-s1", RUN)
    b = _report(tmp_path / "b.json", "m-s2", {**RUN, field: other})
    proc = _cli([BIN / "sipe-eval", "seeds", a, b])
    assert proc.returncode == 2 and f"group 'm': {field} differs between rows 'm-s1' ({RUN[field]}) and 'm-s2' " \
                                    f"({other})" in _last_error(proc)


def test_seeds_compares_the_sentences_each_tag_source_scored(tmp_path):
    a = _report(tmp_path / "a.json", "m-s1", RUN, sentences=50)
    b = _report(tmp_path / "b.json", "m-s2", RUN, sentences=20)  # --tags-max-sentences 20
    proc = _cli([BIN / "sipe-eval", "seeds", a, b])
    assert proc.returncode == 2 and "tag source self sentences differs" in _last_error(proc)


def test_seeds_old_reports_are_averaged_with_a_warning(tmp_path):
    a, b = _report(tmp_path / "a.json", "m-s1"), _report(tmp_path / "b.json", "m-s2", ppl=120.0)
    proc = _cli([BIN / "sipe-eval", "seeds", a, b])
    assert proc.returncode == 0 and "110.00 ± 14.14" in proc.stdout
    assert "rows m-s1, m-s2 record no split, sentence count, data or model" in proc.stderr


def test_seeds_refuses_a_non_finite_score(tmp_path):
    a = _report(tmp_path / "a.json", "m-s1", RUN)
    b = tmp_path / "b.json"
    b.write_text('{"m-s2": {"lm": {"ppl": NaN}, "run": %s}}' % json.dumps(RUN))
    proc = _cli([BIN / "sipe-eval", "seeds", a, b])
    assert proc.returncode == 2 and "row 'm-s2': score 'blocks p(x|tags)' is nan, not a finite number" in _last_error(proc)


# ------------------------------------------------------------------ 5. one line for every user error
@pytest.mark.parametrize("option, value", [("--tag-dropout", "1.5"), ("--tag-dropout", "-0.1"), ("--tag-dropout", "nan"),
                                           ("--tag-sampling", "2"), ("--tag-marginal", "-1")])
def test_criterion_option_errors_exit_2_as_argparse(toy_data, tmp_path, option, value):
    """Issue 37.6: --tag-dropout 1.5, -0.1 and nan ended in a ValueError traceback; criterion option errors
    exited 1 where argparse's exit 2. Now one line, exit 2, before any training."""
    proc = _cli([BIN / "fairseq-train", toy_data, *txl("position"), "--optimizer", "adam", "--lr", "0.003",
                 "--max-tokens", "1024", "--max-update", "1", "--num-workers", "0", "--no-save",
                 "--save-dir", tmp_path / "ck", f"{option}={value}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert _last_error(proc).startswith(f"sipe_fairseq: error: {option} must ")
    assert value in _last_error(proc) and "num_updates" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("tags", ["", " , "])
def test_empty_tags_is_a_usage_error(toy_data, lm_checkpoint, tags):
    """Issue 37.7: --tags "" was silently ignored."""
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--tags", tags])
    assert proc.returncode == 2 and proc.stdout == ""
    assert _last_error(proc).endswith(f"error: argument --tags: tag sources {tags!r}: expected a comma-separated list of given, "
                                      "self, untagged, beam:K, mix:K")


# ------------------------------------------------------------------ 6. sentences longer than the model's positions
def test_long_sentences_counted_and_scored_alike(toy_data, train_checkpoint, tmp_path):
    """Issue 37.7: --tags scored sentences longer than the model's positions without saying so in the table, while
    --inference-tags self refused them. Now both score them whole, in one pass, and say how many: the same
    perplexity (a sipe_txl model of 16 positions; most toy sentences are longer)."""
    import re

    ckpt = train_checkpoint(txl("position", "--tokens-per-sample", "16", "--sample-break-mode", "none"))
    out = tmp_path / "self.json"
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", f"m={ckpt}", "--tags", "self", "--json", out])
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = _strict_json(out)["m"]["tag_sources"]["self"]
    longer = row["longer_than_max_positions"]
    assert 0 < longer < row["sentences"] == 40 and row["max_positions"] == 16
    assert f"m: {longer} of 40 sentences are longer than the model's 16 positions: scored whole, in one pass" in proc.stdout
    proc = _cli([BIN / "fairseq-eval-lm", toy_data, "--path", ckpt, "--user-dir", ROOT / "sipe_fairseq", "--task",
                 "hexatag_lm", "--inference-tags", "self", "--sample-break-mode", "eos", "--gen-subset", "valid"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    log = proc.stdout + proc.stderr
    assert f"valid: {longer} of 40 sentences are longer than the model's 16 positions: scored whole" in log
    assert float(re.search(r"Perplexity: ([\d.]+)", log).group(1)) == pytest.approx(row["ppl"], abs=0.006)


def test_learned_positions_refuse_long_sentences():
    """A model with learned absolute positions has no row beyond them: both paths refuse with this line."""
    from conftest import small_dictionary, tiny_transformer_lm
    from sipe_fairseq.structure.scoring import beyond_positions

    model = tiny_transformer_lm(small_dictionary())
    assert beyond_positions(model, [10, 64]) == (0, 64, None)
    count, limit, refusal = beyond_positions(model, [10, 65, 70])
    assert (count, limit) == (2, 64)
    assert refusal == "2 sentences are longer than the model's 64 learned positions (longest 70 tokens): it cannot " \
                      "score them whole"


# ------------------------------------------------------------------ 7. loaders return eval mode
def test_loaders_return_models_in_eval_mode(toy_data, lm_checkpoint):
    from sipe_fairseq.checkpoints import load_lm, load_with_task

    for model, _ in (load_lm(str(lm_checkpoint), str(toy_data)), load_with_task(str(lm_checkpoint), str(toy_data))):
        assert not model.training and not any(m.training for m in model.modules())
