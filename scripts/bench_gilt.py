#!/usr/bin/env python
"""Cost of GiLT against ``sipe_txl --sipe-injection none`` of the same size: train-step time, peak
training tensor memory, and beam scoring speed; prints a markdown table.

    .venv/bin/python scripts/bench_gilt.py DATA_DIR [--arch-size tiny|small] [--rounds 8] [--sentences 20]

DATA_DIR: a ``sipe-preprocess`` directory (with arcs), e.g. the demo's toy data. Both models are
built once in this process with one fixed ``gilt_lm`` batch of the valid split (the ``none`` model
reads the same tokens); after a warm-up, each round times one training step of each (zero_grad,
forward, loss as its criterion, backward, Adam step) in alternating order, and the reported ratio is
the median of the per-round ratios (the same process and load for both, so the ratio is what
counts on a shared machine). Memory: each model's first step under ``torch.profiler`` with
``profile_memory``, the maximum of the running sum of allocator events plus the tensors alive before
(parameters, Adam state, batch). Beam: sentences/s of ``eval/gilt_scoring.py`` against the ``none``
model's per-sentence scoring of the same sentences.
"""
import argparse
import statistics
import time

import torch


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


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("data")
    p.add_argument("--arch-size", default="tiny", choices=("tiny", "small"))
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--sentences", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    built, batches = _models(args.data, args.arch_size)
    opts = {n: torch.optim.Adam(m.parameters(), lr=1e-4) for n, (_, m, _) in built.items()}
    mem = {}
    for n, (_, m, c) in built.items():
        _step(m, c, opts[n], batches[n])  # Adam state exists before the measured step
        mem[n] = _peak(m, c, opts[n], batches[n])
    times = {n: [] for n in built}
    for r in range(args.rounds + 2):
        order = list(built) if r % 2 == 0 else list(built)[::-1]
        for n in order:
            _, m, c = built[n]
            t0 = time.perf_counter()
            _step(m, c, opts[n], batches[n])
            if r >= 2:
                times[n].append(time.perf_counter() - t0)
    ratio = statistics.median(g / n for g, n in zip(times["gilt"], times["none"]))

    from sipe_fairseq.eval.gilt_scoring import read_sentences, score_sentence

    task = built["gilt"][0]
    sents = read_sentences(args.data, "valid", task.dictionary, args.sentences)
    eos = task.dictionary.eos()
    with torch.no_grad():
        for _, m, _ in built.values():
            m.eval()
        t0 = time.perf_counter()
        for words, _ in sents:
            score_sentence(built["gilt"][1], words, eos, beam=20, count_beam=5)
        beam_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for words, _ in sents:
            toks = [eos] + [t for w in words for t in w]
            built["none"][1](torch.tensor([toks]))
        none_s = time.perf_counter() - t0
    print(f"| {args.arch_size}, batch of 16 blocks x 128 tokens | none | GiLT | ratio |")
    print("|---|---:|---:|---:|")
    print(f"| train step (median of {args.rounds} rounds), s | {statistics.median(times['none']):.3f} | "
          f"{statistics.median(times['gilt']):.3f} | {ratio:.2f} |")
    print(f"| peak training tensor memory, MB | {mem['none'] / 2**20:.1f} | {mem['gilt'] / 2**20:.1f} | "
          f"{mem['gilt'] / mem['none']:.2f} |")
    print(f"| scoring, sentences/s (GiLT: beam 20, count beam 5) | {len(sents) / none_s:.1f} | {len(sents) / beam_s:.2f} | "
          f"{none_s / beam_s:.3f} |")


if __name__ == "__main__":
    main()
