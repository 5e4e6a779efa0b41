#!/usr/bin/env python
"""Does ``--max-memory`` bound a structure search? For SiPE and GiLT decoders and ``beam:K`` / ``mix:K``
at two budgets, the estimate of the largest planned batch (``sipe_fairseq/structure/memory.py``) beside the
measured peak; prints a markdown table.

    OMP_NUM_THREADS=1 nice -n 15 .venv/bin/python scripts/bench_memory.py [--size ewt|tiny]
        [--families sipe,gilt] [--kinds beam,mix] [--ks 4,16,64,256,1000] [--budgets 300M,1G]

Each run is a fresh process (``--child``) that sets the allocator as the commands do
(``cli/allocator.keep_freed_memory``), builds the model in process (random weights: the memory does not
depend on them) and its sentences, scores two sentences under ``self`` (torch's lazy first-use allocations),
collects garbage, resets the resident high-water mark (``/proc/self/clear_refs``) and reads ``VmRSS`` (the
baseline), then scores its sentences under the source with ``StructureOptions(max_memory=BUDGET, workers=1)``
(one process: the budget of one search) through the engine's entry point (``score_sentences``: the plan, then
the batches) and reads ``VmHWM``. The peak is
``VmHWM`` minus the baseline: what the search added to the resident size, allocator reserve included.

Models (``--size``): ``ewt``, the EWT walkthrough's size (examples/ewt/run.sh: d 128, FFN 512, 3 layers,
4 heads, a 4,000-piece vocabulary; SiPE ``sipe_txl --sipe-injection position``, GiLT ``gilt_txl``);
``tiny``, the tests' (``sipe_txl_tiny``: d 64, FFN 256, 2 layers, 4 heads, 200 pieces). The tensors do not
depend on the weights, but GiLT's graphs do (a hypothesis's arcs are Python lists, and the results keep the
final hypotheses' arcs): its count head is set to prefer one or two arcs a word, as a trained one does, where
random weights would pick counts up to ``2i - 1``. Sentences:
synthetic, 20-40 words (uniform) of 1-3 pieces each (70/20/10%), a fixed seed; a run scores
``2 x`` the beam's batch cap of them (``Source.batch_cap``: ``BEAM_ROWS`` / (8 K) sentences, at least 2), so at least
two batches are planned and every batch the budget allows is full.

The estimate of a refused source is the largest one-sentence estimate among its sentences (the refusal names
the first sentence over the budget, shortest first).

Real sentences (``--path CKPT --data DATA --text FILE``, one sentence a line, e.g. the sentences of the SyntaxGym
suites): a trained checkpoint (through ``sipe_fairseq.hub``, the commands' loader) scores the file's sentences at
the suites' width (``--tags-mass 0.99 --tags-top-pairs 4`` unless given), where the posterior, not the
synthetic table's full width, decides the rows. One row per source, budget and allocator (the commands' kept heap,
``SIPE_MALLOC=system``): every planned batch run alone in a forked child (its peak above the fork, against that
batch's own estimate: the estimate's error); the whole plan in one forked child (the run a command makes: the
budget's bound, what the batches leave behind included); and the whole plan once more with
``memory.release_freed`` disabled (the heap each batch freed kept for the next, as before it was called; the
:class:`~sipe_fairseq.structure.memory.HeapGuard` releases it only when the budget needs it): the peak,
and the CPU time and minor page faults of the two whole runs (the price of giving the heap back).
"""
import argparse
import dataclasses
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib
import benchlib  # noqa: E402

SIZES = {"ewt": dict(dim=128, ffn=512, layers=3, heads=4, vocab=4000),
         "tiny": dict(dim=64, ffn=256, layers=2, heads=4, vocab=200)}


