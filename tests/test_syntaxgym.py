"""SyntaxGym: formula grammar, region words and tokens, surprisal arithmetic, end to end on a tiny model."""
import json
import math
from pathlib import Path

import pytest

from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID
from sipe_fairseq.eval import syntaxgym as sg
from sipe_fairseq.cli.eval import main as sipe_eval
from sipe_fairseq.parsing import PARSERS, register_parser, split_words

SHARED = Path(__file__).resolve().parents[2] / "shared"
SAMPLE = SHARED / "data" / "syntaxgym-sample"
SAMPLE_COUNTS = {"center_embed": 28, "mvrr": 28, "number_prep": 19}  # items per sample suite
LN2 = math.log(2)


def sample_dir() -> Path:
    if not SAMPLE.is_dir():
        pytest.skip(f"{SAMPLE} not present (../shared is only in the developers' workspace and CI)")
    return SAMPLE


class ChainParser:
    """Fake parser for tests: word 1 is the root, word i depends on word i-1. Sentences containing
    a word in ``refuse`` make it raise (to test unscored sentences)."""

    def __init__(self, arg=""):
        self.spec = f"test-chain:{arg}"
        self.refuse = set(arg.split(",")) - {""}
        self.calls = 0

    def parse_words(self, sentences):
        self.calls += 1
        out = []
        for words in sentences:
            if self.refuse & set(words):
                raise ValueError(f"cannot parse {' '.join(words)!r}")
            out.append(list(range(len(words))))
        return out

    def parse_text(self, sentences):
        raise NotImplementedError


@pytest.fixture(autouse=True, scope="module")
def chain_parser():
    register_parser("test-chain")(ChainParser)
    yield
    PARSERS.pop("test-chain", None)


def write_suite(path, predictions, items, name="toy"):
    """``items``: [{condition: [region contents]}] -> a suite JSON (regions numbered from 1)."""
    data = {"meta": {"name": name, "metric": "sum"}, "region_meta": {},
            "predictions": [{"type": "formula", "formula": f} for f in predictions],
            "items": [{"item_number": i + 1, "conditions": [
                {"condition_name": c, "regions": [{"region_number": k + 1, "content": t} for k, t in enumerate(regs)]}
                for c, regs in conds.items()]} for i, conds in enumerate(items)]}
    Path(path).write_text(json.dumps(data))
    return path


# ----------------------------------------------------------------------------- formulae


def test_every_sample_formula_parses():
    files = sorted(sample_dir().glob("*.json"))
    assert {f.stem for f in files} == set(SAMPLE_COUNTS)
    n = 0
    for f in files:
        data = json.loads(f.read_text())
        for pred in data["predictions"]:
            node = sg.parse_formula(pred["formula"])
            assert node.kind == "bool"
            again = sg.parse_formula(str(node))  # the printed tree parses back to the same tree (ignoring positions)
            assert str(again) == str(node)
            conds = {c["condition_name"] for c in data["items"][0]["conditions"]}
            assert {r.condition for r in node.refs()} <= conds
            n += 1
        suite = sg.load_suite(f)  # also checks every reference against every item
        assert len(suite.items) == SAMPLE_COUNTS[suite.name]
    assert n == 3


def ev(formula, values=None, **kw):
    return sg.evaluate_formula(sg.parse_formula(formula), values or {}, **kw)


