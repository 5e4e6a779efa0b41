"""Benchmark machinery shared by scripts/bench_*.py (independent of sipe_fairseq; no torch import).

Host processes that each hold every configuration and answer line-protocol commands
(:func:`child_main`, :class:`Child`), turns driven in rotated order over rounds (:func:`drive`,
:func:`host_groups`), ratios paired by round and host so that a process's own speed cancels
(:func:`paired_ratios`, :func:`paired_ratio`, :func:`host_ratios`, :func:`process_effect`,
:func:`host_note`), machine-load and memory probes from /proc (:func:`cpu_snapshot`,
:func:`status_kb`, :func:`reset_hwm`, :func:`malloc_trim`), in-process paired timing
(:func:`paired_times`) and markdown tables (:func:`markdown_table`). The method is described in
scripts/bench_decoders.py's docstring.
"""
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASE = "@base"  # label suffix of the workers that import sipe_fairseq from --baseline DIR


def cpu_snapshot():
    """(CPU seconds the whole machine was busy, incl. steal; CPU seconds of this process) so far."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    return (sum(vals) - vals[3] - vals[4]) / os.sysconf("SC_CLK_TCK"), time.process_time()


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def malloc_trim():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def child_main(args, worker_cls):
    """A host process for the configurations ``args.child`` (comma-separated): one worker
    (``worker_cls``) each, built in turn. Line protocol: the parent writes
    ``{"cmd": ..., "cfg": ..., "kw": {...}}``, the host answers one JSON line on its original stdout
    (everything else printed goes to stderr); the first line holds every worker's ``info``."""
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    workers = {}
    try:
        for cfg in args.child.split(","):
            workers[cfg] = worker_cls(argparse.Namespace(**{**vars(args), "child": cfg}))
        reply = {"ok": True, "result": {cfg: w.cmd_info() for cfg, w in workers.items()}}
    except Exception as exc:  # report build errors to the parent
        reply, workers = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, None
    proto.write(json.dumps(reply) + "\n")
    proto.flush()
    if workers is None:
        return 1
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["cmd"] == "quit":
            break
        try:
            reply = {"ok": True, "result": getattr(workers[msg["cfg"]], "cmd_" + msg["cmd"])(**msg.get("kw", {}))}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        proto.write(json.dumps(reply) + "\n")
        proto.flush()
    return 0


