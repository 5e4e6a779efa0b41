"""Issue 49/50: ``--device`` on every command that loads checkpoints, through the one loader
(``checkpoints/specs.py``): ``cpu`` gives the default's numbers; a device this machine or torch build lacks, or a
word that is no device, is a usage error (exit status 2) naming the option before anything is loaded. On a machine
with CUDA the same sentences score on ``cuda`` within float32's tolerance of ``cpu``."""
import json

import pytest
import torch

import launcher
from conftest import BIN, ENV, txl


@pytest.fixture(scope="module")
def lm_checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))


def _run(cmd):
    proc = launcher.run([str(c) for c in cmd], env=ENV, timeout=300)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc


COMMANDS = {
    "sipe-eval-lm": lambda data, ck: [BIN / "sipe-eval-lm", data, "--path", ck, "--tags", "self"],
    "sipe-eval blimp": lambda data, ck: [BIN / "sipe-eval", "blimp", "--data", data, "--path", ck, "--blimp", "x.jsonl"],
    "sipe-eval syntaxgym": lambda data, ck: [BIN / "sipe-eval", "syntaxgym", "--data", data, "--path", ck,
                                             "--suites", "x.json"],
    "sipe-eval attention": lambda data, ck: [BIN / "sipe-eval", "attention", "--data", data, "--path", ck,
                                             "--conllu", "x.conllu"],
    "sipe-eval report": lambda data, ck: [BIN / "sipe-eval", "report", "--data", data, "--path", ck, "--no-ppl"],
    "sipe-surprisal": lambda data, ck: [BIN / "sipe-surprisal", "--path", ck, "--data", data, "x.txt"],
    "sipe-generate": lambda data, ck: [BIN / "sipe-generate", "--path", ck, "--data", data, "x.txt"],
    "sipe-eval reading-times": lambda data, ck: [BIN / "sipe-eval", "reading-times", "--rt", "x", "--path", ck],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("device,reason", [
    ("cuda", "no CUDA device here"), ("cuda:7", None), ("tpu9", "not a device"),
])
def test_a_device_this_machine_lacks_is_a_usage_error(command, device, reason, toy_data, lm_checkpoint):
    if torch.cuda.is_available() and device.startswith("cuda"):
        pytest.skip("this machine has CUDA")
    proc = _run([*COMMANDS[command](toy_data, lm_checkpoint), "--device", device])
    line = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "argument --device: " in line, proc.stderr[-2000:]
    assert (reason or "no CUDA device here") in line and proc.stdout == ""


def test_cpu_gives_the_defaults_numbers(toy_data, lm_checkpoint, tmp_path):
    outs = []
    for extra in ([], ["--device", "cpu"]):
        out = tmp_path / f"{len(extra)}.json"
        proc = _run([BIN / "sipe-eval-lm", toy_data, "--path", lm_checkpoint, "--tags", "self,mix:2", "--json", out,
                     *extra])
        assert proc.returncode == 0, proc.stderr[-2000:]
        outs.append(json.loads(out.read_text()))
    a, b = (next(iter(o.values())) for o in outs)
    for source in ("self", "mix:2"):
        assert a["tag_sources"][source]["ppl"] == b["tag_sources"][source]["ppl"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_cuda_scores_as_cpu(toy_data, lm_checkpoint):
    from sipe_fairseq import hub

    texts = ["the dog sleeps .", "some owls near the cat sing ."]
    on_cpu = hub.load(lm_checkpoint, data=toy_data).score(texts, "mix:4")
    on_gpu = hub.load(lm_checkpoint, data=toy_data, device="cuda").score(texts, "mix:4")
    for a, b in zip(on_cpu, on_gpu):  # float32 on two devices: relative 1e-4 per sentence
        assert abs(a.logprob - b.logprob) <= 1e-4 * abs(a.logprob)
