"""Tests of the hexatag core (sipe_fairseq.hexatag) and the ``sipe-hexatag`` CLI."""
import io
import itertools
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sipe_fairseq.cli.hexatag import main
from sipe_fairseq.hexatag import (
    EOS, NONTERMINALS, TERMINALS, ConlluError, HexatagError, NonProjectiveError, TreeError, check_tree,
    decode, encode, encode_tree, format_tags, is_projective, nonprojective_arcs, parse_tags, projectivize,
    read_conllu,
)

EWT = Path(os.environ.get("SIPE_SHARED", Path(__file__).resolve().parent.parent.parent / "shared")) / "data" / "ud-english-ewt"
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- strategies --------------------------------------------------------------------------------

@st.composite
def projective_trees(draw, max_size=60):
    """A random projective tree: pick a head in the span, split each side into dependent subtrees."""
    n = draw(st.integers(1, max_size))
    heads = [0] * n

    def build(lo, hi, parent):  # words lo..hi (inclusive) form one subtree attached to parent
        h = draw(st.integers(lo, hi))
        heads[h - 1] = parent
        for a, b in ((lo, h - 1), (h + 1, hi)):
            while a <= b:
                end = draw(st.integers(a, b))
                build(a, end, h)
                a = end + 1

    build(1, n, 0)
    return heads


@st.composite
def trees(draw, max_size=60):
    """Any tree: words in a random order, each attached to a word placed before it."""
    n = draw(st.integers(1, max_size))
    order = draw(st.permutations(range(1, n + 1)))
    heads = [0] * n
    for k in range(1, n):
        heads[order[k] - 1] = order[draw(st.integers(0, k - 1))]
    return heads


tag_pairs = st.tuples(st.sampled_from(TERMINALS + ("x",)), st.sampled_from(NONTERMINALS + ("R2",)))


def ancestors(heads, w):
    out = []
    while heads[w - 1]:
        w = heads[w - 1]
        out.append(w)
    return out


# --- encode / decode ---------------------------------------------------------------------------

def test_worked_example():
    # l1 l2 h r1 r2, heads [3, 3, 0, 3, 3]; left-first BHT: D = X0[C = X0[B = X1[l1, A = X1[l2, h]], r1], r2].
    # In-order: l1 (left of B) l | B (left of C, bit 1) L1 | l2 (left of A) l | A (right of B, bit 1) R1 |
    # h (right of A) r | C (left of D, bit 0) L0 | r1 (right of C) r | D (root = left, bit 0) L0 | r2 r | EOS.
    tags = encode([3, 3, 0, 3, 3])
    assert format_tags(tags) == "l/L1 l/R1 r/L0 r/L0 r/EOS"
    assert decode(tags) == [3, 3, 0, 3, 3]


@pytest.mark.parametrize("heads, line", [
    ([0], "l/EOS"),
    ([2, 0], "l/L1 r/EOS"),
    ([0, 1], "l/L0 r/EOS"),
    ([0, 1, 2], "l/L0 l/R0 r/EOS"),  # X0[w1, X0[w2, w3]]: the inner node is a right child
    ([2, 0, 2], "l/L1 r/L0 r/EOS"),  # X0[X1[w1, w2], w3]: left dependent first
])
def test_small_trees(heads, line):
    assert format_tags(encode(heads)) == line
    assert decode(parse_tags(line)) == heads


@PROPS
@given(projective_trees())
def test_projective_round_trip(heads):
    tags = encode(heads)
    assert len(tags) == len(heads)
    assert [n for _, n in tags].count(EOS) == 1 and tags[-1][1] == EOS
    assert all(t in TERMINALS for t, _ in tags)
    assert all(n in NONTERMINALS for _, n in tags)
    assert decode(tags) == heads
    assert parse_tags(format_tags(tags)) == tags


