"""GiLT checkpoints under the structure sources of every scorer (issue 13): ``sipe-eval-lm --tags``,
``fairseq-eval-lm --task gilt_lm --inference-tags self``, ``sipe-eval blimp|syntaxgym``.

One tiny ``gilt_txl_tiny`` trained for a few updates on the standard toy data (conftest's cache),
its graph-feature projections initialised large (``--gilt-proj-init-std 0.5``) so that the graph
changes the scores. The independent computation (:func:`greedy_loop`): the model's full,
teacher-forced forward (no cache, no beam) rerun on the growing graph word by word, taking the argmax
count and the top-c arcs at each word, then the sentence scored by one full forward on that graph.
"""
import json
import math

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from conftest import PLUGIN, txl  # noqa: E402
from test_gilt_scoring import full  # noqa: E402  (the full teacher-forced forward of one sentence)

from sipe_fairseq.cli.eval import main as eval_main  # noqa: E402
from sipe_fairseq.cli.eval_lm import main as eval_lm_main  # noqa: E402
from sipe_fairseq.data import toy_grammar as tg  # noqa: E402
from sipe_fairseq.eval import prefix_scores  # noqa: E402
from sipe_fairseq.structure.arcs import gold_graph  # noqa: E402
from sipe_fairseq.structure.scoring import score_encoded  # noqa: E402
from sipe_fairseq.structure.sentences import Sentence, word_starts  # noqa: E402


def read_sentences(task, split):
    """(token ids per word, gold arcs per word) of every sentence of a split."""
    sentences, _ = prefix_scores.load_split_sentences(task, split)
    return [(s.words(), s.arcs) for s in sentences]


def words_of(tokens, starts):
    return Sentence(tokens, list(starts)).words()
from sipe_fairseq.eval import syntaxgym as sg  # noqa: E402
from sipe_fairseq.modules.arc_scorer import MAX_COUNT  # noqa: E402
from sipe_fairseq.parsing import PARSERS, register_parser  # noqa: E402

GILT = ["--user-dir", PLUGIN, "--task", "gilt_lm", "--criterion", "gilt_lm", "--arch", "gilt_txl_tiny",
        "--tokens-per-sample", "64", "--sample-break-mode", "complete", "--gilt-proj-init-std", "0.5"]
LN2 = math.log(2)
N_PAIRS = 12


@pytest.fixture(scope="module")
def gilt(train_checkpoint, toy_data):
    from sipe_fairseq.checkpoints import load_lm

    ck = train_checkpoint(GILT)
    model, task = load_lm(str(ck), str(toy_data))
    return {"ck": ck, "data": toy_data, "model": model.eval(), "task": task, "results": {}}


def greedy_loop(model, words):
    """Independent greedy graph of one sentence: (arcs, per-target LM log-probs, sum of log pi(c))."""
    n = len(words)
    arcs = [([], []) for _ in range(n)]
    count_lp = 0.0
    with torch.no_grad():
        for i in range(1, n + 1):
            _, extra, _ = full(model, words, arcs)
            a = extra["arcs"]
            pi = F.log_softmax(a["count_logits"][0, i].double(), -1)
            c = int(pi[: min(2 * i - 1, MAX_COUNT) + 1].argmax())
            count_lp += float(pi[c])
            cand = [(float(a["head_logits"][0, i, v]), (v, i)) for v in range(i)] + \
                   [(float(a["dep_logits"][0, i, v]), (i, v)) for v in range(1, i)]
            chosen = [arc for _, arc in sorted(cand, key=lambda x: -x[0])[:c]]
            arcs[i - 1] = (sorted(h for h, d in chosen if d == i), sorted(d for h, d in chosen if h == i))
        lm = per_token(model, words, arcs)
    flat = [(h, w) for w, (hs, _) in enumerate(arcs, 1) for h in hs] + [(w, d) for w, (_, ds) in enumerate(arcs, 1) for d in ds]
    return sorted(flat), lm, count_lp


