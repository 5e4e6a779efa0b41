"""Data validation at load (issue 14, items 1 and 4): every damaged split is refused before
training starts, naming the file and the first bad sentence; fairseq commands stop with one line."""
import json
import shutil

import numpy as np
import pytest
from fairseq.data import Dictionary
from omegaconf import OmegaConf

from sipe_fairseq.data import validate
from sipe_fairseq.data.preprocess import PreprocessOptions, preprocess
from sipe_fairseq.data.writers import write_stream
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.data.validate import DataError, validate_split
from sipe_fairseq.tasks.hexatag_lm import HexatagLanguageModelingTask, HexatagLMConfig
from sipe_fairseq.tasks.sipe_data import SiPEDataMixin
import launcher
from conftest import BIN, ENV, PLUGIN
from test_preprocess import TRAIN, VALID

KINDS = ("terminal", "nonterminal")



@pytest.fixture(scope="module")
def data_dir(toy_data_400):
    return toy_data_400


def _copy(data_dir, tmp_path, name="d"):
    out = tmp_path / name
    shutil.copytree(data_dir, out)
    return out


def _task(path, mode="fast"):
    cfg = OmegaConf.structured(HexatagLMConfig(
        data=str(path), tokens_per_sample=64, sample_break_mode="complete", validate_data=mode, seed=1, batch_size=None,
        batch_size_valid=None, dataset_impl=None, data_buffer_size=10, tpu=False, use_plasma_view=False, plasma_path=""))
    return HexatagLanguageModelingTask.setup_task(cfg)


def _stream(path, name):
    """(flat ids, sentence offsets) of ``path/name`` (.bin/.idx), read independently of the code under test."""
    idx = (path / f"{name}.idx").read_bytes()
    n = int(np.frombuffer(idx[18:26], dtype=np.uint64)[0])
    sizes = np.frombuffer(idx[26:26 + 4 * n], dtype=np.int32)
    dtype = {3: np.int16, 4: np.int32, 8: np.uint16, 1: np.uint8}[idx[17]]
    return np.fromfile(path / f"{name}.bin", dtype=dtype), np.concatenate([[0], np.cumsum(sizes)]), dtype


def _rewrite(path, name, flat, dtype):
    np.asarray(flat).astype(dtype).tofile(path / f"{name}.bin")


def _dicts(path):
    return Dictionary.load(str(path / "dict.txt")), SiPEDataMixin.load_tag_dictionaries(str(path), KINDS)


def test_clean_directory_loads(data_dir):
    task = _task(data_dir)
    for split in ("train", "valid", "test"):
        task.load_dataset(split)
    d, tags = _dicts(data_dir)
    report = validate_split(str(data_dir), "train", d, tags, "full")
    manifest = json.loads((data_dir / "manifest.json").read_text())
    tok, off, _ = _stream(data_dir, "train")
    assert report["sentences"] == len(off) - 1 and report["tokens"] == len(tok)
    assert report["tagged"] == manifest["splits"]["train"]["tagged_positions"]
    # 3 streams x (.bin, .idx), 3 dictionaries
    assert report["files"] == {"checked": 9, "crc32": 9, "hashed": 9, "unrecorded": 0, "no_checksum": 0}


@pytest.mark.parametrize("case", ["random", "zeros", "copy"])
def test_replaced_terminal_stream_is_refused(data_dir, tmp_path, case):
    """Issue 14.1: train.terminal.bin replaced with random ids, zeros or the non-terminal stream
    trained silently; now loading train fails naming the file and the first bad sentence."""
    path = _copy(data_dir, tmp_path)
    flat, off, dtype = _stream(path, "train.terminal")
    if case == "random":
        new = np.random.RandomState(0).randint(0, 7, len(flat))
    elif case == "zeros":
        new = np.zeros(len(flat))
    else:
        new, _, _ = _stream(path, "train.nonterminal")
    _rewrite(path, "train.terminal", new, dtype)
    task = _task(path)
    task.load_dataset("valid")  # the other splits are fine
    with pytest.raises(DataError, match=r"train\.terminal\.bin: sentence 0, position \d+: id \d+ is not a terminal tag id"):
        task.load_dataset("train")


def test_first_bad_sentence_is_named(data_dir, tmp_path):
    path = _copy(data_dir, tmp_path)
    flat, off, dtype = _stream(path, "train.terminal")
    flat = flat.copy()
    flat[off[137] + 1] = 0
    _rewrite(path, "train.terminal", flat, dtype)
    with pytest.raises(DataError, match=r"train\.terminal\.bin: sentence 137, position 1: id 0 .* 1 such ids"):
        _task(path).load_dataset("train")