@PROPS
@given(trees())
def test_projectivize(heads):
    projective = nonprojective_arcs(heads) == []
    assert is_projective(heads) == projective
    proj, lifts = projectivize(heads)
    assert is_projective(proj) and (lifts == 0) == projective
    # lifting only moves a dependent up to an ancestor of its head
    assert all(p == h or p in ancestors(heads, h) for h, p in zip(heads, proj))
    tags, used, n_lifts = encode_tree(heads)
    assert (used, n_lifts) == (proj, lifts)
    assert decode(tags) == proj
    if not projective:
        with pytest.raises(NonProjectiveError):
            encode(heads)
        with pytest.raises(NonProjectiveError):
            encode_tree(heads, strict=True)


@pytest.mark.parametrize("line, message", [
    ("l/L0 r/L0", "last word must carry EOS"),
    ("l/EOS r/EOS", "EOS before the last word"),
    ("r/EOS", "no open node"),
    ("r/L0 r/EOS", "no open node"),
    ("l/L0 x/EOS", "unknown terminal"),
    ("l/Q1 r/EOS", "unknown non-terminal"),
    ("l/R0 r/EOS", "no open node"),
    ("l/L0 l/EOS", "expected one finished tree"),  # leftover stack
    ("l/L0 l/L0 r/EOS", "expected one finished tree"),
    ("", "empty"),
    ("l/L0 rEOS", "word 2"),
])
def test_decode_rejects(line, message):
    with pytest.raises(HexatagError, match=message):
        decode(parse_tags(line))


def _check_decoded(tags):
    try:
        heads = decode(tags)
    except HexatagError:
        return
    check_tree(heads)
    assert len(heads) == len(tags) and is_projective(heads)
    assert decode(encode(heads)) == heads


def binary_head_trees(lo, hi, side):
    """Brute force from the hexatag rules (tags.py docstring): every binary head tree over words lo..hi whose
    root is a ``side`` ("L"/"R") child, as ``(terminal per word, non-terminal per gap, heads, lexical head)``."""
    if lo == hi:
        yield [side.lower()], [], {}, lo
        return
    for k in range(lo, hi):  # left child over lo..k, right child over k+1..hi, the node on gap k
        for left in binary_head_trees(lo, k, "L"):
            for right in binary_head_trees(k + 1, hi, "R"):
                for bit in (0, 1):
                    head, dep = (left[3], right[3]) if bit == 0 else (right[3], left[3])
                    yield (left[0] + right[0], left[1] + [f"{side}{bit}"] + right[1],
                           {**left[2], **right[2], dep: head}, head)


def valid_sequences(n):
    """Every tag sequence of ``n`` words that encodes a tree (the root counts as a left child), with its heads."""
    out = {}
    for terms, nonterms, heads, root in binary_head_trees(1, n, "L"):
        heads[root] = 0
        out[tuple(zip(terms, nonterms + [EOS]))] = [heads[w] for w in range(1, n + 1)]
    return out


VALID = {n: valid_sequences(n) for n in range(1, 6)}
ALL_PAIRS = [(t, n) for t in TERMINALS + ("x",) for n in NONTERMINALS + ("R2",)]
VALID_PAIRS = [(t, n) for t in TERMINALS for n in NONTERMINALS]


def _decodes(tags):
    try:
        return decode(list(tags))
    except HexatagError:
        return None


def test_decode_all_short_sequences():
    """Every sequence of up to 3 pairs (18 pair kinds, invalid ones included) and of 4-5 well-formed
    pairs decodes exactly when it is the in-order tagging of a binary head tree, to that tree's heads."""
    for n, pairs in ((1, ALL_PAIRS), (2, ALL_PAIRS), (3, ALL_PAIRS), (4, VALID_PAIRS), (5, VALID_PAIRS)):
        decoded = {}
        for tags in itertools.product(pairs, repeat=n):
            heads = _decodes(tags)
            if heads is not None:
                decoded[tags] = heads
        assert decoded == VALID[n], n
    assert [len(VALID[n]) for n in VALID] == [1, 2, 8, 40, 224]  # Catalan(n - 1) shapes x 2^(n - 1) head bits
    assert all(VALID[len(tags)][tags] == heads for tags, heads in ((tuple(encode(h)), h) for h in
                                                                  ([0], [2, 0], [0, 1, 2], [2, 0, 2], [3, 3, 0, 3, 3])))


