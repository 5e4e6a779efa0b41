"""The one loader of ``--path [NAME=]CKPT`` checkpoints (sipe_fairseq/checkpoints/specs.py): parsing, lazy
loading one model at a time, and the one dictionary check every command goes through."""
import gc
import logging
import shutil
import weakref

import pytest

from conftest import STOCK_MLM, txl
from sipe_fairseq.checkpoints import (CHECKPOINT_EXIT_STATUS, CheckpointError, CheckpointSpecs, check_dictionary,
                                      load_checkpoint, parse_checkpoint_specs)
from sipe_fairseq.checkpoints import specs as specs_module

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # what fairseq's Dictionary puts before dict.txt's symbols


@pytest.fixture(scope="module")
def lm_checkpoint(train_checkpoint):
    return train_checkpoint(txl("position"))  # the same run as test_trust's: trained once per session


@pytest.fixture(scope="module")
def reordered_data(toy_data, tmp_path_factory):
    """toy_data with two symbols of dict.txt swapped: the same size, the same symbols, another order."""
    out = tmp_path_factory.mktemp("reordered") / "data"
    shutil.copytree(toy_data, out)
    lines = (out / "dict.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    (out / "dict.txt").write_text("".join(lines), encoding="utf-8")
    return out


def _dict_dir(tmp_path, symbols):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "dict.txt").write_text("".join(f"{s} {100 - i}\n" for i, s in enumerate(symbols)), encoding="utf-8")
    return str(tmp_path)


# ------------------------------------------------------------------ parsing
def test_parse_names_bare_paths_and_order(tmp_path):
    a, b = tmp_path / "a.pt", tmp_path / "b=c.pt"
    a.write_bytes(b"")
    b.write_bytes(b"")
    got = parse_checkpoint_specs([f"first={b}", str(a), f"x={a}"])
    assert list(got.items()) == [("first", str(b)), (str(a), str(a)), ("x", str(a))]
    assert parse_checkpoint_specs(None) == {} and len(CheckpointSpecs.parse([])) == 0
    specs = CheckpointSpecs.parse([f"first={b}", str(a)], str(tmp_path))
    assert specs.names() == ["first", str(a)] and "first" in specs and len(specs) == 2
    assert list(specs.paths().items()) == [("first", str(b)), (str(a), str(a))]


def test_parse_refuses_a_name_twice_and_a_missing_file(tmp_path):
    a = tmp_path / "a.pt"
    a.write_bytes(b"")
    with pytest.raises(ValueError) as err:
        CheckpointSpecs.parse([f"m={a}", f"m={a}"])
    assert str(err.value) == "checkpoint name 'm' given twice"
    with pytest.raises(ValueError) as err:
        parse_checkpoint_specs([str(a), str(a)])  # a bare path names itself
    assert str(err.value) == f"checkpoint name {str(a)!r} given twice"
    missing = tmp_path / "nope.pt"
    with pytest.raises(CheckpointError) as err:
        CheckpointSpecs.parse([f"m={a}", f"n={missing}"])
    assert str(err.value) == f"checkpoint {missing}: no such file"


# ------------------------------------------------------------------ the dictionary check
def test_check_dictionary_same_symbols_same_order(tmp_path):
    words = ["\u2581the", "\u2581dog", "s"]
    data = _dict_dir(tmp_path / "d", words)
    check_dictionary("ck.pt", data, SPECIALS + words)  # the same: no error
    with pytest.raises(CheckpointError) as err:
        check_dictionary("ck.pt", data, SPECIALS + ["\u2581dog", "\u2581the", "s"])
    assert str(err.value) == (f"checkpoint ck.pt: its dictionary (7 symbols) is not the data directory {data}'s dict.txt "
                              "(7 symbols): symbol 4 is '\u2581dog' in the model's, '\u2581the' in the data's; use the "
                              "data directory the checkpoint was trained on")
    with pytest.raises(CheckpointError) as err:
        check_dictionary("ck.pt", data, SPECIALS + words[:2])
    assert "(6 symbols) is not" in str(err.value) and "(7 symbols)" in str(err.value)
    assert str(err.value).endswith("the data's has 's' at 6, where the model's ends; use the data directory the "
                                   "checkpoint was trained on")


def test_check_dictionary_of_a_masked_lm_encoder(tmp_path):
    """An encoder's task appends <mask> to dict.txt: the data's symbols are the model's without that last one."""
    words = ["\u2581the", "\u2581dog"]
    data = _dict_dir(tmp_path / "d", words)
    check_dictionary("enc.pt", data, SPECIALS + words + ["<mask>"], masked=True)
    for symbols in (SPECIALS + words, SPECIALS + words + ["<mask>", "extra"]):
        with pytest.raises(CheckpointError) as err:
            check_dictionary("enc.pt", data, symbols, masked=True)
        msg = str(err.value)
        assert msg.startswith(f"checkpoint enc.pt: its dictionary ({len(symbols)} symbols) is not the data directory "
                              f"{data}'s dict.txt (6 symbols, plus <mask>: a masked-LM encoder's task appends it to "
                              "dict.txt as in training): "), msg
    assert "the data's has '<mask>' at 6, where the model's ends" in str(
        pytest.raises(CheckpointError, check_dictionary, "enc.pt", data, SPECIALS + words, True).value)
    # a decoder's dictionary with <mask> is not its data's
    with pytest.raises(CheckpointError, match="the model's has '<mask>' at 6, where the data's ends"):
        check_dictionary("dec.pt", data, SPECIALS + words + ["<mask>"])


