"""The one CoNLL-U writer (``sipe_fairseq.hexatag.conllu_io``: ``conllu_row``, ``conllu_lines``,
``conllu_sentence``): it round-trips through the package's reader and the ``conllu`` library's parser, and
the five places that write CoNLL-U through it (``ParsedText.conllu``, ``Continuation.conllu``,
``graph_rows``, ``tagged_line_conllu``, ``ToySentence.to_conllu``) write exactly what they wrote when each
formatted its rows by hand (the expected strings below were captured from that code before the change)."""
import conllu
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from sipe_fairseq.data.toy_grammar import ToySentence
from sipe_fairseq.hexatag.conllu_io import (
    conllu_comment, conllu_lines, conllu_row, conllu_sentence, hexatag_misc, plain_deprels, read_conllu_lines,
)
from sipe_fairseq.hub.interface import ParsedText
from sipe_fairseq.parsing.line_tagger import TaggedLine, tagged_line_conllu
from sipe_fairseq.structure.generation import graph_rows
from sipe_fairseq.structure.prompts import Continuation

FORMS = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=6)
LABELS = st.sampled_from(["nsubj", "obj", "det", "acl:relcl", "dep"])


@st.composite
def trees(draw):
    """A random tree over 1..12 words: each word after the root attaches to one already placed."""
    n = draw(st.integers(1, 12))
    order = draw(st.permutations(range(1, n + 1)))
    heads = [0] * n
    for k, word in enumerate(order[1:], 1):
        heads[word - 1] = order[draw(st.integers(0, k - 1))]
    return heads


@settings(max_examples=150, deadline=None)
@given(heads=trees(), data=st.data())
def test_round_trip_through_reader(heads, data):
    n = len(heads)
    words = data.draw(st.lists(FORMS, min_size=n, max_size=n))
    deprels = ["root" if h == 0 else data.draw(LABELS) for h in heads]
    lemmas = data.draw(st.lists(st.one_of(st.none(), FORMS), min_size=n, max_size=n))
    block = conllu_sentence(words, heads, deprels, [("sent_id", "s-7"), ("text", " ".join(words))],
                            lemma=lemmas, misc=[hexatag_misc(("l", "R1"))] * n)
    assert block.endswith("\n\n") and not block.endswith("\n\n\n")
    (sent,) = read_conllu_lines(block.splitlines(keepends=True), "<block>")
    assert (sent.words, sent.heads, sent.deprels) == (words, heads, deprels)
    assert (sent.sent_id, sent.text, sent.line) == ("s-7", " ".join(words), 1)
    # the conllu library reads every column where the writer put it
    (token_list,) = conllu.parse(block)
    assert [t["id"] for t in token_list] == list(range(1, n + 1))
    assert [t["lemma"] for t in token_list] == [lemma or "_" for lemma in lemmas]
    assert [(t["upos"], t["feats"], t["head"], t["deprel"]) for t in token_list] \
        == [("_", None, h, d) for h, d in zip(heads, deprels)]
    assert [t["misc"] for t in token_list] == [{"Hexatag": "l,R1"}] * n


def test_row_columns_and_empty_fields():
    row = conllu_row(3, "dogs", 0, "root", lemma="dog", upos="NOUN", xpos="", feats="Number=Plur", deps="0:root",
                     misc=None)
    assert row.split("\t") == ["3", "dogs", "dog", "NOUN", "_", "Number=Plur", "0", "root", "0:root", "_"]
    assert conllu_row(1, "x").split("\t") == ["1", "x"] + ["_"] * 8
    assert conllu_comment("newdoc") == "# newdoc" and conllu_comment("prompt", "") == "# prompt = "
    assert plain_deprels([2, 0, 2]) == ["dep", "root", "dep"]
    with pytest.raises(TypeError):
        conllu_row(1, "x", lemmas="y")  # a misspelled column is refused, not dropped


def test_lines_and_block_shape():
    lines = conllu_lines(["a", "b"], [0, 1], comments={"sent_id": 4, "newdoc": None}, upos=["X", None])
    assert lines == ["# sent_id = 4", "# newdoc", "1\ta\t_\tX\t_\t_\t0\t_\t_\t_", "2\tb\t_\t_\t_\t_\t1\t_\t_\t_"]
    assert conllu_sentence(["a", "b"], [0, 1], comments={"sent_id": 4, "newdoc": None}, upos=["X", None]) \
        == "\n".join(lines) + "\n\n"
    assert conllu_sentence([], comments=[("sent_id", 1), ("error", "x")]) == "# sent_id = 1\n# error = x\n\n"


# ---------------------------------------------------------------------- the five writers, unchanged
SIPE_HYPO = {"positional_scores": torch.tensor([-1.25, -0.5, -0.25]), "tags": [("l", "L1"), ("r", "R0"), ("r", "EOS")],
             "tag_origin": ["prompt", "model", "model"], "heads": [2, 0, 2]}
GILT_HYPO = {"positional_scores": torch.tensor([-1.0, -2.0, -3.0]), "arcs": [([], []), ([0], [1]), ([], [])],
             "arc_origin": ["prompt", "model", "model"], "arc_counts": [0, 2, 0]}