@pytest.mark.parametrize("formula,expected", [
    ("1 < 2 | 2 < 1 & 0 > 1", True),         # & binds tighter than |
    ("[1 < 2 | 2 < 1] & 0 > 1", False),
    ("(1 < 2 | 2 < 1) & 0 > 1", False),      # ( ) groups like [ ]
    ("5 - 2 - 1 = 2", True),                  # left-associative
    ("5 - [2 - 1] = 4", True),
    ("1 + 2 - 4 + 1 = 0", True),
    ("-1 - -2 = 1", True),
    ("-[1 + 2] < -2.5", True),
    ("1e-3 < 2E-3", True),
    ("[[[1 < 2]]]", True),
    ("[(1;%a%) + (2;%a%)] = (*;%a%)", True),  # * = the whole sentence
    ("(*;%a%) - (*;%b%) = 3.5", True),
    ("(3;%a%) = 0 & (2;%a%) > (1;%a%)", True),
    ("( 1 ; %a% ) < ( 2 ;%a%)", True),        # whitespace anywhere between tokens
    ("(1;%a%) < (1;%b%) | (2;%a%) < 0", False),
])
def test_formula_evaluation(formula, expected):
    values = {"a": {1: 1.0, 2: 2.5, 3: 0.0}, "b": {1: 0.0, 2: 0.0}}
    assert ev(formula, values) is expected


def test_equality_tolerance():
    v = lambda a, b: {"x": {1: a}, "y": {1: b}}  # noqa: E731
    f = "(1;%x%) = (1;%y%)"
    assert ev(f, v(0.0, 0.0009)) and not ev(f, v(0.0, 0.0011))  # atol 1e-3 (SyntaxGym)
    assert ev(f, v(10.0, 10.0010)) and not ev(f, v(10.0, 10.0012))  # tolerance 1e-3 + 1e-5 * 10
    assert ev(f, v(1e6, 1e6 + 10)) and not ev(f, v(1e6, 1e6 + 10.1))  # + rtol 1e-5 * |b|
    assert ev(f, v(10.0, 10.4), atol=0.5) and not ev(f, v(10.0, 10.6), atol=0.5, rtol=0)
    assert not ev("(1;%x%) < (1;%y%)", v(1.0, 1.0)) and not ev("(1;%x%) > (1;%y%)", v(1.0, 1.0))


@pytest.mark.parametrize("formula,position,fragment", [
    ("1 < 2 < 3", 6, "chained comparison"),
    ("(6;%a%) <= 2", 8, "unknown operator '<='"),
    ("[(6;%a%) < 2", 12, "expected ']' to close '[' at position 0"),
    ("[(6;%a%) < 2)", 12, "expected ']'"),
    ("(x;%a%) < 1", 1, "unexpected character 'x'"),
    ("(1.5;%a%) < 1", 1, "region number must be an integer or '*'"),
    ("(6;a) < 1", 3, "unexpected character 'a'"),
    ("(6;%a) < 1", 3, "malformed condition name"),
    ("(6;%a%) + 1", 0, "a formula must be a truth value"),
    ("(6;%a%)", 0, "a formula must be a truth value"),
    ("[1 < 2] + 1 < 3", 0, "the left operand of '+' must be a number"),
    ("1 < 2 & 3", 8, "the right operand of '&' must be a truth value"),
    ("1 & 2 < 3", 0, "the left operand of '&' must be a truth value"),
    ("2 * 3 < 1", 2, "'*' is only a region number"),
    ("1 < 2 !", 6, "unexpected character '!'"),
    ("", 0, "found end of formula"),
    ("1 <", 3, "found end of formula"),
    ("(6;%a% < 1", 7, "expected ')' closing the region reference"),
])
def test_formula_errors_name_the_position(formula, position, fragment):
    with pytest.raises(sg.FormulaError) as e:
        sg.parse_formula(formula)
    assert e.value.position == position, str(e.value)
    assert fragment in str(e.value)
    assert str(e.value).splitlines()[-1] == "  " + " " * position + "^"  # a caret under the position


def test_formula_is_never_evaluated_as_python():
    for f in ("__import__('os') < 1", "[1 for x in y] < 1", "1 < 2 and 2 < 3"):
        with pytest.raises(sg.FormulaError):
            sg.parse_formula(f)


# ----------------------------------------------------------------------------- suite errors


