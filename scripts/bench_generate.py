#!/usr/bin/env python
"""Generation speed of the SiPE decoders: KV-cache (incremental) vs uncached decoding, and each
injection's cached sampling throughput relative to ``none``; and scoring with tags from the prefix
(``beam:K``, ``self``) against ``none``'s plain scoring; prints markdown tables.

    .venv/bin/python scripts/bench_generate.py [--quick] [--parts sampling scoring] [--batches 1 8] [--tokens 256]
        [--repeats 3] [--score-sentences 8] [--score-words 20] [--score-sources self beam:1 beam:4 beam:16]

What is measured: sampling ``--tokens`` new tokens after one ``</s>`` from a randomly initialised
model (eval mode, no grad, dropout off), B sequences at once. Every model has the tag heads (also
``none``: ``--sipe-tag-heads on``) and also samples each new position's hexatag from them (the heads
at position i predict the tags of token i+1), so every step feeds a token and its tags -- the
self-tagging generation a tagged LM needs -- and the configurations differ by the injection only.
  * cached: one new position per step through ``incremental_state`` (:class:`SiPEDecoder` KV cache);
  * uncached: every step runs the full forward over the whole prefix and keeps the last position.
Every model is built once in this process and every round runs every configuration, in an order
rotated each round, so machine load hits all alike; reported ratios are medians over rounds of the
per-round ratio (cached/uncached speed-up: of the same configuration; injection: to ``none`` of the
same family and batch size). Times are this process's CPU time (one thread: robust to other
processes' load on a shared machine), wall-clock ratios in brackets as a cross-check. Targets
(issue 12): speed-up >= 5x at 256 tokens; every injection's cached tokens/s >= 0.8x ``none``.

Scoring part (``--parts scoring``; issue 12 section 5): ``--score-sentences`` random sentences (word
counts uniform around ``--score-words``, 1-3 subwords per word, the hexatags of a random tree on
word starts) scored by :class:`~sipe_fairseq.eval.prefix_tags.PrefixTagScorer` -- ``none`` (no tags:
one forward per sentence, "plain") and a ``position`` decoder of the same size under ``given`` (one
forward with the data's tags), ``self`` and each ``beam:K``, the last two through the KV cache.
One process, one unmeasured run, then ``--score-rounds`` rounds running every configuration in an
order rotated each round (``benchlib.paired_runs``); sentences/s from the median CPU time; ratio =
median over rounds of the per-round throughput ratio to ``none`` (``benchlib.speed_ratio``), with
its min-max, the wall-clock ratio beside it.
"""
import argparse
import statistics
import sys
import time
from dataclasses import fields
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchlib

INJECTIONS = ("none", "input", "position", "disentangled", "attention-bias", "input+attention-bias", "position+attention-bias")
FAMILIES = ("sipe_txl", "sipe_rope", "sipe_transformer_lm")
SPEEDUP_TARGET, INJECTION_TARGET = 5.0, 0.8


def build(family, injection, a, dictionary):
    import torch
    from fairseq.models.transformer_lm import base_lm_architecture

    torch.manual_seed(a.seed)
    if family == "sipe_transformer_lm":
        from argparse import Namespace
        from types import SimpleNamespace
        from sipe_fairseq.models.sipe_transformer_lm import SiPETransformerLanguageModel, SiPETransformerLMConfig
        defaults = SiPETransformerLMConfig()
        ns = Namespace(**{f.name: getattr(defaults, f.name) for f in fields(defaults)})
        ns.__dict__.update(decoder_embed_dim=a.embed_dim, decoder_ffn_embed_dim=a.ffn, decoder_layers=a.layers,
                           decoder_attention_heads=a.heads, decoder_input_dim=a.embed_dim, decoder_output_dim=a.embed_dim,
                           share_decoder_input_output_embed=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                           tokens_per_sample=a.tokens + 8, max_target_positions=a.tokens + 8, add_bos_token=False, tpu=False)
        base_lm_architecture(ns)
        task = SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)
        return SiPETransformerLanguageModel.build_model(ns, task).decoder.eval()
    from sipe_fairseq.models.sipe_lm import SiPEDecoder, SiPEDecoderConfig, SiPERopeConfig
    config = SiPERopeConfig if family == "sipe_rope" else SiPEDecoderConfig
    cfg = config(decoder_embed_dim=a.embed_dim, decoder_ffn_embed_dim=a.ffn, decoder_layers=a.layers,
                 decoder_attention_heads=a.heads, dropout=0.0, sipe_injection=injection, sipe_tag_heads="on",
                 tokens_per_sample=a.tokens + 8, max_target_positions=a.tokens + 8)
    return SiPEDecoder(cfg, dictionary).eval()


