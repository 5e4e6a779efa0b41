"""Every command checks its input before it works and never cuts its output silently (issue 24):
the scoring commands' numeric options and output paths, nothing scored, and sipe-generate's options,
prompts and parser backends. Commands run as the user runs them (tests/launcher.py): exact exit
status, the one line on stderr, no traceback."""
import re

import pytest

import launcher
from conftest import BIN, ENV, txl


def _cli(cmd, stdin=None, timeout=300):
    proc = launcher.run([str(c) for c in cmd], env=ENV, timeout=timeout, input=stdin)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc


def _usage_error(proc, option, message):
    """argparse's usage error: exit status 2, its last stderr line names the option and the range."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].endswith(f"error: argument {option}: {message}"), proc.stderr


@pytest.fixture(scope="module")
def lm_checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))


# ------------------------------------------------------------------ scoring commands
@pytest.mark.parametrize("option, value, message", [
    ("--tags-max-sentences", "-1", "expected an integer >= 1, got -1"),
    ("--tags-max-sentences", "0", "expected an integer >= 1, got 0"),
    ("--context-window", "-3", "expected an integer >= 0, got -3"),
    ("--max-tokens", "0", "expected an integer >= 1, got 0"),
    ("--gilt-count-beam", "x", "expected an integer >= 1, got 'x'"),
])
def test_eval_lm_numeric_options_are_range_checked(toy_data, lm_checkpoint, option, value, message):
    """Issue 24.3: --tags-max-sentences -1 scored 299 of 300 sentences, 0 printed NaN and exited 0,
    --context-window -3 left 1,682 tokens out; now each is a usage error before anything is loaded."""
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--tags", "given", option, value])
    _usage_error(proc, option, message)
    assert proc.stdout == ""


def test_eval_lm_json_path_checked_before_any_work(toy_data, lm_checkpoint, tmp_path):
    """Issue 24.4: --json into a directory that does not exist failed after the whole evaluation, with a
    traceback; now one line naming the path, exit status 2, before the checkpoint is loaded (the missing
    checkpoint below would otherwise give status 3)."""
    out = tmp_path / "no-such-dir" / "scores.json"
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", tmp_path / "missing.pt", "--json", out])
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"ERROR sipe_fairseq.cli.eval_lm: --json {out}: cannot write there: directory "
                                        f"{out.parent} does not exist"]
    proc = _cli([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--json", tmp_path])  # a directory
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"ERROR sipe_fairseq.cli.eval_lm: --json {tmp_path}: cannot write there: "
                                        "it is a directory"]


@pytest.mark.parametrize("argv", [
    ["blimp", "--data", "{data}", "--path", "{ck}", "--blimp", "{tmp}", "--json", "{out}"],
    ["blimp", "--data", "{data}", "--path", "{ck}", "--blimp", "{tmp}", "--markdown", "{out}"],
    ["syntaxgym", "--data", "{data}", "--path", "{ck}", "--suites", "{tmp}", "--json", "{out}"],
    ["report", "--data", "{data}", "--path", "{ck}", "--ppl-out", "{out}"],
    ["report", "--ppl-json", "{tmp}/x.json", "--markdown", "{out}"],
    ["seeds", "{tmp}/a-s1.json", "--json", "{out}"],
    ["attention", "--data", "{data}", "--conllu", "{tmp}/x.conllu", "--path", "{ck}", "--plot", "{out}"],
    ["sweep-plot", "--report", "{tmp}/r.json", "--out", "{out}"],
])
def test_sipe_eval_output_paths_checked_before_any_work(toy_data, tmp_path, argv):
    """Every output path of sipe-eval is checked before anything is read, loaded or scored: one line
    naming the option and the path, exit status 2 (the inputs named here do not even exist)."""
    out = tmp_path / "missing-dir" / "out.file"
    argv = [a.format(data=toy_data, ck=tmp_path / "missing.pt", tmp=tmp_path, out=out) for a in argv]
    option = next(a for a, b in zip(argv, argv[1:]) if b == str(out))
    proc = _cli([BIN / "sipe-eval", *argv])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"ERROR sipe-eval: {option} {out}: cannot write there: directory {out.parent} "
                                        "does not exist"]


@pytest.mark.parametrize("argv, option, message", [
    (["blimp", "--batch-size", "0"], "--batch-size", "expected an integer >= 1, got 0"),
    (["syntaxgym", "--eq-atol", "-1"], "--eq-atol", "expected a number >= 0, got -1"),
    (["report", "--context-window", "-2"], "--context-window", "expected an integer >= 0, got -2"),
    (["attention", "--max-sentences", "-1"], "--max-sentences", "expected an integer >= 0, got -1"),
])
def test_sipe_eval_numeric_options_are_range_checked(tmp_path, argv, option, message):
    required = {"blimp": ["--data", tmp_path, "--path", "x.pt", "--blimp", tmp_path],
                "syntaxgym": ["--data", tmp_path, "--path", "x.pt", "--suites", tmp_path],
                "report": [], "attention": ["--data", tmp_path, "--conllu", "x", "--path", "x.pt"]}[argv[0]]
    _usage_error(_cli([BIN / "sipe-eval", *argv, *required]), option, message)


def test_eval_lm_nothing_scored_exits_1(toy_data, train_checkpoint, tmp_path):
    """A GiLT checkpoint leaves out whole every block longer than its positions; on a split of such
    sentences nothing is scored: one line, exit status 1, no perplexity printed."""
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from test_gilt_generate import GILT_TRAIN

    ck = train_checkpoint(GILT_TRAIN)
    long = tmp_path / "long.conllu"
    words = ("the dogs near the cat run " * 12).split() + ["."]
    rows = [f"{i}\t{w}\t_\t_\t_\t_\t{0 if i == 1 else 1}\tdep\t_\t_" for i, w in enumerate(words, 1)]
    long.write_text("\n".join(rows) + "\n\n" + "\n".join(rows) + "\n\n", encoding="utf-8")
    data = tmp_path / "data"
    assert preprocess_main(["--train", str(long), "--valid", str(long), "--destdir", str(data), "--srcdict",
                            str(toy_data / "dict.txt"), "--spm-model", str(toy_data / "spm.model")]) == 0
    proc = _cli([BIN / "sipe-eval-lm", data, "--path", ck, "--json", tmp_path / "out.json"])
    assert proc.returncode == 1, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]
    assert errors == [line for line in proc.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and re.match(r"ERROR sipe_fairseq\.cli\.eval_lm: split 'valid': no token scored of \d+, so "
                                         r"no perplexity \(left out: blocks longer than the model's \d+ positions",
                                         errors[0]), proc.stderr
    assert "ppl" not in proc.stdout and not (tmp_path / "out.json").exists()