class Child:
    """A host process (``name``) for ``labels`` of one code version (working tree, or ``--baseline``
    for ``@base`` labels), spoken to line by line: ``script`` (default this one) run with ``--child
    CONFIG,CONFIG,...`` and the options ``keys`` of ``args``."""

    def __init__(self, name, labels, args, logdir, script, keys):
        self.label = name
        self.log = open(os.path.join(logdir, name.replace("@", "_").replace("#", "_") + ".log"), "w+")
        base = {lab.endswith(BASE) for lab in labels}
        if len(base) != 1:
            raise ValueError(f"one host process runs one code version, got {labels}")
        configs = ",".join(lab.split("@")[0] for lab in labels)
        argv = [sys.executable, script, "--child", configs]
        for key in keys:
            argv += ["--" + key.replace("_", "-"), str(getattr(args, key))]
        argv += ["--no-trim"] if args.no_trim else []
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        if not args.omp_spin:  # idle OpenMP threads sleep instead of spinning: CPU time = work done
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        if base.pop():
            env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(args.baseline), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     cwd=str(ROOT), env=env)

    def read(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            tail = self.log.read()[-3000:]
            raise RuntimeError(f"worker {self.label} died (exit {self.proc.poll()}):\n{tail}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"worker {self.label}: {reply['error']}")
        return reply["result"]

    def call(self, cmd, label, **kw):
        self.proc.stdin.write(json.dumps({"cmd": cmd, "cfg": label.split("@")[0], "kw": kw}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=60)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def host_groups(labels, replicas):
    """Host processes: ``replicas`` per code version, each holding every label of that version.
    Returns ``{process name: labels}``; names ``w0``, ``w1``, ... (``base0``, ... for ``@base``)."""
    groups = {}
    for prefix, mine in (("w", [lab for lab in labels if not lab.endswith(BASE)]),
                         ("base", [lab for lab in labels if lab.endswith(BASE)])):
        if mine:
            for k in range(max(1, replicas)):
                groups[f"{prefix}{k}"] = mine
    return groups


def drive(labels, make_child, args, kinds, reference="none"):
    """Time ``labels`` in ``args.replicas`` host processes per code version, each holding every label
    (``make_child(name, labels, logdir)``): a process's own speed (memory placement; an A/A test here
    measured 3-8% between two processes running the same model) is shared by the configurations it
    compares, so it cancels in their ratios instead of posing as a cost. One step computing at a
    time: first each label's memory step, in a fresh process of its own; then the hosts build (in
    parallel) and run ``args.warmup + args.repeats`` rounds of turns (a turn = ``args.steps`` steps
    of each of ``kinds`` of one label in one host, then ``args.pause`` s) in an order rotated every
    round; then the profile tables of ``args.profile`` and the idle RSS. A label's samples pool its
    hosts; ``slots`` holds each sample's [round, host]. Returns ``(results per label, seconds)``;
    ``reference``'s step time is logged."""
    start = time.perf_counter()
    stamp = lambda: f"[{time.perf_counter() - start:.0f}s]"  # noqa: E731
    results = {lab: {f"{k}_{m}": [] for k in kinds for m in ("wall", "cpu", "load")} for lab in labels}
    for lab in labels:
        results[lab]["slots"] = []
    groups = host_groups(labels, getattr(args, "replicas", 1))
    first = {}  # label -> its first host
    turns = []  # (label, host index within its code version, host name)
    for name, mine in groups.items():
        for lab in mine:
            first.setdefault(lab, name)
            turns.append((lab, int(name.lstrip("abesw")), name))
    with tempfile.TemporaryDirectory(prefix="bench.") as logdir:
        children = {}
        try:
            for lab in labels:  # memory: one fresh process per label, one at a time (a step takes GBs)
                mem = make_child("memory-" + lab, [lab], logdir)
                try:
                    results[lab]["info"] = mem.read()[lab.split("@")[0]]
                    results[lab]["memory"] = mem.call("memory", lab)
                finally:
                    mem.close()
                log(f"{stamp()} memory {lab}: {results[lab]['memory']['alloc_peak_bytes'] / 2**20:,.0f} MB")
            for name, mine in groups.items():  # the hosts build in parallel; nothing is measured yet
                children[name] = make_child(name, mine, logdir)
            for name in groups:
                children[name].read()
            log(f"{stamp()} {len(groups)} host processes built, {len(turns)} turns per round")
            rounds = args.warmup + args.repeats
            for r in range(rounds):
                order = turns[r % len(turns):] + turns[:r % len(turns)]
                for lab, k, name in order:
                    res = results[lab]
                    for kind in kinds:
                        steps = children[name].call(kind, lab, n=args.steps)
                        if r >= args.warmup:  # one sample per turn: the median of its steps
                            res[kind + "_wall"].append(median([st["wall"] for st in steps]))
                            res[kind + "_cpu"].append(median([st["cpu"] for st in steps]))
                            res[kind + "_load"].append(max(st["load"] for st in steps))
                        if args.pause:
                            time.sleep(args.pause)
                    if r >= args.warmup:
                        res["slots"].append([r - args.warmup, k])
                tag = "warm-up" if r < args.warmup else f"repeat {r - args.warmup + 1}/{args.repeats}"
                last = results[reference][kinds[0] + "_wall"]
                log(f"{stamp()} round {r + 1}/{rounds} ({tag}) done"
                    + (f"; {reference} {kinds[0]} step {last[-1]:.1f} s" if last else ""))
            for lab in args.profile:
                if lab in first:
                    results[lab]["profile"] = children[first[lab]].call("profile", lab, kinds=list(kinds))
            for lab in labels:
                results[lab]["rss_idle_kb"] = children[first[lab]].call("rss", lab)
        finally:
            for child in children.values():
                child.close()
    return results, time.perf_counter() - start


def _slots(res, key):
    return [tuple(slot) for slot in res.get("slots") or [(i, 0) for i in range(len(res[key]))]]


def paired_ratios(res, ref_res, key):
    """Per-sample ratios ``res[key] / ref_res[key]`` of the same round and host process."""
    ref = dict(zip(_slots(ref_res, key), ref_res[key]))
    return [v / ref[slot] for slot, v in zip(_slots(res, key), res[key]) if slot in ref]


def paired_ratio(res, ref_res, key):
    """The reported ratio: median of the per-sample ratios (same round and host), so a host's own
    speed cancels; the ratio of medians if nothing pairs."""
    paired = paired_ratios(res, ref_res, key)
    return median(paired) if paired else ratio(median(res[key]), median(ref_res[key]))


def host_ratios(res, ref_res, key):
    """The ratio measured within each host process alone (their spread is the run's noise gauge)."""
    ref = dict(zip(_slots(ref_res, key), ref_res[key]))
    by = {}
    for slot, v in zip(_slots(res, key), res[key]):
        if slot in ref:
            by.setdefault(slot[1], []).append(v / ref[slot])
    return [median(by[k]) for k in sorted(by)]


def process_effect(res, key):
    """A/A: the same configuration's median in host k / in host 0, k >= 1 (a process's own speed)."""
    by = {}
    for slot, v in zip(_slots(res, key), res[key]):
        by.setdefault(slot[1], []).append(v)
    return [median(by[k]) / median(by[0]) for k in sorted(by) if k > 0]


def replicas_of(settings):
    return settings.get("replicas") or 1


def host_note(rows, reference_labels, kinds=("train", "eval")):
    """Notes on the host processes: their own speed (A/A) and the ratios each measured alone."""
    out = []
    for ref in (r for r in rows if r["label"] in reference_labels):
        eff = ref.get("process_effect") or {}
        eff = {"train": eff} if isinstance(eff, list) else eff
        if not any(eff.get(k) for k in kinds):
            return ["- One host process (--replicas 1): no A/A control."]
        parts = "; ".join(f"{k} " + ", ".join(f"{v:.3f}x" for v in eff[k]) for k in kinds if eff.get(k))
        out.append(f"- A/A control: `{ref['label']}` in host process 2.. vs host 1, same code and batch: {parts} -- a "
                   "process's own speed, which cancels in the ratios because every host runs every configuration.")
    spread = []
    for r in rows:
        for k in kinds:
            hr = r.get(k + "_host_ratios") or []
            if len(hr) > 1 and r["label"] not in reference_labels:
                spread.append(f"{r['label']} {k} " + "/".join(f"{v:.3f}" for v in hr))
    if spread:
        out.append("- Ratio measured within each host alone (noise gauge): " + "; ".join(spread) + ".")
    return out


def ratio(a, b):
    return a / b if b > 0 else float("nan")


def fmt_range(rng, spec=".2f"):
    """`` [lo-hi]`` of a (min, max) pair formatted with ``spec`` (e.g. ``.3g`` for ratios far below 1); "" for None."""
    return f" [{rng[0]:{spec}}-{rng[1]:{spec}}]" if rng else ""


def add_common_arguments(p, vocab_help: str) -> None:
    """Model size, batch, tagging and measurement options shared with bench_encoders.py."""
    p.add_argument("--embed-dim", type=int, default=512, help="d_model")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--ffn", type=int, default=2048, help="FFN inner dimension")
    p.add_argument("--vocab", type=int, default=8000, help=vocab_help)
    p.add_argument("--batch", type=int, default=8, help="sequences per batch")
    p.add_argument("--tokens", type=int, default=512, help="tokens per sequence")
    p.add_argument("--tag-density", type=float, default=0.75, help="fraction of positions with a hexatag")
    p.add_argument("--threads", type=int, default=2, help="torch.set_num_threads in every worker")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3, help="measured rounds (median reported)")
    p.add_argument("--warmup", type=int, default=1, help="unmeasured rounds first")
    p.add_argument("--replicas", type=int, default=2,
                   help="host processes, each holding every configuration; samples pooled, ratios paired within a host "
                        "(a process's own speed differs by several percent here: the A/A line of the report)")


def paired_times(fns, repeats: int, clock=time.perf_counter):
    """In-process pairing: run the callables ``fns`` (name -> callable) in turn ``repeats`` times, the
    order rotated every time; returns name -> seconds per run, the k-th runs of all names one pair."""
    names = list(fns)
    out = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = clock()
            fns[name]()
            out[name].append(clock() - start)
    return out


def paired_runs(fns, repeats: int, clocks=None):
    """:func:`paired_times` timed by several clocks at once (default ``wall``: ``time.perf_counter``, ``cpu``:
    ``time.process_time``): returns name -> ``{clock: [seconds per run], "slots": [[run, 0], ...]}``, the shape
    :func:`paired_ratio` pairs (the k-th runs of all names share slot ``[k, 0]``)."""
    clocks = clocks or {"wall": time.perf_counter, "cpu": time.process_time}
    names = list(fns)
    out = {name: {**{c: [] for c in clocks}, "slots": []} for name in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = {c: clock() for c, clock in clocks.items()}
            fns[name]()
            for c, clock in clocks.items():
                out[name][c].append(clock() - start[c])
            out[name]["slots"].append([r, 0])
    return out


def speed_ratio(res, ref_res, key):
    """Throughput of ``res`` relative to ``ref_res`` (time ratio inverted) from paired samples: the median of the
    per-pair ``ref / res`` and their min-max (None when nothing pairs)."""
    paired = paired_ratios(ref_res, res, key)
    return paired_ratio(ref_res, res, key), ([min(paired), max(paired)] if paired else None)


def markdown_table(header, rows, align=None) -> str:
    """A markdown table: ``header`` cells, ``rows`` of cells (str() of each), ``align`` one of "l"/"r" per column
    (default: first left, others right)."""
    align = align or "l" + "r" * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)

