#!/usr/bin/env python
"""Cost of each SiPE injection: train-step time, eval throughput and peak training memory of
``sipe_txl`` for every ``--sipe-injection`` and of fairseq's ``transformer_lm`` of the same size,
as ratios to ``sipe_txl`` with ``none``; prints a markdown table.

    .venv/bin/python scripts/bench_decoders.py [--quick] [--repeats 3] [--json FILE]

Method (why the ratios can be trusted on a shared, noisy 2-core box):
  * every configuration lives in its own fresh worker process (this script with ``--child``),
    built once; the parent drives the workers one at a time, so only one computes at any moment;
  * memory is measured on each worker's first training step (fresh process, nothing cached):
    (a) torch allocator accounting from ``torch.profiler.profile(profile_memory=True)``: the
    running sum of all allocation/free events of the step, whose maximum plus the tensors alive at
    the start (parameters, Adam state, batch) is the step's peak tensor memory -- exact and
    independent of load, malloc caching and fragmentation; (b) process RSS high-water mark:
    VmRSS before the step, the kernel's high-water mark reset (``/proc/self/clear_refs`` 5), one
    step, then VmHWM (``ru_maxrss`` where clear_refs is unavailable; then the mark also covers
    model building). Adam's state is initialized (by a zero-gradient step, a no-op on the
    weights) before, so the measured step is a steady-state one;
  * timing: warm-up rounds first, then ``--repeats`` rounds; a round runs one training step
    (zero_grad, forward, LM + tag-head loss as ``hexatag_lm``, backward, Adam step) and one eval
    forward (eval mode, no grad, log-softmax over the vocabulary and gathering the target's
    log-probability as ``fairseq-eval-lm``) per configuration, the order rotated each round, so
    machine-load drift hits all configurations alike; the median per configuration is reported
    (and the min-max of the per-round ratios to ``none`` as a noise indicator).
"""
import argparse
import ctypes
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INJECTIONS = ("none", "input", "position", "disentangled", "attention-bias", "input+attention-bias", "position+attention-bias")
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
        """[(seconds, external CPU load in cores during the step)] for ``n`` steps."""
        out = []
        for _ in range(n):
            gc.collect()
            busy0, own0 = _cpu_snapshot()
            start = time.perf_counter()
            fn()
            wall = time.perf_counter() - start
            busy1, own1 = _cpu_snapshot()
            out.append((wall, max(0.0, (busy1 - busy0) - (own1 - own0)) / wall))
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
        _malloc_trim()
        live = self._live_bytes()
        rss_before = _status_kb("VmRSS")
        reset = _reset_hwm()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            self.train_step()
        hwm = _status_kb("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                        if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))
        running = peak = 0
        for _, nbytes in events:
            running += nbytes
            peak = max(peak, running)
        del prof
        gc.collect()
        _malloc_trim()
        return {"live_bytes_at_start": live, "alloc_peak_bytes": live + peak, "alloc_step_peak_bytes": peak,
                "rss_before_kb": rss_before, "rss_peak_increase_kb": hwm - rss_before,
                "rss_method": "VmHWM after clear_refs" if reset else "ru_maxrss", "memory_events": len(events)}

    def cmd_train(self, n=1):
        out = self.timed(self.train_step, n)
        if self.args.trim:
            _malloc_trim()
        return out

    def cmd_eval(self, n=1):
        out = self.timed(self.eval_step, n)
        if self.args.trim:
            _malloc_trim()
        return out

    def cmd_profile(self, rows=25):
        """torch.profiler op table of one training step and one eval step (self CPU time)."""
        from torch.profiler import ProfilerActivity, profile
        tables = {}
        for name, fn in (("train", self.train_step), ("eval", self.eval_step)):
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                fn()
            tables[name] = prof.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total", row_limit=rows,
                                                                              max_name_column_width=40,
                                                                              max_shapes_column_width=60)
        return tables

    def cmd_rss(self):
        return _status_kb("VmRSS")


def _cpu_snapshot():
    """(CPU seconds the whole machine was busy, incl. steal; CPU seconds of this process) so far."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    own = os.times()
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK"), own.user + own.system


def _status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _malloc_trim():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def child_main(args):
    """Line protocol: the parent writes ``{"cmd": ..., "kw": {...}}``, the worker answers one JSON line
    on its original stdout (everything else printed goes to stderr)."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        worker = Worker(args)
        reply = {"ok": True, "result": worker.cmd_info()}
    except Exception as exc:  # report build errors to the parent
        reply, worker = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, None
    proto.write(json.dumps(reply) + "\n")
    proto.flush()
    if worker is None:
        return 1
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            break
        try:
            reply = {"ok": True, "result": getattr(worker, "cmd_" + msg["cmd"])(**msg.get("kw", {}))}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


