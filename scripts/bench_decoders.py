#!/usr/bin/env python
"""Cost of each SiPE injection: train-step time, eval throughput and peak training memory of
``sipe_txl`` for every ``--sipe-injection`` and of fairseq's ``transformer_lm`` of the same size,
as ratios to ``sipe_txl`` with ``none``; prints a markdown table (``--json FILE`` for all numbers).

    .venv/bin/python scripts/bench_decoders.py [--quick] [--repeats 3] [--threads 2] [--json FILE]
    .venv/bin/python scripts/bench_decoders.py --baseline /path/to/old/checkout   # before/after

Method (what makes the ratios trustworthy on a shared, noisy 2-core box):
  * every host process (this script with ``--child``) holds every configuration, each built once
    (model, Adam, a fixed batch), and there are ``--replicas`` hosts; the parent drives them by
    turns, so only one computes at any moment. Why hosts and not one process per configuration: an
    A/A test (the same model in two processes) differed by 3-8% in train-step time and up to 20% in
    eval time on this box, a process's own speed that no number of rounds removes; inside a host it
    is shared by the configurations being compared and cancels in their ratios (same-model A/A
    within one process: about 1-2%);
  * memory: each configuration's first training step, in a fresh process of its own, is recorded with
    ``torch.profiler.profile(profile_memory=True)``; the maximum of the running sum of the CPU
    allocator's allocation/free events, plus the tensors alive at the start (parameters, Adam
    state, batch), is the step's peak tensor memory -- exact, and independent of load, malloc
    caching and fragmentation. Cross-check: the process RSS high-water mark of that step (VmRSS
    before it, kernel high-water mark reset with ``/proc/self/clear_refs`` 5, VmHWM after; else
    ``ru_maxrss``). Adam's state is created first by a zero-gradient step (weights unchanged), so
    the measured step is a steady-state one;
  * time: warm-up rounds, then ``--repeats`` rounds; a round gives every configuration one
    training step (zero_grad, forward, LM + tag-head loss as ``hexatag_lm``, backward, Adam step)
    and one eval forward (eval mode, no grad, log-softmax over the vocabulary, the target's
    log-probability gathered as ``fairseq-eval-lm`` does), in an order rotated every round, so load
    drift hits all configurations alike; the ratio reported is the median of the per-sample
    ratios to ``none`` of the same round and host, with their min-max and the ratio within each
    host alone as noise gauges. Each sample also records the worker's CPU
    time and the load other processes put on the machine (/proc/stat);
    CPU-time ratios are shown as the load-robust cross-check (and used for the verdict when the
    machine was busy).
"""
import argparse
import gc
import json
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402  (the shared machinery; re-exported for bench_encoders.py and older callers)
    BASE, Child, add_common_arguments, child_main, cpu_snapshot, drive, fmt_range, host_note, host_ratios,
    malloc_trim, median, paired_ratio, paired_ratios, process_effect, ratio, replicas_of, reset_hwm, status_kb,
)
try:
    from sipe_fairseq.modules.assembly import INJECTION_CHOICES as INJECTIONS  # noqa: E402  (the one list)
except ImportError:
    if "--child" not in sys.argv:
        raise
    INJECTIONS = ()  # a host process of a --baseline checkout older than that list: it builds what it is told
FAIRSEQ = "transformer_lm"
CONFIGS = INJECTIONS + (FAIRSEQ,)
TIME_TARGET = {"none": 1.0, "input": 1.03, "position": 1.10}  # every other injection: 1.15
DEFAULT_TIME_TARGET, MEMORY_TARGET = 1.15, 1.10
QUICK = dict(embed_dim=64, heads=4, layers=2, ffn=256, vocab=500, batch=2, tokens=64, repeats=3, warmup=1, steps=5)


def time_target(cfg):
    return None if cfg == FAIRSEQ else TIME_TARGET.get(cfg, DEFAULT_TIME_TARGET)


