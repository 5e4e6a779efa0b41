#!/usr/bin/env python
"""Cost of each SiPE injection in the encoders: train-step time and peak training memory of
``sipe_roberta`` (none, input), ``sipe_deberta`` and ``sipe_modernbert`` (none, input, position), as
ratios to the same encoder with ``none``, all in one run; prints markdown tables (``--json FILE``
for all numbers).

    .venv/bin/python scripts/bench_encoders.py [--quick] [--repeats 3] [--threads 2] [--json FILE]
    .venv/bin/python scripts/bench_encoders.py --configs deberta.position --profile deberta.none,deberta.position
    .venv/bin/python scripts/bench_encoders.py --baseline /path/to/old/checkout   # before/after

Default size (base-like, CPU-feasible; as scripts/bench_decoders.py): d_model 512, 8 heads, 6 layers,
FFN 2048 (ModernBERT: GeGLU, 768 per gate branch = ModernBERT-base's 1.5 d), vocabulary 8000,
batch 8 x 512 tokens, 15% of the positions masked, 75% of the positions tagged. Each encoder keeps
its own defaults otherwise: RoBERTa learned absolute positions, post-norm, GELU, dropout 0.1;
DeBERTa disentangled attention over 256 log buckets (max relative position 512), dropout 0.1;
ModernBERT rotary, pre-norm, no biases, no dropout, layers 1, 4, 7, .. global and the others local
with a 128-token window (layers G L L G L L at 6 layers).

Method: the machinery of scripts/bench_decoders.py (see its docstring): ``--replicas`` host
processes, each holding every configuration (a process's own speed cancels in the ratios), driven
by turns (only one computes at a time) in an order rotated every round;
memory from the torch profiler's allocator events of one steady-state training step; time as the
median of ``--repeats`` rounds, wall and CPU time, with the load of other processes recorded per
sample. A training step is what fairseq's trainer does with ``--criterion hexatag_mlm``:
zero_grad, the criterion itself (forward with the MLM logits only at the masked positions, MLM
cross-entropy + tag-head losses at masked tagged positions), backward of loss / masked tokens,
Adam step.
"""
import argparse
import gc
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decoders as bench  # noqa: E402  (the decoder worker, whose commands the encoder worker reuses)
import benchlib  # noqa: E402  (host processes, interleaving, paired ratios)

ENCODERS = {"roberta": ("none", "input"), "deberta": ("none", "input", "position"),
            "modernbert": ("none", "input", "position")}
CONFIGS = tuple(f"{enc}.{inj}" for enc, injs in ENCODERS.items() for inj in injs)
TARGET = {"none": 1.0, "input": 1.03, "position": 1.15}  # time and peak memory, ratio to the encoder's none
SIZE_KEYS = ("embed_dim", "heads", "layers", "ffn", "modernbert_ffn", "vocab", "batch", "tokens", "mask_prob",
             "tag_density", "window", "global_every", "buckets", "max_relative", "threads", "seed")
QUICK = dict(embed_dim=64, heads=4, layers=3, ffn=256, modernbert_ffn=96, vocab=500, batch=2, tokens=64, window=16,
             buckets=32, max_relative=64, repeats=2, warmup=1, steps=1)


def reference_of(label):
    """The label a row's ratios are taken to: the same encoder with ``none``, same code."""
    enc = label.split(".")[0]
    return f"{enc}.none" + (benchlib.BASE if label.endswith(benchlib.BASE) else "")


# ----------------------------------------------------------------------------------- worker


