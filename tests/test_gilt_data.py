"""GiLT arc stream: tree/graph -> item -> arcs round trips, sipe-preprocess writes {split}.arcs, load checks."""
import json

import pytest

from sipe_fairseq.data.gilt.arc_streams import load_arc_stream
from sipe_fairseq.data.gilt.arcs import ArcError, decode_arcs, decode_words, deps_arcs, encode_arcs, tree_arcs
from sipe_fairseq.data.preprocess import PreprocessOptions, preprocess
from sipe_fairseq.data.toy_grammar import generate
from sipe_fairseq.hexatag import read_conllu

from conftest import shared_path

# an EWT-like non-projective tree: heads of words 1..9
NONPROJ = [2, 4, 4, 0, 7, 7, 2, 4, 4]


def test_encoding_by_hand():
    # word 1: head 2 is later -> belongs to word 2; word 1 owns nothing
    # word 2: head 3 later; dependent 1 -> [0 heads, 1 dep: 1]
    item = encode_arcs(tree_arcs([2, 3, 0]), 3)
    #          w1      w2         w3: head root, deps 2
    assert item == [0, 0, 0, 1, 1, 1, 0, 1, 2]
    assert decode_words(item, 3) == [([], []), ([], [1]), ([0], [2])]
    assert decode_arcs(item, 3) == [(2, 1), (3, 2), (0, 3)]


@pytest.mark.parametrize("heads", [NONPROJ, [0], [0, 1, 1, 2], [3, 3, 0, 3, 4]])
def test_tree_round_trip(heads):
    n = len(heads)
    item = encode_arcs(tree_arcs(heads), n)
    arcs = decode_arcs(item, n)
    assert sorted(arcs) == sorted(tree_arcs(heads))
    assert len(item) == 2 * n + n  # two counts per word, one value per arc, one arc per word in a tree


def test_toy_and_ewt_round_trip():
    sents = [s for s in generate(40, seed=3)]
    trees = [[int(line.split("\t")[6]) for line in s.to_conllu().splitlines() if line and not line.startswith("#")]
             for s in sents]
    ewt = shared_path("data", "ud-english-ewt", "en_ewt-ud-dev.conllu")
    for k, sent in enumerate(read_conllu(ewt)):
        trees.append(sent.heads)
        if k == 300:
            break
    for heads in trees:
        n = len(heads)
        arcs = decode_arcs(encode_arcs(tree_arcs(heads), n), n)
        assert sorted(arcs) == sorted((h, w) for w, h in enumerate(heads, 1))


def test_graph_round_trip_and_errors():
    lines = ["# sent_id = g", "1\tA\t_\t_\t_\t_\t2\tnsubj\t2:nsubj|3:nsubj:xsubj\t_",
             "2\tB\t_\t_\t_\t_\t0\troot\t0:root\t_", "3\tC\t_\t_\t_\t_\t2\txcomp\t2:xcomp|2.1:dep\t_",
             "2.1\tX\t_\t_\t_\t_\t_\t_\t3:dep\t_"]
    arcs, skipped = deps_arcs(lines)
    assert sorted(arcs) == [(0, 2), (2, 1), (2, 3), (3, 1)] and skipped == 1
    item = encode_arcs(arcs, 3)
    assert decode_words(item, 3) == [([], []), ([0], [1]), ([2], [1])]
    assert sorted(decode_arcs(item, 3)) == sorted(arcs)
    with pytest.raises(ArcError):
        decode_words(item, 2)  # values left over
    with pytest.raises(ArcError):
        decode_words(item, 4)  # ends inside word 4
    with pytest.raises(ArcError):
        decode_words([1, 1, 0], 1)  # word 1's head 1 is not earlier
    with pytest.raises(ArcError):
        encode_arcs([(2, 2)], 2)


def _conllu(trees):
    out = []
    for heads in trees:
        for w, h in enumerate(heads, 1):
            out.append(f"{w}\tw{w}\t_\t_\t_\t_\t{h}\tdep\t{h}:dep\t_")
        out.append("")
    return "\n".join(out) + "\n"