# ----------------------------------------------------------------------------------- worker


class Worker:
    """One configuration: model, Adam, a fixed batch; answers commands from the parent."""

    def __init__(self, args):
        import torch
        torch.set_num_threads(args.threads)
        torch.manual_seed(args.seed)
        from fairseq.data import Dictionary
        import sipe_fairseq  # noqa: F401  (registers the plugin)

        self.torch, self.args, self.cfg = torch, args, args.child
        d = Dictionary()
        for i in range(args.vocab - len(d)):
            d.add_symbol(f"w{i}")
        self.dictionary = d
        self.model = self._build_fairseq() if self.cfg == FAIRSEQ else self._build_sipe()
        self.decoder = self.model if self.cfg != FAIRSEQ else self.model.decoder
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self._make_batch()

    def _build_sipe(self):
        from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig
        a = self.args
        cfg = SiPEDecoderConfig(decoder_embed_dim=a.embed_dim, decoder_ffn_embed_dim=a.ffn, decoder_layers=a.layers,
                                decoder_attention_heads=a.heads, dropout=a.dropout, sipe_injection=self.cfg,
                                tokens_per_sample=a.tokens, max_target_positions=a.tokens)
        self.dropouts = (cfg.dropout, cfg.attention_dropout, cfg.activation_dropout)
        return SiPEDecoder(cfg, self.dictionary)

    def _build_fairseq(self):
        """fairseq's own ``transformer_lm``: its config defaults + ``base_lm_architecture`` (pre-norm,
        sinusoidal positions), our sizes and dropouts, tied input/output embedding."""
        from dataclasses import fields
        from types import SimpleNamespace
        from fairseq.models.transformer_lm import TransformerLanguageModel, TransformerLanguageModelConfig, base_lm_architecture
        from sipe_fairseq.models.sipe_lm import SiPEDecoderConfig
        a = self.args
        ours = SiPEDecoderConfig()
        defaults = TransformerLanguageModelConfig()
        ns = argparse.Namespace(**{f.name: getattr(defaults, f.name) for f in fields(defaults)})
        ns.__dict__.update(decoder_embed_dim=a.embed_dim, decoder_ffn_embed_dim=a.ffn, decoder_layers=a.layers,
                           decoder_attention_heads=a.heads, decoder_input_dim=a.embed_dim, decoder_output_dim=a.embed_dim,
                           share_decoder_input_output_embed=True, dropout=a.dropout,
                           attention_dropout=ours.attention_dropout, activation_dropout=ours.activation_dropout,
                           relu_dropout=ours.activation_dropout, activation_fn=str(ours.activation_fn),
                           tokens_per_sample=a.tokens, max_target_positions=a.tokens, add_bos_token=False, tpu=False)
        base_lm_architecture(ns)
        self.dropouts = (ns.dropout, ns.attention_dropout, ns.activation_dropout)
        task = SimpleNamespace(source_dictionary=self.dictionary, target_dictionary=self.dictionary)
        return TransformerLanguageModel.build_model(ns, task)

    def _make_batch(self):
        """B x (T+1) random tokens (inputs/targets shifted by one) and hexatags: with probability
        ``tag_density`` a position gets terminal id 5..6 and non-terminal id 5..9, else 4 (no tag)."""
        torch, a = self.torch, self.args
        g = torch.Generator().manual_seed(a.seed)
        shape = (a.batch, a.tokens + 1)
        nspecial = self.dictionary.nspecial
        stream = torch.randint(nspecial, len(self.dictionary), shape, generator=g)
        tagged = torch.rand(shape, generator=g) < a.tag_density
        notag = torch.full(shape, 4)
        terms = torch.where(tagged, torch.randint(5, 7, shape, generator=g), notag)
        nts = torch.where(tagged, torch.randint(5, 10, shape, generator=g), notag)
        self.tokens, self.target = stream[:, :-1].contiguous(), stream[:, 1:].contiguous()
        self.net_input = {"src_tokens": self.tokens} if self.cfg == FAIRSEQ else {
            "prev_output_tokens": self.tokens, "src_terminals": terms[:, :-1].contiguous(),
            "src_nonterminals": nts[:, :-1].contiguous()}
        self.tag_targets = {"terminal": terms[:, 1:].contiguous(), "nonterminal": nts[:, 1:].contiguous()}
        self.ntokens = self.tokens.numel()

    # -- the measured operations

    def train_step(self):
        import torch.nn.functional as F
        from sipe_fairseq.criterions.hexatag_lm import TAG_HEADS, tag_nll
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        net_output = self.model(**self.net_input)
        lprobs = self.decoder.get_normalized_probs(net_output, log_probs=True)
        loss = F.nll_loss(lprobs.view(-1, lprobs.size(-1)), self.target.view(-1), ignore_index=self.dictionary.pad(),
                          reduction="sum")
        for kind, n in TAG_HEADS:  # as the hexatag_lm criterion (heads exist unless injection none)
            logits = net_output[1].get(f"{kind}_logits")
            if logits is not None:
                loss = loss + tag_nll(logits, self.tag_targets[kind], n)[0]
        (loss / self.ntokens).backward()
        self.optimizer.step()

    def eval_step(self):
        torch = self.torch
        self.model.eval()
        with torch.no_grad():
            net_output = self.model(**self.net_input)
            lprobs = self.decoder.get_normalized_probs(net_output, log_probs=True)
            scores = lprobs.gather(-1, self.target.unsqueeze(-1))
        return float(scores.sum())

    def timed(self, fn, n):
        """Per step: wall seconds, CPU seconds of this process (all threads) and the load other
        processes put on the machine meanwhile (cores), for ``n`` steps."""
        out = []
        for _ in range(n):
            gc.collect()
            busy0, own0 = cpu_snapshot()
            start = time.perf_counter()
            fn()
            wall = time.perf_counter() - start
            busy1, own1 = cpu_snapshot()
            out.append({"wall": wall, "cpu": own1 - own0, "load": max(0.0, (busy1 - busy0) - (own1 - own0)) / wall})
        return out

    # -- commands

    def cmd_info(self):
        named = list(self.model.named_parameters())
        total = sum(p.numel() for _, p in named)
        sipe = sum(p.numel() for n, p in named if n.split(".")[0] == "tags" or ".injections." in n)
        heads = sum(p.numel() for n, p in named if n.split(".")[0] in ("terminal_head", "nonterminal_head"))
        return {"params": total, "sipe_params": sipe, "tag_head_params": heads, "dropouts": self.dropouts,
                "threads": self.torch.get_num_threads(), "torch": self.torch.__version__}

    def _live_bytes(self):
        tensors = [*self.model.parameters(), *self.model.buffers(), self.target, *self.net_input.values(),
                   *self.tag_targets.values()]
        for state in self.optimizer.state.values():
            tensors += [v for v in state.values() if self.torch.is_tensor(v)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def cmd_memory(self):
        """Peak memory of one training step (see the module docstring)."""
        torch = self.torch
        from torch.profiler import ProfilerActivity, profile
        for p in self.model.parameters():  # Adam state without moving the weights (zero gradient)
            p.grad = torch.zeros_like(p)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        malloc_trim()
        live = self._live_bytes()
        rss_before = status_kb("VmRSS")
        reset = reset_hwm()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            self.train_step()
        hwm = status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                        if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
        running = peak = 0
        for _, nbytes in events:
            running += nbytes
            peak = max(peak, running)
        del prof
        gc.collect()
        malloc_trim()
        return {"live_bytes_at_start": live, "alloc_peak_bytes": live + peak, "alloc_step_peak_bytes": peak,
                "rss_before_kb": rss_before, "rss_peak_increase_kb": hwm - rss_before,
                "rss_method": "VmHWM after clear_refs" if reset else "ru_maxrss", "memory_events": len(events)}

    def cmd_train(self, n=1):
        out = self.timed(self.train_step, n)
        if not self.args.no_trim:  # hand freed heap back to the OS: eight idle workers would hold GBs
            malloc_trim()
        return out

    def cmd_eval(self, n=1):
        out = self.timed(self.eval_step, n)
        if not self.args.no_trim:
            malloc_trim()
        return out

    def cmd_profile(self, rows=25, kinds=("train", "eval")):
        """torch.profiler op table of one step of each kind (self CPU time)."""
        from torch.profiler import ProfilerActivity, profile
        tables = {}
        for name in kinds:
            fn = getattr(self, name + "_step")
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                fn()
            tables[name] = prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=rows,
                                                                              max_name_column_width=40,
                                                                              max_shapes_column_width=60)
        return tables

    def cmd_rss(self):
        return status_kb("VmRSS")


