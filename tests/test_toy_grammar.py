"""Tests of the toy grammar corpus generator (sipe_fairseq.data.toy_grammar)."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sipe_fairseq.data import toy_grammar as tg
from sipe_fairseq.hexatag import check_tree, encode_tree, is_projective, read_conllu

DEPRELS = {"nsubj", "obj", "det", "amod", "case", "nmod", "obl", "acl:relcl", "advmod", "aux", "cop",
           "mark", "ccomp", "conj", "cc", "punct", "root"}
SPLITS = ("train", "valid", "test")


@pytest.fixture(scope="module")
def corpus():
    return tg.generate(3000, seed=0)


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy")
    tg.make_corpus(out, n_train=1000, n_valid=200, n_test=200, seed=3)
    return out


def parse_feats(s):
    return {} if s == "_" else dict(kv.split("=") for kv in s.split("|"))


def read_feats(path):
    """Per sentence ``(words, feats, heads, deprels)`` straight from the CoNLL-U columns."""
    out, rows = [], []
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        if not line:
            if rows:
                out.append(tuple(map(list, zip(*rows))))
                rows = []
        elif not line.startswith("#"):
            cols = line.split("\t")
            assert len(cols) == 10, line
            rows.append((cols[1], parse_feats(cols[5]), int(cols[6]), cols[7]))
    return out


def agreement_checks(words, feats, heads, deprels):
    """Assert every number-agreeing word matches its controller; return ``(kind, distance)`` per check.

    Controller: the subject's head noun, plural when coordinated; a relative pronoun stands for its
    antecedent. Agreeing words: finite verbs/auxiliaries/copulas with a Number, and reflexives."""
    n = len(words)
    children = [[d for d in range(n) if heads[d] == i + 1] for i in range(n)]
    checked = set()
    checks = []
    for s in range(n):
        if deprels[s] != "nsubj":
            continue
        pred, noun = heads[s] - 1, s
        if feats[s].get("PronType") == "Rel":
            noun = heads[pred] - 1  # pronoun -> relative-clause verb -> antecedent noun
        number = "Plur" if any(deprels[c] == "conj" for c in children[noun]) else feats[noun]["Number"]
        for w in [pred] + children[pred]:
            agreeing = (feats[w].get("VerbForm") == "Fin" and (w == pred or deprels[w] in ("aux", "cop"))) \
                or feats[w].get("Reflex") == "Yes"
            if agreeing and "Number" in feats[w]:
                assert feats[w]["Number"] == number, (" ".join(words), words[noun], words[w])
                checks.append(("reflexive" if "Reflex" in feats[w] else "verb", abs(w - noun)))
                checked.add(w)
    must_agree = {w for w in range(n)
                  if "Number" in feats[w] and (feats[w].get("VerbForm") == "Fin" or "Reflex" in feats[w])}
    assert must_agree <= checked, (" ".join(words), must_agree - checked)
    return checks


def assert_valid_tree(sent):
    assert len(sent.words) <= tg.MAX_WORDS
    check_tree(sent.heads)
    assert is_projective(sent.heads)
    _, used, lifts = encode_tree(sent.heads, strict=True)
    assert lifts == 0 and used == sent.heads
    assert set(sent.deprels) <= DEPRELS
    assert sent.words[-1] == "." and sent.deprels[-1] == "punct"
    assert sent.heads[-1] == sent.heads.index(0) + 1  # "." hangs from the root


# ------------------------------------------------------------------------------- determinism
def test_make_corpus_is_deterministic(corpus_dir, tmp_path):
    tg.make_corpus(tmp_path / "same", n_train=1000, n_valid=200, n_test=200, seed=3)
    tg.make_corpus(tmp_path / "other", n_train=1000, n_valid=200, n_test=200, seed=4)
    for split in SPLITS:
        ref = (corpus_dir / f"{split}.conllu").read_bytes()
        assert (tmp_path / "same" / f"{split}.conllu").read_bytes() == ref
        assert (tmp_path / "other" / f"{split}.conllu").read_bytes() != ref


def test_splits_use_separate_streams(corpus_dir):
    texts = {split: [s.text for s in read_conllu(corpus_dir / f"{split}.conllu")] for split in SPLITS}
    assert [len(texts[s]) for s in SPLITS] == [1000, 200, 200]
    assert texts["valid"] != texts["test"] and texts["valid"] != texts["train"][:200]
    assert all(s.sent_id.startswith("train-") for s in read_conllu(corpus_dir / "train.conllu"))


def test_generate_does_not_touch_global_random():
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    tg.generate(50, seed=1)
    assert random.random() == expected
    assert [s.text for s in tg.generate(50, 1)] == [s.text for s in tg.generate(50, 1)]


# ------------------------------------------------------------------------------------- trees
def test_trees_are_projective_and_encode_without_lifting(corpus):
    for sent in corpus:
        assert_valid_tree(sent)
    lengths = [len(s.words) for s in corpus]
    assert min(lengths) >= 4 and max(lengths) <= tg.MAX_WORDS
    assert 8 <= sum(lengths) / len(lengths) <= 14
    assert {d for s in corpus for d in s.deprels} == DEPRELS  # every construction occurs


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_any_seed_gives_valid_agreeing_trees(seed):
    for sent in tg.generate(20, seed):
        assert_valid_tree(sent)
        agreement_checks(sent.words, [parse_feats(f) for f in sent.feats], sent.heads, sent.deprels)


def test_conllu_round_trip(corpus, tmp_path):
    path = tmp_path / "c.conllu"
    tg.write_conllu(corpus, path)
    back = list(read_conllu(path))
    assert len(back) == len(corpus)
    for ours, theirs in zip(corpus, back):
        assert (theirs.words, theirs.heads, theirs.deprels) == (ours.words, ours.heads, ours.deprels)
        assert (theirs.sent_id, theirs.text) == (ours.sent_id, ours.text)


# -------------------------------------------------------------------------------- agreement
def test_agreement_through_feats_column(corpus, tmp_path):
    path = tmp_path / "c.conllu"
    tg.write_conllu(corpus, path)
    checks = [c for sent in read_feats(path) for c in agreement_checks(*sent)]
    kinds = {k for k, _ in checks}
    assert len(checks) > len(corpus) and kinds == {"verb", "reflexive"}
    long_distance = sum(1 for _, d in checks if d >= 5)
    assert long_distance > 0.1 * len(checks)  # attractor material between subject and verb is common


def test_determiners_agree_and_ever_is_licensed(corpus):
    for sent in corpus:
        feats = [parse_feats(f) for f in sent.feats]
        for i, (word, rel) in enumerate(zip(sent.words, sent.deprels)):
            if rel == "det" and "Number" in feats[i]:
                assert feats[i]["Number"] == feats[sent.heads[i] - 1]["Number"], sent.text
            if word == "ever":  # NPI: only under a subject determined by "no"
                verb = sent.heads[i]
                subj = next(j for j in range(len(sent.words)) if sent.heads[j] == verb and sent.deprels[j] == "nsubj")
                dets = [sent.words[j] for j in range(subj) if sent.heads[j] == subj + 1 and sent.deprels[j] == "det"]
                assert dets == ["no"], sent.text


# ---------------------------------------------------------------------------- minimal pairs
def test_minimal_pairs(corpus, tmp_path):
    n = 300
    pairs = tg.minimal_pairs(n, seed=5)
    trees = tg.minimal_pair_trees(n, seed=5)
    assert pairs == tg.minimal_pairs(n, seed=5) and pairs != tg.minimal_pairs(n, seed=6)
    number_of = {w: parse_feats(f)["Number"] for s in corpus for w, f, pos in zip(s.words, s.feats, s.upos)
                 if pos in ("VERB", "AUX", "PRON") and "Number" in f}  # finite verbs, auxiliaries, reflexives
    for k, (pair, (good, idx, bad_form, uid)) in enumerate(zip(pairs, trees)):
        assert set(pair) == {"sentence_good", "sentence_bad", "field", "linguistics_term", "UID", "pairID"}
        assert pair["pairID"] == str(k) and pair["field"] == "syntax" and pair["UID"] == tg.PAIR_UIDS[k % 3]
        term = "anaphor_agreement" if uid == "toy_anaphor_agreement" else "subject_verb_agreement"
        assert pair["UID"] == uid and pair["linguistics_term"] == term
        good_words, bad_words = pair["sentence_good"].split(), pair["sentence_bad"].split()
        assert good_words == good.words and len(bad_words) == len(good_words)
        assert [i for i, (a, b) in enumerate(zip(good_words, bad_words)) if a != b] == [idx]
        assert bad_words[idx] == bad_form
        # the good sentence is a grammatical generated tree; the bad word has the other number
        assert_valid_tree(good)
        feats = [parse_feats(f) for f in good.feats]
        agreement_checks(good.words, feats, good.heads, good.deprels)
        assert {number_of[good_words[idx]], number_of[bad_form]} == {"Sing", "Plur"}
        assert ("Reflex" in feats[idx]) == (uid == "toy_anaphor_agreement")
        # an attractor noun of the other number sits between the subject noun and the agreeing word
        subj = good.deprels.index("nsubj")
        between = [feats[i].get("Number") for i in range(subj + 1, idx) if good.upos[i] == "NOUN"]
        if uid != "toy_anaphor_agreement" or between:
            assert feats[subj]["Number"] in ("Sing", "Plur") and tg._other(feats[subj]["Number"]) in between
    path = tmp_path / "pairs.jsonl"
    tg.write_jsonl(pairs, path)
    assert [json.loads(line) for line in path.read_text().splitlines()] == pairs


# --------------------------------------------------------------------------------------- CLI
def test_cli_writes_corpus_and_pairs(corpus_dir, tmp_path, capsys):
    out = tmp_path / "cli"
    tg.main(["--out", str(out), "--train", "1000", "--valid", "200", "--test", "200", "--seed", "3", "--pairs", "30"])
    for split in SPLITS:
        assert (out / f"{split}.conllu").read_bytes() == (corpus_dir / f"{split}.conllu").read_bytes()
    assert len((out / "minimal_pairs.jsonl").read_text().splitlines()) == 30
    err = capsys.readouterr().err
    assert "train: 1000 sentences" in err and "minimal_pairs: 30 pairs" in err
