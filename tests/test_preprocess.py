"""sipe-preprocess: CoNLL-U -> fairseq data directory with aligned hexatag streams."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import launcher
import torch

from sipe_fairseq.cli.preprocess import main
from sipe_fairseq.data.preprocess import PreprocessOptions, preprocess
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG, NOTAG_ID, load_tag_dictionary, tag_names
from sipe_fairseq.data.tag_streams import load_tag_streams
from sipe_fairseq.data.validate import DataError
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS, encode_tree, read_conllu

from fairseq.data import Dictionary, data_utils, indexed_dataset

EWT = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "ud-english-ewt"


def _conllu(*sentences):
    out = []
    for k, rows in enumerate(sentences, 1):
        out.append(f"# sent_id = s{k}")
        for r in rows:
            tid, form, head, rel = r
            out.append("\t".join([str(tid), form, "_", "_", "_", "_", str(head), rel, "_", "_"]))
        out.append("")
    return "\n".join(out) + "\n"


MWT = [(1, "I", 4, "nsubj"), ("2-3", "don't", "_", "_"), (2, "do", 4, "aux"), (3, "n't", 4, "advmod"),
       (4, "know", 0, "root"), (5, "the", 6, "det"), (6, "answer", 4, "obj"), (7, ".", 4, "punct")]
NONPROJ = [(1, "A", 2, "det"), (2, "hearing", 4, "nsubj"), (3, "is", 4, "aux"), (4, "scheduled", 0, "root"),
           (5, "on", 7, "case"), (6, "the", 7, "det"), (7, "issue", 2, "nmod"), (8, "today", 4, "obl"),
           (9, ".", 4, "punct")]
SPACE = [(1, "They", 2, "nsubj"), (2, "moved", 0, "root"), (3, "to", 4, "case"), (4, "New York", 2, "obl"),
         (5, "yesterday", 2, "obl"), (6, ".", 2, "punct")]
LONG = [(1, "The", 2, "det"), (2, "linguists", 3, "nsubj"), (3, "analysed", 0, "root"),
        (4, "complicated", 5, "amod"), (5, "constructions", 3, "obj"), (6, "carefully", 3, "advmod"),
        (7, ".", 3, "punct")]
EMPTY = [(1, "Mary", 2, "nsubj"), (2, "likes", 0, "root"), (3, "tea", 2, "obj"), (4, "and", 5, "cc"),
         (5, "John", 2, "conj"), ("5.1", "likes", "_", "_"), (6, "coffee", 5, "orphan"), (7, ".", 2, "punct")]
TRAIN = _conllu(MWT, NONPROJ, SPACE, LONG, EMPTY,
                [(1, "Transformers", 2, "nsubj"), (2, "learn", 0, "root"), (3, "positional", 4, "amod"),
                 (4, "representations", 2, "obj"), (5, ".", 2, "punct")])
VALID = _conllu([(1, "Wow", 5, "discourse"), (2, ",", 1, "punct"), (3, "Zürich", 5, "nsubj"),
                 (4, "is", 5, "cop"), (5, "lovely", 0, "root"), (6, ".", 5, "punct")],
                [(1, "I", 4, "nsubj"), (2, "do", 4, "aux"), (3, "n't", 4, "advmod"), (4, "know", 0, "root"),
                 (5, ".", 4, "punct")])
BAD = _conllu([(1, "Hello", 0, "root"), (2, "world", 0, "root")])  # two roots: invalid tree


def _run(tmp, name, train=TRAIN, valid=VALID, **kw):
    """Write the CoNLL-U inputs under ``tmp`` and preprocess them into ``tmp/name``."""
    (tmp / "train.conllu").write_text(train, encoding="utf-8")
    (tmp / "valid.conllu").write_text(valid, encoding="utf-8")
    kw.setdefault("spm_vocab_size", 60)
    dest = tmp / name
    manifest = preprocess(PreprocessOptions(train=str(tmp / "train.conllu"), valid=[str(tmp / "valid.conllu")],
                                            destdir=str(dest), **kw))
    return dest, manifest


def _load(dest, split, kinds=("terminal", "nonterminal")):
    tok = data_utils.load_indexed_dataset(str(dest / split), None)
    return tok, load_tag_streams(str(dest), split, tok, kinds)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("pre"), "data", keep_text=True, deprel=True)


def test_end_to_end(built):
    dest, manifest = built
    names = {p.name for p in dest.iterdir()}
    for split in ("train", "valid"):
        for kind in ("", ".terminal", ".nonterminal", ".deprel"):
            assert {f"{split}{kind}.bin", f"{split}{kind}.idx"} <= names
    assert {"dict.txt", "dict.terminal.txt", "dict.nonterminal.txt", "dict.deprel.txt", "spm.model", "spm.vocab",
            "manifest.json", "train.tok", "valid.tok"} <= names
    assert json.loads((dest / "manifest.json").read_text()) == manifest
    tr = manifest["splits"]["train"]
    assert tr["sentences"] == tr["sentences_read"] == 6 and tr["sentences_refused"] == 0
    assert tr["words"] == tr["tagged_positions"] == 8 - 1 + 9 + 6 + 7 + 7 + 5  # MWT line and 5.1 not words
    assert (tr["multiword_tokens"], tr["empty_nodes_skipped"]) == (1, 1)
    assert (tr["trees_lifted"], tr["words_whitespace_replaced"]) == (1, 1) and tr["arcs_lifted"] >= 1
    assert tr["subwords"] == tr["words"] + tr["notag_positions"] > tr["words"] + 6  # some words split
    assert manifest["splits"]["valid"]["unk_tokens"] >= 1  # "ü" never seen in train
    for kind in ("terminal", "nonterminal"):
        d = load_tag_dictionary(str(dest / f"dict.{kind}.txt"))
        assert d.index(NOTAG) == NOTAG_ID and [d.index(t) for t in tag_names(kind)] == list(
            range(FIRST_TAG_ID, FIRST_TAG_ID + len(tag_names(kind))))
    tok, streams = _load(dest, "train")
    assert len(tok) == 6 and all(len(streams[k][i]) == len(tok[i]) for k in streams for i in range(6))


def test_tags_on_first_subwords(built):
    dest, _ = built
    d = Dictionary.load(str(dest / "dict.txt"))
    tok, streams = _load(dest, "train")
    for i, sent in enumerate(read_conllu(str(dest.parent / "train.conllu"))):
        ids, term, nonterm = tok[i].tolist(), streams["terminal"][i].tolist(), streams["nonterminal"][i].tolist()
        assert ids[-1] == d.eos() and term[-1] == nonterm[-1] == NOTAG_ID
        pieces = [d[j] for j in ids[:-1]]
        first = [k for k, t in enumerate(term) if t >= FIRST_TAG_ID]
        assert first == [k for k, t in enumerate(nonterm) if t >= FIRST_TAG_ID] and first[0] == 0
        assert all(t == NOTAG_ID for k, t in enumerate(term) if k not in first)
        words = ["".join(pieces[a:b]).removeprefix("\u2581") for a, b in zip(first, first[1:] + [len(pieces)])]
        assert words == [w.replace(" ", "\u2581") for w in sent.words]
        tags = [(TERMINALS[term[k] - FIRST_TAG_ID], NONTERMINALS[nonterm[k] - FIRST_TAG_ID]) for k in first]
        assert tags == encode_tree(sent.heads)[0]


def _fairseq_preprocess():
    exe = Path(sys.executable).with_name("fairseq-preprocess")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "fairseq_cli.preprocess"]


def test_byte_identical_to_fairseq_preprocess(built, tmp_path):
    dest, _ = built
    out = tmp_path / "fs"
    proc = launcher.run(_fairseq_preprocess() + ["--only-source", "--trainpref", dest / "train.tok",
                                                 "--validpref", dest / "valid.tok", "--destdir", out])
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("dict.txt", "train.bin", "train.idx", "valid.bin", "valid.idx"):
        assert (out / name).read_bytes() == (dest / name).read_bytes(), name
    with pytest.raises(DataError, match="no terminal stream.*sipe-preprocess"):
        _load(out, "train")


def _rewrite(prefix, items, vocab_size):
    b = indexed_dataset.make_builder(prefix + ".bin", "mmap", vocab_size=vocab_size)
    for it in items:
        b.add_item(torch.tensor(it, dtype=torch.int64))
    b.finalize(prefix + ".idx")


def test_alignment_check_names_split_and_sentence(built, tmp_path):
    dest, _ = built
    bad = tmp_path / "bad"
    bad.mkdir()
    for p in dest.iterdir():
        (bad / p.name).write_bytes(p.read_bytes())
    tok, streams = _load(bad, "valid")
    items = [streams["nonterminal"][i].tolist() for i in range(len(tok))]
    _rewrite(str(bad / "valid.nonterminal"), [items[0], items[1] + [NOTAG_ID]], 10)
    with pytest.raises(DataError, match=r"valid\.nonterminal\.idx: sentence 1 has (\d+) .* but (\d+) tokens") as e:
        _load(bad, "valid")
    assert f"sentence 1 has {len(tok[1]) + 1} nonterminal ids but {len(tok[1])} tokens" in str(e.value)
    _rewrite(str(bad / "valid.terminal"), items[:1], 7)
    with pytest.raises(DataError, match=r"valid\.terminal\.idx: 1 sentences, the token stream .*valid\.idx 2"):
        _load(bad, "valid", ("terminal",))


def test_rerun_gives_identical_bytes(built, tmp_path):
    dest, _ = built
    again = tmp_path / "again"  # same inputs (their paths are in the manifest), 2 workers
    preprocess(PreprocessOptions(train=str(dest.parent / "train.conllu"), valid=[str(dest.parent / "valid.conllu")],
                                 destdir=str(again), spm_vocab_size=60, keep_text=True, deprel=True, workers=2))
    files = sorted(p.name for p in dest.iterdir())
    assert files == sorted(p.name for p in again.iterdir())
    for name in files:
        assert (dest / name).read_bytes() == (again / name).read_bytes(), name


def test_no_split(tmp_path):
    dest, manifest = _run(tmp_path, "words", no_split=True)
    assert not (dest / "spm.model").exists() and manifest["settings"]["spm"] is None
    d = Dictionary.load(str(dest / "dict.txt"))
    tok, streams = _load(dest, "train")
    for i, sent in enumerate(read_conllu(str(tmp_path / "train.conllu"))):
        assert [d[j] for j in tok[i][:-1].tolist()] == [w.replace(" ", "\u2581") for w in sent.words]
        assert streams["terminal"][i][-1] == NOTAG_ID and (streams["terminal"][i][:-1] >= FIRST_TAG_ID).all()
    tr = manifest["splits"]["train"]
    assert tr["subwords"] == tr["words"] + tr["sentences"]


def test_deprel(built):
    dest, manifest = built
    d = load_tag_dictionary(str(dest / "dict.deprel.txt"))
    assert d.symbols[NOTAG_ID] == NOTAG and d.symbols[FIRST_TAG_ID:FIRST_TAG_ID + 3] == ["nsubj", "punct", "root"]
    assert d.count[FIRST_TAG_ID:] == sorted(d.count[FIRST_TAG_ID:], reverse=True)  # by frequency, ties by name
    assert manifest["splits"]["valid"]["deprels_unknown"] == 2  # "discourse", "cop": not in train -> <unk>
    tok, streams = _load(dest, "valid", ("terminal", "deprel"))
    for i, sent in enumerate(read_conllu(str(dest.parent / "valid.conllu"))):
        term, rel = streams["terminal"][i].numpy(), streams["deprel"][i].numpy()
        assert rel[term >= FIRST_TAG_ID].tolist() == [d.index(r) for r in sent.deprels]
        assert (rel[term < FIRST_TAG_ID] == NOTAG_ID).all()


def test_refusals_counted_and_fail_on_refusal(tmp_path):
    _, manifest = _run(tmp_path, "strict", train=TRAIN + "\n" + BAD, strict=True, no_split=True)
    tr = manifest["splits"]["train"]
    assert tr["refused"]["non-projective"] == 1 and tr["refused"]["invalid-tree"] == 1
    assert (tr["sentences_read"], tr["sentences"], tr["sentences_refused"], tr["trees_lifted"]) == (7, 5, 2, 0)
    _, lax = _run(tmp_path, "lax", train=TRAIN + "\n" + BAD, no_split=True)
    assert lax["splits"]["train"]["refused"]["invalid-tree"] == 1 and lax["splits"]["train"]["sentences"] == 6
    dest = tmp_path / "fail"
    args = ["--train", str(tmp_path / "train.conllu"), "--destdir", str(dest), "--no-split", "--fail-on-refusal"]
    assert main(args) == 1 and not dest.exists()
    assert main(args[:-1]) == 0 and main(args[:-1]) == 1  # second run: dict.txt exists


@pytest.mark.skipif(not EWT.is_dir(), reason=f"UD English EWT not found at {EWT} (../shared is optional)")
def test_ewt_dev(tmp_path):
    dest = tmp_path / "ewt"
    m = preprocess(PreprocessOptions(train=str(EWT / "en_ewt-ud-dev.conllu"), destdir=str(dest), no_split=True))
    dev = m["splits"]["train"]
    assert (dev["sentences"], dev["trees_lifted"], dev["sentences_refused"]) == (2001, 31, 0)
    tok, streams = _load(dest, "train")
    assert int(np.sum(streams["terminal"].sizes)) == dev["subwords"] == int(np.sum(tok.sizes))


def test_words_never_lose_their_position(built):
    import sentencepiece as spm

    from sipe_fairseq.data.preprocess import clean_word, segment_words

    assert clean_word("a b\tc") == ("a\u2581b\u2581c", 1, 0) and clean_word("") == ("\u2581", 0, 1)
    sp = spm.SentencePieceProcessor(model_file=str(built[0] / "spm.model"))
    pieces, n_none = segment_words(["\u200b", "know"], sp)  # a zero-width space normalizes to nothing
    assert pieces["\u200b"] == ["\u2581"] and n_none == 1
    assert all(" ".join(p).split() == p for p in pieces.values())


OTHER = _conllu(LONG, SPACE, [(1, "Linguists", 2, "nsubj"), (2, "know", 0, "root"), (3, ".", 2, "punct")])


def test_srcdict_reuses_the_vocabulary(built, tmp_path):
    """A second corpus preprocessed with the first one's dict.txt and spm.model: same files, same ids."""
    src, _ = built
    dest, manifest = _run(tmp_path, "again", train=OTHER, deprel=True, srcdict=str(src / "dict.txt"),
                          spm_model=str(src / "spm.model"))
    for name in ("dict.txt", "dict.deprel.txt", "spm.model"):
        assert (dest / name).read_bytes() == (src / name).read_bytes(), name
    for kind in ("terminal", "nonterminal"):  # fixed layout; only the counts (of the new train) differ
        a, b = (load_tag_dictionary(str(x / f"dict.{kind}.txt")) for x in (src, dest))
        assert a.symbols == b.symbols and a.count != b.count
    assert manifest["settings"]["srcdict"]["path"] == str(src / "dict.txt")
    assert manifest["dictionaries"]["dict.txt"] == len(Dictionary.load(str(src / "dict.txt")))
    for split in ("valid",):  # the same sentences get the same token and tag ids
        a, sa = _load(src, split, ("terminal", "deprel"))
        b, sb = _load(dest, split, ("terminal", "deprel"))
        for i in range(len(a)):
            assert a[i].tolist() == b[i].tolist()
            assert sa["deprel"][i].tolist() == sb["deprel"][i].tolist()
    # train is new text: every piece is looked up in the fixed dictionary, never added to it
    d = Dictionary.load(str(dest / "dict.txt"))
    tok, _ = _load(dest, "train")
    assert all(0 <= j < len(d) for i in range(len(tok)) for j in tok[i].tolist())