# ----------------------------------------------------------------------------------- parent

SIZE_KEYS = ("embed_dim", "heads", "layers", "ffn", "vocab", "batch", "tokens", "dropout", "tag_density", "threads", "seed")


def reference_of(label):
    """The row a label's ratios are taken to: ``none`` of the same code (working tree or baseline)."""
    return "none" + BASE if label.endswith(BASE) else "none"


def run(args):
    import torch
    labels = list(args.configs)
    if args.baseline:
        wanted = ["none"] + [c for c in (args.baseline_configs or args.configs) if c not in ("none", FAIRSEQ)]
        labels += [c + BASE for c in wanted]
    script = os.path.abspath(__file__)
    results, elapsed = drive(labels, lambda name, mine, logdir: Child(name, mine, args, logdir, script, SIZE_KEYS), args,
                             ("train", "eval"))
    run_keys = ("repeats", "replicas", "warmup", "steps", "quiet_load", "baseline", "omp_spin")
    settings = {k: getattr(args, k) for k in SIZE_KEYS + run_keys}
    return summarize(settings, labels, results, elapsed, torch.__version__)


def resummarize(path):
    """Rebuild the summary from a ``--json`` file (e.g. after changing the rendering)."""
    with open(path) as f:
        old = json.load(f)
    results = {}
    for row in old["rows"]:
        res = dict(row["samples_raw"], memory=row["memory"], info=row["info"], rss_idle_kb=1024 * row["rss_idle_mb"])
        if row["label"] in old.get("profiles", {}):
            res["profile"] = old["profiles"][row["label"]]
        results[row["label"]] = res
    return summarize(old["settings"], [row["label"] for row in old["rows"]], results, old["elapsed_s"], old["torch"])


