"""Data-parallel training on fairseq's own engine, on CPU: two ranks (gloo, ``--ddp-backend
legacy_ddp``, one process per rank) equal one process at ``--update-freq 2``.

fairseq gives rank r the batches r, r + 2, ... of the same epoch order, and one process at
``--update-freq 2`` accumulates batches 2u and 2u + 1 into update u, so with dropout 0 both see the
same samples per update and sum the same gradients (in a different order). Checked: the logged loss
of every update agrees to the log's 3 decimals (tolerance 0.002), and the saved parameters agree to
1e-5 (float32 sums in another order; measured here: identical, max |d| 0.0).
"""
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import sipe_fairseq

BIN = Path(sys.executable).parent
PLUGIN = str(Path(sipe_fairseq.__file__).parent)
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
UPDATES = 4
TRAIN = ["--user-dir", PLUGIN, "--task", "hexatag_lm", "--criterion", "hexatag_lm", "--tokens-per-sample", "64",
         "--sample-break-mode", "complete", "--arch", "sipe_txl_tiny", "--sipe-injection", "position", "--dropout", "0",
         "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "512", "--max-update", str(UPDATES), "--seed", "1",
         "--cpu", "--num-workers", "0", "--log-format", "simple", "--log-interval", "1", "--disable-validation",
         "--no-epoch-checkpoints"]


@pytest.fixture(scope="module")
def data_dir(toy_data):
    return toy_data  # ~14 batches of 512 tokens per epoch: the 8 batches of the UPDATES updates stay in one epoch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def losses(log: str):
    return [float(x) for x in re.findall(r"train_inner \| epoch \d+: +\d+ / \d+ loss=([\d.]+)", log)]


def check(proc):
    out, err = proc.communicate(timeout=600) if isinstance(proc, subprocess.Popen) else (proc.stdout, proc.stderr)
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
    return out + err


def params(save_dir: Path):
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == UPDATES
    return state["model"]


def test_two_ranks_equal_one_process_with_update_freq_2(data_dir, tmp_path):
    def start(*args):
        return subprocess.Popen([BIN / "fairseq-train", data_dir, *TRAIN, *args], cwd=tmp_path, env=ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    init = f"tcp://127.0.0.1:{free_port()}"
    procs = [start("--update-freq", "2", "--save-dir", tmp_path / "one")] + [
        start("--ddp-backend", "legacy_ddp", "--distributed-backend", "gloo", "--distributed-init-method", init,
              "--distributed-world-size", "2", "--distributed-rank", str(r), "--distributed-no-spawn",
              "--save-dir", tmp_path / "ddp")
        for r in (0, 1)]
    single, rank0, rank1 = [check(p) for p in procs]
    assert "as rank 0" in rank0 and "as rank 1" in rank1
    one, two = losses(single), losses(rank0)  # rank 0 logs the loss over both ranks' samples
    assert len(one) == len(two) == UPDATES, (one, two)
    assert max(abs(a - b) for a, b in zip(one, two)) <= 2e-3, (one, two)
    assert one[-1] < one[0]  # it trains
    p_one, p_two = params(tmp_path / "one"), params(tmp_path / "ddp")
    assert p_one.keys() == p_two.keys()
    for name in p_one:
        torch.testing.assert_close(p_two[name], p_one[name], rtol=0, atol=1e-5, msg=lambda m: f"{name}: {m}")
    print("max |d| parameters:", max((p_two[n].float() - p_one[n].float()).abs().max().item() for n in p_one), "losses", one, two)
