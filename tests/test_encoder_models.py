"""Encoders (issue 6): DeBERTa disentangled attention, ModernBERT local/rotary attention, RoBERTa
absolute positions; every injection's identity at initialization, no tag signal where m_p = 0,
gradients, padding invariance, Table 12 strategies; the hexatag_mlm masking of tags."""
import itertools
from dataclasses import replace

import pytest
import torch
from fairseq.data import Dictionary

import fairseq  # noqa: F401
import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.models.sipe_encoder import (  # noqa: E402
    SiPEDebertaConfig, SiPEEncoder, SiPEEncoderConfig, SiPEModernBertConfig,
)
from sipe_fairseq.modules.attention import _disentangled_spos  # noqa: E402
from sipe_fairseq.modules.input_injection import STRATEGIES, InputFusion  # noqa: E402
from sipe_fairseq.modules.positional import DisentangledPosition, log_bucket, skew  # noqa: E402
from conftest import small_dictionary  # noqa: E402

TINY = dict(encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_layers=2, encoder_attention_heads=4,
            max_positions=64, dropout=0.0, attention_dropout=0.0)
CONFIGS = {
    "roberta": SiPEEncoderConfig(**TINY),
    "deberta": SiPEDebertaConfig(relative_buckets=8, max_relative_positions=32, **TINY),
    "modernbert": SiPEModernBertConfig(local_attention_window=4, global_attention_every=2, **TINY),
}
INJECTIONS = {"roberta": ("input",), "deberta": ("input", "position", "disentangled", "attention-bias"),
              "modernbert": ("input", "position", "attention-bias")}


def dictionary(n=40):
    return small_dictionary(n, mask=True)


DICT = dictionary()


def build(kind, injection="none", seed=0, deprel_dict=None, perturb=False, **overrides):
    """A tiny encoder; ``perturb`` gives the tag projections (W_E, W_delta) non-trivial weights, so
    that tags have an effect right away (W_delta starts at exactly zero)."""
    torch.manual_seed(seed)
    cfg = replace(CONFIGS[kind], sipe_injection=injection, **overrides)
    model = SiPEEncoder(cfg, DICT, deprel_dict).eval()
    if perturb:
        for name, p in model.named_parameters():
            if "injections" in name:
                torch.nn.init.normal_(p, std=0.05)
    return model


def batch(b=3, t=12, seed=1):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(4, len(DICT) - 1, (b, t), generator=g)
    tokens[:, 0] = DICT.bos()
    terms = torch.randint(5, 7, (b, t), generator=g)
    nts = torch.randint(5, 10, (b, t), generator=g)
    untagged = torch.rand(b, t, generator=g) < 0.3  # continuation subwords
    terms[untagged], nts[untagged] = 4, 4
    terms[:, 0], nts[:, 0] = 4, 4
    return tokens, terms, nts


def logits(model, tokens, terms=None, nts=None, **kw):
    kwargs = {"src_terminals": terms, "src_nonterminals": nts} if model.needs_tags else {}
    return model(tokens, **kwargs, **kw)[0]


# ----------------------------------------------------------------------------- positional pieces

def test_log_bucket_exact_near_and_compressed_far():
    rel = torch.arange(-600, 601)
    b = log_bucket(rel, 256, 512)
    assert torch.equal(b[rel.abs() <= 128], rel[rel.abs() <= 128])
    assert torch.equal(log_bucket(-rel, 256, 512), -b)  # odd
    assert (b.diff() >= 0).all() and b[rel.abs() < 512].abs().max() == 255  # monotone; the table clamps beyond
    assert b[rel == 511].item() < 256 and b[rel == 200].item() > 128


def test_skew_matches_index_definition():
    t = 5
    x = torch.randn(2, 3, t, 2 * t - 1)
    out = skew(x)
    for i, j in itertools.product(range(t), range(t)):
        assert torch.equal(out[..., i, j], x[..., i, t - 1 - (i - j)])