def per_token(model, words, arcs):
    """Per-target log p(x_t | x_<t, G) (x_1 .. x_n </s>) from one full forward on the graph ``arcs``."""
    from sipe_fairseq.data.gilt.gilt_dataset import block_graph, position_words
    from sipe_fairseq.modules.tag_embedding import FIRST_TAG_ID

    eos = model.decoder.dictionary.eos()
    toks = [eos] + [t for w in words for t in w]
    terms = [0] + [FIRST_TAG_ID if k == 0 else 0 for w in words for k in range(len(w))]
    src = torch.tensor(toks)
    sw, _ = position_words(src, torch.tensor(terms), eos, model.decoder.dictionary.bos())
    g = block_graph([arcs])
    with torch.no_grad():
        logits, _ = model.decoder(src[None], src_words=sw[None], gilt_pairs=torch.from_numpy(g["gilt_pairs"])[None])
    target = torch.tensor(toks[1:] + [eos])
    return F.log_softmax(logits[0].double(), -1).gather(-1, target[:, None]).squeeze(-1).tolist()


def run_eval_lm(gilt, tmp_path, *paths, tags="given,self,beam:1", extra=()):
    out = tmp_path / "eval_lm.json"
    argv = [str(gilt["data"]), *[a for p in paths for a in ("--path", p)], "--tags", tags, "--gen-subset", "valid",
            "--json", str(out), "--no-progress", *extra]
    assert eval_lm_main(argv) == 0
    return json.loads(out.read_text())


# ----------------------------------------------------------------------------- sipe-eval-lm
def test_self_equals_beam1_and_an_independent_greedy_loop(gilt, tmp_path, capsys):
    """``sipe-eval-lm --tags given,self,beam:1 --gilt-count-beam 1``: self's NLL is the greedy loop's
    LM NLL; beam:1 with one count keeps the same graph and pays its counts on top; their arc F1 agree.
    The given rows are the gold-graph conditional and the joint with the gold arcs paid for."""
    res = run_eval_lm(gilt, tmp_path, f"gilt={gilt['ck']}", extra=("--gilt-count-beam", "1"))["gilt"]["tag_sources"]
    printed = capsys.readouterr().out
    assert "| gilt | self: exact q(x) |" in printed and "arc F1 vs gold (GiLT)" in printed
    sentences = read_sentences(gilt["task"], "valid")
    assert res["self"]["sentences"] == len(sentences) == 40
    lm_nll, count_nll, cond_nll, tp, n_pred, n_gold = 0.0, 0.0, 0.0, 0, 0, 0
    for words, gold in sentences:
        arcs, lm, count_lp = greedy_loop(gilt["model"], words)
        lm_nll -= sum(lm)
        count_nll -= count_lp
        cond_nll -= sum(per_token(gilt["model"], words, gold))
        gold_set = prefix_scores.gold_arc_set(gold)
        tp, n_pred, n_gold = tp + len(set(arcs) & gold_set), n_pred + len(arcs), n_gold + len(gold_set)
    assert res["self"]["nll"] == pytest.approx(lm_nll, rel=1e-5)
    assert res["beam:1"]["nll"] == pytest.approx(lm_nll + count_nll, rel=1e-5) and count_nll > 1.0
    assert res["given"]["nll"] == pytest.approx(cond_nll, rel=1e-5)
    assert abs(res["given"]["nll"] - res["self"]["nll"]) > 1e-3  # the graph matters
    p, r = tp / n_pred, tp / n_gold
    assert res["self"]["arc_f1"] == pytest.approx(100 * 2 * p * r / (p + r)) == res["beam:1"]["arc_f1"]
    # per word counts </s>; the position types add up to the NLL; the joint pays for the gold arcs at word starts
    for row in res.values():
        assert row["ppl_per_word"] == pytest.approx(math.exp(row["nll"] / row["words"]))
        parts = sum(row[f"tokens.{k}"] * row[f"bits.{k}"] * LN2 for k in ("eos", "word_initial", "continuation"))
        assert parts == pytest.approx(row["nll"], rel=1e-9)
    g, j = res["given"], res["given-joint"]
    assert j["bits.continuation"] == g["bits.continuation"] and j["bits.word_initial"] > g["bits.word_initial"]
    gilt["results"]["self_ppl"] = res["self"]["ppl"]
    gilt["results"]["given_ppl"] = res["given"]["ppl"]