def summarize(settings, labels, results, elapsed, torch_version):
    ntok = settings["batch"] * settings["tokens"]
    stats = {}
    for lab in labels:
        res = results[lab]
        stats[lab] = {f"{k}_{m}": median(res[f"{k}_{m}"]) for k in ("train", "eval") for m in ("wall", "cpu", "load")}
    rows = []
    for lab in labels:
        res, st = results[lab], stats[lab]
        ref_lab = reference_of(lab)
        ref, ref_res = stats[ref_lab], results[ref_lab]
        cfg = lab.split("@")[0]
        mem, rss = res["memory"]["alloc_peak_bytes"], res["memory"]["rss_peak_increase_kb"]
        row = {
            "label": lab, "config": cfg, "code": "baseline" if lab.endswith(BASE) else "working tree",
            "model": "transformer_lm (fairseq)" if cfg == FAIRSEQ else "sipe_txl", "injection": "-" if cfg == FAIRSEQ else cfg,
            "params": res["info"]["params"], "sipe_params": res["info"]["sipe_params"],
            "tag_head_params": res["info"]["tag_head_params"],
            "train_ms": 1000 * st["train_wall"], "train_cpu_s": st["train_cpu"],
            "eval_tokens_per_s": ntok / st["eval_wall"], "eval_cpu_s": st["eval_cpu"],
            "peak_mb": mem / 2**20, "rss_peak_increase_mb": rss / 1024,
            "memory_ratio": ratio(mem, ref_res["memory"]["alloc_peak_bytes"]),
            "rss_ratio": ratio(rss, ref_res["memory"]["rss_peak_increase_kb"]),
            "samples": len(res["train_wall"]), "external_load": {k: st[k + "_load"] for k in ("train", "eval")},
            "time_target": time_target(cfg), "memory_target": None if cfg == FAIRSEQ else MEMORY_TARGET,
            "memory": res["memory"], "info": res["info"], "rss_idle_mb": res.get("rss_idle_kb", 0) / 1024,
            "samples_raw": {k: res[k] for k in res if k.split("_")[0] in ("train", "eval") or k == "slots"},
            "process_effect": {k: process_effect(res, k + "_wall") for k in ("train", "eval")},
        }
        basis = {}
        for k in ("train", "eval"):
            row[k + "_ratio"] = paired_ratio(res, ref_res, k + "_wall")
            row[k + "_cpu_ratio"] = paired_ratio(res, ref_res, k + "_cpu")
            row[k + "_host_ratios"] = host_ratios(res, ref_res, k + "_wall")
            paired = paired_ratios(res, ref_res, k + "_wall")
            row[k + "_ratio_range"] = [min(paired), max(paired)] if paired else None
            # the verdict trusts wall-clock medians only when both sides ran on a mostly quiet machine
            quiet = max(st[k + "_load"], ref[k + "_load"]) <= settings["quiet_load"]
            basis[k] = "wall" if quiet else "cpu"
            row[k + "_verdict_ratio"] = row[k + "_ratio"] if quiet else row[k + "_cpu_ratio"]
        row["verdict_basis"] = basis
        t = row["time_target"]
        if t is None:
            row["meets"], row["misses"] = None, []
        else:
            checks = (("train", row["train_verdict_ratio"], t), ("eval", row["eval_verdict_ratio"], t),
                      ("memory", row["memory_ratio"], MEMORY_TARGET))
            row["misses"] = [k for k, v, lim in checks if v > lim]
            row["meets"] = not row["misses"]
        rows.append(row)
    return {"settings": settings, "torch": torch_version, "elapsed_s": elapsed, "rows": rows,
            "profiles": {lab: results[lab]["profile"] for lab in labels if "profile" in results[lab]}}


