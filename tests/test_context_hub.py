"""Issue 50, items 1 and 5 in the Python interface: ``LanguageModel.score(texts, context=...)``,
``conditional_score(prefixes, continuations)`` and the structure fields of ``ScoredText``, on tiny random decoders
(SiPE, GiLT, a plain one) over an in-process toy data directory. The independent computations: the context's own
run, the whole sentence's run (a prefix in the same sentence: its tail), per-token ranks from the whole run."""
import math

import pytest
import torch

import fairseq  # noqa: F401
from conftest import toy_lm_task
from sipe_fairseq.hub.interface import LanguageModel

LN2 = math.log(2)
TOL = 1e-9
TEXTS = ["the dog sees a cat", "a cat runs", "the bell is old ."]
CONTEXT = "the door to the bell is old ."


@pytest.fixture(scope="module")
def lms(tmp_path_factory):
    from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder, GiltLanguageModel
    from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel
    task = toy_lm_task(tmp_path_factory.mktemp("hub-context"))
    d = task.source_dictionary
    common = dict(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                  dropout=0.0, tokens_per_sample=128, max_target_positions=128)
    out = {}
    for name in ("sipe", "none", "gilt"):
        torch.manual_seed(0)
        if name == "gilt":
            model = GiltLanguageModel(GiltDecoder(GiltConfig(**common), d))
        else:
            cfg = SiPEDecoderConfig(sipe_injection="position" if name == "sipe" else "none",
                                    sipe_tag_heads="on" if name == "sipe" else "off", **common)
            model = SiPETransformerXLModel(SiPEDecoder(cfg, d))
        out[name] = LanguageModel(model.double().eval(), task)
    return out


@pytest.mark.parametrize("name,tags", [("sipe", "self"), ("sipe", "mix:4"), ("gilt", "self"), ("gilt", "mix:4"),
                                       ("none", None)])
def test_score_in_context(lms, name, tags):
    lm = lms[name]
    alone = lm.score(TEXTS, tags)
    got = lm.score(TEXTS, tags, context=CONTEXT)
    ctx = lm.score(CONTEXT, tags)[0]
    for a, r in zip(alone, got):
        assert r.tokens == a.tokens and r.words == a.words and r.word_offsets == a.word_offsets
        assert abs(r.context_logprob - ctx.logprob) < TOL  # log p(context), the context's own run
        assert r.context_tokens == len(ctx.tokens) and r.context_dropped == 0
        assert abs(sum(r.token_surprisal) * LN2 + r.logprob) < TOL
        assert abs(sum(r.word_surprisal) + r.end_surprisal + r.boundary_surprisal[0] - sum(r.token_surprisal)) < 1e-9
        assert abs(r.logprob - a.logprob) > 1e-6  # the context is read
    # one context per text, None and "" being no context
    mixed = lm.score(TEXTS, tags, context=[CONTEXT, None, ""])
    assert abs(mixed[0].logprob - got[0].logprob) < TOL  # (another batch: float64 sums in another order)
    assert abs(mixed[1].logprob - alone[1].logprob) < TOL and abs(mixed[2].logprob - alone[2].logprob) < TOL
    assert mixed[1].context_logprob is None and mixed[1].context_tokens == 0
    # several context sentences (a tuple: the same for every text) = their chain
    two = lm.score(TEXTS[:1], tags, context=(TEXTS[1], CONTEXT))[0]
    assert two.context_tokens == len(lm.score(TEXTS[1])[0].tokens) + len(ctx.tokens)


