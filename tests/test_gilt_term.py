"""GiLT's graph-feature score term: gathered = naive (T, T, d) computation, identity at zero init."""
import torch

from sipe_fairseq.modules.attention import SiPEAttention
from sipe_fairseq.modules.graph_term import GraphContext, GraphFeatureTables, attach_graph_terms, naive_pair_scores


def _values(b, tq, tk, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 151, (b, tq, tk, 3), generator=g)


def test_gathered_equals_naive():
    torch.manual_seed(0)
    attn = SiPEAttention(32, 4, position="relative")
    tables = GraphFeatureTables()
    attach_graph_terms([attn], tables, init_std=0.05)
    term = attn.pair_terms[0]
    q = torch.randn(2, 4, 6, 8, dtype=torch.float64)
    vals = _values(2, 6, 6)
    w_k = attn.qkv.weight[32:64].double()
    tables.double(), term.double()
    got = term.pair_scores(q, GraphContext.from_values(vals), w_k, 0.125)
    want = naive_pair_scores(term, q, vals, w_k, 0.125)
    assert got.shape == (2, 4, 6, 6)
    torch.testing.assert_close(got, want)
    # by hand for one pair: the (d,) vector d_ij, the key offset of head 1, the dot product
    i, j = 3, 1
    d = sum(term.proj[f] @ tables.tables[f, vals[0, i, j, f]] for f in range(3))
    k = (w_k @ d).view(4, 8)[1]
    torch.testing.assert_close(got[0, 1, i, j], (q[0, 1, i] @ k) * 0.125)


def test_identity_at_zero_init_and_effect():
    torch.manual_seed(1)
    base = SiPEAttention(32, 4, position="relative").eval()
    with_term = SiPEAttention(32, 4, position="relative").eval()
    with_term.load_state_dict(base.state_dict())
    attach_graph_terms([with_term], GraphFeatureTables(), init_std=0.0)
    x = torch.randn(2, 7, 32)
    ctx = GraphContext.from_values(_values(2, 7, 7, seed=2))
    out0, _ = base(x)
    out1, _ = with_term(x, pairs=ctx)
    torch.testing.assert_close(out1, out0)
    with torch.no_grad():
        with_term.pair_terms[0].proj.normal_(std=0.1)
    out2, _ = with_term(x, pairs=ctx)
    assert (out2 - out0).abs().max() > 1e-3
    # the term enters as a logit: the first position (one key) is unchanged
    torch.testing.assert_close(out2[:, 0], out0[:, 0])


def test_cached_rows_equal_full():
    torch.manual_seed(2)
    attn = SiPEAttention(32, 4, position="relative").eval()
    attach_graph_terms([attn], GraphFeatureTables(), init_std=0.1)
    x = torch.randn(1, 6, 32)
    vals = _values(1, 6, 6, seed=3)
    full, _ = attn(x, pairs=GraphContext.from_values(vals))
    cache, outs = {}, []
    for t in range(6):
        o, _ = attn(x[:, t:t + 1], cache=cache, pairs=GraphContext.from_values(vals[:, t:t + 1, : t + 1]))
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, 1), full)


def test_first_layer():
    attns = [SiPEAttention(16, 2) for _ in range(3)]
    tables = GraphFeatureTables()
    attach_graph_terms(attns, tables, first_layer=2)
    assert [len(a.pair_terms) for a in attns] == [0, 1, 1]
    # the tables are shared, not copied per layer
    assert attns[1].pair_terms[0]._tables[0] is attns[2].pair_terms[0]._tables[0] is tables
    assert not any("tables" in k for k in attns[1].state_dict())
    import pytest

    with pytest.raises(ValueError, match="--gilt-first-layer 4"):
        attach_graph_terms(attns, tables, first_layer=4)
