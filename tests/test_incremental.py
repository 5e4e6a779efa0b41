"""KV-cache (incremental) decoding equals the full forward for every decoder and injection.

Float64, dropout off, tiny models (d 32, 2 layers) with large tag projections (init std 0.3) so
that every class term matters. Batches are right-padded sentences of different lengths: the
decoders are causal, so a real position never sees a pad on its right and the full forward's
outputs there do not depend on the padding, while the cache path feeds every row the same
number of new positions per step (left padding would shift absolute positions -- rotary,
fairseq's learned positions -- and let real tokens attend to pads). Comparisons are made at the
real positions only.
"""

import pytest
import torch
import torch.nn.functional as F

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401  (registers the models)
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig
from sipe_fairseq.modules import FIRST_TAG_ID, RotaryPhase
from sipe_fairseq.modules.assembly import INJECTION_CHOICES
from conftest import small_dictionary, tiny_transformer_lm  # noqa: E402

NOTAG = FIRST_TAG_ID - 1
LENGTHS = (11, 7, 9)
ATOL = 1e-6
CASES = [("relative", inj, 1) for inj in INJECTION_CHOICES] + [("rotary", inj, 1) for inj in INJECTION_CHOICES] + [
    ("relative", "position+attention-bias", 2), ("rotary", "position", 2), ("fairseq", "input", 1)]
IDS = [f"{pos}-{inj}" + ("-first2" if first > 1 else "") for pos, inj, first in CASES]


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(40)


def build(dictionary, position, injection, first_layer=1):
    torch.manual_seed(0)
    if position == "fairseq":
        model = tiny_transformer_lm(dictionary).decoder
        with torch.no_grad():  # non-zero tag tables' effect is the point; learned positions differ per position
            model.embed_positions.weight.normal_(std=0.5)
    else:
        cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                                dropout=0.0, sipe_injection=injection, position_encoding=position, sipe_first_layer=first_layer,
                                sipe_proj_init_std=0.3, tokens_per_sample=64, max_target_positions=64)
        model = SiPEDecoder(cfg, dictionary)
        if position == "rotary" and "position" in injection:  # W_delta starts at zero: make the phases non-trivial
            with torch.no_grad():
                for layer in model.layers:
                    for inj in layer.attn.injections:
                        if isinstance(inj, RotaryPhase):
                            inj.projection.proj.weight.normal_(std=0.5)
    return model.double().eval()


def make_batch(dictionary, lengths=LENGTHS, seed=1):
    """Right-padded tokens and tag streams (pad id for tokens and tags past each length)."""
    g = torch.Generator().manual_seed(seed)
    b, t, pad = len(lengths), max(lengths), dictionary.pad()
    tokens = torch.randint(dictionary.nspecial, len(dictionary), (b, t), generator=g)
    terms = torch.randint(NOTAG, FIRST_TAG_ID + 2, (b, t), generator=g)
    nts = torch.randint(FIRST_TAG_ID, FIRST_TAG_ID + 5, (b, t), generator=g)
    nts[terms == NOTAG] = NOTAG
    real = torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]
    for x in (tokens, terms, nts):
        x.masked_fill_(~real, pad)
    return tokens, terms, nts, real


def log_probs(model, tokens, terms, nts, state=None):
    """LM and both tag heads' log-probabilities, concatenated on the last axis."""
    y, extra = model(tokens, src_terminals=terms, src_nonterminals=nts, incremental_state=state)
    out = [F.log_softmax(y, -1)]
    if "terminal_logits" in extra:
        out += [F.log_softmax(extra["terminal_logits"], -1), F.log_softmax(extra["nonterminal_logits"], -1)]
    return torch.cat(out, -1)


def decode(model, tokens, terms, nts, steps, state=None, start=0):
    """Feed the prefix growing by ``steps`` (sizes) through the cache; concatenated outputs."""
    state = {} if state is None else state
    outs, end = [], start
    for k in steps:
        end += k
        out = log_probs(model, tokens[:, :end], terms[:, :end], nts[:, :end], state)
        assert out.size(1) == k
        outs.append(out)
    return torch.cat(outs, 1), state


def assert_real_close(got, want, real):
    assert got.shape == want.shape
    diff = (got - want).abs()[real]
    assert diff.max() <= ATOL, f"max |cached - full| = {diff.max():.3g}"