def test_decode_random_tags():
    """Random sequences (any pairs, or EOS-last ones that decode more often): exactly those that tag a
    binary head tree decode, counted against the brute force."""
    rng = random.Random(11)
    seqs = []
    for k in range(4000):
        n = rng.randint(1, 5)
        if k % 2:
            seqs.append(tuple(rng.choice(ALL_PAIRS) for _ in range(n)))
        else:
            seqs.append(tuple((rng.choice(TERMINALS), rng.choice(NONTERMINALS[:4])) for _ in range(n - 1))
                        + (("r" if n > 1 else "l", EOS),))
    results = [_decodes(tags) for tags in seqs]
    expected = [VALID[len(tags)].get(tags) for tags in seqs]
    assert results == expected
    decoded = sum(r is not None for r in results)
    assert (decoded, len(seqs) - decoded) == (sum(e is not None for e in expected), sum(e is None for e in expected))
    assert 200 < decoded < len(seqs) - 1000  # both outcomes well represented


@PROPS
@given(projective_trees(max_size=30), st.data())
def test_decode_mutated_tags(heads, data):
    """Valid sequences with one pair replaced: mostly near-valid, so decode succeeds often too."""
    tags = encode(heads)
    tags[data.draw(st.integers(0, len(tags) - 1))] = data.draw(tag_pairs)
    _check_decoded(tags)


@pytest.mark.parametrize("heads, message", [
    ([0, 0], "exactly one root"),
    ([2, 1], "exactly one root"),
    ([0, 3, 2], "cycle"),
    ([0, 4, 1], "out of range"),
    ([0, -1], "out of range"),
    ([0, 2], "own head"),
    ([], "empty"),
])
def test_check_tree_errors(heads, message):
    with pytest.raises(TreeError, match=message):
        check_tree(heads)
    with pytest.raises(TreeError):
        is_projective(heads)  # no endless loop on a cycle
    with pytest.raises(TreeError):
        encode(heads)


# --- CoNLL-U -----------------------------------------------------------------------------------

def conllu_line(i, form, head, deprel="dep"):
    return f"{i}\t{form}\t_\tX\t_\t_\t{head}\t{deprel}\t_\t_"


def conllu_sentence(heads, sent_id=None):
    lines = [f"# sent_id = {sent_id}"] if sent_id else []
    lines += [conllu_line(i, f"w{i}", h, "root" if h == 0 else "dep") for i, h in enumerate(heads, 1)]
    return "\n".join(lines) + "\n\n"


MWT_SENTENCE = """# sent_id = mwt
# text = I don't go
1\tI\tI\tPRON\t_\t_\t4\tnsubj\t_\t_
2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdo\tdo\tAUX\t_\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
4\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_
4.1\tgone\tgo\tVERB\t_\t_\t_\t_\t4:conj\t_

"""


def test_conllu_multiword_and_empty_nodes(tmp_path):
    path = tmp_path / "mwt.conllu"
    path.write_text(MWT_SENTENCE + conllu_sentence([0], "one"))
    first, second = read_conllu(path)
    assert first.words == ["I", "do", "n't", "go"] and first.heads == [4, 4, 4, 0]
    assert (first.sent_id, first.text, first.line) == ("mwt", "I don't go", 1)
    assert first.multiword == [(2, 3, "don't")] and first.empty_nodes == 1
    assert len(encode(first.heads)) == 4  # one tag per syntactic word
    assert (second.sent_id, second.line, second.heads) == ("one", 10, [0])


def test_conllu_tab_separated_only():
    # the form holds two spaces; only tabs separate columns
    (sent,) = read_conllu(io.StringIO(conllu_line(1, "a  b", 2) + "\n" + conllu_line(2, "c", 0) + "\n"))
    assert sent.words == ["a  b", "c"] and sent.heads == [2, 0]