def test_check_dictionary_without_dict_txt(tmp_path):
    with pytest.raises(CheckpointError) as err:
        check_dictionary("ck.pt", str(tmp_path), SPECIALS)
    assert str(err.value) == f"data directory {tmp_path}: no dict.txt to check the checkpoints' dictionaries against"


def test_checkpoint_on_another_dictionary_is_refused_naming_both(lm_checkpoint, toy_data, reordered_data):
    """A checkpoint trained on toy_data, loaded on a directory whose dict.txt has the same symbols in another
    order: one CheckpointError line naming the checkpoint and both directories; loading it anyway is only
    possible with allow_dictionary_mismatch, and then the model's dictionary is the data's."""
    specs = CheckpointSpecs.parse([f"m={lm_checkpoint}"], str(reordered_data))
    with pytest.raises(CheckpointError) as err:
        specs.load("m")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"checkpoint {lm_checkpoint} does not fit the data directory "
                                              f"{reordered_data}: dict.txt differs"), msg
    assert f"trained on {toy_data.resolve()}, the data directory is {reordered_data.resolve()}" in msg, msg
    allowed = CheckpointSpecs.parse([f"m={lm_checkpoint}"], str(reordered_data), allow_dictionary_mismatch=True)
    loaded = allowed.load("m")
    assert loaded.task.source_dictionary.symbols[4:6] == list(reversed(
        load_checkpoint(str(lm_checkpoint), str(toy_data)).task.source_dictionary.symbols[4:6]))


def test_eval_commands_refuse_it_with_exit_status_3(lm_checkpoint, reordered_data, tmp_path, caplog):
    from sipe_fairseq.cli import eval as sipe_eval

    conllu = tmp_path / "x.conllu"
    conllu.write_text("1\tthe\t_\t_\t_\t_\t2\tdet\t_\t_\n2\tdog\t_\t_\t_\t_\t0\troot\t_\t_\n\n", encoding="utf-8")
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        status = sipe_eval.main(["attention", "--data", str(reordered_data), "--conllu", str(conllu), "--path",
                                 f"m={lm_checkpoint}"])
    assert status == CHECKPOINT_EXIT_STATUS
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith(f"checkpoint {lm_checkpoint} does not fit the data directory "
                                                     f"{reordered_data}: dict.txt differs"), errors


def test_a_masked_lm_encoder_passes_the_check(train_checkpoint, toy_data):
    """A stock roberta (masked_lm, no fingerprint) loads through the loader: its task's dictionary is dict.txt
    plus <mask>, which the check accepts for encoders only."""
    ck = train_checkpoint(STOCK_MLM)
    loaded = CheckpointSpecs.parse([f"enc={ck}"], str(toy_data)).load("enc")
    symbols = loaded.task.source_dictionary.symbols
    assert symbols[-1] == "<mask>" and loaded.name == "enc" and loaded.path == str(ck) and not loaded.model.training
    with pytest.raises(CheckpointError, match="where the data's ends"):  # the same symbols, as a decoder's: refused
        check_dictionary(str(ck), str(toy_data), symbols)


# ------------------------------------------------------------------ lazy loading
def test_iteration_loads_one_checkpoint_at_a_time(lm_checkpoint, toy_data, monkeypatch):
    loads = []
    real = specs_module.load_lm

    def counting(path, *args, **kwargs):
        loads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(specs_module, "load_lm", counting)
    specs = CheckpointSpecs.parse([f"a={lm_checkpoint}", f"b={lm_checkpoint}"], str(toy_data))
    it = iter(specs)
    assert loads == []  # nothing is loaded before it is reached
    first = next(it)
    assert (first.name, first.path, len(loads)) == ("a", str(lm_checkpoint), 1) and not first.model.training
    first_model = weakref.ref(first.model)
    second = next(it)
    assert second.name == "b" and len(loads) == 2
    assert first.model is None and first.task is None  # released before the second was loaded
    gc.collect()
    assert first_model() is None  # nothing else held it: freed
    assert second.model is not None
    with pytest.raises(StopIteration):
        next(it)
    assert second.model is None and len(loads) == 2


def test_stopping_early_releases_and_loads_no_more(lm_checkpoint, toy_data, monkeypatch):
    loads = []
    real = specs_module.load_lm
    monkeypatch.setattr(specs_module, "load_lm", lambda path, *a, **k: loads.append(path) or real(path, *a, **k))
    specs = CheckpointSpecs.parse([f"a={lm_checkpoint}", f"b={lm_checkpoint}"], str(toy_data))
    seen = []
    for ck in specs:
        seen.append(ck)
        break
    assert seen[0].model is None and len(loads) == 1  # released when the loop stopped
    kept = specs.load("b")  # loaded by name: kept as long as the caller holds it
    assert kept.name == "b" and kept.model is not None and len(loads) == 2
    with pytest.raises(KeyError):
        specs.load("c")