GILT_ROWS = ("1\tx\t_\t_\t_\t_\t2\tdep\t2:dep\tHeads=1|ArcCount=0|ArcOrigin=prompt\n"
             "2\ty\t_\t_\t_\t_\t0\troot\t0:root\tHeads=1|ArcCount=2|ArcOrigin=model\n"
             "3\tz\t_\t_\t_\t_\t_\t_\t_\tHeads=0|ArcCount=0|ArcOrigin=model")


def test_parsed_text_conllu_unchanged():
    parsed = ParsedText(["The", "cat", "sat"], [2, 3, 0], [("l", "L1"), ("r", "R0"), ("r", "EOS")])
    assert parsed.conllu("s1") == ("# sent_id = s1\n# text = The cat sat\n"
                                   "1\tThe\t_\t_\t_\t_\t2\tdep\t_\tHexatag=l,L1\n"
                                   "2\tcat\t_\t_\t_\t_\t3\tdep\t_\tHexatag=r,R0\n"
                                   "3\tsat\t_\t_\t_\t_\t0\troot\t_\tHexatag=r,EOS\n\n")
    assert ParsedText(["a", "b"], None).conllu() == ("# text = a b\n1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n"
                                                     "2\tb\t_\t_\t_\t_\t_\t_\t_\t_\n\n")


def test_continuation_conllu_unchanged():
    def block(prompt, words, hypo, nth, index):
        return Continuation(prompt, index, nth, words, 0.0, hypo).conllu()
    assert block("The cat", ["The", "cat", "sat"], SIPE_HYPO, 1, 0) == (
        "# sent_id = 1.2\n# prompt = The cat\n# text = The cat sat\n# score = -2.0000\n# tags = l/L1* r/R0 r/EOS\n"
        "1\tThe\t_\t_\t_\t_\t2\tdep\t_\tHexatag=l,L1\n2\tcat\t_\t_\t_\t_\t0\troot\t_\tHexatag=r,R0\n"
        "3\tsat\t_\t_\t_\t_\t2\tdep\t_\tHexatag=r,EOS\n\n")
    assert block("The cat", ["The", "cat", "sat"], dict(SIPE_HYPO, heads=None), 0, 2) == (
        "# sent_id = 3.1\n# prompt = The cat\n# text = The cat sat\n# score = -2.0000\n# tags = l/L1* r/R0 r/EOS\n"
        "1\tThe\t_\t_\t_\t_\t_\t_\t_\tHexatag=l,L1\n2\tcat\t_\t_\t_\t_\t_\t_\t_\tHexatag=r,R0\n"
        "3\tsat\t_\t_\t_\t_\t_\t_\t_\tHexatag=r,EOS\n\n")
    assert block("", ["a", "b"], {"positional_scores": torch.tensor([-1.0, -2.0])}, 0, 0) == (
        "# sent_id = 1.1\n# prompt = \n# text = a b\n# score = -3.0000\n"
        "1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n2\tb\t_\t_\t_\t_\t_\t_\t_\t_\n\n")
    assert block("x", ["x", "y", "z"], GILT_HYPO, 0, 0) == (
        "# sent_id = 1.1\n# prompt = x\n# text = x y z\n# score = -6.0000\n# arcs = x/-* y/0->2,2->1 z/-\n"
        + GILT_ROWS + "\n\n")


def test_graph_rows_unchanged():
    assert "\n".join(graph_rows(["x", "y", "z"], GILT_HYPO)) == GILT_ROWS


def test_tagged_line_conllu_unchanged():
    ok = TaggedLine(3, "  The  cat sat ", (["The", "cat", "sat"], [2, 3, 0]), deprels=["det", "nsubj", "ROOT"],
                    upos=["DET", "NOUN", "VERB"], xpos=["DT", "NN", ""])
    assert tagged_line_conllu(ok, newdoc=True) == (
        "# newdoc\n# sent_id = 3\n# text = The cat sat\n1\tThe\t_\tDET\tDT\t_\t2\tdet\t_\t_\n"
        "2\tcat\t_\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n3\tsat\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    segmented = TaggedLine(4, "a b", (["a", "b"], [0, 1]), sentence=2)
    assert tagged_line_conllu(segmented) == (
        "# sent_id = 4-2\n# text = a b\n1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n2\tb\t_\t_\t_\t_\t1\tdep\t_\t_\n\n")
    assert tagged_line_conllu(TaggedLine(5, "x  y", "cannot  parse\nit")) == (
        "# sent_id = 5\n# text = x y\n# sipe_tag_error = cannot parse it\n\n")
    assert tagged_line_conllu(TaggedLine(6, "  ", "empty line")) == "# sent_id = 6\n# sipe_tag_error = empty line\n\n"


def test_toy_sentence_conllu_unchanged():
    toy = ToySentence(["dogs", "bark"], ["dog", "bark"], ["NOUN", "VERB"], ["Number=Plur", "_"], [2, 0],
                      ["nsubj", "root"], "toy-1")
    assert toy.to_conllu() == ("# sent_id = toy-1\n# text = dogs bark\n1\tdogs\tdog\tNOUN\t_\tNumber=Plur\t2\tnsubj\t_\t_\n"
                               "2\tbark\tbark\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    alone = ToySentence(["dogs"], ["dog"], ["NOUN"], ["_"], [0], ["root"])
    assert alone.to_conllu() == "# text = dogs\n1\tdogs\tdog\tNOUN\t_\t_\t0\troot\t_\t_\n\n"