@pytest.mark.parametrize("bad_line, lineno, message", [
    (conllu_line(2, "x", 1).replace("\t_\t_", " _ _", 1), 5, "10 tab-separated columns, got 8"),
    (conllu_line(2, "x", "_"), 5, "HEAD must be a non-negative integer"),
    (conllu_line(2, "x", 9), 5, "out of range"),
    (conllu_line(3, "x", 1), 5, "out of sequence"),
    (conllu_line("2a", "x", 1), 5, "is not a valid ID"),
    (conllu_line(2, "x", 0), 3, "exactly one root"),  # tree errors name the sentence's first line
    (conllu_line("2-3", "xy", "_"), 5, "multiword token 2-3 ends after the last word \\(1\\)"),
    (conllu_line("9-10", "xy", "_"), 5, "multiword token 9-10 out of sequence \\(expected it to start at word 2\\)"),
    (conllu_line("1-2", "xy", "_"), 5, "multiword token 1-2 out of sequence"),
    (conllu_line("2-2", "xy", "_"), 5, "must span two or more words"),
    (conllu_line("3-2", "xy", "_"), 5, "not a valid ID"),
    ("# bad byte: \udcff", 5, "not UTF-8 \\(byte 0xff at column 13\\)"),
])
def test_conllu_errors_name_the_line(tmp_path, bad_line, lineno, message):
    path = tmp_path / "bad.conllu"
    # line 1: sentence 1, line 3: "# sent_id = 2", line 4: its word 1, line 5: the bad line
    text = conllu_sentence([0]) + "# sent_id = 2\n" + conllu_line(1, "w", 0) + "\n" + bad_line + "\n\n"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ConlluError, match=message) as info:
        list(read_conllu(path))
    assert str(info.value).startswith(f"{path}:{lineno}: ")
    assert info.value.line == lineno


def test_conllu_overlapping_multiword_tokens(tmp_path):
    path = tmp_path / "mwt.conllu"
    lines = [conllu_line("1-3", "abc", "_"), conllu_line(1, "a", 0), conllu_line(2, "b", 1),
             conllu_line("2-3", "bc", "_"), conllu_line(3, "c", 1)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConlluError, match=f"^{path}:4: multiword token 2-3 overlaps 1-3$"):
        list(read_conllu(path))


EWT_NONPROJECTIVE = {"train": 288, "dev": 31, "test": 26}


@pytest.mark.parametrize("split", EWT_NONPROJECTIVE)
def test_ewt_round_trip(split):
    if not EWT.is_dir():
        pytest.skip(f"../shared not present ({EWT} missing): UD English EWT round trip not run")
    nonprojective = 0
    for sent in read_conllu(EWT / f"en_ewt-ud-{split}.conllu"):
        if is_projective(sent.heads):
            assert decode(encode(sent.heads)) == sent.heads, sent.sent_id
        else:
            nonprojective += 1
            proj, _ = projectivize(sent.heads)
            assert decode(encode(proj)) == proj, sent.sent_id
    assert nonprojective == EWT_NONPROJECTIVE[split]


# --- CLI ---------------------------------------------------------------------------------------

CLI_HEADS = [[3, 3, 0, 3, 3], [0], [3, 4, 0, 3]]  # the last one is non-projective (arc 4 -> 2)


@pytest.fixture
def conllu_file(tmp_path):
    path = tmp_path / "small.conllu"
    path.write_text("".join(conllu_sentence(h, f"s{k}") for k, h in enumerate(CLI_HEADS)))
    return path


