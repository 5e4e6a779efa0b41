"""Word-aware tag decisions (``--sipe-tag-head-input word``): the heads that choose word w's pair read
the prefix state just before word w and the embedding of w's first subword.

Float64 tiny decoders (tests/test_prefix_tags.py's helpers). What is asserted: the heads at a position
read the next input token and nothing later (prefix invariance of the full forward); the structure
engine's choice, made once the word's first subword is seen, equals the full forward's heads (given by
one full forward = the forced path through the cache); beam = exact enumeration; batches = one at a
time; greedy generation = ``self``; the option needs the last_subword anchor.
"""
import itertools

import pytest
import torch

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID
from sipe_fairseq.hexatag.constrained import PAIRS
from sipe_fairseq.hexatag.errors import OptionError
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel
from sipe_fairseq.structure.family import StructureOptions
from sipe_fairseq.structure.scoring import score_sentences
from sipe_fairseq.structure.sentences import sentence_of
from test_prefix_tags import (PrefixTagScorer, encode_sentence, parser_tags, reference, sentence_pairs,  # noqa: E402
                              valid_prefix_sequences, word_pieces)
from conftest import small_dictionary  # noqa: E402

PLACEMENT = "last_subword"
TOL = 1e-9  # float64, the same operations in a different order (full forward vs cache)


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(12, mark="\u2581", n_continuations=6)


def make_word_model(dictionary, seed=0, injection="position", positions=64):
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection=injection, sipe_proj_init_std=0.5, sipe_tag_heads="on",
                            sipe_tag_head_input="word", tokens_per_sample=positions, max_target_positions=positions)
    torch.manual_seed(seed)
    model = SiPETransformerXLModel(SiPEDecoder(cfg, dictionary)).double().eval()
    with torch.no_grad():  # sharp heads that depend on the word: choices differ by context
        model.decoder.terminal_head.weight.mul_(8)
        model.decoder.nonterminal_head.weight.mul_(8)
        model.decoder.tag_head_input.proj.weight.mul_(4)
    return model


@pytest.fixture(scope="module")
def model(dictionary):
    return make_word_model(dictionary)


@torch.no_grad()
def test_heads_read_the_next_token_and_nothing_later(model, dictionary):
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (1, 10), generator=g)
    tags = torch.full_like(tokens, 3)
    p = 4
    _, base = model(tokens, src_terminals=tags, src_nonterminals=tags)
    later = tokens.clone()
    spec, n_real = dictionary.nspecial, len(dictionary) - dictionary.nspecial
    later[0, p + 2:] = spec + (later[0, p + 2:] + 1 - spec) % n_real
    later_tags = tags.clone()
    later_tags[0, p + 1:] = 4
    _, out = model(later, src_terminals=later_tags, src_nonterminals=later_tags)
    for kind in ("terminal_logits", "nonterminal_logits"):
        assert torch.equal(out[kind][0, : p + 1], base[kind][0, : p + 1])  # causal in everything but token p+1
    nxt = tokens.clone()
    nxt[0, p + 1] = spec + (int(nxt[0, p + 1]) + 1 - spec) % n_real
    _, out = model(nxt, src_terminals=tags, src_nonterminals=tags)
    assert (out["terminal_logits"][0, p] - base["terminal_logits"][0, p]).abs().max() > 1e-3  # it reads token p+1
    assert torch.equal(out["terminal_logits"][0, :p], base["terminal_logits"][0, :p])
    # the engine's entry point: the state at p and token p+1 give the full forward's heads at p
    term, nt = model.decoder.word_tag_logits(base["tag_state"][0, p], tokens[0, p + 1])
    torch.testing.assert_close(term, base["terminal_logits"][0, p], rtol=0, atol=TOL)
    torch.testing.assert_close(nt, base["nonterminal_logits"][0, p], rtol=0, atol=TOL)


def test_given_forced_path_equals_one_full_forward(model, dictionary):
    encoded = [s for pair in sentence_pairs(dictionary, 3, seed=5) for s in pair]
    eos = dictionary.eos()
    sents = [sentence_of(i, *e, eos=eos) for i, e in enumerate(encoded)]
    opts = StructureOptions(placement=PLACEMENT)
    full = score_sentences(model, sents, "given", opts, eos, dictionary.pad())
    step = score_sentences(model, sents, "given", opts, eos, dictionary.pad(), force_incremental=True)
    for (e, x), y in zip(zip(encoded, full), step):
        assert x.tags == y.tags
        assert max(abs(u - v) for u, v in zip(x.token_logprobs, y.token_logprobs)) < TOL
        assert max(abs(u - v) for u, v in zip(x.tag_logprobs, y.tag_logprobs)) < TOL
        joint = reference(model, [e], PLACEMENT)[1][0]
        assert abs(x.joint - float(joint)) < TOL


@pytest.mark.parametrize("constrained", [True, False])
def test_beam_equals_enumerated_marginal(model, dictionary, constrained):
    pieces = word_pieces(dictionary, [(1, 1), (7, 0), (4, 2)])
    toks, _, _ = encode_sentence(dictionary, pieces, parser_tags(3))
    seqs = valid_prefix_sequences(3) if constrained else [list(s) for s in itertools.product(PAIRS, repeat=3)]
    encoded = [encode_sentence(dictionary, pieces, seq) for seq in seqs]
    _, joint = reference(model, encoded, PLACEMENT)
    exact = float(torch.logsumexp(joint, 0))
    tags = encoded[0][1], encoded[0][2]
    full = PrefixTagScorer(model, f"beam:{len(seqs)}", PLACEMENT, constrained).score(toks, *tags)
    assert abs(full.logprob - exact) < TOL
    one = PrefixTagScorer(model, "beam:1", PLACEMENT, constrained).score(toks, *tags)
    assert abs(one.logprob - float(joint[seqs.index(one.tags)])) < TOL
    own = PrefixTagScorer(model, "self", PLACEMENT, constrained).score(toks, *tags)
    ref = reference(model, [encode_sentence(dictionary, pieces, own.tags)], PLACEMENT)[0][0]
    assert max(abs(u - v) for u, v in zip(own.token_logprobs, ref.tolist())) < TOL


