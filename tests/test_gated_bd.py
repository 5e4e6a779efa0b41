"""The in-place score terms against plain autograd references: Eq. 6's ``gated_bd_add`` vs.
``bd + bd * c``, Eq. 7-8's ``class_bias_add`` vs. ``scores + bias @ onehot``."""
import pytest
import torch
import torch.nn.functional as F

from sipe_fairseq.modules import attention as attention_module
from sipe_fairseq.modules import gated_bd
from sipe_fairseq.modules.assembly import attach_injections
from sipe_fairseq.modules.attention import SiPEAttention
from sipe_fairseq.modules.gated_bd import class_bias_add, gated_bd_add
from sipe_fairseq.modules.injections import TagContext, class_onehot
from sipe_fairseq.modules.positional import RelativePosition, rel_shift

from reference_ops import _gated_bd

N_CLASSES = 11


def inputs(b=2, h=3, t=7, d=4, dtype=torch.float64, seed=0, layout_like_model=False):
    g = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    if layout_like_model:  # q as the attention makes it: a permuted view of the qkv projection
        q_pos = rand(b, t, 3, h, d).permute(2, 0, 3, 1, 4)[0] + rand(h, 1, d)
    else:
        q_pos = rand(b, h, t, d)
    cls = torch.randint(0, N_CLASSES, (b, t), generator=g)
    return {"scores": rand(b, h, t, t), "q_pos": q_pos, "r": rand(h, t, d), "gate": 0.5 * rand(b, h, t, N_CLASSES),
            "onehot": class_onehot(cls, N_CLASSES, dtype), "scale": d ** -0.5}


def reference(scores, q_pos, r, gate, onehot, scale, causal=False):
    return scores + _gated_bd(q_pos, r, gate, onehot, scale)


def visible(y, causal):
    """Causal: the entries j > i are unspecified (the attention masks them), compare the rest."""
    if not causal:
        return y
    t = y.size(-1)
    return y.masked_fill(torch.ones(t, t, dtype=torch.bool).triu_(1), 0)


def fused(scores, q_pos, r, gate, onehot, scale, causal=False):
    return gated_bd_add(scores.clone(), q_pos, r, gate, onehot, scale, causal)  # clone: it writes into scores


def leaves(x, names=("scores", "q_pos", "r", "gate")):
    return {k: (v.detach().clone().requires_grad_(k in names) if torch.is_tensor(v) else v) for k, v in x.items()}


@pytest.mark.parametrize("causal,t,block,batch_rows", [(False, 7, 64, 4), (True, 7, 64, 4), (True, 11, 4, 1), (True, 12, 4, 4),
                                                        (False, 6, 64, 1)])