def test_cli_encode_decode(conllu_file, tmp_path, capsys):
    assert main(["encode", str(conllu_file)]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines == ["l/L1 l/R1 r/L0 r/L0 r/EOS", "l/EOS", format_tags(encode([3, 3, 0, 3]))]
    assert "sentences: 3, words: 10, non-projective trees lifted: 1 (arcs: 1), errors: 0" in err
    tags = tmp_path / "small.hexatag"
    tags.write_text(out)
    assert main(["decode", str(tags), "-o", str(tmp_path / "heads")]) == 0
    heads = [[int(h) for h in line.split()] for line in (tmp_path / "heads").read_text().splitlines()]
    assert heads == [[3, 3, 0, 3, 3], [0], [3, 3, 0, 3]]  # the lifted tree
    assert "sentences: 3, words: 10, errors: 0" in capsys.readouterr().err


def test_cli_stdin_and_strict(conllu_file, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(conllu_file.read_text()))
    assert main(["encode", "--strict", "-"]) == 2
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 2
    assert "<stdin>:11: non-projective arcs into words [2]" in err
    assert "errors: 1 (stopped" in err and "Traceback" not in err


def test_cli_encode_errors(conllu_file, tmp_path, capsys):
    bad = tmp_path / "bad.conllu"
    text = conllu_file.read_text().replace(conllu_line(1, "w1", 0, "root"), "1\tw1\t_\t_\t0\troot")
    bad.write_text(text)  # second sentence (line 8 + 1) is malformed
    assert main(["encode", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == ["l/L1 l/R1 r/L0 r/L0 r/EOS"]
    assert f"{bad}:9: expected 10 tab-separated columns, got 6" in err
    assert main(["encode", "--keep-going", str(bad), str(conllu_file)]) == 1
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 6 and out.splitlines()[1] == ""
    assert "sentences: 6, words: 19, non-projective trees lifted: 2 (arcs: 2), errors: 1" in err
    assert main(["encode", str(tmp_path / "missing.conllu")]) == 2
    assert "missing.conllu: No such file or directory" in capsys.readouterr().err


def test_cli_encode_not_utf8(conllu_file, tmp_path, capsys):
    """A byte that is not UTF-8 fails its sentence with file:line; --keep-going encodes the sentences after it."""
    bad = tmp_path / "latin1.conllu"
    root_line = conllu_line(1, "w1", 0, "root").encode()  # sentence 2, line 9
    bad.write_bytes(conllu_file.read_bytes().replace(root_line, root_line.replace(b"w1", b"w\xe91")))
    assert main(["encode", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == ["l/L1 l/R1 r/L0 r/L0 r/EOS"]
    assert f"{bad}:9: not UTF-8 (byte 0xe9 at column 4)" in err and "Traceback" not in err
    assert main(["encode", "--keep-going", str(bad), str(conllu_file)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 6 and lines[1] == "" and lines[2] == lines[5] != ""
    assert "sentences: 6, words: 19, non-projective trees lifted: 2 (arcs: 2), errors: 1" in err


def test_cli_decode_errors(tmp_path, capsys):
    tags = tmp_path / "bad.hexatag"
    tags.write_text("l/EOS\nl/L1 x/EOS\nl/L0 r/EOS\n")
    assert main(["decode", str(tags)]) == 2
    out, err = capsys.readouterr()
    assert out == "0\n"
    assert f"{tags}:2: word 2: unknown terminal tag 'x'" in err and "Traceback" not in err
    assert main(["decode", "--keep-going", str(tags)]) == 1
    out, err = capsys.readouterr()
    assert out == "0\n\n0 1\n"
    assert "sentences: 3, words: 3, errors: 1" in err
    tags.write_bytes(b"l/EOS\nl/L0 r\xff/EOS\nl/L0 r/EOS\n")
    assert main(["decode", "--keep-going", str(tags)]) == 1
    out, err = capsys.readouterr()
    assert out == "0\n\n0 1\n" and f"{tags}:2: not UTF-8 (byte 0xff at column 7)" in err


def test_core_and_cli_do_not_import_torch():
    code = "import sys, sipe_fairseq.cli.hexatag; sys.exit(any(m in sys.modules for m in ('torch', 'fairseq')))"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
