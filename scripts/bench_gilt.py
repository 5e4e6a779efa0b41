#!/usr/bin/env python
"""Cost of GiLT against ``sipe_txl --sipe-injection none`` of the same size: train-step time, peak
training tensor memory, and beam-over-graphs scoring speed; prints a markdown table.

    .venv/bin/python scripts/bench_gilt.py DATA_DIR [--arch-size tiny|small] [--rounds 8]
        [--beams 300:5 20:5 1:1] [--sentences 10] [--score-rounds 3]

DATA_DIR: a ``sipe-preprocess`` directory (with arcs), e.g. the demo's toy data. Both models are
built once in this process with one fixed ``gilt_lm`` batch of the valid split (the ``none`` model
reads the same tokens). Train step: after two unmeasured rounds, each round times one training step
of each (zero_grad, forward, loss as its criterion, backward, Adam step), the order rotated every
round (``benchlib.paired_runs``); the ratio is the median of the per-round ratios (the same process
and load for both, so the ratio is what counts on a shared machine), [min-max] beside it. Memory:
each model's first step under ``torch.profiler`` with ``profile_memory``, the maximum of the running
sum of allocator events plus the tensors alive before (parameters, Adam state, batch). Scoring: the
first ``--sentences`` sentences of the valid split, sentences/s of the structure engine's beam
over graphs (``sipe_fairseq/structure``, 64 sentences at a time) for every
``--beams BEAM:COUNT_BEAM`` (the paper's default is 300:5; SyntaxGym and GLUE
parsing use 20:5) against the ``none`` model's plain scoring of the same sentences (one forward of
``</s>`` + the sentence each, log-softmax, the targets' log-probabilities): every round runs all
of them in rotated order after one unmeasured run, ratios paired by round as for the train step.
Wall clock, CPU-time ratios as a cross-check.
"""
import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib


def _models(data, size):
    import sipe_fairseq
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    sipe_fairseq.register()
    built = {}
    for name, task, crit, arch in (("none", "hexatag_lm", "hexatag_lm", f"sipe_txl_{size}"),
                                   ("gilt", "gilt_lm", "gilt_lm", f"gilt_txl_{size}")):
        argv = [data, "--task", task, "--criterion", crit, "--arch", arch, "--tokens-per-sample", "128",
                "--sample-break-mode", "complete", "--max-tokens", "2048", "--dropout", "0.0"]
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        cfg = convert_namespace_to_omegaconf(args)
        t = tasks.setup_task(cfg.task)
        t.load_dataset("valid")
        torch.manual_seed(1)
        model = t.build_model(cfg.model)
        built[name] = (t, model, t.build_criterion(cfg.criterion))
    ds = built["gilt"][0].datasets["valid"]
    batch = ds.collater([ds[i] for i in range(16)])
    plain = {k: v for k, v in batch.items()}
    plain["net_input"] = {k: batch["net_input"][k] for k in ("src_tokens", "src_lengths", "src_terminals", "src_nonterminals")}
    return built, {"none": plain, "gilt": batch}


def _step(model, crit, opt, batch):
    opt.zero_grad()
    loss, _, _ = crit(model, batch)
    loss.backward()
    opt.step()


def _peak(model, crit, opt, batch):
    from torch.profiler import ProfilerActivity, profile

    opt.zero_grad(set_to_none=True)
    alive = sum(p.numel() * p.element_size() for p in model.parameters())
    alive += sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        _step(model, crit, opt, batch)
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and str(e.device_type()).endswith("CPU"))  # as bench_decoders.py
    run = peak = 0
    for _, nbytes in events:
        run += nbytes
        peak = max(peak, run)
    return alive + peak


def parse_beams(specs):
    """``["300:5", "20"]`` -> ``[(300, 5), (20, 5)]`` (count beam 5 when omitted); raises ``ValueError``."""
    out = []
    for spec in specs:
        beam, sep, count = spec.partition(":")
        if not beam.isdigit() or (sep and not count.isdigit()) or int(beam) < 1 or (sep and int(count) < 1):
            raise ValueError(f"beam {spec!r}: expected BEAM[:COUNT_BEAM] with positive integers")
        out.append((int(beam), int(count) if count else 5))
    return out


def beam_label(beam, count_beam):
    return f"beam {beam}, count beam {count_beam}"