def sample(model, batch, new_tokens, cached, seed):
    """Sample ``new_tokens`` tokens (and tags, if the model has tag heads) for ``batch`` rows;
    returns ((CPU seconds, wall seconds), the sampled tokens)."""
    import torch
    from sipe_fairseq.modules import FIRST_TAG_ID

    g = torch.Generator().manual_seed(seed)
    eos, notag = model.dictionary.eos(), FIRST_TAG_ID - 1
    tokens = torch.full((batch, 1), eos, dtype=torch.long)
    terms, nts = torch.full_like(tokens, notag), torch.full_like(tokens, notag)
    state = {} if cached else None
    cpu, wall = time.process_time(), time.perf_counter()
    with torch.inference_mode():
        for _ in range(new_tokens):
            logits, extra = model(tokens, src_terminals=terms, src_nonterminals=nts, incremental_state=state)
            probs = torch.softmax(logits[:, -1].float(), -1)
            nxt = torch.multinomial(probs, 1, generator=g)
            tokens = torch.cat([tokens, nxt], 1)
            if "terminal_logits" in extra:
                t = torch.multinomial(torch.softmax(extra["terminal_logits"][:, -1].float(), -1), 1, generator=g)
                n = torch.multinomial(torch.softmax(extra["nonterminal_logits"][:, -1].float(), -1), 1, generator=g)
                terms, nts = torch.cat([terms, t + FIRST_TAG_ID], 1), torch.cat([nts, n + FIRST_TAG_ID], 1)
            else:
                terms, nts = torch.cat([terms, terms[:, -1:]], 1), torch.cat([nts, nts[:, -1:]], 1)
    return (time.process_time() - cpu, time.perf_counter() - wall), tokens


