"""Tag timing (``--tag-timing``, sipe_fairseq/hexatag/timing.py): which tags each word carries and what
the heads choose there.

What is asserted:
- the unit automaton accepts exactly the timed forms of the sequences ``decode`` accepts (N <= 5,
  brute force over every unit sequence), and timing round-trips;
- the data streams carry the timed units at the words' first subwords;
- on a float64 word-aware decoder, for ``nt-delay`` and ``delay``: ``given`` equals an independent full
  forward (the timed tags fed, each word's fed tags scored at the position before it, the fixed parts
  free), through the cache too; ``beam`` over all units = the exact marginal by enumeration; ``self``
  = one full forward with its own tags; batches = one at a time; greedy generation = ``self`` (tests/test_word_aware_heads.py);
- on a ``sipe-preprocess`` directory, the eval-lm data path (timed streams and targets) gives the
  engine's ``given`` and joint numbers.
"""
import itertools
import math
from pathlib import Path

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from sipe_fairseq.data.tag_timing import time_sentence_streams
from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
from sipe_fairseq.hexatag.constrained import CLOSED, PAIRS, START, is_valid
from sipe_fairseq.hexatag.errors import OptionError
from sipe_fairseq.hexatag.timing import TIMINGS, advance_unit, can_end, timed_pairs, untimed_pairs
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import sentence_of
from conftest import small_dictionary  # noqa: E402
from test_prefix_tags import PrefixTagScorer, encode_sentence, parser_tags, sentence_pairs, word_pieces  # noqa: E402
from test_word_aware_heads import make_word_model  # noqa: E402

PLACEMENT = "last_subword"
TOL = 1e-9  # float64: the same operations in another order (cache vs full forward, batch vs alone)
SHIFTED = ("nt-delay", "delay")


def valid_sequences(n):
    return [list(s) for s in itertools.product(PAIRS, repeat=n) if is_valid(list(s))]


@pytest.mark.parametrize("timing", TIMINGS)
def test_unit_automaton_accepts_exactly_the_timed_valid_sequences(timing):
    for n in range(1, 6):
        want = {tuple(timed_pairs(v, timing)) for v in valid_sequences(n)}
        got = set()
        for units, state in prefix_valid_units(n, timing):
            if (state == CLOSED) if timing == "paper" else can_end(state, timing, n):
                got.add(tuple(units))
        assert got == want, (timing, n)
        for v in valid_sequences(n):
            back = untimed_pairs(timed_pairs(v, timing), timing)
            assert back == (v[:-1] + [(None, None)] if timing == "delay" else v)


def test_timed_pairs_by_hand():
    pairs = [("l", "L1"), ("l", "R1"), ("r", "EOS")]
    assert timed_pairs(pairs, "nt-delay") == [("l", "EOS"), ("l", "L1"), ("r", "R1")]
    assert timed_pairs(pairs, "delay") == [(None, None), ("l", "L1"), ("l", "R1")]
    assert timed_pairs(pairs, "paper") == pairs


@pytest.mark.parametrize("timing", SHIFTED)
def test_streams_carry_the_units_at_first_subwords(timing):
    d = small_dictionary(12, mark="\u2581", n_continuations=6)
    pieces = word_pieces(d, [(1, 2), (7, 0), (4, 1), (2, 0)])
    tags = parser_tags(4)
    _, a, b = encode_sentence(d, pieces, tags)
    ta, tb = time_sentence_streams(a, b, timing)
    starts = [0, 3, 4, 6]
    for pos, unit in zip(starts, timed_pairs(tags, timing)):
        want_a = NOTAG_ID if unit[0] is None else FIRST_TAG_ID + TERMINALS.index(unit[0])
        want_b = NOTAG_ID if unit[1] is None else FIRST_TAG_ID + NONTERMINALS.index(unit[1])
        assert (int(ta[pos]), int(tb[pos])) == (want_a, want_b)
    others = [p for p in range(len(a)) if p not in starts]
    assert bool((ta[others] == NOTAG_ID).all() and (tb[others] == NOTAG_ID).all())


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


def timed_model(dictionary, timing, seed=0, positions=64):
    model = make_word_model(dictionary, seed=seed, positions=positions)
    model.decoder.tag_timing = timing
    return model


def units_of(tags, timing):
    """What the words carry, from tags in the paper's layout (delay: the last pair, "-", never enters)."""
    return [(None, None)] + list(tags[:-1]) if timing == "delay" else timed_pairs(tags, timing)


