"""Issue 48, data and checkpoint integrity, unit by unit (the commands' and hub.load's rows: tests/test_faults.py):
the one dict.txt loader (fairseq's rules, errors naming file and line), the data directory check, the checkpoint
archive's CRC check, the spm.model check of the data fingerprint and of the raw-text encoder."""
import hashlib
import json
import shutil
import struct
import zipfile

import pytest
import torch
from fairseq.data import Dictionary

from sipe_fairseq.checkpoints.load import SKIP_CRC_ENV, check_archive
from sipe_fairseq.data.dictionary import check_data_directory, data_directory_problem, load_dictionary
from sipe_fairseq.data.fingerprint import data_fingerprint, fingerprint_mismatch, spm_problem
from sipe_fairseq.hexatag.errors import CheckpointError, DataError

GOOD = "▁the 10\n▁dog 7\n. 5\nruns 3 #fairseq:overwrite\n"


# ------------------------------------------------------------------ 4. the one dict.txt loader
def test_load_dictionary_is_fairseqs_on_a_good_file(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_text(GOOD, encoding="utf-8")
    ours, theirs = load_dictionary(str(path)), Dictionary.load(str(path))
    assert ours.symbols == theirs.symbols and ours.count == theirs.count and len(ours) == 4 + 4


@pytest.mark.parametrize("text, where", [
    (GOOD + "brokenline\n", "dict.txt:5: not a fairseq dictionary line '<token> <count> [#fairseq:overwrite]': "
                            "'brokenline'"),
    (GOOD + "▁cat many\n", "dict.txt:5: not a fairseq dictionary line '<token> <count> [#fairseq:overwrite]': "
                           "'▁cat many'"),
    ("▁the 10\n\n▁dog 3\n", "dict.txt:2: not a fairseq dictionary line '<token> <count> [#fairseq:overwrite]': ''"),
    (GOOD + "▁dog 2\n", "dict.txt:5: token '▁dog' already on line 2 (a line ending in #fairseq:overwrite replaces it)"),
    ("<unk> 3\n", "dict.txt:1: token '<unk>' already a special symbol of every dictionary"),
    (GOOD + "runs 2\n", "dict.txt:5: token 'runs' already on line 4"),  # line 4 carries #fairseq:overwrite
    ("a 1\rb\n", "dict.txt:2: not a fairseq dictionary line"),  # universal newlines, as fairseq's text mode
])
def test_a_malformed_line_names_the_file_and_the_line(tmp_path, text, where):
    """fairseq's own message names neither ("Incorrect dictionary format ...", "Duplicate word found ...")."""
    path = tmp_path / "dict.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(Exception) as fairseq_error:
        Dictionary.load(str(path))
    assert str(path) not in str(fairseq_error.value)
    with pytest.raises(DataError) as err:
        load_dictionary(str(path))
    assert str(err.value).startswith(f"{tmp_path}/{where}") and "\n" not in str(err.value), str(err.value)


def test_a_dictionary_that_is_not_utf8_names_the_line(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_bytes(b"a 1\nb 2\ncaf\xe9 3\n")
    with pytest.raises(DataError, match=r"dict\.txt:3: not UTF-8 \(byte 0xe9\)"):
        load_dictionary(str(path))


def test_a_missing_dictionary_is_file_not_found_as_fairseqs(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_dictionary(str(tmp_path / "dict.txt"))


def test_srcdict_and_tag_dictionaries_go_through_it(tmp_path):
    """sipe-preprocess --srcdict (PreprocessError) and the tag dictionaries (DataError, a ValueError) name the line."""
    from sipe_fairseq.data.preprocess import load_token_dictionary
    from sipe_fairseq.data.preprocess.options import PreprocessError
    from sipe_fairseq.data.tag_dictionary import load_tag_dictionary

    path = tmp_path / "dict.terminal.txt"
    path.write_text("<notag> 4\nl 3\nr\n", encoding="utf-8")
    with pytest.raises(PreprocessError, match=r"dict\.terminal\.txt:3: not a fairseq dictionary line"):
        load_token_dictionary(str(path))
    with pytest.raises(ValueError, match=r"dict\.terminal\.txt:3: not a fairseq dictionary line"):
        load_tag_dictionary(str(path), "terminal")


# ------------------------------------------------------------------ 3. the data directory check
def test_data_directory_problems(tmp_path):
    assert data_directory_problem(str(tmp_path / "none")) == f"data directory {tmp_path / 'none'}: no such directory"
    (tmp_path / "file").write_text("x")
    assert data_directory_problem(str(tmp_path / "file")) == f"data directory {tmp_path / 'file'}: not a directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert data_directory_problem(str(empty)).startswith(f"data directory {empty}: empty: make one from CoNLL-U")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("x")
    assert data_directory_problem(str(other)) == f"data directory {other}: no dict.txt there: not a sipe-preprocess " \
                                                 "directory"
    assert data_directory_problem(str(other), require_dictionary=False) is None  # the commands' early check
    (other / "dict.txt").write_text("a 1\nb\n")
    assert data_directory_problem(str(other), require_dictionary=False).startswith(f"{other}/dict.txt:2: ")
    (other / "dict.txt").write_text("a 1\nb 2\n")
    assert data_directory_problem(f"{other}:{tmp_path / 'none'}") is None  # the first of several shards
    check_data_directory(None)
    with pytest.raises(ValueError, match="no such directory"):
        check_data_directory(str(tmp_path / "none"))


# ------------------------------------------------------------------ 2. the checkpoint archive's CRCs
def _saved(path, **kwargs):
    torch.manual_seed(0)
    state = {"model": {"embed.weight": torch.randn(64, 32), "proj.weight": torch.randn(128, 64), "step": 3},
             "cfg": {"task": {"_name": "x"}}}
    torch.save(state, str(path), **kwargs)
    return state


def _zero_inside(path, member_suffix=None):
    """4 KiB zeroed in the middle of the largest data member; its name."""
    with zipfile.ZipFile(path) as archive:
        info = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        n, m = struct.unpack("<HH", f.read(4))
        f.seek(info.header_offset + 30 + n + m + info.file_size // 2 - 2048)
        f.write(bytes(4096))
    return info.filename


def test_damaged_archive_names_member_and_tensor(tmp_path, monkeypatch):
    monkeypatch.delenv(SKIP_CRC_ENV, raising=False)
    path = tmp_path / "ck.pt"
    _saved(path)
    check_archive(str(path))  # intact
    member = _zero_inside(path)
    loaded = torch.load(str(path), weights_only=False)  # what torch itself does with it: no complaint
    assert float(loaded["model"]["proj.weight"].abs().min()) == 0.0
    with pytest.raises(CheckpointError) as err:
        check_archive(str(path))
    assert str(err.value) == (f"checkpoint {path}: damaged: zip member {member} (it holds tensor proj.weight) does not "
                              "match the CRC-32 recorded when it was saved (changed on disk or in a copy); use an "
                              "intact copy")
    monkeypatch.setenv(SKIP_CRC_ENV, "1")
    check_archive(str(path))  # skipped
    monkeypatch.setenv(SKIP_CRC_ENV, "0")
    with pytest.raises(CheckpointError):
        check_archive(str(path))


def test_crc_check_leaves_other_files_to_the_unpickler(tmp_path, monkeypatch):
    """torch's legacy (non-zip) format and a file that is no archive at all are not refused here: torch.load's own
    error (read_checkpoint: "cannot be read as a fairseq checkpoint") says what they are."""
    monkeypatch.delenv(SKIP_CRC_ENV, raising=False)
    legacy = tmp_path / "legacy.pt"
    _saved(legacy, _use_new_zipfile_serialization=False)
    check_archive(str(legacy))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    check_archive(str(junk))
    cut = tmp_path / "cut.pt"
    _saved(cut)
    cut.write_bytes(cut.read_bytes()[:1000])  # no central directory: BadZipFile
    check_archive(str(cut))


def test_a_pickle_of_other_objects_only_names_the_member(tmp_path, monkeypatch):
    """The tensor's name is read with stand-ins for every global (nothing of the file is built or run); a layout
    they cannot follow names the member alone."""
    monkeypatch.delenv(SKIP_CRC_ENV, raising=False)
    path = tmp_path / "list.pt"
    torch.save([torch.randn(4096)], str(path))
    member = _zero_inside(path)
    with pytest.raises(CheckpointError) as err:
        check_archive(str(path))
    assert f"zip member {member} does not match" in str(err.value)


# ------------------------------------------------------------------ 1. spm.model
def _data_dir(root, spm: bytes = b"spm-model-bytes", record: bool = True):
    root.mkdir()
    (root / "dict.txt").write_text("a 1\n")
    (root / "spm.model").write_bytes(spm)
    if record:
        sha = hashlib.sha256(spm).hexdigest()
        (root / "manifest.json").write_text(json.dumps({"settings": {"spm": {"sha256": sha}}}))
    return root


def test_fingerprint_refuses_a_missing_spm_model_the_checkpoint_recorded(tmp_path):
    """Before, the manifest's hash stood in for the missing file and the two fingerprints agreed."""
    trained = data_fingerprint(str(_data_dir(tmp_path / "trained")))
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "trained", moved)
    (moved / "spm.model").unlink()
    current = data_fingerprint(str(moved))
    assert current["spm_sha256"] == trained["spm_sha256"] and current["spm_file"] is False
    line = fingerprint_mismatch(trained, current)
    sha = trained["spm_sha256"]
    assert line.startswith(f"spm.model is missing: {moved}/spm.model: no such file, the checkpoint recorded sha256 "
                           f"{sha} (data: no file; its manifest.json records {sha})"), line
    assert fingerprint_mismatch(trained, data_fingerprint(str(tmp_path / "trained"))) is None
    old = {k: v for k, v in trained.items() if k != "spm_sha256"}  # a checkpoint that recorded no spm.model
    assert fingerprint_mismatch(old, current) is None


def test_raw_text_encoder_refuses_a_missing_or_other_spm_model(tmp_path, caplog):
    from sipe_fairseq.data.encode import SentenceEncoder

    data = _data_dir(tmp_path / "d")
    assert spm_problem(str(data)) is None
    (data / "spm.model").write_bytes(b"another model")
    assert spm_problem(str(data)).startswith(f"spm.model differs: {data}/spm.model has sha256 ")
    (data / "spm.model").unlink()
    with pytest.raises(CheckpointError) as err:
        SentenceEncoder(str(data))
    assert str(err.value).startswith(f"spm.model is missing: {data}/spm.model: no such file, {data}/manifest.json "
                                     "records sha256 ")
    assert str(err.value).endswith("; --allow-dictionary-mismatch encodes the words anyway")
    encoder = SentenceEncoder(str(data), allow_dictionary_mismatch=True)
    assert encoder.sp is None and "(--allow-dictionary-mismatch)" in caplog.text
    unrecorded = _data_dir(tmp_path / "u", record=False)
    (unrecorded / "spm.model").unlink()  # a --no-split directory: nothing recorded, nothing refused
    assert spm_problem(str(unrecorded)) is None and SentenceEncoder(str(unrecorded)).sp is None
    with pytest.raises(DataError, match="no such directory"):
        SentenceEncoder(str(tmp_path / "none"))
