"""Packaging and use outside the checkout: the wheel built from pyproject.toml holds the package and
every console script, installs with ``pip --no-deps`` into a plain directory, and ``sipe-user-dir``
gives fairseq's ``--user-dir`` from any working directory; ``--tensorboard-logdir`` writes events and
fairseq no longer asks for tensorboardX."""
import importlib
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import sipe_fairseq
from conftest import ROOT

BIN = Path(sys.executable).parent
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_console_scripts_resolve():
    assert {"sipe-hexatag", "sipe-preprocess", "sipe-eval-lm", "sipe-glue-preprocess", "sipe-eval", "sipe-tag",
            "sipe-user-dir"} <= SCRIPTS.keys()
    for name, target in SCRIPTS.items():
        module, func = target.split(":")
        assert callable(getattr(importlib.import_module(module), func)), name


def test_wheel_installs_and_names_its_user_dir(tmp_path):
    """Build the wheel from a copy of the sources (the checkout stays clean), install it into a
    plain directory without dependencies, and ask the installed package for its --user-dir from a
    directory outside the checkout."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "sipe_fairseq", src / "sipe_fairseq", ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path / "dist", src],
                   check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("sipe_fairseq-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    py_files = {str(p.relative_to(ROOT)) for p in (ROOT / "sipe_fairseq").rglob("*.py")}
    assert py_files <= set(names), sorted(py_files - set(names))
    for name, target in SCRIPTS.items():
        assert f"{name} = {target}" in entry_points
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", target, wheel],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([sys.executable, "-m", "sipe_fairseq.cli.user_dir"], cwd=elsewhere, capture_output=True, text=True,
                         env=dict(ENV, PYTHONPATH=str(target)), check=True).stdout
    assert Path(out.strip()) == (target / "sipe_fairseq").resolve()


def test_train_from_another_directory_with_tensorboard(tmp_path, toy_data):
    """From a directory outside the checkout: ``--user-dir "$(sipe-user-dir)"`` loads the plugin and
    ``--tensorboard-logdir`` writes event files."""
    pytest.importorskip("tensorboardX", reason="tensorboardX (requirements.txt) not installed")
    data = toy_data
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    user_dir = subprocess.run([sys.executable, "-m", "sipe_fairseq.cli.user_dir"], cwd=elsewhere, env=ENV, capture_output=True,
                              text=True, check=True).stdout.strip()
    assert Path(user_dir) == Path(sipe_fairseq.__file__).resolve().parent
    proc = subprocess.run([BIN / "fairseq-train", data, "--user-dir", user_dir, "--task", "hexatag_lm",
                           "--criterion", "hexatag_lm",
                           "--arch", "sipe_txl_tiny", "--sipe-injection", "position", "--tokens-per-sample", "64",
                           "--sample-break-mode", "complete", "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "512",
                           "--max-update", "2", "--cpu", "--num-workers", "0", "--no-save", "--log-interval", "1",
                           "--disable-validation",  # stops mid-epoch: once aborted at exit (exit 134), see tasks/sipe_data.py
                           "--tensorboard-logdir", "tb"], cwd=elsewhere, env=ENV, capture_output=True, text=True, timeout=600)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    assert "Please install tensorboardX" not in log
    assert list((elsewhere / "tb" / "train_inner").glob("events.out.tfevents.*")), sorted(map(str, (elsewhere / "tb").rglob("*")))