def test_disentangled_scores_equal_a_loop_over_buckets():
    """c2p_ij = <q_i, K_r[d(i,j)]>, p2c_ij = <k_j, Q_r[d(j,i)]> (Eq. 18), from the bucketed table."""
    torch.manual_seed(0)
    t, h, d, c = 7, 2, 4, 8
    pos = DisentangledPosition(c, buckets=6, max_distance=12)
    rows = pos.table.weight
    w_q, w_k = torch.randn(c, c), torch.randn(c, c)
    rel = pos(t)  # offsets t-1 .. -(t-1)
    pos_q = (rel @ w_q.T).view(-1, h, d).transpose(0, 1)
    pos_k = (rel @ w_k.T).view(-1, h, d).transpose(0, 1)
    q, k = torch.randn(1, h, t, d), torch.randn(1, h, t, d)
    got = _disentangled_spos(q, k, pos_q, pos_k, 1.0)
    norm = pos.norm
    for i, j in itertools.product(range(t), range(t)):
        r_ij = norm(rows[(log_bucket(torch.tensor(i - j), 6, 12) + 6).clamp(0, 11)])  # DeBERTa-v3: 2 x 6 rows
        r_ji = norm(rows[(log_bucket(torch.tensor(j - i), 6, 12) + 6).clamp(0, 11)])
        kr, qr = (r_ij @ w_k.T).view(h, d), (r_ji @ w_q.T).view(h, d)
        want = (q[0, :, i] * kr).sum(-1) + (k[0, :, j] * qr).sum(-1)
        torch.testing.assert_close(got[0, :, i, j], want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- identity, signal, gradients

@pytest.mark.parametrize("kind,injection", [("deberta", "position"), ("modernbert", "position"),
                                            ("deberta", "disentangled"), ("deberta", "attention-bias")])
def test_score_side_injection_is_identity_at_initialization(kind, injection):
    """With W_E = 0 (W_delta is zero by default for rotary) the model equals the vanilla encoder
    with the same weights; with the default small W_E it is close."""
    tokens, terms, nts = batch()
    base = build(kind)
    want = logits(base, tokens)
    exact = build(kind, injection, sipe_proj_init_std=0.0)
    missing, unexpected = exact.load_state_dict(base.state_dict(), strict=False)
    new = ("tags.", "terminal_head", "nonterminal_head")
    assert not unexpected and all(k.startswith(new) or "injections" in k for k in missing)
    torch.testing.assert_close(logits(exact, tokens, terms, nts), want, rtol=0, atol=0)
    small = build(kind, injection)
    small.load_state_dict(base.state_dict(), strict=False)
    got = logits(small, tokens, terms, nts)
    assert not torch.equal(got, want) or kind == "modernbert"
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("kind,injection", [(k, i) for k, inj in INJECTIONS.items() for i in inj])
def test_untagged_positions_carry_no_tag_signal(kind, injection):
    """Any id below FIRST_TAG_ID (specials, <notag>) means m_p = 0: swapping among them changes
    nothing; changing a real tag changes the output."""
    model = build(kind, injection, perturb=True)
    tokens, terms, nts = batch()
    want = logits(model, tokens, terms, nts)
    untagged = terms == 4
    t2, n2 = terms.clone(), nts.clone()
    t2[untagged], n2[untagged] = 1, 0  # pad / bos ids: still "no tag"
    torch.testing.assert_close(logits(model, tokens, t2, n2), want, rtol=0, atol=0)
    t3 = terms.clone()
    t3[~untagged] = 11 - t3[~untagged]  # l <-> r
    assert not torch.allclose(logits(model, tokens, t3, nts), want)


@pytest.mark.parametrize("kind,injection", [(k, i) for k, inj in INJECTIONS.items() for i in inj])
def test_gradients_reach_tag_tables(kind, injection):
    model = build(kind, injection, perturb=True).train()
    tokens, terms, nts = batch()
    out, extra = model(tokens, src_terminals=terms, src_nonterminals=nts)
    (out.logsumexp(-1).sum() + extra["terminal_logits"].sum()).backward()
    assert model.tags.terminal.grad.abs().sum() > 0 and model.tags.nonterminal.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", list(CONFIGS))
@pytest.mark.parametrize("injection", ["none", "input", "position"])
def test_right_padding_does_not_change_real_positions(kind, injection):
    if injection == "position" and kind == "roberta":
        pytest.skip("no position pathway with absolute positions")
    model = build(kind, injection, perturb=True)
    tokens, terms, nts = batch(b=1, t=9)
    want = logits(model, tokens, terms, nts)
    pad = torch.full((1, 6), DICT.pad())
    tag_pad = torch.full((1, 6), 1)
    got = logits(model, torch.cat([tokens, pad], 1), torch.cat([terms, tag_pad], 1), torch.cat([nts, tag_pad], 1))
    torch.testing.assert_close(got[:, :9], want, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(got).all()


def test_modernbert_local_layers_see_only_their_window():
    """A single local layer (window 4: +-2 positions) ignores tokens farther away; global does not."""
    local = build("modernbert", encoder_layers=2, global_attention_every=3)  # layers 2.. are local; use layer 2 only
    assert local.layers[0].attn.window == 0 and local.layers[1].attn.window == 4
    x = torch.randn(1, 10, 32)
    changed = x.clone()
    changed[:, 9] += torch.randn(32)  # not a constant shift, which the pre-norm would remove
    out, _ = local.layers[1](x, causal=False)
    out2, _ = local.layers[1](changed, causal=False)
    torch.testing.assert_close(out[:, :7], out2[:, :7], rtol=0, atol=0)
    assert not torch.allclose(out[:, 7:], out2[:, 7:])
    g1, _ = local.layers[0](x, causal=False)
    g2, _ = local.layers[0](changed, causal=False)
    assert not torch.allclose(g1[:, 0], g2[:, 0])


def test_position_injection_needs_a_position_pathway():
    with pytest.raises(ValueError, match="position injection needs relative"):
        build("roberta", "position")


def test_missing_tags_is_a_clear_error():
    model = build("deberta", "position")
    with pytest.raises(ValueError, match="needs hexatags"):
        model(batch()[0])


# ----------------------------------------------------------------------------- Table 12 strategies

def deprel_dict():
    d = Dictionary()  # 4 specials, <notag>, labels (the sipe-preprocess layout)
    for s in ("<notag>", "nsubj", "obj", "det", "root"):
        d.add_symbol(s)
    return d


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_every_table12_strategy_builds_and_uses_its_priors(strategy):
    model = build("roberta", "input", sipe_input_strategy=strategy, deprel_dict=deprel_dict())
    tokens, terms, nts = batch()
    deprels = torch.where(terms >= 5, torch.randint(5, 9, terms.shape), torch.full_like(terms, 4))
    out, _ = model(tokens, src_terminals=terms, src_nonterminals=nts, src_deprels=deprels)
    assert torch.isfinite(out).all()
    base = build("roberta", "none")
    model.load_state_dict(base.state_dict(), strict=False)
    plain = logits(base, tokens)
    if STRATEGIES[strategy][0] == "concat":  # at init W = [I 0 ..] ignores the priors (next test): give them a say
        with torch.no_grad():
            torch.nn.init.normal_(model.fusion.proj.weight[:, 32:], std=0.1)
    with_tags = model(tokens, src_terminals=terms, src_nonterminals=nts, src_deprels=deprels)[0]
    assert not torch.allclose(with_tags, plain)
    untagged = torch.full_like(terms, 4)
    no_tags = model(tokens, src_terminals=untagged, src_nonterminals=untagged, src_deprels=untagged)[0]
    mode = STRATEGIES[strategy][0]
    if mode in ("add", "residual", "concat"):  # no prior anywhere -> the plain encoder (concat: W = [I 0 ..] at init)
        torch.testing.assert_close(no_tags, plain, rtol=1e-5, atol=1e-5)


def test_fusion_formulas():
    x = torch.randn(2, 3, 4)
    t, n, dr = torch.randn(2, 3, 4), torch.randn(2, 3, 4), torch.randn(2, 3, 4)
    priors = {"t": t, "n": n, "dr": dr}
    torch.testing.assert_close(InputFusion("ADD_T_NT", 4)(x, priors)[0], x + t + n)
    torch.testing.assert_close(InputFusion("ADD_DNT", 4)(x, priors)[0], x + dr + n)
    torch.testing.assert_close(InputFusion("ADD_T_NT_DR", 4)(x, priors)[0], x + t + n + dr)
    alpha = InputFusion("ADD_T_NT_ALPHA", 4, alpha_init=0.1)
    torch.testing.assert_close(alpha(x, priors)[0], 0.1 * x + 0.9 * (t + n))
    out, extra = InputFusion("ADD_T_NT_RESIDUAL", 4)(x, priors)
    assert torch.equal(out, x) and torch.allclose(extra, t + n)
    cat = InputFusion("CONCAT_POS_DNT", 4)
    torch.testing.assert_close(cat(x, priors)[0], x)  # W = [I 0 0] at initialization
    with torch.no_grad():
        torch.nn.init.normal_(cat.proj.weight)
    w = cat.proj.weight
    torch.testing.assert_close(cat(x, priors)[0], x @ w[:, :4].T + dr @ w[:, 4:8].T + n @ w[:, 8:].T)
    with pytest.raises(ValueError, match="needs the priors"):
        InputFusion("ADD_DNT", 4)(x, {"t": t, "n": n})


@pytest.mark.parametrize("strategy", [s for s, (mode, _) in STRATEGIES.items() if mode == "concat"])
def test_concat_strategies_start_as_the_plain_embedding(strategy):
    """Table 12 CONCAT_*: W [x; priors] with W = [I 0 ..] at initialization, so the fused input, and
    the whole encoder, equal the vanilla encoder with the same weights whatever the tags."""
    model = build("roberta", "input", sipe_input_strategy=strategy, deprel_dict=deprel_dict())
    d = model.cfg.encoder_embed_dim
    w = model.fusion.proj.weight
    assert torch.equal(w[:, :d], torch.eye(d)) and not w[:, d:].any()
    tokens, terms, nts = batch()
    deprels = torch.where(terms >= 5, torch.randint(5, 9, terms.shape), torch.full_like(terms, 4))
    x = model.embed_tokens(tokens) + model.embed_positions(tokens)
    priors = {"t": torch.randn(*x.shape), "n": torch.randn(*x.shape), "dr": torch.randn(*x.shape)}
    torch.testing.assert_close(model.fusion(x, priors)[0], x, rtol=0, atol=0)
    base = build("roberta", "none", seed=5)
    model.load_state_dict(base.state_dict(), strict=False)
    got = model(tokens, src_terminals=terms, src_nonterminals=nts, src_deprels=deprels)[0]
    torch.testing.assert_close(got, logits(base, tokens), rtol=1e-5, atol=1e-5)


def test_residual_strategy_keeps_tags_out_of_the_first_attention():
    """ADD_T_NT_RESIDUAL adds t + n on the skip branch: layer 1's attention weights ignore the tags
    (Table 12), unlike ADD_T_NT."""
    tokens, terms, nts = batch()
    other = terms.clone()
    other[terms >= 5] = 11 - other[terms >= 5]

    def first_attention(strategy, tm):
        model = build("roberta", "input", sipe_input_strategy=strategy, encoder_layers=1)
        return model(tokens, src_terminals=tm, src_nonterminals=nts, need_attn=True)[1]["attn"][0]

    torch.testing.assert_close(first_attention("ADD_T_NT_RESIDUAL", terms), first_attention("ADD_T_NT_RESIDUAL", other))
    assert not torch.allclose(first_attention("ADD_T_NT", terms), first_attention("ADD_T_NT", other))


def test_deprel_strategy_without_deprel_dictionary_is_refused():
    with pytest.raises(ValueError, match="needs the deprel stream"):
        build("roberta", "input", sipe_input_strategy="ADD_DNT")