@pytest.mark.parametrize("name,tags", [("sipe", "self"), ("sipe", "mix:4"), ("gilt", "mix:4"), ("none", None)])
def test_conditional_score_is_the_whole_sentence_s_tail(lms, name, tags):
    """A prefix of the same sentence: every token's log-prob and rank, and every word's surprisal, equal the whole
    sentence's after the prefix (the same prefix; minicons' ``conditional_score``)."""
    lm = lms[name]
    prefixes, conts = ["the dog", "a"], ["sees a cat", "cat runs"]
    got = lm.conditional_score(prefixes, conts, tags, measures=("rank", "entropy"))
    whole = lm.score([p + " " + c for p, c in zip(prefixes, conts)], tags, measures=("rank", "entropy"))
    for r, w, c in zip(got, whole, conts):
        n = len(r.tokens)
        assert r.tokens == w.tokens[-n:] and r.words == c.split()
        assert max(abs(a - b) for a, b in zip(r.token_logprobs, w.token_logprobs[-n:])) < TOL
        assert r.token_rank == w.token_rank[-n:]
        assert max(abs(a - b) for a, b in zip(r.token_entropy, w.token_entropy[-n:])) < 1e-9
        k = len(r.words)
        assert max(abs(a - b) for a, b in zip(r.word_surprisal, w.word_surprisal[-k:])) < 1e-9
        assert abs(r.logprob + r.context_logprob - w.logprob) < 1e-9
        if r.structure_surprisal is not None:
            assert max(abs(a - b) for a, b in zip(r.structure_surprisal, w.structure_surprisal[-k:])) < TOL
    # a preceding context of whole sentences instead
    sep = lm.conditional_score(prefixes[0], conts[:1], tags, same_sentence=False)[0]
    assert abs(sep.logprob - lm.score(conts[:1], tags, context=prefixes[0])[0].logprob) < TOL


def test_structure_fields(lms):
    """Under self and mix:K, per word: the lexical surprisal is the plain sum of the word's pieces; the structure
    fields are None where the source has none (given, beam:K, a model without structure)."""
    for name in ("sipe", "gilt"):
        for tags in ("self", "mix:4"):
            for r in lms[name].score(TEXTS, tags):
                assert len(r.structure_surprisal) == len(r.structure_entropy) == len(r.words)
                assert max(abs(a - b) for a, b in zip(r.lexical_surprisal, r.word_surprisal_sum)) < TOL
                assert all(x >= 0 for x in r.structure_entropy + r.posterior_entropy)
        assert lms[name].score(TEXTS[:1], "beam:4")[0].structure_surprisal is None
    assert lms["none"].score(TEXTS[:1])[0].structure_surprisal is None


def test_long_context_keeps_the_latest_sentences(lms):
    lm = lms["sipe"]
    sentence_tokens = len(lm.score(CONTEXT)[0].tokens)
    text_tokens = len(lm.score(TEXTS[0])[0].tokens)
    fit = (lm.max_positions() - text_tokens) // sentence_tokens
    r = lm.score(TEXTS[0], "self", context=[(CONTEXT,) * (fit + 3)])[0]
    assert r.context_dropped == 3 and r.context_tokens == fit * sentence_tokens
    assert abs(r.logprob - lm.score(TEXTS[0], "self", context=[(CONTEXT,) * fit])[0].logprob) < TOL


def test_context_bad_input(lms):
    lm = lms["sipe"]
    with pytest.raises(ValueError, match="2 entries for 3 texts"):
        lm.score(TEXTS, "self", context=[CONTEXT, CONTEXT])
    with pytest.raises(ValueError, match="context"):
        lm.score(TEXTS, "beam:2", context=CONTEXT)
    with pytest.raises(ValueError, match="context"):
        lm.score(TEXTS, "given", context=CONTEXT)


def test_python_doc_context_blocks_run_as_written(lms, capsys):
    """The ``python context`` blocks of docs/python.md, in order, with ``lm`` a SiPE model (docs/python.md's
    ``python`` blocks run in tests/test_hub.py on a trained checkpoint; these need only ``lm``)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python context\n(.*?)```", text, re.S)
    assert len(blocks) == 2
    namespace = {"lm": lms["sipe"]}
    for block in blocks:
        exec(compile(block, "docs/python.md", "exec"), namespace)  # noqa: S102
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("alone") and "after the story" in out[0]
    assert out[1].startswith("['sleep', '.']")
    assert [line.split()[0] for line in out[2:]] == "the dogs near the cat sleep .".split()


def test_a_context_sentence_longer_than_the_positions_is_dropped_whole(lms):
    """A context sentence that alone exceeds the positions ends the context that can be fed: it and every older one
    are counted as dropped, never cut."""
    lm = lms["sipe"]
    long = " ".join(["the dog sees a cat"] * 30)
    assert len(lm.tokenize(long)[0].token_ids) > lm.max_positions()
    r = lm.score(TEXTS[0], "self", context=[(CONTEXT, long, TEXTS[1])])[0]
    assert r.context_dropped == 2 and r.context_tokens == len(lm.score(TEXTS[1])[0].tokens)
    assert abs(r.logprob - lm.score(TEXTS[0], "self", context=TEXTS[1])[0].logprob) < TOL