def _word_start_table(path):
    d = Dictionary.load(str(path / "dict.txt"))
    return np.array([s.startswith("\u2581") for s in d.symbols]), d


@pytest.mark.parametrize("case", ["continuation", "eos", "nonterminal-missing", "both-missing", "first-piece"])
def test_tags_at_wrong_positions(data_dir, tmp_path, case):
    """Valid ids at the wrong place: on a continuation piece, on </s>, in one stream only, missing
    on a word start in both streams, missing on a sentence's first piece."""
    path = _copy(data_dir, tmp_path)
    starts, d = _word_start_table(path)
    tok, off, _ = _stream(path, "train")
    term, _, dtype = _stream(path, "train.terminal")
    nonterm, _, _ = _stream(path, "train.nonterminal")
    term, nonterm = term.copy(), nonterm.copy()
    if case == "continuation":
        pos = int(np.flatnonzero(~starts[tok] & (tok != d.eos()))[0])
        sent = int(np.searchsorted(off, pos, side="right") - 1)
        term[pos] = FIRST_TAG_ID
        expect = rf"train\.terminal\.bin: sentence {sent}, position {pos - off[sent]}: a terminal tag on a continuation piece"
    elif case == "eos":
        term[off[6] - 1] = FIRST_TAG_ID
        expect = r"train\.terminal\.bin: sentence 5: a terminal tag on </s>"
    elif case == "first-piece":
        term[off[7]] = nonterm[off[7]] = NOTAG_ID
        expect = r"train\.terminal\.bin: sentence 7: its first piece carries no tag"
    else:
        pos = off[9] + 1 + int(np.flatnonzero(starts[tok[off[9] + 1:off[10]]])[0])  # a word start after the first
        nonterm[pos] = NOTAG_ID
        if case == "nonterminal-missing":
            expect = rf"train\.nonterminal\.bin: sentence 9, position {pos - off[9]}: tagged where terminal is not"
        else:
            term[pos] = NOTAG_ID
            expect = rf"train\.terminal\.bin: sentence 9, position {pos - off[9]}: a word-start piece without a tag"
    _rewrite(path, "train.terminal", term, dtype)
    _rewrite(path, "train.nonterminal", nonterm, dtype)
    with pytest.raises(DataError, match=expect):
        _task(path).load_dataset("train")


@pytest.mark.parametrize("case", ["bin-2-bytes", "idx"])
def test_truncated_files(data_dir, tmp_path, case):
    """Issue 14.1: a .bin truncated by 2 bytes trained 6 updates then crashed; a truncated .idx
    gave 'offset must be non-negative'."""
    path = _copy(data_dir, tmp_path)
    name = "train.bin" if case == "bin-2-bytes" else "train.idx"
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[:-2] if case == "bin-2-bytes" else data[:-5])
    match = (r"train\.bin: \d+ bytes, but .*train\.idx describes \d+ tokens" if case == "bin-2-bytes"
             else r"train\.idx: \d+ bytes, but its header announces 400 sentences")
    with pytest.raises(DataError, match=match):
        _task(path).load_dataset("train")


def test_missing_and_missized_streams(data_dir, tmp_path):
    path = _copy(data_dir, tmp_path)
    for f in path.glob("valid.terminal.*"):
        f.unlink()
    with pytest.raises(DataError, match=r"valid\.terminal\.bin/\.idx: no terminal stream .* not a SiPE data directory"):
        _task(path).load_dataset("valid")
    for ext in ("bin", "idx"):
        shutil.copyfile(path / f"test.terminal.{ext}", path / f"valid.terminal.{ext}")
    with pytest.raises(DataError, match=r"valid\.terminal\.idx: sentence 0 has \d+ terminal ids but \d+ tokens"):
        _task(path).load_dataset("valid")


def test_empty_split(data_dir, tmp_path):
    """Issue 14.4: fairseq-train crashed with 'cannot mmap an empty file' on an empty valid split
    (what sipe-preprocess writes when no valid sentence is kept)."""
    path = _copy(data_dir, tmp_path)
    for name in ("valid", "valid.terminal", "valid.nonterminal"):
        write_stream(str(path / name), np.zeros(0, np.int64), np.zeros(0, np.int64), 300)
    with pytest.raises(DataError, match=r"valid\.bin: split 'valid' has no sentence"):
        _task(path).load_dataset("valid")