def test_srcdict_errors_name_the_problem(built, tmp_path):
    src, _ = built
    with pytest.raises(Exception, match="--srcdict needs the sentencepiece model"):
        _run(tmp_path, "a", srcdict=str(src / "dict.txt"))
    with pytest.raises(Exception, match="--thresholdsrc: the dictionary is fixed"):
        _run(tmp_path, "b", srcdict=str(src / "dict.txt"), no_split=True, thresholdsrc=2)
    bad = tmp_path / "bad.txt"
    bad.write_text("the 10\nof\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"bad\.txt:2: not a fairseq dictionary line"):
        _run(tmp_path, "c", srcdict=str(bad), no_split=True)
    bad.write_text("the 10\nof 3\nthe 2\n", encoding="utf-8")
    with pytest.raises(Exception, match=r"bad\.txt:3: token 'the' already on line 1"):
        _run(tmp_path, "d", srcdict=str(bad), no_split=True)
    assert main(["--train", str(tmp_path / "train.conllu"), "--destdir", str(tmp_path / "e"),
                 "--srcdict", str(tmp_path / "missing.txt"), "--no-split"]) == 1


def test_an_interrupted_run_leaves_no_partial_directory(tmp_path, monkeypatch):
    """Issue 48: sipe-preprocess writes into a hidden folder inside DESTDIR and moves the files in at the end, the
    manifest last. Stopped while it writes the streams, it leaves DESTDIR empty (before: dict.txt and the streams
    written so far without a manifest, and a re-run refused as "dict.txt exists"), so the same command runs
    again into it."""
    import sipe_fairseq.data.preprocess as pre

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pre, "write_all_splits", stopped)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, "d")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == []
    monkeypatch.undo()
    dest, manifest = _run(tmp_path, "d")
    names = sorted(p.name for p in dest.iterdir())
    assert "manifest.json" in names and "dict.txt" in names and not [n for n in names if n.startswith(".")]
    assert sorted(manifest["files"]) == [n for n in names if n != "manifest.json"]
