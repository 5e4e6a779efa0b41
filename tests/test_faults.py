"""The fault suite: a table of bad inputs and faults, one row per case, each run as a user would run it, asserting
the documented exit status, one line on stderr and no traceback, and that nothing was written where an output
was asked for (a report, a TSV, a JSON). Every surface added brings its rows.

A row is a :class:`Fault`: an id, the command line (``{ck}``, ``{data}``, ``{tmp}``... are filled from the
fixtures by :func:`fill`), what is fed on stdin, the exit status, a piece of the one line it must print, and the
outputs that must not exist afterwards. Rows that need a fixture of their own (a damaged checkpoint, a data
directory without ``spm.model``) build it in ``faults_env``; rows of the Python interface are functions that
must raise the named exception with a message naming the sentence.
"""
import os
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

import pytest

import launcher


@dataclass(frozen=True)
class Fault:
    id: str
    argv: Tuple[str, ...]  # after the python executable: ("-m", "sipe_fairseq.cli.surprisal", ...)
    status: int
    message: str  # a piece of the one stderr line
    stdin: Optional[str] = None
    not_written: Tuple[str, ...] = ()  # outputs (templates) that must not exist afterwards
    setup: Optional[Callable[[dict], None]] = field(default=None, compare=False)  # builds what the row needs


@pytest.fixture(scope="module")
def faults_env(train_checkpoint, toy_data, tmp_path_factory) -> Dict[str, str]:
    """What the rows' templates name: ``ck`` (a tiny SiPE decoder), ``data`` (its data directory), ``tmp`` (a
    fresh folder per module, the commands' working directory)."""
    from conftest import txl

    return {"ck": str(train_checkpoint(txl("position"))), "data": str(toy_data),
            "tmp": str(tmp_path_factory.mktemp("faults"))}


def fill(template: str, env: Dict[str, str]) -> str:
    return template.format(**env)


def run_fault(fault: Fault, env: Dict[str, str]):
    """Run ``fault``'s command (a fork of this process, as every CLI run of the suite; tests/launcher.py) and
    check the exit status, the one line without a traceback, and that nothing was written."""
    if fault.setup is not None:
        fault.setup(env)
    argv = [sys.executable, *(fill(a, env) for a in fault.argv)]
    stdin = None if fault.stdin is None else fill(fault.stdin, env)
    proc = launcher.run(argv, cwd=env["tmp"], input=stdin, timeout=600)
    err = proc.stderr.strip()
    assert proc.returncode == fault.status, f"{fault.id}: exit {proc.returncode}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, f"{fault.id}: a traceback\n{proc.stderr[-2000:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and fill(fault.message, env) in lines[0], f"{fault.id}: {err!r}"
    for out in fault.not_written:
        path = fill(out, env)
        assert not os.path.exists(path), f"{fault.id}: {path} was written"


# Each area adds its rows (and any fixture of its own) below its header, then one parametrized test over them:
#     @pytest.mark.parametrize("fault", AREA_FAULTS, ids=lambda f: f.id)
#     def test_area_faults(fault, faults_env): run_fault(fault, faults_env)

# ============================================================================ the output boundary


# ============================================================================ the input reader


# ============================================================================ data and checkpoint integrity


# ============================================================================ one-line endings, suites, reports