def _swap_ids(path, name, a, b):
    """Tag ids ``a`` and ``b`` exchanged everywhere in ``path/name`` (sizes and id ranges unchanged);
    returns the number of positions changed."""
    flat, _, dtype = _stream(path, name)
    new = flat.copy()
    new[flat == a], new[flat == b] = b, a
    _rewrite(path, name, new, dtype)
    return int(((flat == a) | (flat == b)).sum())


def test_manifest_sizes_and_crc32_fast_and_sha256_full(data_dir, tmp_path):
    """A change that keeps every id valid (one terminal tag l <-> r) passes the content checks; the
    manifest's crc32 catches it by default (issue 24.6: it trained silently before), the sha256 with
    --validate-data full. A manifest without file records (an older sipe-preprocess) is not refused:
    the report says nothing was compared."""
    path = _copy(data_dir, tmp_path)
    flat, off, dtype = _stream(path, "train.terminal")
    flat = flat.copy()
    k = int(np.flatnonzero(flat >= FIRST_TAG_ID)[10])
    flat[k] = FIRST_TAG_ID + 1 - (flat[k] - FIRST_TAG_ID)
    _rewrite(path, "train.terminal", flat, dtype)
    with pytest.raises(DataError, match=r"train\.terminal\.bin: crc32 [0-9a-f]{8} differs from the [0-9a-f]{8} "
                                        r".*manifest\.json records \(same size, other bytes\)"):
        _task(path, "fast").load_dataset("train")
    with pytest.raises(DataError, match=r"train\.terminal\.bin: crc32 .* differs"):
        _task(path, "full").load_dataset("train")
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"]["train.terminal.bin"]["crc32"]  # full still has the sha256
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"train\.terminal\.bin: sha256 differs from .*manifest\.json"):
        _task(path, "full").load_dataset("train")
    del manifest["files"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    d, tags = _dicts(path)
    assert validate_split(str(path), "train", d, tags, "full")["files"] is None
    # a file grown or shrunk after preprocessing: sizes are compared in fast mode too
    path2 = _copy(data_dir, tmp_path, "d2")
    manifest = json.loads((path2 / "manifest.json").read_text())
    manifest["files"]["valid.terminal.idx"]["bytes"] += 1
    (path2 / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=r"valid\.terminal\.idx: \d+ bytes, .*manifest\.json records \d+"):
        _task(path2, "fast").load_dataset("valid")
    _task(path2, "none").load_dataset("valid")


def test_swapped_tag_ids_refused_by_default(data_dir, tmp_path):
    """Issue 24.6: the non-terminal ids 5 and 6 exchanged over the whole stream (every id still valid,
    sizes unchanged): fairseq-train now stops with one line naming the file, without
    --validate-data full."""
    path = _copy(data_dir, tmp_path)
    changed = _swap_ids(path, "train.nonterminal", 5, 6)
    assert changed > 1000
    d, tags = _dicts(path)
    report = validate_split(str(path), "train", d, tags, "none")  # the content checks alone cannot see it ...
    assert report["sentences"] == 400
    validate.check_content(validate.read_stream(str(path / "train")),
                           {k: validate.read_stream(str(path / f"train.{k}")) for k in KINDS},
                           validate.dictionary_limits(d, tags, False), validate.expectations(str(path), "train"),
                           validate._scope(validate.read_stream(str(path / "train")), "full"))
    proc = _train(path, tmp_path)  # ... the crc32 does, by default
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sipe_fairseq: error:")]
    assert len(errors) == 1 and errors[0].startswith(f"sipe_fairseq: error: {path}/train.nonterminal.bin: crc32 "), errors


def test_old_manifest_without_checksums_loads_with_one_warning(data_dir, tmp_path, caplog):
    """A manifest written before crc32 was recorded (bytes and sha256 only) still loads, with one
    warning for all splits; its sizes are still compared."""
    import logging

    path = _copy(data_dir, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    for rec in manifest["files"].values():
        del rec["crc32"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    from sipe_fairseq.tasks import sipe_data

    sipe_data._WARNED_MANIFESTS.clear()
    task = _task(path)
    with caplog.at_level(logging.INFO, logger="sipe_fairseq.tasks.sipe_data"):
        for split in ("train", "valid", "test"):
            task.load_dataset(split)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "records no crc32 checksums (written by an older sipe-preprocess)" in warnings[0]
    d, tags = _dicts(path)
    files = validate_split(str(path), "train", d, tags, "fast")["files"]
    assert files == {"checked": 9, "crc32": 0, "hashed": 0, "unrecorded": 0, "no_checksum": 9}


def test_fast_mode_samples_large_splits(data_dir, tmp_path, monkeypatch):
    """Above FAST_FULL_TOKENS, fast mode's content checks read an evenly spread sample; full reads
    everything. (The manifest's file records are removed: their crc32 refuses any change in any mode.)"""
    monkeypatch.setattr(validate, "FAST_FULL_TOKENS", 100)
    monkeypatch.setattr(validate, "FAST_SAMPLE_SENTENCES", 50)
    path = _copy(data_dir, tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    del manifest["files"]
    (path / "manifest.json").write_text(json.dumps(manifest))
    d, tags = _dicts(path)
    assert validate_split(str(path), "train", d, tags, "fast")["checked"] == "a sample of 50 of 400 sentences"
    picked = set(np.unique(np.linspace(0, 399, 50).astype(int)).tolist())
    flat, off, dtype = _stream(path, "train.terminal")
    flat = flat.copy()
    outside = min(set(range(400)) - picked)
    flat[off[outside]] = 0
    _rewrite(path, "train.terminal", flat, dtype)
    validate_split(str(path), "train", d, tags, "fast")  # not in the sample
    with pytest.raises(DataError, match=rf"sentence {outside}, position 0"):
        validate_split(str(path), "train", d, tags, "full")
    flat[off[399]] = 0  # the last sentence is always sampled
    _rewrite(path, "train.terminal", flat, dtype)
    with pytest.raises(DataError, match="sentence 399, position 0"):
        validate_split(str(path), "train", d, tags, "fast")


@pytest.mark.parametrize("opts", [{}, {"no_split": True}, {"deprel": True}])
def test_real_layouts_pass(tmp_path, opts):
    """Multiword tokens, a lifted tree, a word with inner whitespace ("New York": two marked pieces,
    one tag), --no-split and --deprel data all pass in full mode."""
    (tmp_path / "train.conllu").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "valid.conllu").write_text(VALID, encoding="utf-8")
    dest = tmp_path / "out"
    preprocess(PreprocessOptions(train=str(tmp_path / "train.conllu"), valid=[str(tmp_path / "valid.conllu")],
                                 destdir=str(dest), spm_vocab_size=60, progress=False, **opts))
    kinds = KINDS + (("deprel",) if opts.get("deprel") else ())
    d, tags = Dictionary.load(str(dest / "dict.txt")), SiPEDataMixin.load_tag_dictionaries(str(dest), kinds)
    for split in ("train", "valid"):
        report = validate_split(str(dest), split, d, tags, "full")
        assert report["files"]["hashed"] == report["files"]["crc32"] == 3 * (1 + len(kinds))
    if not opts:
        assert validate_split(str(dest), "train", d, tags, "full")["untagged_word_starts"] >= 1  # New▁York


def _train(path, tmp_path):
    cmd = [BIN / "fairseq-train", path, "--user-dir", PLUGIN, "--task", "hexatag_lm", "--tokens-per-sample", "64",
           "--sample-break-mode", "complete", "--criterion", "hexatag_lm", "--arch", "sipe_txl_tiny", "--optimizer", "adam",
           "--lr", "0.003", "--max-tokens", "1024", "--max-update", "2", "--no-save", "--num-workers", "0",
           "--save-dir", tmp_path / "ck"]
    return launcher.run(cmd, env=ENV, timeout=300)


@pytest.mark.parametrize("case", ["random", "empty-valid", "missing"])
def test_fairseq_train_stops_with_one_line(data_dir, tmp_path, case):
    """fairseq-train exits with status 1 and one line naming the file, no traceback (before: exit
    0 and training on random tags; tracebacks for the other two)."""
    path = _copy(data_dir, tmp_path)
    if case == "random":
        flat, _, dtype = _stream(path, "train.terminal")
        _rewrite(path, "train.terminal", np.random.RandomState(1).randint(0, 10, len(flat)), dtype)
        expect = f"sipe_fairseq: error: {path}/train.terminal.bin: sentence 0, position"
    elif case == "empty-valid":
        for name in ("valid", "valid.terminal", "valid.nonterminal"):
            write_stream(str(path / name), np.zeros(0, np.int64), np.zeros(0, np.int64), 300)
        expect = f"sipe_fairseq: error: {path}/valid.bin: split 'valid' has no sentence"
    else:
        for f in path.glob("train.nonterminal.*"):
            f.unlink()
        expect = f"sipe_fairseq: error: {path}/train.nonterminal.bin/.idx: no nonterminal stream"
    proc = _train(path, tmp_path)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sipe_fairseq: error:")]
    assert len(errors) == 1 and errors[0].startswith(expect), proc.stderr[-2000:]