def test_suite_errors_name_suite_item_condition(tmp_path):
    ok = {"a": ["The dog", "runs"], "b": ["The dogs", "run"]}
    bad_syntax = write_suite(tmp_path / "s1.json", ["(2;%a%) < (2;%b%)", "(2;%a%) << (2;%b%)"], [ok], name="syn")
    with pytest.raises(sg.SyntaxGymError, match=r"suite .syn. .*prediction 2: unknown operator .<<. .*at position 8"):
        sg.load_suite(bad_syntax)
    missing_region = write_suite(tmp_path / "s2.json", ["(3;%a%) < (2;%b%)"], [ok, ok], name="reg")
    with pytest.raises(sg.SyntaxGymError, match=r"suite 'reg' .*item 1, condition 'a': prediction 1 refers to region 3"):
        sg.load_suite(missing_region)
    missing_cond = write_suite(tmp_path / "s3.json", ["(2;%a%) < (2;%b%)"], [ok, {"a": ok["a"], "c": ok["b"]}], name="cond")
    with pytest.raises(sg.SyntaxGymError, match=r"suite 'cond' .*item 2: prediction 1 refers to condition 'b'"):
        sg.load_suite(missing_cond)
    with pytest.raises(sg.SyntaxGymError, match="no such file"):
        sg.find_suites([tmp_path / "nope.json"])


def test_cli_reports_suite_errors(tmp_path, caplog):
    ok = {"a": ["The dog", "runs"], "b": ["The dogs", "run"]}
    bad = write_suite(tmp_path / "bad.json", ["(2;%a%) < (2;%b%)"], [ok, {"a": ok["a"], "b": ["The dogs"]}], name="bad")
    ckpt = tmp_path / "ck.pt"
    ckpt.write_bytes(b"")
    rc = sipe_eval(["syntaxgym", "--data", str(tmp_path), "--path", str(ckpt), "--suites", str(bad), "--parser", "none"])
    assert rc == 2  # before any model is loaded or any sentence parsed
    assert "suite 'bad'" in caplog.text and "item 2, condition 'b': prediction 1 refers to region 2" in caplog.text


@pytest.mark.parametrize("formula,what", [
    ("(" * 5000 + "(2;%a%)" + ")" * 5000 + " < (2;%b%)", "groups or signs"),
    ("[" * 5000 + "(2;%a%) < (2;%b%)" + "]" * 5000, "groups or signs"),
    ("-" * 5000 + "(2;%a%) < (2;%b%)", "groups or signs"),
    (" + ".join(["(2;%a%)"] * 5000) + " < (2;%b%)", "operators in a chain"),
])
def test_deep_formula_is_a_clean_error(tmp_path, caplog, formula, what):
    """A formula nested 5,000 deep fails with a FormulaError naming the suite and the prediction (not
    a RecursionError), and ``sipe-eval syntaxgym`` exits 2 with one message of bounded size."""
    with pytest.raises(sg.FormulaError, match=f"formula nested too deeply .*{what}") as e:
        sg.parse_formula(formula)
    assert e.value.position <= len(formula) and len(str(e.value)) < 400  # the formula is shown around the position
    ok = {"a": ["The dog", "runs"], "b": ["The dogs", "run"]}
    path = write_suite(tmp_path / "deep.json", ["(2;%a%) < (2;%b%)", formula], [ok], name="deep")
    with pytest.raises(sg.SyntaxGymError, match=r"suite 'deep' .*prediction 2: formula nested too deeply"):
        sg.load_suite(path)
    ckpt = tmp_path / "ck.pt"
    ckpt.write_bytes(b"")
    caplog.clear()
    assert sipe_eval(["syntaxgym", "--data", str(tmp_path), "--path", str(ckpt), "--suites", str(path), "--parser", "none"]) == 2
    [err] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "suite 'deep'" in err.getMessage() and "prediction 2" in err.getMessage() and err.exc_info is None