@torch.no_grad()
def full_reference(model, dictionary, pieces, tags, timing, units=None):
    """LM log-probs per target and log p(x, units) from one full forward, written from the timing's
    definition: word w's first subword carries its unit; the heads at the position before it (which
    read that subword) pay for the unit's tags, but for the fixed parts."""
    toks = [p for ps in pieces for p in ps] + [dictionary.eos()]
    starts = list(itertools.accumulate([0] + [len(ps) for ps in pieces[:-1]]))
    units = units_of(tags, timing) if units is None else units
    src = torch.tensor([[dictionary.eos()] + toks[:-1]])
    terms = torch.full_like(src, NOTAG_ID)
    nts = torch.full_like(src, NOTAG_ID)
    for s, (t, n) in zip(starts, units):
        if t is not None:
            terms[0, s + 1] = FIRST_TAG_ID + TERMINALS.index(t)
            nts[0, s + 1] = FIRST_TAG_ID + NONTERMINALS.index(n)
    logits, extra = model(src, src_terminals=terms, src_nonterminals=nts)
    lm = torch.log_softmax(logits[0].double(), -1).gather(-1, torch.tensor(toks)[:, None]).squeeze(-1)
    lt = torch.log_softmax(extra["terminal_logits"][0].double(), -1)
    ln = torch.log_softmax(extra["nonterminal_logits"][0].double(), -1)
    joint = lm.sum()
    for w, (s, (t, n)) in enumerate(zip(starts, units)):
        if t is None:  # delay: word 1 carries nothing
            continue
        joint = joint + lt[s, TERMINALS.index(t)]
        if not (timing == "nt-delay" and w == 0):  # word 1's EOS: a fixed start marker
            joint = joint + ln[s, NONTERMINALS.index(n)]
    return lm, float(joint)


def prefix_valid_units(n, timing):
    """Every unit sequence of n words the prefix automaton takes, with the state it leaves (the engine's
    beam does not ask the tree to close at ``</s>``, in any timing). Under ``delay`` word 1 carries nothing."""
    first = [(None, None)] if timing == "delay" else []
    out = []
    for units in itertools.product(PAIRS, repeat=n - len(first)):
        state = START
        for u in units:
            state = advance_unit(state, u, timing)
            if state is None:
                break
        else:
            out.append((first + list(units), state))
    return out


def enumerated(model, dictionary, pieces, n, timing):
    """The joint of every prefix-valid unit sequence of n words and the log of their sum."""
    seqs = [units for units, _ in prefix_valid_units(n, timing)]
    joints = torch.tensor([full_reference(model, dictionary, pieces, None, timing, units=u)[1] for u in seqs],
                          dtype=torch.float64)
    return seqs, joints, float(torch.logsumexp(joints, 0))


@pytest.mark.parametrize("timing", SHIFTED)
def test_given_equals_an_independent_full_forward(dictionary, timing):
    model = timed_model(dictionary, timing)
    pieces = word_pieces(dictionary, [(1, 1), (7, 0), (4, 2), (9, 0)])
    tags = parser_tags(4)
    toks, a, b = encode_sentence(dictionary, pieces, tags)
    lm, joint = full_reference(model, dictionary, pieces, tags, timing)
    sent = [sentence_of(0, toks, a, b, None, dictionary.eos())]
    opts = StructureOptions(placement=PLACEMENT)
    for incremental in (False, True):
        x = score_sentences(model, sent, "given", opts, dictionary.eos(), dictionary.pad(), force_incremental=incremental)[0]
        assert max(abs(u - v) for u, v in zip(x.token_logprobs, lm.tolist())) < TOL
        assert abs(x.joint - joint) < TOL
        assert x.tags == (tags[:-1] + [("-", "-")] if timing == "delay" else tags) and x.complete


@pytest.mark.parametrize("timing", SHIFTED)
@pytest.mark.parametrize("n", [1, 3, 4])
def test_beam_equals_enumerated_marginal_and_self_is_one_forward(dictionary, timing, n):
    model = timed_model(dictionary, timing, seed=2)
    pieces = word_pieces(dictionary, [(1, 1), (7, 0), (4, 2), (9, 1)][:n])
    toks, a, b = encode_sentence(dictionary, pieces, parser_tags(n))
    seqs, joints, exact = enumerated(model, dictionary, pieces, n, timing)
    full = PrefixTagScorer(model, f"beam:{len(seqs)}", PLACEMENT).score(toks, a, b)
    assert abs(full.logprob - exact) < TOL
    entered = n - (timing == "delay")  # delay: the last pair never enters ("-")
    one = PrefixTagScorer(model, "beam:1", PLACEMENT).score(toks, a, b)
    assert abs(one.logprob - float(joints[seqs.index(units_of(one.tags, timing))])) < TOL
    own = PrefixTagScorer(model, "self", PLACEMENT).score(toks, a, b)
    assert own.tags[entered:] == [("-", "-")] * (n - entered)
    lm, joint = full_reference(model, dictionary, pieces, own.tags, timing)
    assert max(abs(u - v) for u, v in zip(own.token_logprobs, lm.tolist())) < TOL
    assert abs(own.joint - joint) < TOL