def build_model(family: str, size: str):
    """A decoder LM of ``size`` (:data:`SIZES`), random weights, eval mode."""
    import torch
    from fairseq.data import Dictionary

    s = SIZES[size]
    d = Dictionary()
    for i in range(s["vocab"] - len(d)):
        d.add_symbol(f"\u2581w{i}" if i % 3 else f"x{i}")
    common = dict(decoder_embed_dim=s["dim"], decoder_ffn_embed_dim=s["ffn"], decoder_layers=s["layers"],
                  decoder_attention_heads=s["heads"], dropout=0.0, tokens_per_sample=256, max_target_positions=256)
    torch.manual_seed(1)
    if family == "gilt":
        from sipe_fairseq.models.gilt_lm import GiltConfig, GiltDecoder, GiltLanguageModel
        model = GiltLanguageModel(GiltDecoder(GiltConfig(**common), d))
        count = model.decoder.arc_scorer.count  # as a trained scorer: one or two arcs a word, rarely more
        with torch.no_grad():
            count.weight.mul_(0.1)
            count.bias.copy_(-2 * (torch.arange(count.bias.numel(), dtype=count.bias.dtype) - 1.5).abs())
    else:
        from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPETransformerXLModel
        model = SiPETransformerXLModel(SiPEDecoder(SiPEDecoderConfig(sipe_injection="position", sipe_tag_heads="on",
                                                                     **common), d))
    return model.eval(), d


def make_sentences(count: int, vocab: int, seed: int = 7, words=(20, 40)):
    """``count`` synthetic sentences (module docstring), in a fixed random order."""
    import torch
    from sipe_fairseq.structure.sentences import Sentence

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        n_words = int(torch.randint(words[0], words[1] + 1, (1,), generator=g))
        pieces = torch.multinomial(torch.tensor([0.7, 0.2, 0.1]), n_words, replacement=True, generator=g) + 1
        starts = (torch.cumsum(pieces, 0) - pieces).tolist()
        tokens = torch.randint(4, vocab, (int(pieces.sum()) + 1,), generator=g)
        tokens[-1] = 2  # </s>
        out.append(Sentence(tokens, starts))
    return out


def status(key: str) -> int:
    return benchlib.status_kb(key) * 1024


def child(args) -> dict:
    """One run (module docstring): the numbers as a dict."""
    from sipe_fairseq.cli.allocator import keep_freed_memory

    kept = keep_freed_memory()
    import torch
    from sipe_fairseq.structure import memory
    from sipe_fairseq.structure.family import StructureOptions, structure_of
    from sipe_fairseq.structure.scoring import BEAM_ROWS, plan, score_sentences
    from sipe_fairseq.structure.sources import parse_source

    torch.set_num_threads(1)
    model, d = build_model(args.family, args.size)
    src = parse_source(args.source)
    budget = memory.parse_size(args.budget)
    sentences = make_sentences(max(2, 2 * src.batch_cap(256, BEAM_ROWS)), len(d), args.seed)
    options = StructureOptions(max_memory=budget, workers=1)
    with torch.no_grad():
        score_sentences(model, sentences[:2], "self", options, d.eos(), d.pad())  # warm-up: lazy allocations
    size, family = memory.model_size(model), structure_of(model)
    out = {"allocator_kept": kept, "sentences": len(sentences), "budget": budget}
    try:
        batches = plan(model, sentences, src, options)
    except memory.MemoryBudgetError as e:
        one = [memory.estimate_bytes(size, src, [s], family) for s in sentences]
        return dict(out, refused=str(e), estimate=max(one))
    out["batches"] = len(batches)
    out["estimate"] = max(memory.estimate_bytes(size, src, [sentences[i] for i in b], family) for b in batches)
    gc.collect()
    benchlib.reset_hwm()
    before = status("VmRSS")
    vm_before = status("VmSize")
    start = time.process_time()
    score_sentences(model, sentences, src, options, d.eos(), d.pad())
    out.update(peak=status("VmHWM") - before, vm_growth=status("VmPeak") - vm_before, baseline=before,
               cpu_s=time.process_time() - start)
    return out