@pytest.mark.parametrize("position,injection,first", CASES, ids=IDS)
def test_cache_matches_full_forward(dictionary, position, injection, first):
    model = build(dictionary, position, injection, first)
    tokens, terms, nts, real = make_batch(dictionary)
    with torch.no_grad():
        full = log_probs(model, tokens, terms, nts)
        t = tokens.size(1)
        one, _ = decode(model, tokens, terms, nts, [1] * t)  # token by token
        assert_real_close(one, full, real)
        several, _ = decode(model, tokens, terms, nts, [3, 1, 4, 2, 1])  # k > 1 new positions per step
        assert_real_close(several, full, real)
        # reorder after a prefix of 5: a permutation, then a duplicating order; continue with the reordered rows
        for order in ([2, 0, 1], [1, 1, 0, 2, 2]):
            order = torch.tensor(order)
            _, state = decode(model, tokens, terms, nts, [2, 3])
            model.reorder_incremental_state(state, order)
            rt, rn, rk, rr = tokens[order], terms[order], nts[order], real[order]
            rest, _ = decode(model, rt, rn, rk, [1, 3, 2], state=state, start=5)
            assert_real_close(rest, log_probs(model, rt, rn, rk)[:, 5:], rr[:, 5:])


def test_cache_is_not_a_full_recompute(dictionary):
    """The cached step reads the stored keys: corrupting them changes the output (the test above
    could otherwise pass by recomputing the prefix), and outputs for the new positions only."""
    model = build(dictionary, "relative", "position+attention-bias")
    tokens, terms, nts, _ = make_batch(dictionary)
    with torch.no_grad():
        _, state = decode(model, tokens, terms, nts, [4])
        good = log_probs(model, tokens[:, :5], terms[:, :5], nts[:, :5], {key: dict(c) for key, c in state.items()})
        for key, cache in state.items():
            if key.endswith("layer0"):
                cache = dict(cache)
                cache["k"] = cache["k"] + 1.0
                state[key] = cache
        bad = log_probs(model, tokens[:, :5], terms[:, :5], nts[:, :5], state)
    assert good.size(1) == 1 and (bad - good).abs().max() > 1e-3


@pytest.mark.parametrize("position", ["relative", "fairseq"])
def test_changed_prefix_tags_are_refused(dictionary, position):
    model = build(dictionary, position, "position" if position != "fairseq" else "input")
    tokens, terms, nts, _ = make_batch(dictionary)
    with torch.no_grad():
        _, state = decode(model, tokens, terms, nts, [4])
        other = terms.clone()
        other[:, 1] = FIRST_TAG_ID + 1 - (terms[:, 1] == FIRST_TAG_ID + 1).long()
        with pytest.raises(ValueError, match="tags of the cached prefix"):
            log_probs(model, tokens[:, :5], other[:, :5], nts[:, :5], state)
        with pytest.raises(ValueError, match="already cached"):
            log_probs(model, tokens[:, :4], terms[:, :4], nts[:, :4], state)


def test_fairseq_scripting_reorder_applies_once(dictionary):
    """fairseq's SequenceGenerator calls ``reorder_incremental_state_scripting``, which walks every
    submodule: the permutation must be applied once, not once per level."""
    for position, injection in (("relative", "position"), ("fairseq", "input")):
        model = build(dictionary, position, injection)
        tokens, terms, nts, real = make_batch(dictionary)
        order = torch.tensor([1, 2, 0])
        with torch.no_grad():
            _, state = decode(model, tokens, terms, nts, [3])
            model.reorder_incremental_state_scripting(state, order)
            rest, _ = decode(model, tokens[order], terms[order], nts[order], [2], state=state, start=3)
            full = log_probs(model, tokens[order], terms[order], nts[order])[:, 3:5]
        assert_real_close(rest, full, real[order][:, 3:5])


def test_fairseq_beam_search_scores_match_full_forward(dictionary):
    """fairseq's SequenceGenerator (beam 3, forced 3-token prefix) decodes through the cache and
    reorders it every step; each hypothesis's per-token scores equal a full forward's (the
    generator works in float32)."""
    from fairseq.sequence_generator import SequenceGenerator
    from sipe_fairseq.models.sipe_lm import SiPETransformerXLModel

    model = SiPETransformerXLModel(build(dictionary, "relative", "none")).eval()
    generator = SequenceGenerator([model], dictionary, beam_size=3, max_len_b=8, min_len=8)
    prefix = torch.randint(dictionary.nspecial, len(dictionary), (2, 3), generator=torch.Generator().manual_seed(3))
    sample = {"net_input": {"src_tokens": prefix, "src_lengths": torch.tensor([3, 3])}}
    with torch.no_grad():
        hyps = generator.generate([model], sample, prefix_tokens=prefix)
        checked = 0
        for beam in hyps:
            assert len(beam) == 3
            for hyp in beam:
                toks = hyp["tokens"]
                inputs = torch.cat([toks.new_tensor([dictionary.eos()]), toks[:-1]])[None]
                full = F.log_softmax(model(inputs)[0], -1)[0].gather(-1, toks[:, None])[:, 0]
                torch.testing.assert_close(hyp["positional_scores"].double(), full, rtol=0, atol=1e-5)
                checked += 1
    assert checked == 6