@pytest.mark.parametrize("timing", SHIFTED)
@pytest.mark.parametrize("source", ["given", "self", "beam:3"])
def test_batches_equal_one_at_a_time(dictionary, timing, source):
    model = timed_model(dictionary, timing, seed=1)
    encoded = [s for pair in sentence_pairs(dictionary, 3, seed=7) for s in pair]
    together = PrefixTagScorer(model, source, PLACEMENT, batch=len(encoded)).score_batch(encoded)
    for sent, x in zip(encoded, together):
        alone = PrefixTagScorer(model, source, PLACEMENT).score(*sent)
        assert x.tags == alone.tags and abs(x.logprob - alone.logprob) < TOL and abs(x.joint - alone.joint) < TOL


def test_shifted_timing_needs_the_last_subword_anchor(dictionary):
    from types import SimpleNamespace

    from sipe_fairseq.models.sipe_lm import SiPEDecoderConfig, SiPETransformerXLModel

    cfg = SiPEDecoderConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=1, decoder_attention_heads=2,
                            sipe_injection="position", tokens_per_sample=16, max_target_positions=16)
    task = SimpleNamespace(args=SimpleNamespace(tag_head_placement="first_subword", tag_timing="nt-delay"),
                           target_dictionary=dictionary)
    with pytest.raises(OptionError, match="--tag-head-placement last_subword"):
        SiPETransformerXLModel.build_model(cfg, task)
    task.args.tag_head_placement = "last_subword"
    assert SiPETransformerXLModel.build_model(cfg, task).decoder.tag_timing == "nt-delay"


@pytest.mark.parametrize("timing", SHIFTED)
def test_split_given_matches_eval_lm_blocks(tmp_path, timing):
    """The data path (timed streams, targets without the fixed parts) and the engine's given agree on a
    sipe-preprocess directory: perplexity, joint bound and counts."""
    from conftest import toy_lm_task
    from sipe_fairseq.eval.prefix_scores import score_split_sources
    from sipe_fairseq.eval.perplexity import score_split

    task = toy_lm_task(tmp_path, sample_break_mode="eos", tokens_per_sample=512, tag_head_placement=PLACEMENT,
                       tag_timing=timing)
    model = timed_model(task.source_dictionary, timing, positions=512)
    blocks = score_split(model, task, "valid")
    ours = score_split_sources(model, task, "valid", ["given"])
    given, joint = ours["given"], ours["given-joint"]
    assert given["sentences"] == 12 and given["tokens"] == blocks["lm"]["count"]
    assert given["words"] == blocks["lm.per_word"]["count"]
    for kind in ("eos", "word_initial", "continuation"):
        assert given[f"tokens.{kind}"] == blocks[f"lm.{kind}"]["count"]
    assert abs(math.log(given["ppl"]) - blocks["lm"]["nll"]) < 1e-5
    assert abs(math.log(joint["ppl"]) - blocks["joint"]["nll"]) < 1e-5