def test_gradcheck_float64(monkeypatch, causal, t, block, batch_rows):
    """Exact adjoint of every output entry (non-causal: rel_shift's garbage j > i included), also
    with several causal row blocks and batch chunks."""
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", block)
    monkeypatch.setattr(gated_bd, "BATCH_ROWS", batch_rows)
    x = leaves(inputs(t=t))
    names = ("scores", "q_pos", "r", "gate")

    def fn(*args):
        return fused(**dict(zip(names, args)), onehot=x["onehot"], scale=x["scale"], causal=causal)

    assert torch.autograd.gradcheck(fn, tuple(x[k] for k in names), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
@pytest.mark.parametrize("layout_like_model", [False, True])
@pytest.mark.parametrize("causal,block,batch_rows", [(False, 64, 4), (False, 64, 2), (True, 64, 4), (True, 8, 2), (True, 5, 1)])
def test_forward_and_gradients_equal_reference(monkeypatch, dtype, tol, layout_like_model, causal, block, batch_rows):
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", block)
    monkeypatch.setattr(gated_bd, "BATCH_ROWS", batch_rows)
    x = dict(inputs(b=3, h=4, t=33, d=8, dtype=dtype, seed=1, layout_like_model=layout_like_model), causal=causal)
    g = torch.Generator().manual_seed(2)
    upstream = visible(torch.randn(x["scores"].shape, generator=g, dtype=dtype), causal)
    outs, grads = [], []
    for f in (reference, fused):
        a = leaves(x)
        y = f(**a)
        y.backward(upstream)
        outs.append(visible(y.detach(), causal))
        grads.append({k: a[k].grad for k in ("scores", "q_pos", "r", "gate")})
    torch.testing.assert_close(outs[1], outs[0], rtol=tol, atol=tol)  # non-causal: garbage included
    for k in grads[0]:
        torch.testing.assert_close(grads[1][k], grads[0][k], rtol=tol, atol=tol, msg=lambda m: f"grad {k}: {m}")


@pytest.mark.parametrize("causal", [False, True])
def test_masked_causal_use_equals_reference(monkeypatch, causal):
    """As in the attention: -inf above the diagonal, softmax, weighted values; the reference is the
    plain ``scores + _gated_bd`` (causal blocks of 6 rows)."""
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", 6)
    x = inputs(b=2, h=3, t=20, d=8, dtype=torch.float64, seed=3)
    t = x["scores"].size(-1)
    future = torch.ones(t, t, dtype=torch.bool).triu_(1)
    v = torch.randn(2, 3, t, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    results = []
    for f in (reference, lambda **a: fused(**a, causal=causal)):
        a = leaves(x)
        out = torch.matmul(F.softmax(f(**a).masked_fill(future, float("-inf")), dim=-1), v)
        out.pow(2).sum().backward()
        results.append((out.detach(), [a[k].grad for k in ("scores", "q_pos", "r", "gate")]))
    torch.testing.assert_close(results[1][0], results[0][0], rtol=1e-12, atol=1e-12)
    for g_fused, g_ref in zip(results[1][1], results[0][1]):
        torch.testing.assert_close(g_fused, g_ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("names", [("q_pos",), ("gate",), ("r", "gate"), ("scores",)])
def test_partial_requires_grad(monkeypatch, names, causal):
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", 4)
    x = dict(inputs(t=9, seed=5), causal=causal)
    grads = []
    for f in (reference, fused):
        a = leaves(x, names)
        visible(f(**a), causal).sum().backward()
        grads.append([a[k].grad for k in names])
    for g_fused, g_ref in zip(*reversed(grads)):
        torch.testing.assert_close(g_fused, g_ref)


@pytest.mark.parametrize("causal", [False, True])
def test_no_grad_path_writes_in_place(monkeypatch, causal):
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", 5)
    x = inputs(t=12, seed=6)
    expected = reference(**x)
    scores = x["scores"].clone()
    with torch.no_grad():
        out = gated_bd_add(scores, x["q_pos"], x["r"], x["gate"], x["onehot"], x["scale"], causal)
    assert out is scores
    torch.testing.assert_close(visible(out, causal), visible(expected, causal), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal,block,batch_rows", [(False, 64, 4), (True, 64, 4), (True, 4, 1), (True, 5, 2)])
def test_ungated_is_plain_bd(monkeypatch, causal, block, batch_rows):
    """gate=None: scores + BD (Eq. 3, the vanilla model's route) equals RelativePosition.score's
    rel_shift, forward and backward, and passes gradcheck."""
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", block)
    monkeypatch.setattr(gated_bd, "BATCH_ROWS", batch_rows)
    x = inputs(b=3, h=2, t=13, d=4, seed=10)
    names = ("scores", "q_pos", "r")
    assert torch.autograd.gradcheck(lambda s, q, r: gated_bd_add(s.clone(), q, r, None, None, x["scale"], causal),
                                    tuple(leaves(x, names)[k] for k in names), eps=1e-6, atol=1e-7)
    rel = RelativePosition(8, 2).double()
    upstream = visible(torch.randn(x["scores"].shape, dtype=torch.float64, generator=torch.Generator().manual_seed(11)), causal)
    results = []
    for f in (lambda s, q, r: s + rel.score(q, x["scale"], r),
              lambda s, q, r: gated_bd_add(s.clone(), q, r, None, None, x["scale"], causal)):
        a = leaves(x, names)
        y = f(a["scores"], a["q_pos"], a["r"])
        y.backward(upstream)
        results.append([visible(y.detach(), causal)] + [a[k].grad for k in names])
    for got, ref in zip(results[1], results[0]):
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        out = gated_bd_add(x["scores"].clone(), x["q_pos"], x["r"], None, None, x["scale"], causal)
    torch.testing.assert_close(visible(out, causal), results[0][0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_class_bias_add_gradcheck_and_reference(monkeypatch, causal):
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", 4)
    monkeypatch.setattr(gated_bd, "BATCH_ROWS", 1)
    x = leaves(inputs(t=9, seed=8), ("scores", "gate"))
    bias, onehot = x["gate"], x["onehot"]
    assert torch.autograd.gradcheck(lambda s, e: class_bias_add(s.clone(), e, onehot, causal), (x["scores"], bias))
    upstream = torch.randn(x["scores"].shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    upstream = visible(upstream, causal)
    results = []
    for f in (lambda s, e: s + torch.matmul(e, onehot), lambda s, e: class_bias_add(s.clone(), e, onehot, causal)):
        s, e = (v.detach().clone().requires_grad_() for v in (x["scores"], bias))
        y = f(s, e)
        y.backward(upstream)
        results.append((visible(y.detach(), causal), s.grad, e.grad))
    for a, r in zip(*results):
        torch.testing.assert_close(a, r, rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        torch.testing.assert_close(visible(class_bias_add(x["scores"].clone(), bias, onehot, causal), causal), results[0][0])


@pytest.mark.parametrize("injection,position", [([], "relative"), (["position"], "relative"),
                                                (["position", "attention-bias"], "relative"),
                                                (["attention-bias"], "relative"), (["attention-bias"], "rotary"),
                                                (["disentangled"], "none")])
def test_attention_layer_equals_reference(monkeypatch, injection, position):
    """SiPEAttention with the in-place terms vs. the same layer computing ``scores + _gated_bd`` and
    ``scores + bias @ onehot`` (causal blocks of 6 rows, one batch row per op)."""
    monkeypatch.setattr(gated_bd, "BLOCK_ROWS", 6)
    monkeypatch.setattr(gated_bd, "BATCH_ROWS", 1)
    torch.manual_seed(0)
    b, t, c, h = 2, 16, 32, 4
    attn = SiPEAttention(c, h, position=position).double()
    attach_injections([attn], injection, tag_dim=8, init_std=0.3)
    attn.double()
    g = torch.Generator().manual_seed(7)
    x = torch.randn(b, t, c, generator=g, dtype=torch.float64)
    tags = TagContext(torch.randint(0, N_CLASSES, (b, t), generator=g),
                      torch.randn(N_CLASSES, 8, generator=g, dtype=torch.float64))

    def run():
        attn.zero_grad()
        xi = x.clone().requires_grad_()
        out, probs = attn(xi, tags, need_weights=True)
        out.pow(2).sum().backward()
        return out.detach(), probs.detach(), xi.grad, [p.grad.clone() for p in attn.parameters()]

    fused_run = run()
    with torch.no_grad():
        fused_eval = attn(x, tags)[0]
    monkeypatch.setattr(attention_module, "gated_bd_add", lambda scores, q_pos, r, gate, onehot, scale, causal: scores + (
        _gated_bd(q_pos, r, gate, onehot, scale) if gate is not None
        else rel_shift(torch.matmul(q_pos * scale, r.transpose(-1, -2)))))
    monkeypatch.setattr(attention_module, "class_bias_add",
                        lambda scores, bias, onehot, causal: scores + torch.matmul(bias, onehot))
    ref_run = run()
    for a, r in zip(fused_run[:3], ref_run[:3]):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    for a, r in zip(fused_run[3], ref_run[3]):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(fused_eval, ref_run[0], rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- DeBERTa, Eq. 12-13

def spos_inputs(b=2, h=3, t=6, d=4, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    rand = lambda *s: torch.randn(*s, generator=g, dtype=dtype)  # noqa: E731
    qk = rand(b, t, 2, h, d).permute(2, 0, 3, 1, 4)  # permuted views, as the attention makes them
    pos = rand(2 * t - 1, 2, h, d).permute(1, 2, 0, 3)
    cls = torch.randint(0, N_CLASSES, (b, t), generator=g)
    return {"scores": rand(b, h, t, t), "q": qk[0], "k": qk[1], "pos_q": pos[0], "pos_k": pos[1],
            "gate": 0.5 * rand(b, h, t, N_CLASSES), "onehot": class_onehot(cls, N_CLASSES, dtype), "scale": (3 * d) ** -0.5}


def test_gated_spos_add_matches_autograd_reference():
    """Forward and every gradient of the in-place Eq. 13 equal ``scores + S_pos + S_pos * c``."""
    from reference_ops import _gated_spos
    from sipe_fairseq.modules.gated_bd import gated_spos_add

    x = spos_inputs()
    names = ("q", "k", "pos_q", "pos_k", "gate")
    a = {n: v.clone().requires_grad_(n in names) if torch.is_tensor(v) else v for n, v in x.items()}
    b = {n: v.clone().requires_grad_(n in names) if torch.is_tensor(v) else v for n, v in x.items()}
    want = b["scores"] + _gated_spos(b["q"], b["k"], b["pos_q"], b["pos_k"], b["gate"], b["onehot"], b["scale"])
    got = gated_spos_add(a["scores"].clone(), a["q"], a["k"], a["pos_q"], a["pos_k"], a["gate"], a["onehot"], a["scale"])
    torch.testing.assert_close(got, want)
    w = torch.randn_like(want)
    (got * w).sum().backward()
    (want * w).sum().backward()
    for n in names:
        torch.testing.assert_close(a[n].grad, b[n].grad, msg=n)
    with torch.no_grad():  # the no-grad path computes the same
        torch.testing.assert_close(gated_spos_add(x["scores"].clone(), x["q"], x["k"], x["pos_q"], x["pos_k"], x["gate"],
                                                  x["onehot"], x["scale"]), want.detach())


def test_gated_spos_add_gradcheck():
    from sipe_fairseq.modules.gated_bd import gated_spos_add

    x = spos_inputs(b=1, h=2, t=4, d=3)
    args = [x[n].clone().requires_grad_(n != "onehot") for n in ("scores", "q", "k", "pos_q", "pos_k", "gate", "onehot")]

    def fn(scores, *rest):
        return gated_spos_add(scores.clone(), *rest, x["scale"])

    assert torch.autograd.gradcheck(fn, args)