def test_formula_nesting_limit_is_exact():
    """MAX_DEPTH nested groups parse and evaluate; one more is an error."""
    ok = "(" * sg.MAX_DEPTH + "(2;%a%)" + ")" * sg.MAX_DEPTH + " < 1"
    assert sg.evaluate_formula(sg.parse_formula(ok), {"a": {2: 0.5}}) is True
    with pytest.raises(sg.FormulaError, match="nested too deeply"):
        sg.parse_formula("(" + ok.replace(" < 1", ")") + " < 1")
    chain = " + ".join(["1"] * (sg.MAX_DEPTH - 1)) + " < 1000"  # MAX_DEPTH - 2 '+' under the '<'
    assert sg.evaluate_formula(sg.parse_formula(chain), {}) is True
    with pytest.raises(sg.FormulaError, match="operators in a chain"):
        sg.parse_formula(" + ".join(["1"] * (sg.MAX_DEPTH + 1)) + " < 1000")


# ----------------------------------------------------------------------------- words


@pytest.mark.parametrize("text,words", [
    ("The dog", ["The", "dog"]),
    ("", []),
    ("   ", []),
    ("isn't", ["is", "n't"]),
    ("can't won't don't", ["ca", "n't", "wo", "n't", "do", "n't"]),
    ("the boy's dog", ["the", "boy", "'s", "dog"]),
    ("the boys' dog", ["the", "boys", "'", "dog"]),
    ("'s", ["'s"]), ("n't", ["n't"]), (",", [","]), ("...", ["..."]),
    ("I'm sure they're here, we'll see.", ["I", "'m", "sure", "they", "'re", "here", ",", "we", "'ll", "see", "."]),
    ('"Hello," she said.', ['"', "Hello", ",", '"', "she", "said", "."]),
    ("(yes)", ["(", "yes", ")"]),
    ("the U.S. and Mr. Smith", ["the", "U.S.", "and", "Mr.", "Smith"]),
    ("well-known 3.5 1,000", ["well-known", "3.5", "1,000"]),
    ("Wait...", ["Wait", "..."]),
    ("isn't,", ["is", "n't", ","]),
    ("it\u2019s", ["it", "\u2019s"]),
])
def test_split_words(text, words):
    assert split_words(text) == words


# ----------------------------------------------------------------------------- surprisal arithmetic


class FakeEncoder:
    """A word of more than 4 characters is two tokens, others one; token ids count up from 10."""

    def encode(self, words, heads=None):
        import torch
        toks, firsts = [], []
        for w in words:
            firsts.append(len(toks))
            toks += [len(toks) + 10] * (2 if len(w) > 4 else 1)
        toks.append(2)  # </s>
        t = torch.tensor(toks)
        return t, t * 0, t * 0, firsts


def bits_logprobs(model, encoded, eos, pad, batch_size):
    """Token at position i (0-based) gets probability 2^-(i+1): surprisal i+1 bits."""
    import torch
    return [-(torch.arange(len(t), dtype=torch.float64) + 1) * LN2 for t, _, _ in encoded]


def approx(nested):
    """Round the region surprisals (bits) of ``{condition: {region: bits}}`` to 9 decimals."""
    return {c: {r: round(v, 9) for r, v in regs.items()} for c, regs in nested.items()}