@pytest.mark.parametrize("position,injection", [("relative", "position+attention-bias"), ("rotary", "position"),
                                                ("relative", "none")])
@pytest.mark.parametrize("share_from", [0, 6])
def test_branching_reorders_match_full_forward(dictionary, position, injection, share_from, monkeypatch):
    """Beams repeat rows: after a reorder with repeats the children share their parent's cached
    positions (modules/kv_cache.py) instead of copies. Several rounds of branching, pruning and
    permuting, with 1-3 new positions per step and every row continuing with its own tokens: each
    step's outputs (and attention probabilities) equal a full forward of the rows' sequences."""
    from sipe_fairseq.modules import kv_cache

    monkeypatch.setattr(kv_cache, "SHARE_FROM", share_from)  # 6: the first reorders copy, later ones share
    model = build(dictionary, position, injection)
    g = torch.Generator().manual_seed(5)
    tokens, terms, nts, _ = make_batch(dictionary, lengths=(6, 6, 6))

    def extend(x, lo, hi):
        return torch.cat([x, torch.randint(lo, hi, (x.size(0), 1), generator=g)], 1)

    orders = [[0, 0, 1, 2, 2, 2], [5, 4, 4, 3, 1, 0, 0, 2], [1, 1, 1, 2, 3, 3, 6], [0, 2, 4, 6], [3, 2, 1, 0, 0]]
    steps = [9, 1, 3, 1, 2, 1] if not share_from else [2, 3, 1, 3, 2, 1]  # 9 > OWN_LIMIT: a row that does not
    # branch gets a prefix of its own too
    state, end, shared_seen = {}, 0, False
    with torch.no_grad():
        for round_, k in enumerate(steps):
            while tokens.size(1) < end + k:
                tokens = extend(tokens, dictionary.nspecial, len(dictionary))
                terms = extend(terms, NOTAG, FIRST_TAG_ID + 2)
                nts = extend(nts, FIRST_TAG_ID, FIRST_TAG_ID + 5)
            end += k
            y, extra = model(tokens[:, :end], src_terminals=terms[:, :end], src_nonterminals=nts[:, :end],
                             incremental_state=state, need_attn=True)
            fy, fextra = model(tokens[:, :end], src_terminals=terms[:, :end], src_nonterminals=nts[:, :end], need_attn=True)
            torch.testing.assert_close(F.log_softmax(y, -1), F.log_softmax(fy, -1)[:, -k:], rtol=0, atol=ATOL)
            for got, want in zip(extra["attn_layers"], fextra["attn_layers"]):
                torch.testing.assert_close(got, want[:, :, -k:], rtol=0, atol=ATOL)
            if round_ < len(orders):
                order = torch.tensor(orders[round_])
                model.reorder_incremental_state(state, order)
                tokens, terms, nts = tokens[order], terms[order], nts[order]
                tokens, terms, nts = tokens[:, :end], terms[:, :end], nts[:, :end]
                shared_seen |= any(kv_cache.is_shared(c) for c in state.values() if isinstance(c, dict))
    assert shared_seen


def test_many_rows_without_a_prefix_beside_a_shared_one(dictionary, monkeypatch):
    """A branching reorder of a short cache (own positions <= OWN_LIMIT) leaves most rows without a
    shared prefix: more of them than any prefix has children (a batch of sentences, one branching).
    The next steps still equal a full forward of the rows' sequences (a row without a prefix once read
    a slot past its prefix group's width: IndexError)."""
    from sipe_fairseq.modules import kv_cache

    monkeypatch.setattr(kv_cache, "SHARE_FROM", 0)
    model = build(dictionary, "relative", "position")
    tokens, terms, nts, _ = make_batch(dictionary, lengths=(6,) * 6)
    state = {}
    with torch.no_grad():
        model(tokens[:, :2], src_terminals=terms[:, :2], src_nonterminals=nts[:, :2], incremental_state=state)
        order = torch.tensor([0, 0, 1, 2, 3, 4, 5])
        model.reorder_incremental_state(state, order)
        assert any(kv_cache.is_shared(c) for c in state.values() if isinstance(c, dict))
        tokens, terms, nts = tokens[order], terms[order], nts[order]
        for end in (3, 4):
            y, _ = model(tokens[:, :end], src_terminals=terms[:, :end], src_nonterminals=nts[:, :end],
                         incremental_state=state)
            fy, _ = model(tokens[:, :end], src_terminals=terms[:, :end], src_nonterminals=nts[:, :end])
            torch.testing.assert_close(F.log_softmax(y, -1), F.log_softmax(fy, -1)[:, -1:], rtol=0, atol=ATOL)
