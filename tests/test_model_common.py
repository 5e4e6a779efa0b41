"""The helpers shared by the model assemblies (models/_common.py) and old configs: the tag-input
checks of every tagged decoder, the tag heads, and checkpoints saved with the removed option
``tie_adaptive_weights``, which still build (fairseq drops or ignores the unknown key)."""
import types

import pytest
import torch
from omegaconf import OmegaConf

import fairseq  # noqa: F401
import sipe_fairseq  # noqa: F401
from fairseq.models import build_model
from sipe_fairseq.models._common import build_tag_heads, check_tag_inputs, preset, tag_heads_enabled
from sipe_fairseq.models.sipe_lm import SiPEDecoderConfig, SiPETransformerXLModel
from sipe_fairseq.modules import FIRST_TAG_ID
from conftest import small_dictionary  # noqa: E402


@pytest.fixture(scope="module")
def dictionary():
    return small_dictionary(20)


def saved_model_cfg(name, **extra):
    """A model config as a checkpoint stores it: every field of the dataclass, resolved."""
    cfg = SiPEDecoderConfig(decoder_embed_dim=16, decoder_ffn_embed_dim=32, decoder_layers=2, decoder_attention_heads=2,
                            sipe_injection="position", tokens_per_sample=32, max_target_positions=32)
    return OmegaConf.create({**OmegaConf.to_container(OmegaConf.structured(cfg)), "_name": name, **extra})


@pytest.mark.parametrize("name", ["sipe_txl", "sipe_txl_tiny"])  # a model name (dataclass merge) or an arch name
def test_old_config_with_tie_adaptive_weights_still_builds(dictionary, name):
    """fairseq builds a checkpoint's model with ``from_checkpoint=True`` (checkpoint_utils): the
    removed key is dropped (model name: merge_with_parent removes unknown keys) or carried along
    unread (arch name); either way the model equals one built from a config without it."""
    task = types.SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
    torch.manual_seed(0)
    old = build_model(saved_model_cfg(name, tie_adaptive_weights=True), task, from_checkpoint=True)
    torch.manual_seed(0)
    new = build_model(saved_model_cfg(name), task, from_checkpoint=True)
    assert isinstance(old, SiPETransformerXLModel) and "tie_adaptive_weights" not in SiPEDecoderConfig.__dataclass_fields__
    a, b = old.state_dict(), new.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    tokens = torch.randint(4, 24, (2, 6))
    tags = torch.full_like(tokens, FIRST_TAG_ID)
    old.eval(), new.eval()
    assert torch.equal(old(tokens, src_terminals=tags, src_nonterminals=tags)[0], new(tokens, src_terminals=tags,
                                                                                          src_nonterminals=tags)[0])


def test_check_tag_inputs():
    tokens = torch.zeros(2, 5, dtype=torch.long)
    check_tag_inputs(tokens, tokens.clone(), tokens.clone(), "m", "hexatag_lm")  # fine
    with pytest.raises(ValueError, match=r"^m needs hexatags: .*--task hexatag_lm"):
        check_tag_inputs(tokens, tokens, None, "m", "hexatag_lm")
    with pytest.raises(ValueError, match=r"tag shapes \(2, 4\)/\(2, 5\) differ from tokens \(2, 5\)"):
        check_tag_inputs(tokens, tokens[:, :4], tokens, "m", "hexatag_lm")


def test_sipe_transformer_lm_checks_tags_through_the_shared_helper(dictionary):
    """The absolute-position decoder: no tags, or tags of another shape, stop with the shared
    messages, in a full forward and an incremental one."""
    from sipe_fairseq.models.sipe_transformer_lm import SiPETransformerDecoder, sipe_transformer_lm_tiny

    args = types.SimpleNamespace()
    sipe_transformer_lm_tiny(args)
    args.max_target_positions = args.tokens_per_sample = 32
    embed = torch.nn.Embedding(len(dictionary), args.decoder_embed_dim, dictionary.pad())
    dec = SiPETransformerDecoder(args, dictionary, embed).eval()
    tokens = torch.randint(4, 24, (2, 6))
    tags = torch.full_like(tokens, FIRST_TAG_ID)
    assert dec(tokens, src_terminals=tags, src_nonterminals=tags)[1]["terminal_logits"].shape == (2, 6, 2)
    for state in (None, {}):
        with pytest.raises(ValueError, match="sipe_transformer_lm needs hexatags"):
            dec(tokens, incremental_state=state)
        with pytest.raises(ValueError, match="differ from tokens"):
            dec(tokens, src_terminals=tags[:, :5], src_nonterminals=tags[:, :5], incremental_state=state)


def test_tag_heads_and_preset():
    assert [tag_heads_enabled(s, t) for s in ("on", "off", "auto") for t in (True, False)] == [
        True, True, False, False, True, False]
    term, nonterm = build_tag_heads(8)
    assert term.weight.shape == (2, 8) and nonterm.weight.shape == (5, 8)
    assert build_tag_heads(8, enabled=False) == (None, None)
    args = types.SimpleNamespace(decoder_layers=3)
    preset(args, decoder_layers=2, dropout=0.1)
    assert (args.decoder_layers, args.dropout) == (3, 0.1)  # a value the user set wins