@pytest.mark.parametrize("source", ["self", "beam:3"])
def test_prefix_invariance_and_batches(model, dictionary, source):
    """Over a shared prefix the engine's numbers and tags agree; a batch = each sentence alone."""
    pairs = sentence_pairs(dictionary)
    scorer = PrefixTagScorer(model, source, PLACEMENT, True)
    for (ta, aa, ba), (tb, ab, bb) in pairs:
        s = 0
        while s < min(len(ta), len(tb)) and int(ta[s]) == int(tb[s]):
            s += 1
        x, y = scorer.score(ta, aa, ba), scorer.score(tb, ab, bb)
        # a word's pair is chosen once its first subword is seen: the words that start inside the prefix
        words = sum(1 for k in range(s) if int(aa[k]) >= FIRST_TAG_ID)
        assert max(abs(u - v) for u, v in zip(x.token_logprobs[:s], y.token_logprobs[:s])) < 1e-10
        if source == "self":
            assert x.tags[:words] == y.tags[:words]
    encoded = [s for pair in pairs for s in pair]
    together = PrefixTagScorer(model, source, PLACEMENT, batch=len(encoded)).score_batch(encoded)
    for sent, x in zip(encoded, together):
        alone = scorer.score(*sent)
        assert x.tags == alone.tags and abs(x.logprob - alone.logprob) < 1e-9


@pytest.mark.parametrize("timing", ["paper", "nt-delay", "delay"])  # --tag-timing (tests/test_tag_timing.py)
def test_greedy_generation_is_self(dictionary, timing):
    from test_generate import generate
    from sipe_fairseq.structure.sentences import Sentence

    model = make_word_model(dictionary, seed=1)
    model.decoder.tag_timing = timing
    # unconstrained: a constrained generator must also close the tree by max_len, which self does not know
    hyps, _ = generate(model, dictionary, bsz=4, beam=2, sampling=True, sample_tags=False, seed=5, max_len=40,
                       placement=PLACEMENT, constrained=False)
    checked = most = 0
    for beam in hyps:
        for h in beam:
            own = score_sentences(model, [Sentence(h["tokens"], h["word_starts"])], "self",
                                  StructureOptions(placement=PLACEMENT, constrained=False), dictionary.eos(),
                                  dictionary.pad())[0]
            assert own.tags == h["tags"]
            assert max(abs(u - float(v)) for u, v in zip(own.token_logprobs, h["positional_scores"])) < 1e-6
            checked += 1
            most = max(most, len(own.tags))
    assert checked == 8 and most >= 10


def test_needs_the_last_subword_anchor(dictionary):
    from types import SimpleNamespace

    cfg = SiPEDecoderConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=1, decoder_attention_heads=2,
                            sipe_injection="position", sipe_tag_head_input="word", tokens_per_sample=16,
                            max_target_positions=16)
    task = SimpleNamespace(args=SimpleNamespace(tag_head_placement="first_subword"), target_dictionary=dictionary)
    with pytest.raises(OptionError, match="--tag-head-placement last_subword"):
        SiPETransformerXLModel.build_model(cfg, task)
    task.args.tag_head_placement = "last_subword"
    assert SiPETransformerXLModel.build_model(cfg, task).decoder.tag_head_input is not None


@pytest.mark.parametrize("word_aware", [True, False])
def test_detached_heads_train_only_themselves(dictionary, word_aware):
    """--sipe-tag-head-detach: the same forward values; the tag losses' gradient reaches the heads (and the
    word-aware layer) and nothing of the LM, which it reaches without the option."""
    from dataclasses import replace

    base = make_word_model(dictionary, seed=2)
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (2, 9), generator=g)
    tags = torch.randint(FIRST_TAG_ID, FIRST_TAG_ID + 2, (2, 9), generator=g)
    grads = {}
    for detach in (False, True):
        cfg = replace(base.decoder.cfg, sipe_tag_head_detach=detach, sipe_tag_head_input="word" if word_aware else "state")
        model = SiPETransformerXLModel(SiPEDecoder(cfg, dictionary)).double()
        model.load_state_dict(base.state_dict(), strict=word_aware)
        _, extra = model(tokens, src_terminals=tags, src_nonterminals=tags)
        loss = extra["terminal_logits"].logsumexp(-1).sum() + extra["nonterminal_logits"].logsumexp(-1).sum()
        model.zero_grad()
        loss.backward()
        grads[detach] = {k: (p.grad.abs().sum().item() if p.grad is not None else 0.0) for k, p in model.named_parameters()}
        grads[detach, "logits"] = extra["terminal_logits"].detach()
    torch.testing.assert_close(grads[True, "logits"], grads[False, "logits"], rtol=0, atol=0)
    heads = ("decoder.terminal_head.", "decoder.nonterminal_head.", "decoder.tag_head_input.")
    lm = [k for k in grads[True] if not k.startswith(heads)]
    assert all(grads[True][k] == 0.0 for k in lm) and sum(grads[False][k] for k in lm) > 0
    assert all(grads[True][k] > 0 for k in grads[True] if k.startswith(heads[:2]))
