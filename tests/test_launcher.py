"""tests/launcher.py runs CLI entry points in a fork of the test process: the same command through a
fresh interpreter must give the same exit status and the same lines on the same streams (times and
throughputs masked), or the suite would test something users do not run."""
import re
import subprocess
import sys

import pytest

import launcher
from conftest import BIN, ENV, PLUGIN, txl


# what only the import of a module prints, once per interpreter (a fork has them imported): hydra's DEBUG
# lines, and fairseq's note that the --user-dir package is imported already
IMPORT_TIME = re.compile(r"^DEBUG:|--user-dir=.* has already been imported")


def _mask(text):
    """Lines with dates, times, rates and other numbers masked (they differ between two runs), without the
    lines of IMPORT_TIME."""
    text = "\n".join(ln for ln in text.splitlines() if not IMPORT_TIME.search(ln))
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "DATE", text)
    text = re.sub(r"0x[0-9a-f]+", "ADDR", text)
    text = re.sub(r"\d+(\.\d+)?(e-?\d+)?", "N", text)
    return [ln for ln in text.splitlines() if ln.strip()]


def _both(cmd, **kw):
    forked = launcher.popen(cmd, merge_stderr=False, **kw)
    assert isinstance(forked, launcher.ForkedProcess)
    f_out, f_err = forked.communicate(timeout=300)
    real = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kw)
    return (forked.returncode, f_out, f_err), (real.returncode, real.stdout, real.stderr)


@pytest.mark.skipif(not launcher.FORK, reason="SIPE_TEST_SUBPROCESS=1: every command is a real subprocess")
def test_forked_eval_lm_prints_what_a_fresh_process_prints(train_checkpoint, toy_data):
    ckpt = train_checkpoint(txl("position"))
    cmd = [BIN / "fairseq-eval-lm", toy_data, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--path", ckpt,
           "--gen-subset", "valid", "--tokens-per-sample", "64", "--sample-break-mode", "eos", "--num-workers", "0",
           "--output-word-probs"]
    (f_rc, f_out, f_err), (r_rc, r_out, r_err) = _both(cmd, env=ENV, cwd=toy_data)
    assert f_rc == r_rc == 0
    assert _mask(f_out) == _mask(r_out)
    assert _mask(f_err) == _mask(r_err)
    ppl = [re.search(r"Perplexity: ([\d.]+)", out).group(1) for out in (f_out + f_err, r_out + r_err)]
    assert ppl[0] == ppl[1]  # the same computation, to the printed digit


@pytest.mark.skipif(not launcher.FORK, reason="SIPE_TEST_SUBPROCESS=1: every command is a real subprocess")
def test_forked_user_error_exits_like_a_fresh_process(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"sentence_good": "caf\xe9", "sentence_bad": "x"}\n')
    cmd = [sys.executable, "-m", "sipe_fairseq.cli.eval", "blimp", "--data", tmp_path, "--path", bad, "--blimp", bad]
    (f_rc, f_out, f_err), (r_rc, r_out, r_err) = _both(cmd, env=ENV)
    assert f_rc == r_rc == 2
    assert _mask(f_out) == _mask(r_out) and _mask(f_err) == _mask(r_err)
    assert "Traceback" not in f_err