def render(summary):
    s, rows = summary["settings"], summary["rows"]
    none = next(r for r in rows if r["label"] == "none")
    base_note = f"; rows marked (base) run the code in `{s['baseline']}`, as ratios to its own `none`" if s["baseline"] else ""
    out = [
        f"### SiPE decoder cost: d_model {s['embed_dim']}, {s['heads']} heads, {s['layers']} layers, FFN {s['ffn']}, "
        f"vocab {s['vocab']}, batch {s['batch']} x {s['tokens']} tokens, {100 * s['tag_density']:.0f}% tagged, "
        f"dropout {s['dropout']}, {s['threads']} threads, torch {summary['torch']}",
        "",
        f"Ratios to `sipe_txl` `none`{base_note}. Targets: `input` <= {TIME_TARGET['input']:.2f}x, `position` <= "
        f"{TIME_TARGET['position']:.2f}x, every other injection <= {DEFAULT_TIME_TARGET:.2f}x in time (train step and eval); "
        f"every injection <= {MEMORY_TARGET:.2f}x in peak memory.",
        "",
        "| model | injection | params | SiPE params (+ tag heads) | train step, wall [range] | train step, CPU | "
        "eval time, wall [range] | eval time, CPU | peak memory | RSS peak increase | target time / memory | meets |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        target = "-" if r["time_target"] is None else f"{r['time_target']:.2f} / {r['memory_target']:.2f}"
        if r["meets"] is None:
            meets = "(reference)"
        else:
            meets = "yes" if r["meets"] else "**no**: " + ", ".join(r["misses"])
            meets += " (time by " + "/".join(sorted(set(r["verdict_basis"].values()))) + ")"
        name = r["injection"] + (" (base)" if r["code"] == "baseline" else "")
        out.append(
            f"| {r['model']} | {name} | {r['params'] / 1e6:.2f}M | {r['sipe_params']:,} (+ {r['tag_head_params']:,}) | "
            f"{r['train_ratio']:.3f}x{fmt_range(r['train_ratio_range'])} | {r['train_cpu_ratio']:.3f}x | "
            f"{r['eval_ratio']:.3f}x{fmt_range(r['eval_ratio_range'])} | {r['eval_cpu_ratio']:.3f}x | "
            f"{r['memory_ratio']:.3f}x | {r['rss_ratio']:.3f}x | {target} | {meets} |")
    out += [
        "",
        f"Absolute, `sipe_txl` `none`: train step {none['train_ms']:,.0f} ms wall / {1000 * none['train_cpu_s']:,.0f} ms CPU "
        f"(medians), eval {none['eval_tokens_per_s']:,.0f} tokens/s, peak training-step memory {none['peak_mb']:,.0f} MB "
        f"(tensors), RSS peak increase {none['rss_peak_increase_mb']:,.0f} MB, {none['params']:,} parameters.",
        "",
        "| run | train ms (wall) | train ms (CPU) | eval tok/s (wall) | eval ms (CPU) | peak MB (tensors) | "
        "RSS peak increase MB | "
        "other processes' load, cores (median train / eval) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        load = r["external_load"]
        out.append(f"| {r['label']} | {r['train_ms']:,.0f} | {1000 * r['train_cpu_s']:,.0f} | {r['eval_tokens_per_s']:,.0f} | "
                   f"{1000 * r['eval_cpu_s']:,.0f} | {r['peak_mb']:,.0f} | {r['rss_peak_increase_mb']:,.0f} | "
                   f"{load['train']:.2f} / {load['eval']:.2f} |")
    out += [
        "",
        "Notes:",
        f"- Time: {s['warmup']} warm-up round(s), then {s['repeats']} rounds in each of {replicas_of(s)} host process(es); "
        f"every host holds every configuration (model, Adam, batch), so a process's own speed cancels in the ratios. "
        f"A turn = {s['steps']} step(s) of one configuration in one host (their median is the sample); only one turn "
        "computes at a time and the order rotates every round, so load drift hits all configurations alike. Ratio = "
        "median of the per-sample ratios to `none` of the same round and host; [a-b] = their min-max.",
        *host_note(rows, [r["label"] for r in rows if r["label"] == reference_of(r["label"])]),
        "- Train step = zero_grad(set_to_none) + forward + loss (LM NLL + tag-head NLL, as the `hexatag_lm` criterion) "
        "+ backward + `torch.optim.Adam` step. Eval = eval mode, `torch.no_grad`, log-softmax over the vocabulary and "
        "the target's log-probability (as `fairseq-eval-lm`); eval tok/s = batch tokens / wall time.",
        f"- Other processes' load during each sample = machine busy time (/proc/stat, incl. steal) minus the worker's "
        f"own CPU time, per second. CPU = the worker's user+system time (all threads), far less sensitive to other "
        "processes than wall time (workers run with OMP_WAIT_POLICY=PASSIVE unless --omp-spin, so waiting threads do "
        f"not burn CPU). The time verdict uses the wall ratio when the median other load was <= {s['quiet_load']} "
        "cores for both the configuration and its `none`, else the CPU ratio (shown in `meets`).",
        "- Peak memory (ratio column): torch's CPU allocator events of the configuration's first training step "
        "(a fresh process), recorded "
        "with `torch.profiler.profile(profile_memory=True)`: max of the running sum of allocations minus frees, plus the "
        "tensors alive at the start (parameters, Adam state, batch). Exact and independent of load and malloc caching. "
        "Adam's state is created beforehand by a zero-gradient step (no change to the weights), so this is a "
        "steady-state step.",
        f"- RSS peak increase: the same step's process high-water mark minus the RSS just before it "
        f"({none['memory']['rss_method']}); includes malloc caching/fragmentation (cross-check).",
        "- `transformer_lm` (fairseq): `TransformerLanguageModel.build_model` from its config defaults + "
        "`base_lm_architecture` (pre-norm, sinusoidal positions, final layer norm), same sizes, tied input/output "
        f"embedding, dropouts (dropout, attention, activation) {tuple(none['info']['dropouts'])} as ours; it sees no tags.",
        f"- Whole run: {summary['elapsed_s'] / 60:.1f} min.",
    ]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(p, "dictionary size (incl. fairseq's 4 specials)")
    p.add_argument("--dropout", type=float, default=0.1, help="residual/embedding dropout (SiPE default)")
    p.add_argument("--steps", type=int, default=1, help="train and eval steps per configuration per round")
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help=f"comma-separated subset of {','.join(CONFIGS)} (none is always run)")
    p.add_argument("--quick", action="store_true",
                   help="tiny smoke run (checks the plumbing; at this size per-op overhead dominates, so its ratios mean "
                   "nothing): " + " ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--json", metavar="FILE", help="also write all numbers (per-round samples included) as JSON")
    p.add_argument("--profile", default="", help="comma-separated configs to profile with torch.profiler after the timing")
    p.add_argument("--baseline", metavar="DIR",
                   help="also run the SiPE configs with the sipe_fairseq package found in DIR (e.g. a copy of an older "
                        "revision), interleaved with the working tree's: before/after comparisons")
    p.add_argument("--baseline-configs", default="", help="comma-separated configs to run with --baseline (default: all "
                   "selected SiPE configs; none is always run)")
    p.add_argument("--quiet-load", type=float, default=0.25,
                   help="judge time by wall clock if other processes used at most this many cores (median), else by CPU time")
    p.add_argument("--from-json", metavar="FILE", help="print the tables of an earlier --json FILE (no measuring)")
    p.add_argument("--pause", type=float, default=0.2, help="seconds between two turns (lets thread pools go idle)")
    p.add_argument("--no-trim", action="store_true",
                   help="do not malloc_trim after each turn (default trims: idle workers would otherwise keep GBs)")
    p.add_argument("--omp-spin", action="store_true",
                   help="leave OMP_WAIT_POLICY alone (default: PASSIVE in the workers, so that a thread waiting for a "
                        "descheduled peer sleeps instead of spinning and the CPU-time figures measure work)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        sys.exit(child_main(args, Worker))
    if args.quick:
        for k, v in QUICK.items():
            if p.get_default(k) == getattr(args, k):
                setattr(args, k, v)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    args.configs = ["none"] + [c for c in configs if c != "none"]
    args.profile = [c.strip() for c in args.profile.split(",") if c.strip()]
    args.baseline_configs = [c.strip() for c in args.baseline_configs.split(",") if c.strip()]
    bad = [c for c in args.configs + args.baseline_configs if c not in CONFIGS]
    bad += [c for c in args.profile if c.split("@")[0] not in CONFIGS]
    if bad:
        p.error(f"unknown config(s) {bad}; choose from {CONFIGS}")
    if args.baseline and not os.path.isdir(os.path.join(args.baseline, "sipe_fairseq")):
        p.error(f"--baseline {args.baseline}: no sipe_fairseq package there")
    summary = resummarize(args.from_json) if args.from_json else run(args)
    print(render(summary))
    for lab, tables in summary["profiles"].items():
        for kind, table in tables.items():
            print(f"\n#### torch.profiler: {lab}, one {kind} step (sorted by self CPU time)\n\n```\n{table}\n```")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