class EncoderWorker(bench.Worker):
    """One encoder configuration (``--child ENCODER.INJECTION``): model, Adam, the ``hexatag_mlm``
    criterion and a fixed masked batch; the commands (memory, train, profile, rss) are the decoder
    bench's."""

    def __init__(self, args):
        import torch
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        from types import SimpleNamespace
        from fairseq.data import Dictionary
        import sipe_fairseq  # noqa: F401  (registers the plugin)
        from sipe_fairseq.criterions.hexatag_mlm import HexatagMLMCriterion

        self.torch, self.args, self.cfg = torch, args, args.child
        d = Dictionary()
        for i in range(args.vocab - len(d) - 1):
            d.add_symbol(f"w{i}")
        self.mask_idx = d.add_symbol("<mask>")  # last, as fairseq's masked_lm task adds it
        self.dictionary = d
        self.model = self._build()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.criterion = HexatagMLMCriterion(SimpleNamespace(target_dictionary=d))
        self._make_batch()
        gc.freeze()  # the per-step gc.collect() (outside the timed region) then skips ~0.15 s of fairseq's objects

    def _build(self):
        from sipe_fairseq.models import sipe_encoder as m
        a = self.args
        enc, injection = self.cfg.split(".")
        model_cls, cfg_cls = {"roberta": (m.SiPERobertaModel, m.SiPEEncoderConfig),
                              "deberta": (m.SiPEDebertaModel, m.SiPEDebertaConfig),
                              "modernbert": (m.SiPEModernBertModel, m.SiPEModernBertConfig)}[enc]
        extra = {"deberta": dict(relative_buckets=a.buckets, max_relative_positions=a.max_relative),
                 "modernbert": dict(encoder_ffn_embed_dim=a.modernbert_ffn, local_attention_window=a.window,
                                    global_attention_every=a.global_every)}.get(enc, {})
        cfg = cfg_cls(**{"encoder_embed_dim": a.embed_dim, "encoder_ffn_embed_dim": a.ffn, "encoder_layers": a.layers,
                         "encoder_attention_heads": a.heads, "sipe_injection": injection, "max_positions": a.tokens,
                         **extra})
        self.dropouts = (cfg.dropout, cfg.attention_dropout, cfg.activation_dropout)
        return model_cls(m.SiPEEncoder(cfg, self.dictionary))

    def _make_batch(self):
        """B x T blocks ``<s> w .. w </s>``; every inner position is tagged with probability
        ``tag_density`` (terminal id 5..6, non-terminal 5..9, else <notag>) and selected for the MLM
        with probability ``mask_prob`` (80% <mask>, 10% a random word, 10% kept, as fairseq's
        ``MaskTokensDataset``); selected positions lose their input tags and are the targets (as
        ``hexatag_mlm``'s ``MaskedTagDataset``)."""
        torch, a, d = self.torch, self.args, self.dictionary
        from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
        g = torch.Generator().manual_seed(a.seed)
        shape = (a.batch, a.tokens)
        tokens = torch.randint(d.nspecial, self.mask_idx, shape, generator=g)
        tokens[:, 0], tokens[:, -1] = d.bos(), d.eos()
        inner = torch.zeros(shape, dtype=torch.bool)
        inner[:, 1:-1] = True
        tagged = inner & (torch.rand(shape, generator=g) < a.tag_density)
        notag = torch.full(shape, NOTAG_ID)
        terms = torch.where(tagged, torch.randint(5, 7, shape, generator=g), notag)
        nts = torch.where(tagged, torch.randint(5, 10, shape, generator=g), notag)
        selected = inner & (torch.rand(shape, generator=g) < a.mask_prob)
        u = torch.rand(shape, generator=g)
        src = torch.where(selected & (u < 0.8), torch.full(shape, self.mask_idx), tokens)
        src = torch.where(selected & (u >= 0.8) & (u < 0.9), torch.randint(d.nspecial, self.mask_idx, shape, generator=g), src)
        pad = torch.full(shape, d.pad())
        self.net_input = {"src_tokens": src, "src_terminals": terms.masked_fill(selected, NOTAG_ID),
                          "src_nonterminals": nts.masked_fill(selected, NOTAG_ID)}
        self.target = torch.where(selected, tokens, pad)
        self.tag_targets = {f"{kind}_target": torch.where(selected & (ids >= FIRST_TAG_ID), ids, pad)  # tag pad = 1
                            for kind, ids in (("terminal", terms), ("nonterminal", nts))}
        self.sample = {"net_input": self.net_input, "target": self.target, **self.tag_targets,
                       "ntokens": src.numel(), "nsentences": a.batch}
        self.masked = int(selected.sum())

    def train_step(self):
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss, sample_size, _ = self.criterion(self.model, self.sample)
        (loss / sample_size).backward()  # = fairseq's trainer: gradients divided by the sample size
        self.optimizer.step()

    def cmd_info(self):
        enc = self.model.encoder
        named = list(enc.named_parameters())
        sipe = sum(p.numel() for n, p in named if n.startswith(("tags.", "fusion.", "deprel.")) or ".injections." in n)
        heads = sum(p.numel() for n, p in named if n.startswith(("terminal_head.", "nonterminal_head.")))
        pattern = "".join("L" if layer.attn.window else "G" for layer in enc.layers)
        return {"params": sum(p.numel() for _, p in named), "sipe_params": sipe, "tag_head_params": heads,
                "dropouts": self.dropouts, "layers": pattern, "masked_positions": self.masked,
                "threads": self.torch.get_num_threads(), "torch": self.torch.__version__}