def test_prefix_invariance(gilt):
    """Sentences sharing their first words get the same per-token scores, graphs and prefix marginals
    there, under self and beam:3 (nothing after the prefix is looked at); and the beam's per-token
    increments add up to its running logsumexp at every word boundary."""
    from sipe_fairseq.data.encode import SentenceEncoder

    enc = SentenceEncoder(str(gilt["data"]))
    d = enc.dictionary
    checked = 0
    for good, i, bad_form, _ in tg.minimal_pair_trees(6, seed=7):
        a = enc.encode(good.words)
        b = enc.encode(good.words[:i] + [bad_form] + good.words[i + 1:])
        q = a[3][i]  # the first token that differs, inside the differing word i + 1 (0-based i)
        while int(a[0][q]) == int(b[0][q]):
            q += 1
        assert a[3][: i + 1] == b[3][: i + 1] and bool((a[0][:q] == b[0][:q]).all()) and q < a[3][i + 1]
        for source in ("self", "beam:3"):
            sa, sb = score_encoded(gilt["model"], [a[:3], b[:3]], source, d)
            assert sa.token_logprobs[:q] == pytest.approx(sb.token_logprobs[:q], abs=1e-9)
            assert sa.extra["prefix_logp"][:i] == pytest.approx(sb.extra["prefix_logp"][:i], abs=1e-9)
            assert {x for x in map(tuple, sa.extra["arcs"]) if max(x) <= i} == \
                   {x for x in map(tuple, sb.extra["arcs"]) if max(x) <= i}  # the graph of the shared words 1..i
            assert sa.token_logprobs[q] != pytest.approx(sb.token_logprobs[q], abs=1e-6)
            ends = [s - 1 for s in a[3][1:]] + [len(a[0]) - 2, len(a[0]) - 1]  # last target of each word, then </s>
            cum = torch.tensor(sa.token_logprobs, dtype=torch.float64).cumsum(0)
            assert [float(cum[e]) for e in ends] == pytest.approx(sa.extra["prefix_logp"], abs=1e-9)
            assert sa.logprob == pytest.approx(float(cum[-1]), abs=1e-9)
            checked += 1
    assert checked == 12


def test_fairseq_eval_lm_inference_tags_self_equals_sipe_eval_lm_self(gilt):
    """``fairseq-eval-lm --task gilt_lm --sample-break-mode eos --inference-tags self`` prints the
    perplexity ``sipe-eval-lm --tags self`` computes (the default, given, the gold conditional)."""
    if "self_ppl" not in gilt["results"]:
        pytest.skip("needs test_self_equals_beam1_and_an_independent_greedy_loop")
    from fairseq import options
    from fairseq_cli.eval_lm import main

    def stock(*extra):
        parser = options.get_eval_lm_parser()
        args = options.parse_args_and_arch(parser, [str(gilt["data"]), "--path", str(gilt["ck"]), "--user-dir", PLUGIN,
                                                    "--task", "gilt_lm", "--gen-subset", "valid", "--sample-break-mode", "eos",
                                                    "--max-tokens", "2048", "--cpu", "--num-workers", "0", *extra])
        return main(args)

    honest = stock("--inference-tags", "self")
    given = stock()
    assert honest["perplexity"] == pytest.approx(gilt["results"]["self_ppl"], rel=1e-4)
    assert given["perplexity"] == pytest.approx(gilt["results"]["given_ppl"], rel=1e-4)
    assert abs(math.log(honest["perplexity"]) - math.log(given["perplexity"])) > 1e-4


def test_bad_input_is_one_line(gilt, tmp_path, capsys):
    """--gilt-count-beam 0: usage error (exit 2); --inference-tags self with blocks of several
    sentences: fairseq-eval-lm stops with the one-line EvaluationError."""
    from fairseq import options
    from fairseq_cli.eval_lm import main

    from sipe_fairseq.tasks.sipe_data import EvaluationError

    with pytest.raises(SystemExit) as e:
        eval_lm_main([str(gilt["data"]), "--path", str(gilt["ck"]), "--tags", "beam:2", "--gilt-count-beam", "0"])
    assert e.value.code == 2 and "--gilt-count-beam" in capsys.readouterr().err
    parser = options.get_eval_lm_parser()
    args = options.parse_args_and_arch(parser, [str(gilt["data"]), "--path", str(gilt["ck"]), "--user-dir", PLUGIN,
                                                "--task", "gilt_lm", "--gen-subset", "valid", "--sample-break-mode",
                                                "complete", "--inference-tags", "self", "--cpu", "--num-workers", "0"])
    with pytest.raises(EvaluationError, match="sample-break-mode eos"):
        main(args)