def load_real(args):
    """The checkpoint and the file's sentences (module docstring, real sentences) as the engine takes them."""
    from sipe_fairseq import hub

    lm = hub.load(args.path, args.data)
    lines = [line.strip() for line in Path(args.text).read_text().splitlines() if line.strip()]
    if args.limit:
        lines = lines[:args.limit]
    sentences = lm._sentences([(t, t.split(), None) for t in lines])[0]
    return lm.model, lm.dictionary, sentences, lm.options


def forked_peak(fn) -> Tuple[int, float, int]:
    """``(bytes, CPU seconds, minor page faults)``: how far the resident size of a forked child rose above its start
    while it ran ``fn()``, and what that took (no timeout: the bench waits)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: reset the high-water mark, run, report, leave without Python's cleanup
        os.close(r)
        code = 0
        try:
            benchlib.reset_hwm()
            before, cpu, faults = status("VmRSS"), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            fn()
            got = [status("VmHWM") - before, time.process_time() - cpu,
                   resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults]
            os.write(w, json.dumps(got).encode())
        except BaseException:  # noqa: BLE001  reported as a failed row, never raised into the parent's loop
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    _, status_code = os.waitpid(pid, 0)
    if status_code != 0 or not text:
        raise RuntimeError(f"forked child failed (status {status_code})")
    peak, cpu, faults = json.loads(text)
    return int(peak), float(cpu), int(faults)


def real_child(args) -> dict:
    """Real sentences (module docstring): per-batch peaks against their estimates, then the whole plan."""
    from sipe_fairseq.cli.allocator import keep_freed_memory

    kept = keep_freed_memory()
    import torch
    from sipe_fairseq.structure import memory
    from sipe_fairseq.structure.family import structure_of
    from sipe_fairseq.structure.scoring import plan, score_sentences, sharing
    from sipe_fairseq.structure.sources import parse_source

    torch.set_num_threads(1)
    model, d, sentences, loaded = load_real(args)
    src, budget = parse_source(args.source), memory.parse_size(args.budget)
    options = dataclasses.replace(loaded, max_memory=budget, workers=1, mass=args.tags_mass,
                                  top_pairs=args.tags_top_pairs)
    with torch.no_grad():
        score_sentences(model, sentences[:2], "self", options, d.eos(), d.pad())  # warm-up: lazy allocations
        size, family = memory.model_size(model), structure_of(model)
        shared = sharing(options, src, False, sentences) is not None
        batches = plan(model, sentences, src, options)
        gc.collect()
        out = {"allocator_kept": kept, "sentences": len(sentences), "budget": budget, "batches": len(batches),
               "per_batch": []}
        for b in batches:
            est = memory.estimate_bytes(size, src, [sentences[i] for i in b], family, options.top_pairs,
                                        options.count_beam, shared)
            peak = forked_peak(lambda b=b: score_sentences(model, [sentences[i] for i in b], src, options, d.eos(),
                                                           d.pad()))[0]
            out["per_batch"].append([len(b), est, peak])
        out["whole"] = forked_peak(lambda: score_sentences(model, sentences, src, options, d.eos(), d.pad()))

        def unreleased():  # the whole plan as before each batch gave its freed heap back
            memory.release_freed = lambda: False
            score_sentences(model, sentences, src, options, d.eos(), d.pad())
        out["unreleased"] = forked_peak(unreleased)
    return out


def real_rows(args) -> list:
    rows = []
    for source in args.sources.split(","):
        for budget in args.budgets.split(","):
            for allocator in ("kept", "system"):
                env = dict(os.environ, SIPE_MALLOC="system" if allocator == "system" else "")
                got = run_child(["--real-child", source, budget, "--path", args.path, "--data", args.data,
                                 "--text", args.text, "--limit", str(args.limit), "--tags-mass", str(args.tags_mass),
                                 "--tags-top-pairs", str(args.tags_top_pairs)], env)
                benchlib.log(f"{source} {budget} {allocator}: {json.dumps(got)}")
                if "error" in got:
                    rows.append([source, budget, allocator, "failed: " + got["error"][:100]] + ["-"] * 7)
                    continue
                per = got["per_batch"]
                over = [x[2] - x[1] for x in per if x[2] > x[1]]
                whole, kept = got["whole"], got["unreleased"]
                rows.append([source, budget, allocator, f"{got['batches']} / {got['sentences']}",
                             mib(max(x[1] for x in per)), mib(max(x[2] for x in per)),
                             f"{len(over)} ({mib(max(over))} at most)" if over else "0",
                             f"{mib(whole[0])} ({whole[0] / got['budget']:.2f})",
                             f"{mib(kept[0])} ({kept[0] / got['budget']:.2f})",
                             f"{whole[1] / kept[1]:.3f}", f"{whole[2]:,} / {kept[2]:,}"])
    return rows


REAL_HEADER = ["source", "budget", "allocator", "batches / sentences", "largest estimate", "largest batch peak",
               "batches above their estimate", "whole plan peak (/ budget)",
               "whole plan peak, freed heap kept (/ budget)", "CPU: released / kept", "page faults: released / kept"]


def run_child(argv_tail, env=None) -> dict:
    env = dict(env or os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    proc = subprocess.run([sys.executable, __file__, *argv_tail], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n) -> str:
    return f"{n / 2 ** 20:,.0f} MiB"


def row_cells(family, source, budget_text, got) -> list:
    cells = [family, source, budget_text]
    if "error" in got:
        return cells + ["-", "failed: " + got["error"][:120], "-", "-", "-"]
    budget = got["budget"]
    if "refused" in got:
        return cells + [f"{mib(got['estimate'])} (one sentence)", "refused before scoring", "-", "-", "-"]
    return cells + [mib(got["estimate"]), mib(got["peak"]), f"{got['peak'] / budget:.2f}",
                    f"{got['peak'] / got['estimate']:.2f}", f"{got['batches']} / {got['sentences']}"]


HEADER = ["family", "source", "budget", "estimate (largest planned batch)", "measured peak", "peak / budget",
          "peak / estimate", "batches / sentences"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="ewt")
    p.add_argument("--families", default="sipe,gilt")
    p.add_argument("--kinds", default="beam,mix")
    p.add_argument("--ks", default="4,16,64,256,1000")
    p.add_argument("--budgets", default="300M,1G")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--path", help="real sentences: a trained checkpoint (module docstring)")
    p.add_argument("--data", help="real sentences: its data directory")
    p.add_argument("--text", help="real sentences: a file of them, one a line")
    p.add_argument("--limit", type=int, default=0, help="real sentences: the first N only (0: all)")
    p.add_argument("--sources", default="mix:16", help="real sentences: the tag sources")
    p.add_argument("--tags-mass", type=float, default=0.99)
    p.add_argument("--tags-top-pairs", type=int, default=4)
    p.add_argument("--child", nargs=3, metavar=("FAMILY", "SOURCE", "BUDGET"), help=argparse.SUPPRESS)
    p.add_argument("--real-child", nargs=2, metavar=("SOURCE", "BUDGET"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.real_child:
        args.source, args.budget = args.real_child
        print(json.dumps(real_child(args)))
        return 0
    if args.path:
        rows = real_rows(args)
        print(f"\n{Path(args.text).name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
        print(benchlib.markdown_table(REAL_HEADER, rows, "llllrrrrrrr"))
        return 0
    if args.child:
        args.family, args.source, args.budget = args.child
        print(json.dumps(child(args)))
        return 0
    rows = []
    for family in args.families.split(","):
        for kind in args.kinds.split(","):
            for k in args.ks.split(","):
                for budget in args.budgets.split(","):
                    source = f"{kind}:{k}"
                    got = run_child(["--child", family, source, budget, "--size", args.size, "--seed", str(args.seed)])
                    benchlib.log(f"{family} {source} {budget}: {json.dumps(got)}")
                    rows.append(row_cells(family, source, budget, got))
    print(f"\n`--size {args.size}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(benchlib.markdown_table(HEADER, rows, "lllrrrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