@pytest.mark.parametrize("timing", SHIFTED)
def test_sentence_scorers_feed_the_timed_tags(dictionary, timing):
    """BLiMP's and SyntaxGym's given path (the engine on word-aligned tags, as ``SentenceEncoder`` gives them:
    ``score_encoded``) feeds the model's timing: its per-token numbers are those of one ordinary full forward
    of the timed streams (``reference_ops.full_forward_logprobs``, float32 log-softmax there: 1e-5), not
    those of the untimed ones."""
    from reference_ops import full_forward_logprobs
    from sipe_fairseq.structure.scoring import score_encoded

    model = timed_model(dictionary, timing, seed=4)
    encoded = [s for pair in sentence_pairs(dictionary, 2, seed=9) for s in pair]
    engine = score_encoded(model, encoded, "given", dictionary, StructureOptions(placement=PLACEMENT))
    timed = full_forward_logprobs(model, encoded, dictionary.eos())
    model.decoder.tag_timing = "paper"  # the same weights fed the word-aligned streams as they are
    untimed = full_forward_logprobs(model, encoded, dictionary.eos())
    for x, lp in zip(engine, timed):
        assert len(x.token_logprobs) == len(lp)
        assert max(abs(u - float(v)) for u, v in zip(x.token_logprobs, lp)) < 1e-5
    assert max(abs(u - float(v)) for x, plain in zip(engine, untimed) for u, v in zip(x.token_logprobs, plain)) > 1e-3


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny word-aware decoder per shifted timing, trained for a few updates through fairseq-train."""
    import os
    import sys

    import launcher
    from sipe_fairseq.cli.preprocess import main as preprocess_main
    from sipe_fairseq.data import toy_grammar

    root = tmp_path_factory.mktemp("timing")
    toy_grammar.make_corpus(root / "toy", n_train=200, n_valid=10, n_test=12, seed=4)
    data = root / "data"
    assert preprocess_main(["--train", str(root / "toy/train.conllu"), "--valid", str(root / "toy/valid.conllu"),
                            "--test", str(root / "toy/test.conllu"), "--destdir", str(data), "--spm-vocab-size", "200"]) == 0
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    out = {"data": data}
    for timing in SHIFTED:
        save = root / f"ck-{timing}"
        cmd = [Path(sys.executable).parent / "fairseq-train", data, "--user-dir", str(Path(sipe_fairseq.__file__).parent),
               "--task", "hexatag_lm", "--criterion", "hexatag_lm", "--arch", "sipe_txl_tiny", "--sipe-injection", "position",
               "--sipe-proj-init-std", "0.5", "--tag-head-placement", PLACEMENT, "--sipe-tag-head-input", "word",
               "--tag-timing", timing, "--optimizer", "adam", "--lr", "0.003", "--max-tokens", "1024", "--max-update", "4",
               "--seed", "1", "--save-dir", save, "--no-epoch-checkpoints", "--disable-validation", "--num-workers", "0",
               "--tokens-per-sample", "128", "--sample-break-mode", "complete"]
        proc = launcher.run(cmd, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[timing] = save / "checkpoint_last.pt"
    return out


@pytest.mark.parametrize("timing", SHIFTED)
def test_fairseq_eval_lm_matches_the_engine(trained, timing):
    """A checkpoint trained with --tag-timing keeps it: fairseq-eval-lm (given, and --inference-tags self)
    prints the perplexities sipe-eval-lm's given and self compute."""
    from fairseq import options
    from fairseq_cli.eval_lm import main

    from sipe_fairseq.checkpoints import load_lm
    from sipe_fairseq.eval.prefix_scores import score_split_sources

    model, task = load_lm(str(trained[timing]), str(trained["data"]))
    assert model.decoder.tag_timing == timing
    ours = score_split_sources(model, task, "test", ["given", "self"])

    def eval_lm(*extra, timing_args=("--tag-timing", timing)):
        parser = options.get_eval_lm_parser()
        args = options.parse_args_and_arch(parser, [str(trained["data"]), "--path", str(trained[timing]), "--user-dir",
                                                    str(Path(sipe_fairseq.__file__).parent), "--task", "hexatag_lm",
                                                    "--gen-subset", "test", "--tokens-per-sample", "128", "--max-tokens",
                                                    "2048", "--cpu", "--num-workers", "0", "--sample-break-mode", "eos",
                                                    "--tag-head-placement", PLACEMENT, *timing_args, *extra])
        return main(args)

    assert eval_lm()["perplexity"] == pytest.approx(ours["given"]["ppl"], rel=1e-4)
    assert eval_lm("--inference-tags", "self")["perplexity"] == pytest.approx(ours["self"]["ppl"], rel=1e-4)
    with pytest.raises(OptionError, match=f"trained with --tag-timing {timing}; the task has --tag-timing paper"):
        eval_lm(timing_args=())  # the data would carry the paper's tags: refused at load


@pytest.mark.parametrize("timing", SHIFTED)
def test_constrained_generation_closes_every_tree(dictionary, timing):
    """The generator's limits in units: every sentence ends as one tree by max_len, though the last EOS
    (delay: the last pair) never enters (delay: completed by the one pair that closes it)."""
    from test_generate import generate

    model = timed_model(dictionary, timing, seed=3)
    hyps, _ = generate(model, dictionary, bsz=4, beam=2, sampling=True, sample_tags=False, seed=5, max_len=30,
                       placement=PLACEMENT, constrained=True)
    tags = [h["tags"] for beam in hyps for h in beam]
    if timing == "delay":
        tags = [t[:-1] + [("r" if len(t) > 1 else "l", "EOS")] for t in tags]
    assert len(tags) == 8 and all(is_valid(t) for t in tags) and max(map(len, tags)) >= 10
