"""A missing, refused (untrusted) or non-fairseq checkpoint: one line naming it and exit status 3 in
every sipe-* command that loads checkpoints (issue 14); the layering of parser backends."""
import fractions
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, parse_checkpoint_specs, read_checkpoint


@pytest.fixture(scope="module")
def bad_checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ck")
    untrusted = root / "untrusted.pt"  # a type outside the weights-only allowlist
    torch.save({"model": {}, "cfg": None, "extra": fractions.Fraction(1, 3)}, str(untrusted))
    plain = root / "plain.pt"  # loads, but is no fairseq checkpoint
    torch.save({"weights": torch.zeros(2)}, str(plain))
    garbage = root / "garbage.pt"
    garbage.write_bytes(b"not a zip archive at all")
    return {"untrusted": str(untrusted), "plain": str(plain), "garbage": str(garbage), "missing": str(root / "nope.pt")}


@pytest.mark.parametrize("kind, reason", [("untrusted", "refused by torch's weights-only loading (it holds fractions.Fraction"),
                                          ("plain", "cannot be read as a fairseq checkpoint (KeyError"),
                                          ("garbage", "cannot be read as a fairseq checkpoint"),
                                          ("missing", "no such file")])
def test_read_checkpoint_names_the_file(bad_checkpoints, kind, reason):
    path = bad_checkpoints[kind]
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint {path}: ") and reason in msg and "\n" not in msg


def test_checkpoint_specs(bad_checkpoints):
    assert list(parse_checkpoint_specs([f"u={bad_checkpoints['untrusted']}", bad_checkpoints["plain"]]).items()) == [
        ("u", bad_checkpoints["untrusted"]), (bad_checkpoints["plain"], bad_checkpoints["plain"])]
    with pytest.raises(ValueError, match="given twice"):
        parse_checkpoint_specs([f"a={bad_checkpoints['plain']}", f"a={bad_checkpoints['untrusted']}"])
    with pytest.raises(CheckpointError, match="no such file"):
        parse_checkpoint_specs([f"a={bad_checkpoints['missing']}"])