# ----------------------------------------------------------------------------------- parent


def run(args):
    import torch
    labels = list(args.configs)
    if args.baseline:
        labels += [c + benchlib.BASE for c in labels]
    script = os.path.abspath(__file__)
    load_before = os.getloadavg()
    def child(name, mine, logdir):
        return benchlib.Child(name, mine, args, logdir, script, SIZE_KEYS)

    results, elapsed = benchlib.drive(labels, child, args, ("train",), reference=labels[0])
    run_keys = ("repeats", "replicas", "warmup", "steps", "quiet_load", "baseline", "omp_spin")
    settings = {k: getattr(args, k) for k in SIZE_KEYS + run_keys}
    settings["loadavg_before"], settings["loadavg_after"] = load_before, os.getloadavg()
    settings["quick"] = args.quick
    return summarize(settings, labels, results, elapsed, torch.__version__)


def summarize(settings, labels, results, elapsed, torch_version):
    med = {lab: {m: benchlib.median(results[lab][f"train_{m}"]) for m in ("wall", "cpu", "load")} for lab in labels}
    rows = []
    for lab in labels:
        res, st = results[lab], med[lab]
        ref_res, ref = results[reference_of(lab)], med[reference_of(lab)]
        enc, inj = lab.split("@")[0].split(".")
        mem, rss = res["memory"]["alloc_peak_bytes"], res["memory"]["rss_peak_increase_kb"]
        paired = benchlib.paired_ratios(res, ref_res, "train_wall")
        quiet = max(st["load"], ref["load"]) <= settings["quiet_load"]  # else judge time by CPU time
        row = {
            "label": lab, "encoder": "sipe_" + enc, "injection": inj,
            "code": "baseline" if lab.endswith(benchlib.BASE) else "working tree", "info": res["info"],
            "params": res["info"]["params"], "sipe_params": res["info"]["sipe_params"],
            "tag_head_params": res["info"]["tag_head_params"],
            "train_ms": 1000 * st["wall"], "train_cpu_s": st["cpu"], "external_load": st["load"],
            "train_ratio": benchlib.paired_ratio(res, ref_res, "train_wall"),
            "train_cpu_ratio": benchlib.paired_ratio(res, ref_res, "train_cpu"),
            "train_host_ratios": benchlib.host_ratios(res, ref_res, "train_wall"),
            "train_ratio_range": [min(paired), max(paired)] if paired else None,
            "peak_mb": mem / 2**20, "rss_peak_increase_mb": rss / 1024,
            "memory_ratio": benchlib.ratio(mem, ref_res["memory"]["alloc_peak_bytes"]),
            "rss_ratio": benchlib.ratio(rss, ref_res["memory"]["rss_peak_increase_kb"]),
            "memory": res["memory"], "rss_idle_mb": res.get("rss_idle_kb", 0) / 1024,
            "samples_raw": {k: res[k] for k in res if k.startswith("train_") or k == "slots"},
            "process_effect": benchlib.process_effect(res, "train_wall"),
            "target": TARGET[inj], "verdict_basis": "wall" if quiet else "cpu",
        }
        row["train_verdict_ratio"] = row["train_ratio"] if quiet else row["train_cpu_ratio"]
        if inj == "none":
            row["meets"], row["misses"] = None, []
        else:
            row["misses"] = [k for k, v in (("time", row["train_verdict_ratio"]), ("memory", row["memory_ratio"]))
                             if v > row["target"]]
            row["meets"] = not row["misses"]
        rows.append(row)
    return {"settings": settings, "torch": torch_version, "elapsed_s": elapsed, "rows": rows,
            "profiles": {lab: results[lab]["profile"] for lab in labels if "profile" in results[lab]}}


