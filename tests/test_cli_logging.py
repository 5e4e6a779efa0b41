"""Logging of the plugin's commands (cli/logs.py): a command's declared level and format take effect
even though importing fairseq configured the root logger first; a set-up chosen by an in-process
caller is left alone."""
import io
import logging
import re
import sys

import pytest

import launcher
from conftest import BIN, ENV, txl
from sipe_fairseq.cli import logs


@pytest.fixture
def root_state():
    """The root logger's handlers and level restored after the test (pytest's capture lives there)."""
    root = logging.getLogger()
    handlers, level, plugin = root.handlers[:], root.level, logging.getLogger("sipe_fairseq").level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("sipe_fairseq").setLevel(plugin)


def _default_basic_config(root):
    """What fairseq's import leaves: ``logging.basicConfig(level=DEBUG)`` on a fresh interpreter."""
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG)


def test_replaces_the_default_set_up(root_state, monkeypatch):
    monkeypatch.delenv("LOGLEVEL", raising=False)
    _default_basic_config(root_state)
    logs.configure("WARNING", logs.SHORT_FORMAT, plugin_level=logging.INFO)
    [handler] = root_state.handlers
    assert handler.stream is sys.stderr and handler.formatter._fmt == logs.SHORT_FORMAT
    assert root_state.level == logging.WARNING
    assert logging.getLogger("sipe_fairseq.tasks").getEffectiveLevel() == logging.INFO
    assert logging.getLogger("fairseq.data").getEffectiveLevel() == logging.WARNING


def test_loglevel_overrides_the_root_level(root_state, monkeypatch):
    monkeypatch.setenv("LOGLEVEL", "error")
    _default_basic_config(root_state)
    logs.configure("INFO")
    assert root_state.level == logging.ERROR and root_state.handlers[0].formatter._fmt == logs.FAIRSEQ_FORMAT


def test_leaves_a_callers_set_up_alone(root_state):
    mine = logging.StreamHandler(io.StringIO())
    mine.setFormatter(logging.Formatter("%(message)s"))
    root_state.handlers[:] = [mine]
    root_state.setLevel(logging.DEBUG)
    logs.configure("WARNING", logs.SHORT_FORMAT, plugin_level=logging.INFO)
    assert root_state.handlers == [mine] and root_state.level == logging.DEBUG
    assert logging.getLogger("sipe_fairseq").level == logging.INFO


def test_sipe_eval_lm_logs_its_own_lines_in_its_format(train_checkpoint, toy_data, tmp_path):
    """A real run (fresh-interpreter logging): the plugin's checks and counts in the declared format,
    fairseq's INFO chatter (which the import-time set-up let through) not; a user error is one line."""
    ckpt = train_checkpoint(txl("position"))
    proc = launcher.run([BIN / "sipe-eval-lm", toy_data, "--path", f"position={ckpt}"], env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if re.match(r"(DEBUG|INFO|WARNING|ERROR)\b", ln)]
    assert any(re.match(r"INFO sipe_fairseq\.tasks\.hexatag_lm: split 'valid': scored (\d+) of \1 tokens; none left out$", ln)
               for ln in lines), proc.stderr[-2000:]
    assert not [ln for ln in lines if not ln.startswith(("INFO sipe_fairseq.", "WARNING ", "ERROR "))], proc.stderr[-2000:]
    missing = launcher.run([BIN / "sipe-eval-lm", toy_data, "--path", str(tmp_path / "missing.pt")], env=ENV, timeout=300)
    assert missing.returncode == 3
    assert missing.stderr.splitlines() == [f"ERROR sipe_fairseq.cli.eval_lm: checkpoint {tmp_path / 'missing.pt'}: no such file"]
