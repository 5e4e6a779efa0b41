"""One tag table per pathway (issue 11, item 4; appendix B: "7d parameters per pathway"):
``--sipe-tag-tables per-pathway`` gives each part of a combined injection its own E^T, E^N; the
default ``shared`` keeps one table read by every pathway."""
import pytest
import torch

import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.models.sipe_encoder import SiPEDebertaConfig, SiPEEncoder  # noqa: E402
from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig  # noqa: E402

from test_decoder_models import batch  # noqa: E402
from test_encoder_models import DICT, TINY  # noqa: E402
from test_encoder_models import batch as enc_batch  # noqa: E402

D = 32
COMBINED = ["input+attention-bias", "position+attention-bias"]


def decoder(injection, seed=0, position="relative", **kw):
    cfg = SiPEDecoderConfig(decoder_embed_dim=D, decoder_ffn_embed_dim=64, decoder_layers=2, decoder_attention_heads=4,
                            dropout=0.0, sipe_injection=injection, position_encoding=position, tokens_per_sample=64,
                            max_target_positions=64, **kw)
    torch.manual_seed(seed)
    return SiPEDecoder(cfg, DICT).eval()


def encoder(injection, seed=0, **kw):
    cfg = SiPEDebertaConfig(relative_buckets=8, max_relative_positions=32, **dict(TINY, sipe_injection=injection, **kw))
    torch.manual_seed(seed)
    return SiPEEncoder(cfg, DICT).eval()


def tag_params(model):
    tables = [model.tags] + list(model.pathway_tags.values())
    return tables, sum(p.numel() for t in tables for p in t.parameters())


def run(model, kind):
    if kind == "decoder":
        tokens, terms, nts = batch()
        tokens = tokens.clamp(max=len(DICT) - 1)
    else:
        tokens, terms, nts = enc_batch()
    return model(tokens, src_terminals=terms, src_nonterminals=nts)[0]


BUILD = {"decoder": decoder, "encoder": encoder}


@pytest.mark.parametrize("kind", ["decoder", "encoder"])
@pytest.mark.parametrize("injection", COMBINED)
def test_per_pathway_tables_are_distinct_and_7d_each(kind, injection):
    model = BUILD[kind](injection, sipe_tag_tables="per-pathway", sipe_proj_init_std=0.1)
    tables, n = tag_params(model)
    assert n == 7 * D * 2 and list(model.pathway_tags) == ["attention-bias"]
    ids = {id(p) for t in tables for p in t.parameters()}
    assert len(ids) == 4
    shared = BUILD[kind](injection, sipe_proj_init_std=0.1)
    assert tag_params(shared)[1] == 7 * D and len(shared.pathway_tags) == 0
    # the attention-bias hooks read their own table: tied to the first table it is the shared model ...
    missing, unexpected = shared.load_state_dict(model.state_dict(), strict=False)
    assert not missing and all(k.startswith("pathway_tags.") for k in unexpected)
    with torch.no_grad():
        own = model.pathway_tags["attention-bias"]
        own.terminal.copy_(model.tags.terminal)
        own.nonterminal.copy_(model.tags.nonterminal)
        torch.testing.assert_close(run(model, kind), run(shared, kind), rtol=0, atol=1e-6)
        # ... and changing it moves the output, while the first pathway's table is untouched
        own.terminal.normal_()
        own.nonterminal.normal_()
        assert (run(model, kind) - run(shared, kind)).abs().max() > 1e-4


def test_per_pathway_gradients_reach_both_tables():
    """(Transformer-XL: a rotary W_delta starts at zero, so its table gets gradient from step 2 on.)"""
    model = decoder("position+attention-bias", sipe_tag_tables="per-pathway", sipe_proj_init_std=0.1).train()
    run(model, "decoder").logsumexp(-1).mean().backward()
    for table in (model.tags, model.pathway_tags["attention-bias"]):
        assert table.terminal.grad.abs().sum() > 0 and table.nonterminal.grad.abs().sum() > 0


@pytest.mark.parametrize("kind", ["decoder", "encoder"])
def test_per_pathway_position_plus_bias_starts_as_the_vanilla_model(kind):
    """Zero W_E: position+attention-bias with its two tables equals the vanilla model (as it does shared)."""
    base = BUILD[kind]("none")
    model = BUILD[kind]("position+attention-bias", seed=5, sipe_tag_tables="per-pathway", sipe_proj_init_std=0.0)
    missing, unexpected = model.load_state_dict(base.state_dict(), strict=False)
    assert not unexpected and any(k.startswith("pathway_tags.") for k in missing)
    with torch.no_grad():
        tokens = batch()[0].clamp(max=len(DICT) - 1) if kind == "decoder" else enc_batch()[0]
        y0 = base(tokens)[0]
    torch.testing.assert_close(run(model, kind), y0, rtol=0, atol=1e-5)


def test_unknown_table_mode_is_refused():
    with pytest.raises(ValueError, match="--sipe-tag-tables must be one of"):
        decoder("position+attention-bias", sipe_tag_tables="per-layer")
