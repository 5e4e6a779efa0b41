#!/usr/bin/env python
"""One SiPEAttention layer, forward + backward (and eval forward), for the ways of computing Eq. 6's
gated BD: ``none`` (no injection, plain BD), ``checkpoint`` (torch.utils.checkpoint around the
autograd reference, the previous code), ``fused`` (``gated_bd_add``, the current code), ``autograd``
(the reference without checkpoint: BD and c saved for backward); each also with attention-bias,
whose Eq. 7-8 term is ``class_bias_add`` for ``fused`` and the previous out-of-place baddbmm otherwise.

    OMP_NUM_THREADS=1 python scripts/bench_gated_bd.py [--batch 8 --heads 8 --tokens 512 --head-dim 64]

Time: median over rounds (wall and this process's CPU time), variants interleaved within a round.
Memory: peak of the running sum of the CPU allocator events of one training step (torch.profiler, profile_memory), above what was
alive before it (as scripts/bench_decoders.py).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.checkpoint import checkpoint

from sipe_fairseq.modules import attention as attention_module
from sipe_fairseq.modules.assembly import attach_injections
from sipe_fairseq.modules.attention import SiPEAttention
from sipe_fairseq.modules.gated_bd import class_bias_add, gated_bd_add
from sipe_fairseq.modules.injections import TagContext

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from reference_ops import _gated_bd  # noqa: E402  the plain-autograd reference (test code)


def _checkpointed(scores, q_pos, r, gate, onehot, scale, causal=False):
    args = (q_pos, r, gate, onehot, scale)
    bd = checkpoint(_gated_bd, *args, use_reentrant=False) if torch.is_grad_enabled() else _gated_bd(*args)
    return scores + bd


def _autograd(scores, q_pos, r, gate, onehot, scale, causal=False):
    return scores + _gated_bd(q_pos, r, gate, onehot, scale)


def _baddbmm(scores, bias, onehot, causal=False):
    b, h, t, _ = scores.shape
    return torch.baddbmm(scores.reshape(b * h, t, t), bias.reshape(b * h, t, -1),
                         onehot.expand(b, h, -1, t).reshape(b * h, -1, t)).view(b, h, t, t)


GATED = {"fused": gated_bd_add, "checkpoint": _checkpointed, "autograd": _autograd}


def build(variant, a):
    torch.manual_seed(0)
    attn = SiPEAttention(a.heads * a.head_dim, a.heads)
    kind, _, bias = variant.partition("+")
    parts = ([] if kind == "none" else ["position"]) + (["attention-bias"] if bias else [])
    attach_injections([attn], parts, tag_dim=64)
    return attn, GATED.get(kind, gated_bd_add), class_bias_add if kind == "fused" else _baddbmm


def step(attn, gated, bias_add, x, tags, grad_out, train=True):
    attention_module.gated_bd_add, attention_module.class_bias_add = gated, bias_add
    if train:
        attn.zero_grad(set_to_none=True)
        xi = x.detach().requires_grad_()
        out, _ = attn(xi, tags)
        out.backward(grad_out)
    else:
        with torch.no_grad():
            attn(x, tags)


def peak_bytes(fn):
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
    running = peak = 0
    for _, n in events:
        running += n
        peak = max(peak, running)
    return peak


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--tokens", type=int, default=512)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--variants", default="none,checkpoint,fused,autograd,none+bias,checkpoint+bias,fused+bias,autograd+bias")
    a = p.parse_args()
    variants = a.variants.split(",")
    g = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch, a.tokens, a.heads * a.head_dim, generator=g)
    grad_out = torch.randn(x.shape, generator=g)
    tags = TagContext(torch.randint(0, 11, (a.batch, a.tokens), generator=g), torch.randn(11, 64, generator=g))
    models = {v: build(v, a) for v in variants}
    mem = {}
    for v in variants:
        step(*models[v], x, tags, grad_out)  # warm-up
        mem[v] = peak_bytes(lambda v=v: step(*models[v], x, tags, grad_out))
    times = {v: {k: [] for k in ("train", "eval", "train_cpu", "eval_cpu")} for v in variants}
    for r in range(a.rounds):
        for v in variants[r % len(variants):] + variants[:r % len(variants)]:
            for kind in ("train", "eval"):
                start, cpu = time.perf_counter(), time.process_time()
                step(*models[v], x, tags, grad_out, train=kind == "train")
                times[v][kind].append(time.perf_counter() - start)
                times[v][kind + "_cpu"].append(time.process_time() - cpu)
    print(f"B={a.batch} H={a.heads} T={a.tokens} d={a.head_dim}, {torch.get_num_threads()} thread(s), torch {torch.__version__}, "
          f"median of {a.rounds} rounds")
    print("Ratios to none (also for the +bias rows).")
    print("| variant | train fwd+bwd ms wall (ratio) | train ms CPU (ratio) | eval fwd ms wall (ratio) | eval ms CPU (ratio) "
          "| step peak MB (ratio) |")
    print("|---|---:|---:|---:|---:|---:|")
    keys = ("train", "train_cpu", "eval", "eval_cpu")
    ref = {k: statistics.median(times[variants[0]][k]) for k in keys}
    for v in variants:
        cells = []
        for k in keys:
            m = statistics.median(times[v][k])
            cells.append(f"{1000 * m:.0f} ({m / ref[k]:.3f})")
        cells.append(f"{mem[v] / 2**20:.0f} ({mem[v] / mem[variants[0]]:.3f})")
        print(f"| {v} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