def test_preprocess_writes_arcs(tmp_path):
    from fairseq.data import data_utils

    trees = [NONPROJ, [0, 1, 1, 2], [2, 0]]
    (tmp_path / "train.conllu").write_text(_conllu(trees), encoding="utf-8")
    dest = tmp_path / "d"
    m = preprocess(PreprocessOptions(train=str(tmp_path / "train.conllu"), destdir=str(dest), no_split=True, progress=False))
    st = m["splits"]["train"]["arcs"]
    assert st == {"arcs": 15, "root_arcs": 3, "words_with_several_heads": 0, "words_without_head": 0,
                  "max_arcs_per_word": 3, "source": "tree"}  # word 4 of NONPROJ: root head + deps 2, 3
    tokens = data_utils.load_indexed_dataset(str(dest / "train"), None)
    term = data_utils.load_indexed_dataset(str(dest / "train.terminal"), None)
    ds, n_words = load_arc_stream(str(dest), "train", tokens, term)
    assert n_words.tolist() == [9, 4, 2]
    for i, heads in enumerate(trees):
        assert sorted(decode_arcs(ds[i].tolist(), len(heads))) == sorted(tree_arcs(heads))
    # out of step: the terminal stream of another directory with other sentence lengths
    (tmp_path / "t2.conllu").write_text(_conllu([[0, 1], [0], [2, 0]]), encoding="utf-8")
    preprocess(PreprocessOptions(train=str(tmp_path / "t2.conllu"), destdir=str(tmp_path / "e"), no_split=True, progress=False))
    other = data_utils.load_indexed_dataset(str(tmp_path / "e" / "train.terminal"), None)
    with pytest.raises(ValueError, match="sentence 0"):
        load_arc_stream(str(dest), "train", tokens, other)


def test_preprocess_deps_graph(tmp_path):
    text = "\n".join(["1\tA\t_\t_\t_\t_\t2\tnsubj\t2:nsubj|3:nsubj:xsubj\t_", "2\tB\t_\t_\t_\t_\t0\troot\t0:root\t_",
                      "3\tC\t_\t_\t_\t_\t2\txcomp\t2:xcomp\t_", ""]) + "\n"
    (tmp_path / "g.conllu").write_text(text, encoding="utf-8")
    m = preprocess(PreprocessOptions(train=str(tmp_path / "g.conllu"), destdir=str(tmp_path / "d"), no_split=True,
                                     progress=False, arcs="deps"))
    st = m["splits"]["train"]["arcs"]
    assert (st["arcs"], st["root_arcs"], st["words_with_several_heads"], st["source"]) == (4, 1, 1, "deps")
    assert json.loads((tmp_path / "d" / "manifest.json").read_text())["settings"]["arcs"] == "deps"


# ------------------------------------------------------------------ arc streams checked at load (issue 24.5)
ARC_CASES = ["random", "zeros", "swapped-bin", "swapped-both", "truncated-bin", "truncated-idx", "later-word",
             "manifest-size", "manifest-crc32"]


def _gilt_task(path, mode="fast", tokens_per_sample=64, sample_break_mode="complete"):
    from omegaconf import OmegaConf

    from sipe_fairseq.tasks.gilt_lm import GiltLanguageModelingTask, GiltLMConfig

    cfg = OmegaConf.structured(GiltLMConfig(
        data=str(path), tokens_per_sample=tokens_per_sample, sample_break_mode=sample_break_mode, validate_data=mode,
        seed=1, batch_size=None, batch_size_valid=None, dataset_impl=None, data_buffer_size=10, tpu=False,
        use_plasma_view=False, plasma_path=""))
    return GiltLanguageModelingTask.setup_task(cfg)