def test_gilt_and_sipe_side_by_side(gilt, train_checkpoint, tmp_path, capsys):
    """One ``sipe-eval-lm`` call with a GiLT and a SiPE checkpoint: a row per model and source, the
    SiPE numbers those of the engine called directly, arc F1 only for GiLT; GiLT's joint and beam rows
    say what they are."""
    from sipe_fairseq.checkpoints import load_lm

    sipe_ck = train_checkpoint(txl("position"))
    res = run_eval_lm(gilt, tmp_path, f"gilt={gilt['ck']}", f"pos={sipe_ck}", tags="given,self,beam:2")
    printed = capsys.readouterr().out
    for name, given, joint, beam in (("gilt", "given: p(x\\|G) (conditional)",
                                      "given: training joint (Bernoulli arcs; not a bound)", "beam:2: beam marginal over counts"),
                                     ("pos", "given: p(x\\|tags) (conditional)", "given: joint bound p(x,tags)",
                                      "beam:2: bound on p(x)")):
        for label in (given, joint, "self: exact q(x)", beam):
            assert f"| {name} | {label} |" in printed
        assert sorted(res[name]["tag_sources"]) == ["beam:2", "given", "given-joint", "self"]  # --json sorts keys
        assert all(math.isfinite(r["ppl"]) for r in res[name]["tag_sources"].values())
    assert "gilt given p(x\\|G) | gilt given joint | gilt self exact | gilt beam:2 | pos given p(x\\|tags)" in printed
    assert "arc_f1" in res["gilt"]["tag_sources"]["beam:2"] and "arc_f1" not in res["pos"]["tag_sources"]["beam:2"]
    model, task = load_lm(str(sipe_ck), str(gilt["data"]))
    own = prefix_scores.score_split_sources(model, task, "valid", ["self", "beam:2"])
    for src in ("self", "beam:2"):
        assert res["pos"]["tag_sources"][src]["nll"] == pytest.approx(own[src]["nll"], rel=1e-9)
    assert res["gilt"]["lm"]["ppl"] > 1 and res["gilt"]["arcs"]["count"] > 0  # the first table: gold arcs paid in the joint


# ----------------------------------------------------------------------------- BLiMP, SyntaxGym
@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gilt-blimp")
    folder = root / "pairs"
    folder.mkdir()
    toy_pairs = tg.minimal_pairs(N_PAIRS, seed=7)
    for uid in tg.PAIR_UIDS:
        tg.write_jsonl([p for p in toy_pairs if p["UID"] == uid], folder / f"{uid}.jsonl")
    trees = []
    for good, i, bad_form, _ in tg.minimal_pair_trees(N_PAIRS, seed=7):
        trees += [good, tg.ToySentence(good.words[:i] + [bad_form] + good.words[i + 1:], good.lemmas, good.upos,
                                       good.feats, good.heads, good.deprels)]
    tg.write_conllu(trees, root / "trees.conllu")
    return {"pairs": folder, "trees": root / "trees.conllu", "root": root}