# ----------------------------------------------------------------------------------- parent


class Child:
    def __init__(self, cfg, args, logdir):
        self.cfg = cfg
        self.log = open(os.path.join(logdir, cfg.replace("+", "_") + ".log"), "w+")
        argv = [sys.executable, os.path.abspath(__file__), "--child", cfg, *size_argv(args)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=str(ROOT), env=env)
        self.info = None

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = self.log.read()[-3000:]
            raise RuntimeError(f"worker {self.cfg} died (exit {self.proc.poll()}):\n{tail}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"worker {self.cfg}: {reply['error']}")
        return reply["result"]

    def call(self, cmd, **kw):
        self.proc.stdin.write(json.dumps({"cmd": cmd, "kw": kw}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        self.log.close()


SIZE_KEYS = ("embed_dim", "heads", "layers", "ffn", "vocab", "batch", "tokens", "dropout", "tag_density", "threads", "seed")


def size_argv(args):
    out = []
    for key in SIZE_KEYS:
        out += ["--" + key.replace("_", "-"), str(getattr(args, key))]
    return out + (["--trim"] if args.trim else [])


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(args):
    import torch
    configs = args.configs
    if "none" not in configs:
        configs = ["none"] + configs
    start = time.perf_counter()
    results = {c: {"train_s": [], "eval_s": [], "train_load": [], "eval_load": []} for c in configs}
    with tempfile.TemporaryDirectory(prefix="bench_decoders.") as logdir:
        children = {}
        try:
            for c in configs:  # building runs in parallel; nothing is measured yet
                children[c] = Child(c, args, logdir)
            for c in configs:
                results[c]["info"] = children[c].read()
            log(f"[{time.perf_counter() - start:.0f}s] {len(configs)} workers built")
            for c in configs:  # one at a time: a training step's activations are large
                results[c]["memory"] = children[c].call("memory")
                log(f"[{time.perf_counter() - start:.0f}s] memory {c}: {results[c]['memory']['alloc_peak_bytes'] / 2**20:,.0f} MB")
            rounds = args.warmup + args.repeats
            for r in range(rounds):
                order = configs[r % len(configs):] + configs[:r % len(configs)]
                for c in order:
                    train = children[c].call("train", n=args.steps)
                    evals = children[c].call("eval", n=args.steps)
                    if r >= args.warmup:  # one sample per turn: the median of its steps
                        for key, steps in (("train", train), ("eval", evals)):
                            results[c][key + "_s"].append(median([w for w, _ in steps]))
                            results[c][key + "_load"].append(max(x for _, x in steps))
                    if args.pause:
                        time.sleep(args.pause)
                tag = "warm-up" if r < args.warmup else f"repeat {r - args.warmup + 1}/{args.repeats}"
                log(f"[{time.perf_counter() - start:.0f}s] round {r + 1}/{rounds} ({tag}) done; "
                    f"none: train {train_of(results, 'none')}")
            if args.profile:
                for c in args.profile:
                    tables = children[c].call("profile")
                    results[c]["profile"] = tables
            for c in configs:
                results[c]["rss_idle_kb"] = children[c].call("rss")
        finally:
            for child in children.values():
                child.close()
    elapsed = time.perf_counter() - start
    return summarize(args, configs, results, elapsed, torch.__version__)


def train_of(results, c):
    s = results[c]["train_s"]
    return f"{1000 * s[-1]:,.0f} ms" if s else "-"


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def summarize(args, configs, results, elapsed, torch_version):
    base = results["none"]
    ntok = args.batch * args.tokens
    rows = []
    stat = {c: {k: robust_median(results[c][k + "_s"], results[c][k + "_load"], args.quiet_load) for k in ("train", "eval")}
            for c in configs}
    for c in configs:
        r = results[c]
        (train, n_train), (ev, n_eval) = stat[c]["train"], stat[c]["eval"]
        paired_train = [a / b for a, b in zip(r["train_s"], base["train_s"])]
        paired_eval = [a / b for a, b in zip(r["eval_s"], base["eval_s"])]
        mem, rss = r["memory"]["alloc_peak_bytes"], r["memory"]["rss_peak_increase_kb"]
        row = {
            "config": c, "model": "transformer_lm (fairseq)" if c == FAIRSEQ else "sipe_txl",
            "injection": "-" if c == FAIRSEQ else c,
            "params": r["info"]["params"], "sipe_params": r["info"]["sipe_params"], "tag_head_params": r["info"]["tag_head_params"],
            "train_ms": 1000 * train, "eval_tokens_per_s": ntok / ev, "peak_mb": mem / 2**20, "rss_peak_increase_mb": rss / 1024,
            "train_ratio": train / stat["none"]["train"][0], "eval_ratio": ev / stat["none"]["eval"][0],
            "quiet_samples": {"train": n_train, "eval": n_eval}, "samples": len(r["train_s"]),
            "external_load": {"train": r["train_load"], "eval": r["eval_load"]},
            "memory_ratio": mem / base["memory"]["alloc_peak_bytes"],
            "rss_ratio": rss / base["memory"]["rss_peak_increase_kb"] if base["memory"]["rss_peak_increase_kb"] else float("nan"),
            "train_ratio_range": [min(paired_train), max(paired_train)] if paired_train else None,
            "eval_ratio_range": [min(paired_eval), max(paired_eval)] if paired_eval else None,
            "time_target": time_target(c), "memory_target": None if c == FAIRSEQ else MEMORY_TARGET,
            "train_s": r["train_s"], "eval_s": r["eval_s"], "memory": r["memory"], "info": r["info"],
            "rss_idle_mb": r.get("rss_idle_kb", 0) / 1024,
        }
        t = row["time_target"]
        if t is None:
            row["meets"] = None
        else:
            misses = [k for k, v, lim in (("train", row["train_ratio"], t), ("eval", row["eval_ratio"], t),
                                          ("memory", row["memory_ratio"], MEMORY_TARGET)) if v > lim]
            row["meets"] = not misses
            row["misses"] = misses
        rows.append(row)
    return {"settings": {k: getattr(args, k) for k in SIZE_KEYS + ("repeats", "warmup", "steps", "quiet_load")}, "torch": torch_version,
            "elapsed_s": elapsed, "rows": rows, "profiles": {c: results[c]["profile"] for c in configs if "profile" in results[c]}}


def robust_median(samples, loads, quiet_load):
    """(median, n) over the samples taken while other processes used <= ``quiet_load`` cores; all if none."""
    quiet = [s for s, load in zip(samples, loads) if load <= quiet_load]
    return (median(quiet), len(quiet)) if quiet else (median(samples), 0)


def fmt_range(rng):
    return f"{rng[0]:.2f}-{rng[1]:.2f}" if rng else "-"


def render(summary):
    s, rows = summary["settings"], summary["rows"]
    none = next(r for r in rows if r["config"] == "none")
    out = [
        f"### SiPE decoder cost: d_model {s['embed_dim']}, {s['heads']} heads, {s['layers']} layers, FFN {s['ffn']}, "
        f"vocab {s['vocab']}, batch {s['batch']} x {s['tokens']} tokens, {100 * s['tag_density']:.0f}% tagged, "
        f"dropout {s['dropout']}, {s['threads']} threads, torch {summary['torch']}",
        "",
        f"Ratios to `sipe_txl` `none`. Targets: `input` <= {TIME_TARGET['input']:.2f}x, `position` <= "
        f"{TIME_TARGET['position']:.2f}x, every other injection <= {DEFAULT_TIME_TARGET:.2f}x in time (train step and eval); "
        f"every injection <= {MEMORY_TARGET:.2f}x in peak memory.",
        "",
        "| model | injection | params | SiPE params (+ tag heads) | train step | eval time (1 / tok/s) | peak memory | "
        "RSS peak increase | target time / memory | meets |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        target = "-" if r["time_target"] is None else f"{r['time_target']:.2f} / {r['memory_target']:.2f}"
        meets = "(reference)" if r["meets"] is None else ("yes" if r["meets"] else "**no**: " + ", ".join(r["misses"]))
        out.append(
            f"| {r['model']} | {r['injection']} | {r['params'] / 1e6:.2f}M | {r['sipe_params']:,} (+ {r['tag_head_params']:,}) | "
            f"{r['train_ratio']:.3f}x [{fmt_range(r['train_ratio_range'])}] | {r['eval_ratio']:.3f}x [{fmt_range(r['eval_ratio_range'])}] | "
            f"{r['memory_ratio']:.3f}x | {r['rss_ratio']:.3f}x | {target} | {meets} |")
    out += [
        "",
        f"Absolute, `sipe_txl` `none`: train step {none['train_ms']:,.0f} ms (median), eval {none['eval_tokens_per_s']:,.0f} "
        f"tokens/s, peak training-step memory {none['peak_mb']:,.0f} MB (tensors), RSS peak increase "
        f"{none['rss_peak_increase_mb']:,.0f} MB, {none['params']:,} parameters.",
        "",
        "| config | train ms | eval tok/s | peak MB (tensors) | RSS peak increase MB | quiet samples train / eval | "
        "other processes' load, cores (median train / eval) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        q, load = r["quiet_samples"], r["external_load"]
        out.append(f"| {r['config']} | {r['train_ms']:,.0f} | {r['eval_tokens_per_s']:,.0f} | {r['peak_mb']:,.0f} | "
                   f"{r['rss_peak_increase_mb']:,.0f} | {q['train']}/{r['samples']} / {q['eval']}/{r['samples']} | "
                   f"{median(load['train']):.2f} / {median(load['eval']):.2f} |")
    mem = none["memory"]
    out += [
        "",
        "Notes:",
        f"- Time: median of {s['repeats']} interleaved rounds ({s['steps']} step(s) each, their median is the round's "
        f"sample) after {s['warmup']} warm-up round(s); each configuration runs "
        "in its own worker process, one worker computes at a time, the order rotates every round; [a-b] = min-max of "
        "the per-round ratios to `none` (noise). The load other processes put on the machine during every sample is "
        "read from /proc/stat (machine busy time minus the worker's own CPU time); a configuration's median is taken "
        f"over its quiet samples (other load <= {s['quiet_load']} cores) when it has any, else over all. Train step = zero_grad + forward + loss (LM NLL + tag-head NLL as "
        "`hexatag_lm`) + backward + `torch.optim.Adam` step; eval = eval mode, `torch.no_grad`, log-softmax over the "
        "vocabulary and the target's log-probability (as `fairseq-eval-lm`).",
        "- Peak memory (ratio column): torch's allocator events of one training step in a fresh worker, recorded with "
        "`torch.profiler.profile(profile_memory=True)`: max of the running sum of allocations minus frees, plus the "
        "tensors alive at the start (parameters, Adam state, batch). Exact and load-independent.",
        f"- RSS peak increase: the same step's process high-water mark minus the RSS before it "
        f"({mem['rss_method']}); includes malloc caching/fragmentation, so it is coarser (cross-check only).",
        "- Adam's state is created by a zero-gradient step before the measured step, so the step is a steady-state one; "
        "gradients are set to None before each step (as fairseq's optimizer zero_grad).",
        "- `transformer_lm` (fairseq): its config defaults + `base_lm_architecture` (pre-norm, sinusoidal positions, "
        f"final norm), same sizes, tied embeddings, dropouts {tuple(next(r for r in rows if r['config'] == 'none')['info']['dropouts'])}; "
        "it sees no tags.",
        f"- Whole run: {summary['elapsed_s'] / 60:.1f} min.",
    ]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embed-dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=8, help="sequences per batch")
    p.add_argument("--tokens", type=int, default=512, help="tokens per sequence")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--tag-density", type=float, default=0.75, help="fraction of positions with a hexatag")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every worker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="measured rounds (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    p.add_argument("--steps", type=int, default=1, help="train/eval steps per configuration per round (their median is the round's sample)")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated subset of {','.join(CONFIGS)}")
    p.add_argument("--quick", action="store_true", help="tiny smoke run: " + " ".join(f"{k}={v}" for k, v in QUICK.items()))
    p.add_argument("--json", metavar="FILE", help="also write all numbers (per-round samples included) as JSON")
    p.add_argument("--profile", default="", help="comma-separated configs to profile with torch.profiler after timing")
    p.add_argument("--quiet-load", type=float, default=0.25,
                   help="a sample is 'quiet' if other processes used at most this many cores meanwhile; medians "
                        "use the quiet samples of a configuration when it has any")
    p.add_argument("--pause", type=float, default=0.2, help="seconds between two workers' turns (lets thread pools idle)")
    p.add_argument("--trim", action="store_true", help="malloc_trim after every timed step (lower idle RSS, more page faults)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        sys.exit(child_main(args))
    if args.quick:
        for k, v in QUICK.items():
            if p.get_default(k) == getattr(args, k):
                setattr(args, k, v)
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    args.profile = [c.strip() for c in args.profile.split(",") if c.strip()]
    bad = [c for c in args.configs + args.profile if c not in CONFIGS]
    if bad:
        p.error(f"unknown config(s) {bad}; choose from {CONFIGS}")
    summary = run(args)
    print(render(summary))
    for c, tables in summary["profiles"].items():
        for name, table in tables.items():
            print(f"\n#### torch.profiler, {c}, {name} step (self CPU time)\n\n```\n{table}\n```")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