def random_sentences(n, words, dictionary, seed, max_subwords=3):
    """``n`` sentences ``(tokens x_1 .. x_m </s>, terminals, nonterminals)``: a word count uniform in
    [words/2, 3 words/2], 1..``max_subwords`` subwords per word (random non-special symbols), and on each
    word's first subword the hexatags of a random dependency tree (random attachment order, lifted if
    non-projective) -- only the word starts matter to ``self``/``beam:K``; ``given`` scores with them."""
    import random

    import torch
    from sipe_fairseq.data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
    from sipe_fairseq.hexatag import NONTERMINALS, TERMINALS
    from sipe_fairseq.hexatag.tags import encode_tree

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        m = rng.randint(max(1, words // 2), max(1, (3 * words) // 2))
        order = list(range(1, m + 1))
        rng.shuffle(order)
        heads = [0] * (m + 1)
        for k, w in enumerate(order[1:], 1):  # order[0] is the root
            heads[w] = order[rng.randrange(k)]
        tags = encode_tree(heads[1:])[0]
        toks, terms, nts = [], [], []
        for t, nt in tags:
            for j in range(rng.randint(1, max_subwords)):
                toks.append(rng.randrange(dictionary.nspecial, len(dictionary)))
                terms.append(FIRST_TAG_ID + TERMINALS.index(t) if j == 0 else NOTAG_ID)
                nts.append(FIRST_TAG_ID + NONTERMINALS.index(nt) if j == 0 else NOTAG_ID)
        toks.append(dictionary.eos())
        terms.append(NOTAG_ID)
        nts.append(NOTAG_ID)
        out.append((torch.tensor(toks), torch.tensor(terms), torch.tensor(nts)))
    return out


def scoring_rows(runs, sources, n_sentences):
    """Table rows of the scoring part from :func:`benchlib.paired_runs` results (``runs[label]``, ``none`` the
    reference): label, tag source, sentences/s (CPU), its ratio to ``none`` [min-max of the paired ratios],
    the wall-clock ratio. Ratios are of throughput (``none``'s time / the row's, paired by round)."""
    from benchlib import fmt_range, median, speed_ratio

    rows = []
    for label, source in sources:
        res = runs[label]
        if label == "none":
            rows.append(["none", source, f"{n_sentences / median(res['cpu']):,.1f}", "(reference)", "(reference)"])
            continue
        cpu, rng = speed_ratio(res, runs["none"], "cpu")
        wall, _ = speed_ratio(res, runs["none"], "wall")
        rows.append([label.split(" ")[0], source, f"{n_sentences / median(res['cpu']):,.1f}",
                     f"{cpu:.3g}x{fmt_range(rng, '.3g')}", f"{wall:.3g}x"])
    return rows


def run_scoring(a, dictionary):
    """The scoring part: ``none``'s plain scoring vs a ``position`` decoder under ``given``, ``self`` and
    ``beam:K`` (:class:`~sipe_fairseq.eval.prefix_tags.PrefixTagScorer`, KV cache), timed in one process by
    :func:`benchlib.paired_runs`; prints its table."""
    from benchlib import markdown_table, paired_runs
    from sipe_fairseq.eval.prefix_tags import PrefixTagScorer
    from sipe_fairseq.models.sipe_lm import SiPETransformerXLModel

    a = argparse.Namespace(**{**vars(a), "tokens": max(a.tokens, 3 * ((3 * a.score_words) // 2) + 2)})  # longest sentence
    models = {inj: SiPETransformerXLModel(build("sipe_txl", inj, a, dictionary)).eval() for inj in ("none", "position")}
    sents = random_sentences(a.score_sentences, a.score_words, dictionary, a.seed)
    sources = [("none", "plain")] + [(f"position [{src}]", src) for src in ["given"] + a.score_sources]
    scorers = {lab: PrefixTagScorer(models["none" if lab == "none" else "position"], "given" if src == "plain" else src,
                                    eos=dictionary.eos(), pad=dictionary.pad()) for lab, src in sources}
    assert not scorers["none"].sees_tags and all(s.cache for lab, s in scorers.items() if lab != "none")
    fns = {lab: (lambda sc=sc: sc.score_batch(sents)) for lab, sc in scorers.items()}
    for fn in fns.values():  # first-call costs out of the measurement
        fn()
    runs = paired_runs(fns, a.score_rounds)
    n_tokens = sum(len(t) for t, _, _ in sents)
    print(f"\n### Scoring with prefix tags: d {a.embed_dim} x {a.layers} layers ({a.heads} heads, FFN {a.ffn}), vocab "
          f"{a.vocab}, {len(sents)} random sentences ({n_tokens} tokens incl. </s>, about {a.score_words} words each), "
          f"{a.threads} thread(s), {a.score_rounds} rounds\n")
    print(markdown_table(["model", "tags", "sentences/s (CPU)", "vs none plain, CPU [range]", "vs none, wall"],
                         scoring_rows(runs, sources, len(sents)), align="llrrr"))
    print("\nnone plain = one forward per sentence (no tags); position: given = the data's tags, one forward; self and "
          "beam:K through the KV cache (PrefixTagScorer). Ratio = median over rounds of the per-round throughput ratio "
          "to none plain (same round, same process, order rotated each round); [range] = their min-max.")
    return runs


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--embed-dim", type=int, default=256)
    p.add_argument("--ffn", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=1000)
    p.add_argument("--tokens", type=int, default=256, help="new tokens sampled per sequence")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    p.add_argument("--uncached", nargs="+", default=["none"],
                   help="injections also decoded without the cache (the slow baseline; sipe_transformer_lm's input always is)")
    p.add_argument("--repeats", type=int, default=2, help="measured rounds")
    p.add_argument("--warmup", type=int, default=0, help="unmeasured rounds")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny sizes (d 64, 2 layers, 64 tokens, 1 round): a smoke test")
    p.add_argument("--parts", nargs="+", default=["sampling", "scoring"], choices=("sampling", "scoring"),
                   help="sampling: the KV-cache/injection table; scoring: beam:K prefix-tag scoring vs none")
    p.add_argument("--score-sentences", type=int, default=8, help="scoring: random sentences per round")
    p.add_argument("--score-words", type=int, default=20, help="scoring: mean words per sentence (1-3 subwords each)")
    p.add_argument("--score-sources", nargs="+", default=["self", "beam:1", "beam:4", "beam:16"],
                   help="scoring: tag sources of the position decoder besides given")
    p.add_argument("--score-rounds", type=int, default=3, help="scoring: measured rounds (after one unmeasured run)")
    a = p.parse_args()
    if a.quick:
        a.embed_dim, a.ffn, a.layers, a.tokens, a.repeats, a.warmup = 64, 256, 2, 64, 1, 0
        a.score_sentences, a.score_words, a.score_rounds = 4, 8, 2

    import torch
    import sipe_fairseq  # noqa: F401  (registers the models)
    from fairseq.data import Dictionary

    from sipe_fairseq.eval.prefix_tags import parse_tag_source

    for src in a.score_sources:
        try:
            if parse_tag_source(src)[0] == "given":
                raise ValueError("given is always run")
        except ValueError as e:
            p.error(f"--score-sources {src}: {e}")
    torch.set_num_threads(a.threads)
    dictionary = Dictionary()
    for i in range(a.vocab - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    if "sampling" in a.parts:
        run_sampling(a, dictionary)
    if "scoring" in a.parts:
        run_scoring(a, dictionary)


def run_sampling(a, dictionary):
    """The sampling part (the module docstring): prints its table."""
    import torch

    configs = []  # (family, injection, cached)
    for family in a.families:
        for inj in (("input",) if family == "sipe_transformer_lm" else INJECTIONS):
            configs.append((family, inj, True))
            if inj in a.uncached or family == "sipe_transformer_lm":
                configs.append((family, inj, False))
    models = {(f, i): build(f, i, a, dictionary) for f, i, _ in configs}
    for model in models.values():  # first-call costs (allocator, lazy tables) out of the measurement
        for cached in (True, False):
            sample(model, 2, 4, cached, a.seed)
    seconds = {(c, b): [] for c in configs for b in a.batches}
    check = {}
    for rnd in range(a.warmup + a.repeats):
        order = configs[rnd % len(configs):] + configs[:rnd % len(configs)]
        for b in a.batches:
            for family, inj, cached in order:
                sec, toks = sample(models[family, inj], b, a.tokens, cached, a.seed + rnd)
                if rnd >= a.warmup:
                    seconds[(family, inj, cached), b].append(sec)
                check.setdefault((family, inj, b, rnd), []).append(toks)
    # cached and uncached decoding of the same model draw the same samples (same logits up to rounding)
    same = sum(bool(torch.equal(*t)) for t in check.values() if len(t) == 2)
    pairs = sum(len(t) == 2 for t in check.values())

    print(f"model d {a.embed_dim} x {a.layers} layers ({a.heads} heads, FFN {a.ffn}), vocab {a.vocab}, {a.tokens} new tokens, "
          f"{a.threads} thread(s), {a.repeats} rounds; cached vs uncached samples identical in {same}/{pairs} runs\n")
    print("| model | injection | B | cached tok/s | cached vs none [wall] | uncached tok/s | cached speed-up [wall] |")
    print("|---|---|---:|---:|---:|---:|---:|")
    verdicts = []

    def ratio(num, den, clock):  # median over rounds of time(num) / time(den)
        return statistics.median(x[clock] / y[clock] for x, y in zip(num, den))

    for family, inj, cached in configs:
        if not cached:
            continue
        for b in a.batches:
            cs = seconds[(family, inj, True), b]
            row = [family, inj, str(b), f"{b * a.tokens / statistics.median(x[0] for x in cs):.0f}"]
            base = seconds.get(((family, "none", True), b))
            if base and family != "sipe_transformer_lm":  # tokens/s ratio = time(none) / time(injection)
                row.append(f"{ratio(base, cs, 0):.2f}x [{ratio(base, cs, 1):.2f}x]")
                if inj != "none":
                    verdicts.append(ratio(base, cs, 0) >= INJECTION_TARGET)
            else:
                row.append("-")
            us = seconds.get(((family, inj, False), b))
            if us:
                row += [f"{b * a.tokens / statistics.median(x[0] for x in us):.0f}",
                        f"{ratio(us, cs, 0):.1f}x [{ratio(us, cs, 1):.1f}x]"]
                verdicts.append(ratio(us, cs, 0) >= SPEEDUP_TARGET)
            else:
                row += ["-", "-"]
            print("| " + " | ".join(row) + " |")
    print(f"\ntargets (speed-up >= {SPEEDUP_TARGET:g}x, injection >= {INJECTION_TARGET:g}x none): "
          f"{sum(verdicts)}/{len(verdicts)} met")


if __name__ == "__main__":
    main()