def test_blimp_with_each_source(gilt, pairs, caplog):
    """``sipe-eval blimp`` on a GiLT checkpoint: default = ``[self]``; with ``--tags given,self,beam:2``
    one column each; the [self] and [given] correct counts recomputed by the independent greedy loop
    and the full forward on the gold trees; sentence scores differ between sources; ``given`` without
    trees is refused in one line (exit 2)."""
    from sipe_fairseq.data.encode import SentenceEncoder
    from sipe_fairseq.eval import blimp
    from sipe_fairseq.parsing.sources import ConlluTrees

    base = ["blimp", "--data", str(gilt["data"]), "--path", f"gilt={gilt['ck']}", "--blimp", str(pairs["pairs"]),
            "--trees", str(pairs["trees"]), "--batch-size", "8"]
    out = pairs["root"] / "default.json"
    assert eval_main(base + ["--json", str(out)]) == 0
    assert json.loads(out.read_text())["models"] == ["gilt [self]"]
    out = pairs["root"] / "all.json"
    assert eval_main(base + ["--tags", "given,self,beam:2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["models"] == ["gilt", "gilt [self]", "gilt [beam:2]"]
    for label in report["models"]:
        assert 0.0 <= report["overall"]["accuracy"][label] <= 100.0

    enc = SentenceEncoder(str(gilt["data"]))
    read = blimp.read_blimp([pairs["pairs"]])
    prepared = blimp.prepare(read, ConlluTrees(str(pairs["trees"])), enc)
    d = enc.dictionary
    scores = {src: blimp.score_prepared(gilt["model"], prepared, d, src)
              for src in ("given", "self", "beam:2")}
    for src, s in scores.items():
        assert len(s) == 2 * N_PAIRS and all(math.isfinite(v) for v in s.values()), src
    assert any(abs(scores["given"][t] - scores["self"][t]) > 1e-4 for t in scores["given"])
    assert any(abs(scores["beam:2"][t] - scores["self"][t]) > 1e-4 for t in scores["self"])
    independent = {"given": {}, "self": {}}
    for text, (tokens, terms, _) in prepared.encoded.items():
        words = words_of(tokens, word_starts(tokens, terms, d))
        independent["self"][text] = sum(greedy_loop(gilt["model"], words)[1])
        independent["given"][text] = sum(per_token(gilt["model"], words, gold_graph(prepared.heads[text])))
    for src, label in (("self", "gilt [self]"), ("given", "gilt")):
        for t, v in independent[src].items():
            assert scores[src][t] == pytest.approx(v, abs=1e-4)
        correct = sum(independent[src][p.good] > independent[src][p.bad] for p in read)
        assert report["overall"]["correct"][label] == correct

    gilt["results"]["blimp_self"] = report["overall"]["accuracy"]["gilt [self]"]
    caplog.clear()
    assert eval_main(base[:-4] + ["--parser", "none", "--tags", "given", "--batch-size", "8"]) == 2
    assert any("needs the sentence's graph" in r.getMessage() for r in caplog.records)


class ChainParser:
    """Fake parser: word 1 is the root, every other word depends on the previous one."""

    def __init__(self, arg=""):
        self.spec = "test-chain"

    def parse_words(self, sentences):
        return [[0] + list(range(1, len(w))) for w in sentences]

    def parse_text(self, sentences):
        raise NotImplementedError


@pytest.fixture
def chain_parser():
    register_parser("test-chain")(ChainParser)
    yield
    PARSERS.pop("test-chain", None)


def test_syntaxgym_with_each_source(gilt, chain_parser, tmp_path):
    """``sipe-eval syntaxgym --tags given,self,beam:3`` on a GiLT checkpoint: [beam:3] region
    surprisals are differences of the beam's prefix marginal (running logsumexp after each word) at
    the region boundaries; [self] ones the independent greedy loop's; given ones the full forward on
    the parser's tree as arcs; all finite, and they differ between sources."""
    suite = tmp_path / "s.json"
    items = [{"a": ["the cat", "sees", "the dog"], "b": ["the cat", "sees", "the dogs"]},
             {"a": ["the cats", "see", "a dog"], "b": ["the cat", "sees", "a dog"]}]
    data = {"meta": {"name": "toy", "metric": "sum"}, "region_meta": {},
            "predictions": [{"type": "formula", "formula": "(3;%a%) < (3;%b%)"}],
            "items": [{"item_number": i + 1, "conditions": [
                {"condition_name": c, "regions": [{"region_number": k + 1, "content": t} for k, t in enumerate(regs)]}
                for c, regs in conds.items()]} for i, conds in enumerate(items)]}
    suite.write_text(json.dumps(data))
    out = tmp_path / "sg.json"
    assert eval_main(["syntaxgym", "--data", str(gilt["data"]), "--path", f"gilt={gilt['ck']}", "--suites", str(suite),
                      "--parser", "test-chain", "--tags", "given,self,beam:3", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["models"] == ["gilt", "gilt [self]", "gilt [beam:3]"]

    from sipe_fairseq.data.encode import SentenceEncoder

    enc = SentenceEncoder(str(gilt["data"]))
    d = enc.dictionary
    _, sentences = sg.read_suites([suite])
    sg.tree_and_encode(sentences, ChainParser(), enc)
    checked, differ = 0, 0
    for s in sentences:
        item = next(i for i in report["items"] if i["item"] == s.item)
        got = {label: item["results"][label]["surprisals"][s.condition.name] for label in report["models"]}
        tokens, terms, _, firsts = s.encoded
        words = words_of(tokens, word_starts(tokens, terms, d))
        greedy = greedy_loop(gilt["model"], words)[1]
        gold = per_token(gilt["model"], words, gold_graph(s.heads))
        beam = score_encoded(gilt["model"], [s.encoded[:3]], "beam:3", d)[0]
        prefix = [0.0] + beam.extra["prefix_logp"]  # the prefix marginal before word 1, after each word
        first_word = 0
        for region in s.condition.regions:
            num, n = region.number, len(region.words)
            a, b = firsts[first_word], (firsts[first_word + n] if first_word + n < len(firsts) else len(tokens) - 1)
            assert got["gilt [self]"][str(num)] == pytest.approx(-sum(greedy[a:b]) / LN2, abs=1e-4)
            assert got["gilt"][str(num)] == pytest.approx(-sum(gold[a:b]) / LN2, abs=1e-4)
            # a float32 model, the suite scored in batches and this sentence alone: float32 rounding, as above
            assert got["gilt [beam:3]"][str(num)] == pytest.approx(
                -(prefix[first_word + n] - prefix[first_word]) / LN2, abs=1e-4)
            assert all(math.isfinite(got[label][str(num)]) for label in got)
            differ += abs(got["gilt"][str(num)] - got["gilt [self]"][str(num)]) > 1e-3
            first_word += n
            checked += 1
    assert checked == 12 and differ > 0
    for label in report["models"]:
        assert report["overall"][label]["accuracy"] is not None


def test_report_for_a_gilt_checkpoint(gilt, pairs, tmp_path):
    """``sipe-eval report --tags given,self``: the GiLT row's [self] perplexity is sipe-eval-lm's
    self number (every sentence alone), its [self] BLiMP sipe-eval blimp's."""
    if "self_ppl" not in gilt["results"] or "blimp_self" not in gilt["results"]:
        pytest.skip("needs the sipe-eval-lm and BLiMP tests of this module")
    out = tmp_path / "report.json"
    assert eval_main(["report", "--data", str(gilt["data"]), "--path", f"gilt={gilt['ck']}", "--blimp", str(pairs["pairs"]),
                      "--trees", str(pairs["trees"]), "--split", "valid", "--tags", "given,self", "--json", str(out)]) == 0
    row = json.loads(out.read_text())["rows"][0]
    assert row["ppl@self"] == pytest.approx(gilt["results"]["self_ppl"], rel=1e-9)
    assert row["blimp@self"] == pytest.approx(gilt["results"]["blimp_self"])
    assert math.isfinite(row["ppl"]) and row["ppl_word@self"] > row["ppl@self"]


def test_blocks_longer_than_the_model_are_left_out_and_counted(gilt, caplog):
    """A window would cut a sentence out of its graph: with positions smaller than some blocks, gilt_lm's eval
    batches leave those blocks out whole (no crash) and the end-of-split line counts the tokens left out."""
    import logging

    task = gilt["task"]
    task.load_dataset("valid")
    ds = task.dataset("valid")
    limit = int(sorted(ds.sizes)[len(ds) // 2])  # about half the blocks are longer
    with caplog.at_level(logging.INFO):
        itr = task.eval_lm_dataloader(ds, max_tokens=4096, max_positions=limit)
        batches = list(itr)
    kept = sum(int(b["ntokens"]) for b in batches)
    longer = int(sum(int(n) for n in ds.sizes if n > limit))
    assert longer > 0 and kept == int(sum(ds.sizes)) - longer
    assert all(b["net_input"]["src_tokens"].size(1) <= limit for b in batches)
    note = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert note and f"{longer} left out" in note[-1] and "not windowed" in note[-1]