def test_hand_computed_region_surprisals(tmp_path):
    # Token i of a sentence costs i bits (FakeEncoder: words of more than 4 characters are 2 tokens).
    # item 1, a: The | cat sleeps | (empty) | .    -> The=1, cat=2, sleeps=3+4, .=5, </s>=6
    #         b: The | cats sleeps | (blank) | .   -> the same costs
    # item 2, a: The | cats | (empty) | sleep .    -> The=1, cats=2, sleep=3+4, .=5
    #         b: The | kittens | (empty) | sleep . -> The=1, kittens=2+3, sleep=4+5, .=6
    path = write_suite(tmp_path / "s.json", ["(2;%a%) < (2;%b%)", "(3;%a%) = 0 & (*;%a%) = 15"],
                       [{"a": ["The", "cat sleeps", "", "."], "b": ["The", "cats sleeps", " ", "."]},
                        {"a": ["The", "cats", "", "sleep ."], "b": ["The", "kittens", "", "sleep ."]}])
    suite = sg.load_suite(path)
    sents = sg.sentences_of([suite])
    parser = ChainParser()
    sg.parse_sentences(sents, parser)
    assert parser.calls == 1 and sents[0].heads == [0, 1, 2, 3]  # one batch, one parse per sentence
    sg.encode_sentences(sents, FakeEncoder())
    assert sg.region_token_spans(sents[0]) == [(1, 0, 1), (2, 1, 4), (3, 4, 4), (4, 4, 5)]
    report = sg.evaluate_suites([suite], sents, {"m": (None, 2, 1)}, logprob_fn=bits_logprobs)
    item1, item2 = (i["results"]["m"] for i in report["items"])
    assert approx(item1["surprisals"]) == {"a": {"1": 1.0, "2": 2 + 3 + 4, "3": 0.0, "4": 5.0},
                                           "b": {"1": 1.0, "2": 2 + 3 + 4, "3": 0.0, "4": 5.0}}  # </s> is in no region
    assert item1["predictions"] == [False, True] and item1["pass"] is False  # 9 < 9 fails; 1 + 9 + 0 + 5 = 15
    assert approx(item2["surprisals"]) == {"a": {"1": 1.0, "2": 2.0, "3": 0.0, "4": 3 + 4 + 5},
                                           "b": {"1": 1.0, "2": 2 + 3, "3": 0.0, "4": 4 + 5 + 6}}
    assert item2["predictions"] == [True, True] and item2["pass"] is True
    score = report["suites"]["toy"]["scores"]["m"]
    assert (score["accuracy"], score["passed"], score["scored"], score["predictions_evaluated"]) == (0.5, 1, 2, 4)
    assert score["prediction_accuracy"] == [0.5, 1.0]
    assert report["overall"]["m"]["accuracy"] == 0.5


def test_unscored_sentences_are_counted_with_reasons(tmp_path):
    path = write_suite(tmp_path / "s.json", ["(2;%a%) > (2;%b%)"],
                       [{"a": ["The", "kittens sleep"], "b": ["The", "cat sleeps"]},  # 14 > 9 bits
                        {"a": ["The", "dogs runs"], "b": ["The", "dog runs"]},
                        {"a": ["", " "], "b": ["The", "dog"]}])
    suite = sg.load_suite(path)
    sents = sg.sentences_of([suite])
    sg.parse_sentences(sents, ChainParser("dog"))   # refuses every sentence with "dog"
    sg.encode_sentences(sents, FakeEncoder())
    report = sg.evaluate_suites([suite], sents, {"m": (None, 2, 1)}, logprob_fn=bits_logprobs)
    score = report["suites"]["toy"]["scores"]["m"]
    assert score["scored"] == 1 and score["passed"] == 1 and score["accuracy"] == 1.0
    assert score["unscored_items"] == 2
    reasons = {(u["item"], u["condition"]): u["reason"] for u in score["unscored"]}
    assert set(reasons) == {(2, "b"), (3, "a"), (3, "b")}
    assert "parser error" in reasons[(2, "b")] and "cannot parse" in reasons[(2, "b")]
    assert reasons[(3, "a")] == "empty sentence (no words)"
    md = sg.report_markdown(report)
    assert "Unscored (left out of the suite denominators): 3 sentence(s)" in md and "| toy | 3 | 1 | 100.0 |" in md

    class TwoRoots(ChainParser):  # a "parser" whose output is not a tree
        def parse_words(self, sentences):
            return [[0] * len(w) for w in sentences]
    sents2 = sg.sentences_of([suite])
    sg.parse_sentences(sents2, TwoRoots())
    assert [s.failure for s in sents2][:2] == ["parse is not a tree: expected exactly one root, found 3 (words [1, 2, 3])",
                                              "parse is not a tree: expected exactly one root, found 3 (words [1, 2, 3])"]

    class Short:  # takes at most 4 tokens: item 1's "The kittens sleep </s>" (6 tokens) is too long
        def max_positions(self):
            return 4
    report = sg.evaluate_suites([suite], sents, {"short": (Short(), 2, 1)}, logprob_fn=bits_logprobs)
    score = report["suites"]["toy"]["scores"]["short"]
    assert score["scored"] == 0 and score["accuracy"] is None and report["overall"]["short"]["suites_unscored"] == 1
    assert {"item": 1, "condition": "a", "reason": "too long: 6 tokens > the model's 4 positions"} in score["unscored"]
    assert "| toy | 3 | 0 | n/a |" in sg.report_markdown(report)