def _damage_arcs(path, case):
    """Damage ``path/train.arcs`` as ``case`` says; returns the regex of the one error line expected."""
    import numpy as np

    from test_data_validation import _rewrite, _stream

    flat, off, dtype = _stream(path, "train.arcs")
    arcs = rf"{path}/train\.arcs"
    if case == "random":
        _rewrite(path, "train.arcs", np.random.RandomState(0).randint(0, 256, len(flat)), dtype)
        return rf"{arcs}\.bin: sentence 0: .* \(the sentence has \d+ words in .*train\.terminal\.bin\)"
    if case == "zeros":
        _rewrite(path, "train.arcs", np.zeros(len(flat)), dtype)
        return rf"{arcs}\.bin: sentence 0: arc item holds \d+ values after its \d+ words"
    if case == "swapped-bin":
        (path / "train.arcs.bin").write_bytes((path / "valid.arcs.bin").read_bytes())
        return rf"{arcs}\.bin: \d+ bytes, but {arcs}\.idx describes \d+ tokens"
    if case == "swapped-both":
        for ext in ("bin", "idx"):
            (path / f"train.arcs.{ext}").write_bytes((path / f"valid.arcs.{ext}").read_bytes())
        return rf"{arcs}\.idx: 60 sentences, the token stream {path}/train\.idx 400: the arc stream does not belong"
    if case in ("truncated-bin", "truncated-idx"):
        name = "train.arcs." + case.split("-")[1]
        data = (path / name).read_bytes()
        (path / name).write_bytes(data[:-100] if case == "truncated-bin" else data[:-5])
        return (rf"{arcs}\.bin: \d+ bytes, but .*train\.arcs\.idx describes" if case == "truncated-bin"
                else rf"{arcs}\.idx: \d+ bytes, but its header announces 400 sentences .*truncated or damaged")
    if case == "later-word":  # sentence 3's first word with a head arc: make it point at the word itself
        item = flat[off[3]:off[4]].tolist()
        pos, w = 0, 1
        while item[pos] == 0:  # word w: [n_heads, heads.., n_deps, deps..]
            pos += 2 + item[pos + 1]
            w += 1
        new = flat.copy()
        new[off[3] + pos + 1] = w
        _rewrite(path, "train.arcs", new, dtype)
        return (rf"{arcs}\.bin: sentence 3: word {w}: heads \[{w}\] not among earlier nodes 0\.\.{w - 1} "
                r"\(an arc belongs to its later word\)")
    manifest = json.loads((path / "manifest.json").read_text())
    if case == "manifest-size":
        manifest["files"]["train.arcs.idx"]["bytes"] += 12
        expect = rf"{arcs}\.idx: \d+ bytes, .*manifest\.json records \d+"
    else:  # a byte change that keeps every item decodable: the recorded checksum differs
        manifest["files"]["train.arcs.bin"]["crc32"] ^= 1
        expect = rf"{arcs}\.bin: crc32 [0-9a-f]{{8}} differs from the [0-9a-f]{{8}} .*manifest\.json records"
    (path / "manifest.json").write_text(json.dumps(manifest))
    return expect


@pytest.mark.parametrize("case", ARC_CASES)
def test_damaged_arc_stream_is_refused_at_load(toy_data_400, tmp_path, case):
    """Issue 24.5: random bytes, zeros or another split's arcs gave a traceback naming only the split,
    a truncated file `buffer is smaller than requested size`, and the arc files were not compared with
    the manifest. Now --task gilt_lm refuses the split with a DataError naming the file (and sentence)."""
    import shutil

    from sipe_fairseq.data.validate import DataError

    path = tmp_path / "d"
    shutil.copytree(toy_data_400, path)
    expect = _damage_arcs(path, case)
    task = _gilt_task(path)
    task.load_dataset("valid")  # the other splits are fine
    with pytest.raises(DataError, match=expect):
        task.load_dataset("train")


def test_clean_arc_stream_is_checked_once(toy_data_400):
    task = _gilt_task(toy_data_400)
    task.load_dataset("train")
    report = task.validate_split(str(toy_data_400), "train", task.dictionary, task.tag_dictionaries)
    manifest = json.loads((toy_data_400 / "manifest.json").read_text())
    assert report["arcs_checked"] and report["arcs"] == manifest["splits"]["train"]["arcs"]["arcs"] == 4223
    assert report["files"]["crc32"] == 11  # 4 streams x (.bin, .idx), 3 dictionaries


def test_arc_stream_without_content_validation_still_refused(toy_data_400, tmp_path):
    """--validate-data none: the structure is still checked, and the loader decodes every item itself."""
    import shutil

    from sipe_fairseq.data.validate import DataError

    path = tmp_path / "d"
    shutil.copytree(toy_data_400, path)
    _damage_arcs(path, "zeros")
    with pytest.raises(DataError, match=rf"{path}/train\.arcs\.bin: sentence 0: arc item holds"):
        _gilt_task(path, "none").load_dataset("train")
    for f in path.glob("valid.arcs.*"):
        f.unlink()
    with pytest.raises(DataError, match=rf"{path}/valid\.arcs\.bin/\.idx: no arc stream for split 'valid'"):
        _gilt_task(path, "none").load_dataset("valid")


