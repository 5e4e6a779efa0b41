"""Model-level properties of the SiPE decoders (no data directory needed)."""
import copy

import pytest
import torch

import fairseq  # noqa: F401  (registers sipe_fairseq on import below)
import sipe_fairseq  # noqa: F401
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig
from sipe_fairseq.modules import FIRST_TAG_ID
from sipe_fairseq.modules.assembly import INJECTION_CHOICES
from conftest import small_dictionary  # noqa: E402

NOTAG = FIRST_TAG_ID - 1
INJECTIONS = INJECTION_CHOICES[1:]
# Identity at initialization: footnotes 3/4 initialize W_E small (here exactly zero) and W_delta
# is zero for rotary; attention-side projections share that init. Input injection adds the tag
# embedding itself, so it is never an identity.


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(40)


def make(dictionary, injection, position="relative", seed=0, **kw):
    cfg = SiPEDecoderConfig(decoder_embed_dim=32, decoder_ffn_embed_dim=64, decoder_layers=3, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection=injection, position_encoding=position,
                            tokens_per_sample=64, max_target_positions=64, **kw)
    torch.manual_seed(seed)
    return SiPEDecoder(cfg, dictionary).eval()


def batch(seed=1, b=3, t=14):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, 44, (b, t), generator=g)
    terms = torch.randint(NOTAG, FIRST_TAG_ID + 2, (b, t), generator=g)
    nts = torch.randint(FIRST_TAG_ID, FIRST_TAG_ID + 5, (b, t), generator=g)
    nts[terms == NOTAG] = NOTAG
    return tokens, terms, nts


@pytest.mark.parametrize("position", ["relative", "rotary"])
@pytest.mark.parametrize("injection", INJECTIONS)
def test_identity_at_initialization(dictionary, position, injection):
    """With the baseline's weights copied in and zero-initialized projections, every
    score-side injection gives exactly the baseline's logits; input injection does not."""
    base = make(dictionary, "none", position)
    model = make(dictionary, injection, position, seed=5, sipe_proj_init_std=0.0)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected
    tokens, terms, nts = batch()
    y0, _ = base(tokens)
    y, extra = model(tokens, src_terminals=terms, src_nonterminals=nts)
    if "input" not in injection:
        torch.testing.assert_close(y, y0, rtol=0, atol=1e-5)
    else:
        assert (y - y0).abs().max() > 1e-4


@pytest.mark.parametrize("injection", ["position", "disentangled", "attention-bias"])
def test_small_init_is_near_identity(dictionary, injection):
    """Default W_E init (std 1e-3) keeps c ~ 0: logits within 1e-2 of the vanilla model."""
    base = make(dictionary, "none")
    model = make(dictionary, injection, seed=5)
    model.load_state_dict(base.state_dict(), strict=False)
    tokens, terms, nts = batch()
    y0, _ = base(tokens)
    y, _ = model(tokens, src_terminals=terms, src_nonterminals=nts)
    assert 0 < (y - y0).abs().max() < 1e-2


@pytest.mark.parametrize("position", ["relative", "rotary"])
@pytest.mark.parametrize("injection", ["none"] + list(INJECTIONS))
def test_causality(dictionary, position, injection):
    """Changing the token or the tags at j > i never changes the output at i."""
    model = make(dictionary, injection, position, sipe_proj_init_std=0.1)
    tokens, terms, nts = batch()
    y, extra = model(tokens, src_terminals=terms, src_nonterminals=nts)
    j = 8
    t2, n2, k2 = tokens.clone(), terms.clone(), nts.clone()
    t2[:, j:] = torch.randint(4, 44, t2[:, j:].shape)
    n2[:, j:] = FIRST_TAG_ID + 1 - (terms[:, j:] == FIRST_TAG_ID + 1).long()
    k2[:, j:] = FIRST_TAG_ID + (nts[:, j:] - FIRST_TAG_ID + 1) % 5
    y2, extra2 = model(t2, src_terminals=n2, src_nonterminals=k2)
    torch.testing.assert_close(y2[:, :j], y[:, :j], rtol=0, atol=1e-5)
    assert (y2[:, j:] - y[:, j:]).abs().max() > 1e-4
    if "terminal_logits" in extra:
        torch.testing.assert_close(extra2["terminal_logits"][:, :j], extra["terminal_logits"][:, :j], rtol=0, atol=1e-5)


@pytest.mark.parametrize("injection", INJECTIONS)
def test_untagged_positions_contribute_nothing(dictionary, injection):
    """Any id below FIRST_TAG_ID (no tag, pad, eos) acts like <notag>: m_p = 0."""
    model = make(dictionary, injection, sipe_proj_init_std=0.1)
    tokens, terms, nts = batch()
    untagged = terms == NOTAG
    y, _ = model(tokens, src_terminals=terms, src_nonterminals=nts)
    t2, n2 = terms.clone(), nts.clone()
    t2[untagged], n2[untagged] = 1, 2  # <pad>, </s>
    y2, _ = model(tokens, src_terminals=t2, src_nonterminals=n2)
    torch.testing.assert_close(y2, y, rtol=0, atol=0)
    # ... and a model given no tags at all equals one given only <notag>
    none = torch.full_like(terms, NOTAG)
    y3, _ = model(tokens, src_terminals=none, src_nonterminals=none)
    cont = copy.deepcopy(model)
    cont.tags.terminal.data.normal_()
    cont.tags.nonterminal.data.normal_()
    y4, _ = cont(tokens, src_terminals=none, src_nonterminals=none)
    torch.testing.assert_close(y4, y3, rtol=0, atol=1e-6)