def render(summary):
    s, rows = summary["settings"], summary["rows"]
    threads = sorted({r["info"]["threads"] for r in rows})
    layers = {r["encoder"]: r["info"]["layers"] for r in rows}
    loads = [r["external_load"] for r in rows]
    modern = (f" (ModernBERT GeGLU {s['modernbert_ffn']} per branch, window {s['window']}, layers "
              f"{layers['sipe_modernbert']})" if "sipe_modernbert" in layers else "")
    deberta = f", DeBERTa {s['buckets']} buckets up to {s['max_relative']}" if "sipe_deberta" in layers else ""
    out = [
        f"### SiPE encoder cost: d_model {s['embed_dim']}, {s['heads']} heads, {s['layers']} layers, FFN {s['ffn']}"
        f"{modern}{deberta}, vocab {s['vocab']}, batch {s['batch']} x {s['tokens']} tokens, "
        f"{100 * s['mask_prob']:.0f}% masked, {100 * s['tag_density']:.0f}% tagged, torch threads "
        f"{'/'.join(map(str, threads))}, torch {summary['torch']}",
        "",
        f"Machine load (1/5/15-min load average): {fmt_load(s['loadavg_before'])} before, "
        f"{fmt_load(s['loadavg_after'])} after; other processes' load during the timed steps (median per "
        f"configuration): {min(loads):.2f}-{max(loads):.2f} cores.",
        "",
        f"Ratios to the same encoder with `none`. Targets (train step and peak memory): `input` <= "
        f"{TARGET['input']:.2f}x, `position` <= {TARGET['position']:.2f}x.",
        "",
        *(["**Smoke run (--quick)**: at this size per-op overhead dominates; its ratios and verdicts mean nothing.", ""]
          if s.get("quick") else []),
        "| encoder | injection | params | SiPE params (+ tag heads) | train step, wall [range] | train step, CPU | "
        "peak memory | RSS peak increase | target | meets targets |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if r["meets"] is None:
            meets = "(reference)"
        else:
            meets = ("yes" if r["meets"] else "**no**: " + ", ".join(r["misses"])) + f" (time by {r['verdict_basis']})"
        name = r["injection"] + (" (base)" if r["code"] == "baseline" else "")
        out.append(
            f"| {r['encoder']} | {name} | {r['params'] / 1e6:.2f}M | {r['sipe_params']:,} (+ {r['tag_head_params']:,}) | "
            f"{r['train_ratio']:.3f}x{benchlib.fmt_range(r['train_ratio_range'])} | {r['train_cpu_ratio']:.3f}x | "
            f"{r['memory_ratio']:.3f}x | {r['rss_ratio']:.3f}x | {r['target']:.2f} | {meets} |")
    out += [
        "",
        "| run | train step ms (wall) | train step ms (CPU) | peak MB (tensors) | RSS peak increase MB | "
        "other processes' load, cores |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(f"| {r['label']} | {r['train_ms']:,.0f} | {1000 * r['train_cpu_s']:,.0f} | {r['peak_mb']:,.0f} | "
                   f"{r['rss_peak_increase_mb']:,.0f} | {r['external_load']:.2f} |")
    out += [
        "",
        "Notes:",
        f"- Time: {s['warmup']} warm-up round(s), then {s['repeats']} rounds in each of {benchlib.replicas_of(s)} host "
        f"process(es), every host holding every configuration, so a process's own speed cancels in the ratios; a turn "
        f"= {s['steps']} step(s) of one configuration in one host (their median the sample), one turn at a time, the "
        "order rotated every round. Ratio = median of the per-sample ratios to the same encoder's `none` of the same "
        "round and host; [a-b] = their min-max.",
        *benchlib.host_note(rows, [r["label"] for r in rows if r["label"] == reference_of(r["label"])], ("train",)),
        "- Train step = zero_grad + the `hexatag_mlm` criterion (forward, MLM logits at the masked positions only, MLM "
        "cross-entropy + terminal/non-terminal tag-head NLL at masked tagged positions; `none` has no tag heads) + "
        "backward of loss / masked tokens + `torch.optim.Adam` step.",
        f"- The time verdict uses the wall ratio when the median other load was <= {s['quiet_load']} cores for both "
        "the row and its `none`, else the CPU-time ratio (user+system of the worker; workers run with "
        "OMP_WAIT_POLICY=PASSIVE unless --omp-spin).",
        "- Peak memory: torch's CPU allocator events of one steady-state training step (torch.profiler, "
        "profile_memory) plus the tensors alive at its start (parameters, Adam state, batch); RSS peak increase is "
        "the process high-water mark of that step (cross-check, includes malloc caching).",
        f"- Whole run: {summary['elapsed_s'] / 60:.1f} min.",
    ]
    return "\n".join(out)


def fmt_load(avg):
    return "/".join(f"{v:.2f}" for v in avg)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    benchlib.add_common_arguments(p, "dictionary size (incl. fairseq's 4 specials and <mask>)")
    p.add_argument("--modernbert-ffn", type=int, default=768, help="ModernBERT's GeGLU inner dimension per branch")
    p.add_argument("--mask-prob", type=float, default=0.15, help="fraction of positions selected for the MLM")
    p.add_argument("--window", type=int, default=128, help="ModernBERT: window of the local layers")
    p.add_argument("--global-every", type=int, default=3, help="ModernBERT: every N-th layer (from layer 1) is global")
    p.add_argument("--buckets", type=int, default=256, help="DeBERTa: relative-position buckets")
    p.add_argument("--max-relative", type=int, default=512, help="DeBERTa: offset mapped to the last log bucket")
    p.add_argument("--steps", type=int, default=1, help="train steps per configuration per round")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help=f"comma-separated subset of {','.join(CONFIGS)} (each encoder's none is added)")
    p.add_argument("--quick", action="store_true", help="tiny smoke run (checks the plumbing; at this size per-op "
                   "overhead dominates, so its ratios mean nothing): " + " ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--json", metavar="FILE", help="also write all numbers (per-round samples included) as JSON")
    p.add_argument("--from-json", metavar="FILE", help="print the tables of an earlier --json FILE (no measuring)")
    p.add_argument("--profile", default="", help="comma-separated configs to profile (torch.profiler, one train step, "
                   "ops by self CPU time) after the timing")
    p.add_argument("--baseline", metavar="DIR", help="also run every selected config with the sipe_fairseq package "
                   "found in DIR, interleaved with the working tree's (before/after comparisons)")
    p.add_argument("--quiet-load", type=float, default=0.25,
                   help="judge time by wall clock if other processes used at most this many cores (median), else by CPU time")
    p.add_argument("--pause", type=float, default=0.2, help="seconds between two turns (lets thread pools go idle)")
    p.add_argument("--no-trim", action="store_true", help="do not malloc_trim after each turn")
    p.add_argument("--omp-spin", action="store_true", help="leave OMP_WAIT_POLICY alone (default: PASSIVE in the workers)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        sys.exit(benchlib.child_main(args, EncoderWorker))
    if args.quick:
        for k, v in QUICK.items():
            if p.get_default(k) == getattr(args, k):
                setattr(args, k, v)
    wanted = [c.strip() for c in args.configs.split(",") if c.strip()]
    args.profile = [c.strip() for c in args.profile.split(",") if c.strip()]
    bad = [c for c in wanted + [c.split("@")[0] for c in args.profile] if c not in CONFIGS]
    if bad:
        p.error(f"unknown config(s) {bad}; choose from {CONFIGS}")
    encoders = [e for e in ENCODERS if any(c.split(".")[0] == e for c in wanted)]
    args.configs = [c for c in CONFIGS if c in wanted or (c.split(".")[0] in encoders and c.endswith(".none"))]
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "sipe_fairseq")):
        p.error(f"--baseline {args.baseline}: no sipe_fairseq package there")
    if args.from_json:
        with open(args.from_json) as f:
            summary = json.load(f)
    else:
        summary = run(args)
    print(render(summary))
    for lab, tables in summary["profiles"].items():
        for kind, table in tables.items():
            print(f"\n#### torch.profiler: {lab}, one {kind} step (sorted by self CPU time)\n\n```\n{table}\n```")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