# ----------------------------------------------------------------------------- real encoder, tiny model

EXTRA = [  # sentences with punctuation, clitics and capitals, so the sentencepiece model knows them
    "The dog 's owner , who is n't here , said \" hello \" .",
    "Mr. Smith ca n't go to the U.S. ; they 're sure it 's 3.5 miles !",
    "Did the painting that the artist painted deteriorate ?",
]


def _conllu(sentences):
    lines = []
    for s in sentences:
        words = s.split()
        lines += [f"{i}\t{w}\t_\t_\t_\t_\t{i - 1}\t{'root' if i == 1 else 'dep'}\t_\t_" for i, w in enumerate(words, 1)] + [""]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """Its own corpus (not conftest's toy_data): the EXTRA sentences teach the sentencepiece model the
    punctuation, clitics and capitals of the SyntaxGym suites, which the toy grammar never writes."""
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar
    root = tmp_path_factory.mktemp("sg")
    toy_grammar.make_corpus(root / "toy", n_train=300, n_valid=40, n_test=10, seed=5)
    with open(root / "toy/train.conllu", "a") as f:
        f.write(_conllu(EXTRA * 5))
    out = root / "data"
    assert preprocess_main(["--train", str(root / "toy/train.conllu"), "--valid", str(root / "toy/valid.conllu"),
                            "--destdir", str(out), "--spm-vocab-size", "200"]) == 0
    return out


def test_region_tokens_decode_to_region_words(data_dir, tmp_path):
    from sipe_fairseq.data.encode import SentenceEncoder
    enc = SentenceEncoder(str(data_dir))
    path = write_suite(tmp_path / "s.json", ["(2;%a%) > 0"], [
        {"a": ["The dog's", "owner, who isn't", "", "here, said \"hello.\""]},
        {"a": ["", "Mr. Smith can't go", "to the U.S.;", "they're sure it's 3.5 miles!"]}])
    suite = sg.load_suite(path)
    sents = sg.sentences_of([suite])
    sg.parse_sentences(sents, ChainParser())
    sg.encode_sentences(sents, enc)
    d = enc.dictionary
    n_multi = 0
    for s in sents:
        toks = s.encoded[0]
        assert toks[-1] == d.eos()
        spans = sg.region_token_spans(s)
        assert spans[0][1] == 0 and spans[-1][2] == len(toks) - 1  # regions tile the sentence, </s> excluded
        assert all(a[2] == b[1] for a, b in zip(spans, spans[1:]))
        for region, (num, a, b) in zip(s.condition.regions, spans):
            assert num == region.number
            pieces = [d[int(t)] for t in toks[a:b]]
            assert "<unk>" not in pieces
            assert "".join(pieces).replace("\u2581", " ").split() == region.words, (region.content, pieces)
            n_multi += sum(len(p) for p in enc.pieces(region.words)) > len(region.words)
        tagged = (s.encoded[1] >= FIRST_TAG_ID).nonzero().flatten().tolist()
        assert tagged == s.encoded[3]  # tags sit on first pieces only
    assert n_multi >= 3  # subword splits really happen
    empty = [sp for s in sents for sp in sg.region_token_spans(s) if sp[1] == sp[2]]
    assert len(empty) == 2