@pytest.mark.parametrize("case", ["random", "truncated-bin"])
def test_fairseq_train_gilt_damaged_arcs_one_line(toy_data_400, tmp_path, case):
    """fairseq-train --task gilt_lm: one line `sipe_fairseq: error: FILE: ...`, exit status 1, no traceback."""
    import re
    import shutil

    import launcher
    from conftest import BIN, ENV, PLUGIN

    path = tmp_path / "d"
    shutil.copytree(toy_data_400, path)
    expect = _damage_arcs(path, case)
    cmd = [BIN / "fairseq-train", path, "--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm",
           "--arch", "gilt_txl_tiny", "--tokens-per-sample", "64", "--sample-break-mode", "complete", "--optimizer", "adam",
           "--lr", "0.003", "--max-tokens", "1024", "--max-update", "2", "--no-save", "--num-workers", "0",
           "--save-dir", tmp_path / "ck"]
    proc = launcher.run([str(c) for c in cmd], env=ENV, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sipe_fairseq: error:")]
    assert len(errors) == 1 and re.match("sipe_fairseq: error: " + expect, errors[0]), proc.stderr[-2000:]


def _too_long_line(path, split, limit):
    """The one error line expected for ``split`` of ``path`` under ``--tokens-per-sample limit``, from the
    token stream itself (``--sample-break-mode eos``: block k is sentence k), and the sentences too long."""
    import re

    from fairseq.data import Dictionary, data_utils

    d = Dictionary.load(str(path / "dict.txt"))
    raw = data_utils.load_indexed_dataset(str(path / split), d)
    long = [k for k, n in enumerate(raw.sizes) if n > limit]
    first, longest = long[0], int(max(raw.sizes[k] for k in long))
    text = d.string(raw[first][:-1], "sentencepiece")  # fairseq's own post-processing of the pieces
    quoted = re.escape(text) if len(text) <= 60 else re.escape(text[:57].rstrip()) + r"\.\.\."
    return (rf'{re.escape(str(path / split))}: sentence {first} \("{quoted}"\) has {int(raw.sizes[first])} tokens, more '
            rf"than the model's {limit} positions \(--tokens-per-sample {limit}; {len(long)} sentences of '{split}' are "
            rf"too long, the longest has {longest} tokens\)\. --task gilt_lm keeps sentences whole: raise "
            rf"--tokens-per-sample to at least {longest}, or leave these sentences out with "
            r"--skip-invalid-size-inputs-valid-test$"), long


def test_too_long_validation_sentence_is_one_option_error(toy_data_400):
    """A validation sentence longer than the model's positions: OptionError naming the split, the sentence,
    its length and both remedies (fairseq raised a bare Exception); skipping leaves exactly those out."""
    from sipe_fairseq.tasks.sipe_data import OptionError

    task = _gilt_task(toy_data_400, tokens_per_sample=24, sample_break_mode="eos")
    task.load_dataset("valid")
    ds = task.dataset("valid")
    expect, long = _too_long_line(toy_data_400, "valid", 24)
    assert 1 < len(long) < len(ds)
    with pytest.raises(OptionError, match=expect):
        task.get_batch_iterator(ds, max_tokens=1024, max_positions=24, ignore_invalid_inputs=False)
    kept = task.get_batch_iterator(ds, max_tokens=1024, max_positions=24, ignore_invalid_inputs=True)
    assert sorted(int(i) for b in kept.frozen_batches for i in b) == [k for k in range(len(ds)) if k not in long]


def test_fairseq_train_gilt_too_long_validation_sentence_one_line(toy_data_400, tmp_path):
    """fairseq-train --task gilt_lm with validation sentences longer than --tokens-per-sample: one line
    `sipe_fairseq: error: ...` with both remedies, exit status 1, no traceback; with
    --skip-invalid-size-inputs-valid-test it trains and validates."""
    import re

    import launcher
    from conftest import BIN, ENV, PLUGIN

    expect, _ = _too_long_line(toy_data_400, "valid", 24)
    cmd = [BIN / "fairseq-train", toy_data_400, "--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm",
           "--arch", "gilt_txl_tiny", "--tokens-per-sample", "24", "--sample-break-mode", "eos", "--optimizer", "adam",
           "--lr", "0.003", "--max-tokens", "1024", "--max-update", "2", "--no-save", "--num-workers", "0",
           "--save-dir", tmp_path / "ck"]
    proc = launcher.run([str(c) for c in cmd], env=ENV, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    errors = [line for line in proc.stderr.splitlines() if line.startswith("sipe_fairseq: error:")]
    assert len(errors) == 1 and re.match("sipe_fairseq: error: " + expect, errors[0]), proc.stderr[-2000:]
    proc = launcher.run([str(c) for c in cmd + ["--skip-invalid-size-inputs-valid-test"]], env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "sipe_fairseq: error" not in proc.stderr and "| valid on 'valid' subset |" in proc.stdout + proc.stderr