@pytest.mark.parametrize("position", ["relative", "rotary"])
@pytest.mark.parametrize("injection", INJECTIONS)
def test_gradients_reach_tag_tables(dictionary, position, injection):
    model = make(dictionary, injection, position).train()
    tokens, terms, nts = batch()
    for _ in range(2):  # a zero-initialized W_delta passes gradient to the tables after one step
        model.zero_grad()
        y, extra = model(tokens, src_terminals=terms, src_nonterminals=nts)
        loss = y.logsumexp(-1).mean() + extra["terminal_logits"].square().mean() + extra["nonterminal_logits"].square().mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= 0.1 * p.grad
    assert model.tags.terminal.grad.abs().sum() > 0
    assert model.tags.nonterminal.grad.abs().sum() > 0


def test_model_needing_tags_without_tags_errors(dictionary):
    model = make(dictionary, "position")
    tokens, _, _ = batch()
    with pytest.raises(ValueError, match="needs hexatags"):
        model(tokens)


def test_first_layer_and_sharing(dictionary):
    model = make(dictionary, "position", sipe_first_layer=2)
    assert [len(layer.attn.injections) for layer in model.layers] == [0, 1, 1]
    shared = make(dictionary, "position+attention-bias", sipe_projection_sharing="shared", sipe_projection_target="d_head")
    projs = [layer.attn.injections[0].projection for layer in shared.layers]
    assert all(p is projs[0] for p in projs) and projs[0].proj.out_features == 8
    per_layer = make(dictionary, "position")
    assert per_layer.layers[0].attn.injections[0].projection.proj.out_features == 32  # d_model
    assert make(dictionary, "disentangled").layers[0].attn.injections[0].projection.proj.out_features == 8  # d_head


def test_sipe_parameter_count_is_7d(dictionary):
    model = make(dictionary, "input")
    assert sum(p.numel() for p in model.tags.parameters()) == 7 * 32


def test_class_gather_equals_direct_computation():
    """The per-class + gather evaluation of c_ij equals the direct <q_i + v, W_E e_j>."""
    from sipe_fairseq.modules import HexatagEmbedding, TagProjection, tag_pair_classes
    from reference_ops import class_scores
    torch.manual_seed(0)
    emb, proj = HexatagEmbedding(16), TagProjection(16, 4, 4, "d_model", init_std=0.3)
    _, terms, nts = batch(b=2, t=9)
    cls = tag_pair_classes(terms, nts)
    q = torch.randn(2, 4, 9, 4)
    fast = class_scores(q, proj(emb.class_table()), cls, 0.5)
    e = emb(cls)  # (B, T, d)
    direct = torch.einsum("bhid,bjhd->bhij", q, proj.proj(e).view(2, 9, 4, 4)) * 0.5
    torch.testing.assert_close(fast, direct, rtol=1e-5, atol=1e-6)


def test_tag_log_probs_against_a_direct_computation():
    """``tag_log_probs``: log p(target class) at tagged ids (FIRST_TAG_ID + c), 0 and not tagged at
    every other id (specials, <notag>, ids past the head's classes), argmax correctness; the heads
    are Linear(d, 2) and Linear(d, 5)."""
    import math

    from sipe_fairseq.data.tag_dictionary import NOTAG_ID, TAG_HEADS
    from sipe_fairseq.modules import tag_head, tag_log_probs

    assert TAG_HEADS == (("terminal", 2), ("nonterminal", 5))
    assert tag_head("terminal", 8).weight.shape == (2, 8) and tag_head("nonterminal", 8).weight.shape == (5, 8)
    logits = torch.tensor([[[0.0, 1.0], [2.0, 0.0], [3.0, 3.0], [1.0, -1.0]]])  # (1, 4, 2)
    target = torch.tensor([[FIRST_TAG_ID + 1, FIRST_TAG_ID + 1, NOTAG_ID, FIRST_TAG_ID + 2]])  # last: past 2 classes
    got = tag_log_probs(logits, target, 2)
    want0 = 1.0 - math.log(math.exp(0.0) + math.exp(1.0))
    want1 = 0.0 - math.log(math.exp(2.0) + math.exp(0.0))
    assert got.tagged.tolist() == [[True, True, False, False]]
    torch.testing.assert_close(got.logprob, torch.tensor([[want0, want1, 0.0, 0.0]]))
    assert got.correct.tolist() == [[True, False, False, False]]
    assert got.nll().item() == pytest.approx(-(want0 + want1))