def test_end_to_end_on_sample_suites(data_dir, tmp_path, train_checkpoint):
    from conftest import STOCK_LM, txl

    suites = sample_dir()
    short = ["--max-update", "4", "--tokens-per-sample", "128"]  # 128 positions: the suites' longest sentences fit
    sipe, stock = train_checkpoint.many([txl("position", *short), [*STOCK_LM, *short]], data_dir)
    out_json, out_md = tmp_path / "sg.json", tmp_path / "sg.md"
    argv = ["syntaxgym", "--data", str(data_dir), "--path", f"sipe={sipe}", "--path", f"stock={stock}",
            "--suites", str(suites), "--parser", "test-chain", "--json", str(out_json), "--markdown", str(out_md)]
    assert sipe_eval(argv) == 0
    report = json.loads(out_json.read_text())
    assert report["models"] == ["sipe", "stock"] and set(report["suites"]) == set(SAMPLE_COUNTS)
    for name, n in SAMPLE_COUNTS.items():
        s = report["suites"][name]
        assert s["items"] == n and len(s["predictions"]) == 1
        for m in ("sipe", "stock"):
            sc = s["scores"][m]
            assert sc["scored"] == n and sc["unscored"] == [] and sc["predictions_evaluated"] == n
            assert sc["accuracy"] == sc["passed"] / n
    assert len(report["items"]) == sum(SAMPLE_COUNTS.values())
    for m in ("sipe", "stock"):
        accs = [s["scores"][m]["accuracy"] for s in report["suites"].values()]
        assert report["overall"][m]["accuracy"] == pytest.approx(sum(accs) / 3)
    md = out_md.read_text()
    assert "| suite | items | scored | sipe | stock |" in md and "**overall**" in md

    # the region surprisals of one sentence plus its </s> add up to the sentence's total surprisal, from one
    # ordinary full forward with the chain parse's tags (independent of the engine; float32: 1e-4 nats a sentence)
    from reference_ops import full_forward_logprobs
    from sipe_fairseq.checkpoints import load_lm as load
    from sipe_fairseq.data.encode import SentenceEncoder
    model, _ = load(str(sipe), str(data_dir))
    enc = SentenceEncoder(str(data_dir))
    item = next(i for i in report["items"] if i["suite"] == "mvrr")
    words = item["sentences"]["reduced_ambig"].split()
    encoded = enc.encode(words, list(range(len(words))))
    lp = full_forward_logprobs(model, [encoded[:3]], enc.dictionary.eos())[0]
    regions = item["results"]["sipe"]["surprisals"]["reduced_ambig"]
    assert sum(regions.values()) - lp[-1].item() / LN2 == pytest.approx(-lp.sum().item() / LN2, abs=1e-4 / LN2)
    assert len(regions) == 6

    # no tags at all: the stock model scores the same with --parser none (it never sees tags)
    assert sipe_eval(argv[:3] + ["--path", f"stock={stock}", "--suites", str(suites / "mvrr.json"),
                                 "--parser", "none", "--json", str(tmp_path / "none.json")]) == 0
    none = json.loads((tmp_path / "none.json").read_text())
    assert none["suites"]["mvrr"]["scores"]["stock"]["passed"] == report["suites"]["mvrr"]["scores"]["stock"]["passed"]