def _errors(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("kind", ["untrusted", "missing"])
def test_eval_commands_exit_3_with_one_line(bad_checkpoints, toy_data, tmp_path, caplog, kind):
    from sipe_fairseq.cli import eval as sipe_eval
    from sipe_fairseq.cli import eval_lm

    path = bad_checkpoints[kind]
    caplog.clear()  # a real data directory: an empty one is refused first (exit status 2, tests/test_faults.py)
    assert eval_lm.main([str(toy_data), "--path", f"m={path}"]) == CHECKPOINT_EXIT_STATUS == 3
    errors = _errors(caplog)
    assert len(errors) == 1 and errors[0].startswith(f"checkpoint {path}: ")
    if kind == "missing":  # (an untrusted one is met after the data: eval_lm above covers that path)
        caplog.clear()
        assert sipe_eval.main(["blimp", "--data", str(tmp_path), "--path", path, "--blimp", str(tmp_path)]) == 3
        errors = _errors(caplog)
        assert len(errors) == 1 and errors[0].startswith(f"checkpoint {path}: ")


def test_sipe_tag_unloadable_hexatagger(bad_checkpoints, tmp_path, capsys):
    from sipe_fairseq.cli.tag import main

    src = tmp_path / "in.txt"
    src.write_text("The dog barks .\n", encoding="utf-8")
    for kind in ("untrusted", "missing"):
        path = bad_checkpoints[kind]
        status = main([str(src), "--backend", f"hexatagger:{path}", "--no-progress", "--tags-out", str(tmp_path / "t")])
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 3 != 1  # 1 means "some lines failed"
        assert len(err) == 1 and err[0].startswith(f"sipe-tag: ERROR: backend 'hexatagger:{path}': checkpoint {path}: ")
    assert main([str(src), "--backend", "nosuch:x", "--no-progress", "--tags-out", str(tmp_path / "t")]) == 2  # usage


def test_sipe_preprocess_unloadable_hexatagger(bad_checkpoints, tmp_path, caplog):
    from sipe_fairseq.cli.preprocess import main

    src = tmp_path / "train.txt"
    src.write_text("The dog barks .\n", encoding="utf-8")
    path = bad_checkpoints["untrusted"]
    caplog.clear()
    status = main(["--input-format", "tokenized", "--parser", f"hexatagger:{path}", "--train", str(src),
                   "--destdir", str(tmp_path / "out"), "--no-progress"])
    assert status == 3
    errors = _errors(caplog)
    assert len(errors) == 1 and f"checkpoint {path}: refused" in errors[0]
    assert not (tmp_path / "out" / "dict.txt").exists()


def test_parsing_layer_imports_no_model_code():
    """``sipe_fairseq.parsing`` alone: spaCy built in, no torch/fairseq imported, ``hexatagger`` unknown
    until the checkpoint layer registers it."""
    code = (
        "import sys\n"
        "from sipe_fairseq import parsing\n"
        "assert not {'torch', 'fairseq'} & set(sys.modules), sorted({'torch', 'fairseq'} & set(sys.modules))\n"
        "assert parsing.registered_parsers() == ['spacy']\n"
        "try:\n"
        "    parsing.resolve_parser('hexatagger:x.pt')\n"
        "except ValueError as e:\n"
        "    assert 'sipe_fairseq.checkpoints.hexatagger' in str(e)\n"
        "else:\n"
        "    raise AssertionError('hexatagger resolved without the checkpoint layer')\n"
        "import sipe_fairseq.checkpoints\n"
        "factory, arg = parsing.resolve_parser('hexatagger:x.pt')\n"
        "assert factory.__module__ == 'sipe_fairseq.checkpoints.hexatagger' and arg == 'x.pt'\n"
    )
    root = str(Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr


def test_sipe_tag_with_an_lm_checkpoint_says_what_it_is(train_checkpoint, tmp_path):
    """Issue 24.7: `sipe-tag --backend hexatagger:<an LM checkpoint>` exited 3 saying only
    `'NoneType' object has no attribute 'data'`; now the line says what the file is."""
    import launcher
    from conftest import BIN, ENV, txl

    ck = train_checkpoint(txl("position"))
    src = tmp_path / "in.txt"
    src.write_text("The dog barks .\n", encoding="utf-8")
    proc = launcher.run([str(BIN / "sipe-tag"), str(src), "--backend", f"hexatagger:{ck}", "--no-progress"], env=ENV,
                        timeout=300)
    assert proc.returncode == 3 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"sipe-tag: ERROR: backend 'hexatagger:{ck}': checkpoint {ck}: not a hexatagger: a hexatag_lm checkpoint (model "
        "sipe_txl_tiny, a language model); a hexatagger is a hexatag_tagging checkpoint (--arch sipe_tagger*)"]


@pytest.mark.parametrize("kind, reason", [("untrusted", "refused by torch's weights-only loading (it holds fractions.Fraction"),
                                          ("plain", "cannot be read as a fairseq checkpoint (KeyError"),
                                          ("garbage", "cannot be read as a fairseq checkpoint"),
                                          ("missing", "no such file"),
                                          ("decoder", "'transformer_lm' is not an encoder the tagger can use")])
def test_init_encoder_refuses_in_one_line(bad_checkpoints, tmp_path, kind, reason):
    """sipe_tagger --init-encoder reads through the one reader: a file it refuses, or a fairseq checkpoint
    of a model that is no encoder, is one CheckpointError line naming the option and the file."""
    from sipe_fairseq.checkpoints import encoder_init

    if kind == "decoder":  # a readable fairseq checkpoint whose architecture is a decoder
        path = str(tmp_path / "decoder.pt")
        history = [{"criterion_name": "cross_entropy", "optimizer_name": "adam", "lr_scheduler_state": {"best": None},
                    "num_updates": 0}]
        torch.save({"model": {"decoder.embed_tokens.weight": torch.zeros(4, 2)}, "optimizer_history": history,
                    "extra_state": {"train_iterator": {"epoch": 1}},
                    "cfg": {"model": {"_name": "transformer_lm", "arch": "transformer_lm"}, "task": {"data": ""}}}, path)
    else:
        path = bad_checkpoints[kind]
    with pytest.raises(CheckpointError) as err:
        encoder_init.read_encoder_init(path, dictionary=None, dict_path="unused")
    msg = str(err.value)
    assert msg.startswith("--init-encoder") and f"{path}: " in msg and reason in msg and "\n" not in msg