def table(size, rounds, train, mem, scoring, n_sentences, score_rounds):
    """The markdown table: ``train`` = paired runs of the train step (``none``, ``gilt``), ``mem`` = peak bytes,
    ``scoring`` = paired runs of ``none`` and one label per beam setting (:func:`beam_label`). Rows: median train
    step (s) and its ratio GiLT/none; peak memory and its ratio; per beam setting sentences/s and the throughput
    ratio GiLT/none (median of per-round ratios, [min-max], CPU ratio in parentheses)."""
    from benchlib import fmt_range, median, paired_ratio, paired_ratios, speed_ratio

    paired = paired_ratios(train["gilt"], train["none"], "wall")
    lines = [f"| {size}, batch of 16 blocks x 128 tokens | none | GiLT | ratio |", "|---|---:|---:|---:|",
             f"| train step (median of {rounds} rounds), s | {median(train['none']['wall']):.3f} | "
             f"{median(train['gilt']['wall']):.3f} | {paired_ratio(train['gilt'], train['none'], 'wall'):.2f}"
             f"{fmt_range([min(paired), max(paired)] if paired else None)} "
             f"({paired_ratio(train['gilt'], train['none'], 'cpu'):.2f}) |",
             f"| peak training tensor memory, MB | {mem['none'] / 2**20:.1f} | {mem['gilt'] / 2**20:.1f} | "
             f"{mem['gilt'] / mem['none']:.2f} |"]
    none_rate = n_sentences / median(scoring["none"]["wall"])
    for label in (k for k in scoring if k != "none"):
        wall, rng = speed_ratio(scoring[label], scoring["none"], "wall")
        cpu, _ = speed_ratio(scoring[label], scoring["none"], "cpu")
        lines.append(f"| scoring {n_sentences} sentences x {score_rounds} rounds, sentences/s (GiLT: {label}; none: one "
                     f"forward) | {none_rate:.1f} | {n_sentences / median(scoring[label]['wall']):.2f} | "
                     f"{wall:.3g}{fmt_range(rng, '.3g')} ({cpu:.3g}) |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--arch-size", default="tiny", choices=("tiny", "small"))
    p.add_argument("--rounds", type=int, default=8, help="measured train-step rounds (after 2 unmeasured)")
    p.add_argument("--sentences", type=int, default=10, help="valid sentences scored per round")
    p.add_argument("--beams", nargs="+", default=["300:5", "20:5", "1:1"],
                   help="BEAM:COUNT_BEAM settings of the beam over graphs (paper: 300:5)")
    p.add_argument("--score-rounds", type=int, default=3, help="measured scoring rounds (after 1 unmeasured run)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    try:
        beams = parse_beams(args.beams)
    except ValueError as e:
        p.error(str(e))
    from benchlib import paired_runs

    torch.set_num_threads(args.threads)
    built, batches = _models(args.data, args.arch_size)
    opts = {n: torch.optim.Adam(m.parameters(), lr=1e-4) for n, (_, m, _) in built.items()}
    mem = {}
    for n, (_, m, c) in built.items():
        _step(m, c, opts[n], batches[n])  # Adam state exists before the measured step
        mem[n] = _peak(m, c, opts[n], batches[n])
    steps = {n: (lambda n=n: _step(built[n][1], built[n][2], opts[n], batches[n])) for n in built}
    paired_runs(steps, 2)  # unmeasured rounds
    train = paired_runs(steps, args.rounds)

    from sipe_fairseq.eval.prefix_scores import load_split_sentences
    from sipe_fairseq.structure.family import StructureOptions
    from sipe_fairseq.structure.scoring import score_sentences

    task = built["gilt"][0]
    sentences = load_split_sentences(task, "valid")[0][:args.sentences]
    sents = [(s.words(), s.arcs) for s in sentences]
    eos = task.dictionary.eos()
    gilt, none = built["gilt"][1], built["none"][1]

    def score_none():  # plain scoring: one forward, log-softmax, the targets' log-probs
        for words, _ in sents:
            toks = torch.tensor([eos] + [t for w in words for t in w] + [eos])
            logits = none(toks[None, :-1])[0]
            float(F.log_softmax(logits[0].double(), -1).gather(-1, toks[1:, None]).sum())

    def score_beam(beam, count_beam):
        score_sentences(gilt, sentences, f"beam:{beam}", StructureOptions(count_beam=count_beam), eos,
                        task.dictionary.pad())

    fns = {"none": score_none}
    fns.update({beam_label(b, c): (lambda b=b, c=c: score_beam(b, c)) for b, c in beams})
    with torch.no_grad():
        for _, m, _ in built.values():
            m.eval()
        paired_runs(fns, 1)  # first-call costs out of the measurement
        scoring = paired_runs(fns, args.score_rounds)
    print(table(args.arch_size, args.rounds, train, mem, scoring, len(sents), args.score_rounds))
    print("\nratio: GiLT / none (time, memory) or GiLT's sentences/s / none's; median of per-round ratios (order "
          "rotated each round, one process), [min-max], CPU-time ratio in parentheses.")


if __name__ == "__main__":
    main()