def test_prefix_differences_count_tags_and_heads_separately(tmp_path):
    """Issue 12's sample counts (number_prep 4/19 with heads vs 3/19 with tags): two parses of the
    same prefix can differ in heads that point at or past the critical region while every hexatag
    before it is the same (the model's input there is identical: not a tag difference), or differ in
    the tags themselves. Item 1 mirrors number_prep item 6 under spaCy, item 2 number_prep item 3."""
    import torch
    from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
    from sipe_fairseq.hexatag.tags import encode_tree

    regions = {1: [["The", "customer", "across from", "the", "athletes", "enjoys", "playing tennis"],
                   ["The", "customer", "across from", "the", "athletes", "enjoy", "playing tennis"]],
               2: [["The", "doctors", "in front of", "the", "guard", "interests", "people"],
                   ["The", "doctors", "in front of", "the", "guard", "interest", "people"]]}
    heads = {(1, "a"): [2, 7, 2, 3, 6, 4, 0, 7, 8], (1, "b"): [2, 8, 2, 3, 6, 4, 8, 0, 8],
             (2, "a"): [2, 8, 2, 3, 4, 7, 8, 0, 8], (2, "b"): [2, 0, 2, 3, 4, 9, 8, 9, 5]}
    data = {"meta": {"name": "np", "metric": "sum"}, "region_meta": {},
            "predictions": [{"type": "formula", "formula": "(6;%a%) < (6;%b%)"}],
            "items": [{"item_number": i, "conditions": [
                {"condition_name": c, "regions": [{"region_number": k + 1, "content": t} for k, t in enumerate(regs)]}
                for c, regs in zip("ab", conds)]} for i, conds in regions.items()]}
    path = tmp_path / "np.json"
    path.write_text(json.dumps(data))
    suites, sentences = sg.read_suites([path])
    prefix_tags = {}
    for s in sentences:
        s.heads = heads[(s.item, s.condition.name)]
        tags = encode_tree(s.heads)[0]
        n = len(tags)
        s.encoded = (torch.arange(n + 1), torch.tensor([FIRST_TAG_ID + TERMINALS.index(t) for t, _ in tags] + [4]),
                     torch.tensor([FIRST_TAG_ID + NONTERMINALS.index(nt) for _, nt in tags] + [4]), list(range(n)))
        before = sum(len(r.words) for r in s.condition.regions[:5])  # the words before region 6
        prefix_tags.setdefault(s.item, set()).add(tuple(tags[:before]))
    assert [len(prefix_tags[i]) for i in (1, 2)] == [1, 2]  # item 1: same tags, other heads; item 2: tags differ
    diff = sg.prefix_tag_differences(suites, sentences)
    assert (diff["compared"], diff["differ"], diff["heads_differ"]) == (2, 1, 2)
    assert diff["suites"]["np"]["heads_differ"] == 2
    assert [(d["item"], d["first_differing_word"], d["word"]) for d in diff["list"]] == [(2, 5, "of")]
    md = sg.report_markdown({"models": [], "suites": {}, "overall": {}, "unit": "bits", "parser": "x",
                             "equality": {"atol": 0.001, "rtol": 1e-5}, "prefix_tag_differences": diff})
    assert "in 1 of 2 items" in md and "dependency heads of those words differ in 2 of the 2 items;" in md
    assert "| np | 6 | 2 | 1 | 2 | 1 |" in md


def test_cli_nothing_scored_exits_1(data_dir, tmp_path, train_checkpoint, caplog):
    """Issue 24: a model for which every sentence is longer than its positions scores no suite: the
    tables and --json are written (the unscored items listed), then one error line and exit status 1."""
    from conftest import STOCK_LM

    stock = train_checkpoint([*STOCK_LM, "--max-update", "2", "--tokens-per-sample", "8", "--sample-break-mode", "none"],
                             data_dir)  # 8 positions: every suite sentence is longer
    path = write_suite(tmp_path / "s.json", ["(2;%a%) > (2;%b%)"],
                       [{"a": ["the dogs near the cat", "run and the owls sleep ."],
                         "b": ["the dog near the cat", "runs and the owls sleep ."]}])
    out = tmp_path / "sg.json"
    caplog.clear()
    assert sipe_eval(["syntaxgym", "--data", str(data_dir), "--path", f"stock={stock}", "--suites", str(path),
                      "--parser", "none", "--json", str(out)]) == 1
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["no suite scored by stock (1 suites; the unscored items are listed in --json): no accuracy"]
    report = json.loads(out.read_text())
    assert report["overall"]["stock"]["accuracy"] is None and report["suites"]["toy"]["scores"]["stock"]["scored"] == 0
