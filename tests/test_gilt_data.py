"""GiLT arc stream: tree/graph -> item -> arcs round trips, sipe-preprocess writes {split}.arcs, load checks."""
import json

import pytest

from sipe_fairseq.data.arc_streams import load_arc_stream
from sipe_fairseq.data.arcs import ArcError, decode_arcs, decode_words, deps_arcs, encode_arcs, tree_arcs
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
