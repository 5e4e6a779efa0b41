"""DeBERTa-v3 relative positions (issue 11, item 1): the bucket function against a reference written
from DeBERTa's formula and released config (position_buckets=256, max_relative_positions=512: a
table of 2 x 256 rows, attention span 256), at the base and tiny sizes; offsets beyond +-127 reach
distinct rows; checkpoints with the older ``buckets``-row table load with that table."""
import math
from dataclasses import replace

import pytest
import torch

import sipe_fairseq

sipe_fairseq.register()

from sipe_fairseq.models.sipe_encoder import SiPEDebertaConfig, SiPEDebertaModel, SiPEEncoder  # noqa: E402
from sipe_fairseq.modules.positional import DisentangledPosition, log_bucket  # noqa: E402

from test_encoder_models import DICT, TINY, batch  # noqa: E402

SIZES = [(256, 512), (64, 256), (32, 128)]  # base, small, tiny (sipe_deberta_* architectures)


def ref_bucket(r: int, bucket_size: int, max_pos: int) -> int:
    """DeBERTa's log bucket, from the formula: r if |r| <= mid, else
    sign(r) * (mid + ceil(log(|r| / mid) / log((max_pos - 1) / mid) * (mid - 1))), mid = bucket_size / 2."""
    mid = bucket_size // 2
    if abs(r) <= mid:
        return r
    return int(math.copysign(mid + math.ceil(math.log(abs(r) / mid) / math.log((max_pos - 1) / mid) * (mid - 1)), r))


def ref_row(r: int, bucket_size: int, max_pos: int) -> int:
    """Row of DeBERTa-v3's table of 2 x bucket_size rows (att_span = bucket_size), clamped."""
    return min(max(ref_bucket(r, bucket_size, max_pos) + bucket_size, 0), 2 * bucket_size - 1)


@pytest.mark.parametrize("buckets,max_pos", SIZES)
def test_log_bucket_equals_the_formula(buckets, max_pos):
    rel = torch.arange(-2 * max_pos, 2 * max_pos + 1)
    want = torch.tensor([ref_bucket(int(r), buckets, max_pos) for r in rel])
    assert torch.equal(log_bucket(rel, buckets, max_pos), want)


@pytest.mark.parametrize("buckets,max_pos", SIZES)
def test_table_has_two_buckets_rows_and_rows_follow_deberta(buckets, max_pos):
    pos = DisentangledPosition(16, buckets, max_pos)
    assert pos.table.num_embeddings == 2 * buckets
    rel = torch.arange(-2 * max_pos, 2 * max_pos + 1)
    want = torch.tensor([ref_row(int(r), buckets, max_pos) for r in rel])
    assert torch.equal(pos.indices(rel), want)
    # forward(T): the normed rows for offsets T-1 .. -(T-1)
    t = max_pos // 2 + 3
    offs = range(t - 1, -t, -1)
    with torch.no_grad():
        torch.nn.init.normal_(pos.table.weight)
        want_rows = pos.norm(pos.table.weight[torch.tensor([ref_row(o, buckets, max_pos) for o in offs])])
        torch.testing.assert_close(pos(t), want_rows)


def test_base_offsets_beyond_127_get_distinct_rows():
    """At the base settings the old 256-row table put every offset beyond +-127 into one row; now
    offsets 128..511 spread over the log buckets 128..255 (and symmetrically below)."""
    pos = DisentangledPosition(8, 256, 512)
    far = torch.arange(128, 512)
    rows_pos, rows_neg = pos.indices(far), pos.indices(-far)
    assert len(set(rows_pos.tolist())) == 128 and len(set(rows_neg.tolist())) == 128
    assert set(rows_pos.tolist()) == set(range(256 + 128, 512))
    assert rows_pos[0] == 256 + 128 and rows_pos[-1] == 511 and rows_neg[-1] == 1
    assert set(rows_pos.tolist()).isdisjoint(rows_neg.tolist())
    legacy = DisentangledPosition(8, 256, 512, layout="legacy")
    assert legacy.table.num_embeddings == 256 and len(set(legacy.indices(far).tolist())) == 1  # the old collapse


def _model(layout=None, seed=0):
    torch.manual_seed(seed)
    cfg = replace(SiPEDebertaConfig(relative_buckets=8, max_relative_positions=32, **TINY), sipe_injection="position")
    if layout is not None:
        cfg = replace(cfg, relative_table_layout=layout)
    return SiPEDebertaModel(SiPEEncoder(cfg, DICT)).eval()


def test_old_checkpoint_loads_with_its_old_table():
    old = _model("legacy", seed=3)
    state = old.state_dict()
    assert state["encoder.relative.table.weight"].shape[0] == 8
    new = _model(seed=4)  # default layout, as a checkpoint without the field is built today
    assert new.encoder.relative.table.num_embeddings == 16
    new.load_state_dict(state, strict=True)
    assert new.encoder.relative.layout == "legacy" and new.encoder.relative.table.num_embeddings == 8
    tokens, terms, nts = batch(t=20)  # offsets up to 19 > 4 = buckets/2: the layouts differ here
    with torch.no_grad():
        a = old(tokens, src_terminals=terms, src_nonterminals=nts)[0]
        b = new(tokens, src_terminals=terms, src_nonterminals=nts)[0]
    torch.testing.assert_close(b, a)


def test_current_checkpoint_round_trips_and_bad_table_is_refused():
    src, dst = _model(seed=1), _model(seed=2)
    dst.load_state_dict(src.state_dict(), strict=True)
    assert dst.encoder.relative.layout == "deberta"
    state = src.state_dict()
    state["encoder.relative.table.weight"] = torch.zeros(10, TINY["encoder_embed_dim"])
    with pytest.raises(ValueError, match="10 rows fits no layout for 8 buckets"):
        _model().load_state_dict(state, strict=True)


def test_old_checkpoint_with_a_fairseq_style_config():
    """fairseq builds a loaded model from an OmegaConf config (struct mode) merged with the dataclass
    defaults, so an old checkpoint's config says layout 'deberta': the table size decides."""
    from omegaconf import OmegaConf

    old = _model("legacy", seed=3)
    cfg = OmegaConf.structured(replace(SiPEDebertaConfig(relative_buckets=8, max_relative_positions=32, **TINY),
                                       sipe_injection="position"))
    OmegaConf.set_struct(cfg, True)
    new = SiPEDebertaModel(SiPEEncoder(cfg, DICT)).eval()
    new.load_state_dict(old.state_dict(), strict=True)
    assert new.encoder.relative.layout == "legacy" and new.encoder.cfg.relative_table_layout == "legacy"
    tokens, terms, nts = batch(t=20)
    with torch.no_grad():
        torch.testing.assert_close(new(tokens, src_terminals=terms, src_nonterminals=nts)[0],
                                   old(tokens, src_terminals=terms, src_nonterminals=nts)[0])
