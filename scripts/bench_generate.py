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

Scoring part (``--parts scoring``): a SiPE decoder scoring sentences with structure from the prefix
(``sipe_fairseq/structure``): ``given`` (the data's tags, one full forward per batch), ``self`` and each
``beam:K`` through the KV cache (every hypothesis of every sentence of a ``--score-batch`` batch in one
decoder call per position), and ``beam:--score-prune-k`` pruned to the heads' top M pairs for each
``--score-top-pairs`` M. With ``--data DIR --path CKPT``: the checkpoint on the first
``--score-sentences`` sentences of ``--score-split``; without: a random-init ``position`` decoder of the
sizes above on random sentences (word counts uniform around ``--score-words``, 1-3 subwords per word,
the hexatags of a random tree on word starts). One process, one unmeasured run, then ``--score-rounds``
rounds running every configuration in an order rotated each round (``benchlib.paired_runs``); CPU time
(one thread); ratio = median over rounds of the per-round throughput ratio to ``given``, with its
min-max; efficiency = candidate positions scored per second over ``given``'s tokens per second.
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


def scoring_rows(runs, configs, n_sentences, n_tokens, stats):
    """Table rows of the scoring part from :func:`benchlib.paired_runs` results (``runs[label]``, ``given`` the
    reference): label, sentences/s and tokens/s (CPU), the throughput ratio to ``given`` [min-max of the paired
    ratios], candidate positions per token, the efficiency (positions/s over given's tokens/s), the wall-clock
    ratio, and the source's perplexity per token (exact, or the beam's bound)."""
    from benchlib import fmt_range, median, speed_ratio

    given_tps = n_tokens / median(runs["given"]["cpu"])
    alone = runs.get(GIVEN_ALONE)
    alone_tps = n_tokens / median(alone["cpu"]) if alone else None
    rows = []
    for label, _, _ in configs:
        res, st = runs[label], stats[label]
        t = median(res["cpu"])
        ratio, rng = (1.0, None) if label == "given" else speed_ratio(res, runs["given"], "cpu")
        wall = 1.0 if label == "given" else speed_ratio(res, runs["given"], "wall")[0]
        eff = st["positions"] / t / given_tps
        row = [label, f"{n_sentences / t:,.1f}", f"{n_tokens / t:,.0f}",
               "(reference)" if label == "given" else f"{ratio:.3g}x{fmt_range(rng, '.3g')}",
               f"{st['positions'] / n_tokens:.1f}", f"{eff:.2f}x"]
        if alone_tps:
            row.append(f"{st['positions'] / t / alone_tps:.2f}x")
        rows.append(row + [f"{wall:.3g}x", f"{st['ppl']:.2f}"])
    return rows


GIVEN_ALONE = "given, one sentence per forward"
COPY_CACHE = "KV cache copied per child"


def scoring_setup(a, dictionary):
    """(model, sentences, eos, pad, description): a checkpoint and the first ``--score-sentences`` sentences of
    ``--score-split`` of ``--data`` (real sentences), else a random-init ``position`` decoder and random sentences."""
    import torch

    if a.data:
        from sipe_fairseq.checkpoints import load_lm
        from sipe_fairseq.eval.prefix_scores import load_split_sentences

        model, task = load_lm(a.path, a.data)
        model.eval()
        sents, _ = load_split_sentences(task, a.score_split)
        sents = sents[:a.score_sentences]
        d = task.source_dictionary
        n_params = sum(p.numel() for p in model.parameters())
        return model, sents, d.eos(), d.pad(), (f"{a.path} ({n_params:,} parameters, placement "
                                                f"{getattr(task.args, 'tag_head_placement', 'first_subword')}), the first "
                                                f"{len(sents)} sentences of {a.data} {a.score_split}")
    from sipe_fairseq.models.sipe_lm import SiPETransformerXLModel
    from sipe_fairseq.structure.sentences import sentence_of

    a = argparse.Namespace(**{**vars(a), "tokens": max(a.tokens, 3 * ((3 * a.score_words) // 2) + 2)})  # longest sentence
    model = SiPETransformerXLModel(build("sipe_txl", "position", a, dictionary)).eval()
    with torch.no_grad():  # sharper heads than the init, as a trained model's
        model.decoder.terminal_head.weight.mul_(8)
        model.decoder.nonterminal_head.weight.mul_(8)
    sents = [sentence_of(i, *s, eos=dictionary.eos()) for i, s in
             enumerate(random_sentences(a.score_sentences, a.score_words, dictionary, a.seed))]
    return model, sents, dictionary.eos(), dictionary.pad(), (
        f"a random-init position decoder, d {a.embed_dim} x {a.layers} layers ({a.heads} heads, FFN {a.ffn}), vocab "
        f"{a.vocab}, {len(sents)} random sentences (about {a.score_words} words each)")


def run_scoring(a, dictionary):
    """The scoring part: a SiPE decoder under ``given`` (one full forward per batch), ``self`` and each
    ``beam:K`` (the structure engine, KV cache, ``--score-batch`` sentences at a time), and ``beam:K`` pruned
    to the heads' top M pairs, timed in one process by :func:`benchlib.paired_runs`; prints its table."""
    import math

    from benchlib import markdown_table, paired_runs
    from sipe_fairseq.modules.kv_cache import SHARE_FROM
    from sipe_fairseq.structure.family import StructureOptions
    from sipe_fairseq.structure.scoring import score_sentences

    model, sents, eos, pad, what = scoring_setup(a, dictionary)
    configs = [("given", "given", 0)] + [(src, src, 0) for src in a.score_sources]
    configs += [(f"beam:{a.score_prune_k} top {m}", f"beam:{a.score_prune_k}", m) for m in a.score_top_pairs]
    stats = {}

    if getattr(a, "score_given_alone", False):
        configs.insert(1, (GIVEN_ALONE, "given", 0))
    for src in getattr(a, "score_copy_cache", None) or []:  # the beam with every branching copied (no sharing)
        configs.append((f"{src}, {COPY_CACHE}", src, 0))

    def fn(label, source, m):
        from sipe_fairseq.modules import kv_cache

        options = StructureOptions(placement=a.placement, top_pairs=m)
        kv_cache.SHARE_FROM = 10 ** 9 if label.endswith(COPY_CACHE) else SHARE_FROM
        if label == GIVEN_ALONE:  # the scorers before the structure engine: one full forward per sentence
            out = [s for sent in sents for s in score_sentences(model, [sent], source, options, eos, pad)]
        else:
            out = score_sentences(model, sents, source, options, eos, pad, a.score_batch)
        tokens = sum(s.n_tokens for s in out)
        stats[label] = {"positions": sum(s.extra.get("positions", s.n_tokens) for s in out),
                        "ppl": math.exp(-sum(s.logprob for s in out) / tokens)}

    fns = {label: (lambda c=(label, src, m): fn(*c)) for label, src, m in configs}
    for f in fns.values():  # first-call costs out of the measurement
        f()
    runs = paired_runs(fns, a.score_rounds)
    n_tokens = sum(s.n for s in sents)
    print(f"\n### Scoring with structure from the prefix: {what}; {n_tokens} tokens incl. </s>; {a.threads} thread(s), "
          f"{a.score_batch} sentences per batch, {a.score_rounds} rounds\n")
    header = ["tags", "sentences/s (CPU)", "tokens/s (CPU)", "vs given, CPU [range]", "positions/token", "efficiency"]
    header += ["efficiency vs one sentence per forward"] if GIVEN_ALONE in runs else []
    print(markdown_table(header + ["vs given, wall", "ppl/token"],
                         scoring_rows(runs, configs, len(sents), n_tokens, stats), align="l" + "r" * (len(header) + 1)))
    print("\ngiven = the data's tags, one full forward per batch; self and beam:K through the KV cache, every hypothesis "
          "of every sentence of a batch in one decoder call per position. positions/token = decoder positions run "
          "(hypotheses x positions) per token; efficiency = positions/s over given's tokens/s. Ratios = median over "
          "rounds of the per-round throughput ratio to given (same round, same process, order rotated each round); "
          "[range] = their min-max. ppl/token: exact for given (p(x|tags)) and self, the bound for beam. "
          f"'{GIVEN_ALONE}': given as the scorers before the structure engine ran it (the efficiency column beside).")
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
    p.add_argument("--data", help="scoring: a sipe-preprocess directory: score real sentences with --path")
    p.add_argument("--path", help="scoring: the checkpoint scored on --data")
    p.add_argument("--score-split", default="test", help="scoring: the split of --data (default test)")
    p.add_argument("--placement", default="first_subword", help="scoring, random model: the tag head placement")
    p.add_argument("--score-batch", type=int, default=256,
                   help="scoring: sentences per batch (default 256, as sipe-eval-lm; beam:K and mix:K at most 512/K)")
    p.add_argument("--score-top-pairs", type=int, nargs="*", default=[2, 3],
                   help="scoring: also beam:--score-prune-k pruned to the heads' top M pairs, for each M (default 2 3)")
    p.add_argument("--score-prune-k", type=int, default=16, help="scoring: the beam width of the pruned rows")
    p.add_argument("--score-given-alone", action="store_true",
                   help="scoring: also given with one full forward per sentence (how it ran before the engine)")
    p.add_argument("--score-copy-cache", nargs="*", default=[], metavar="SOURCE",
                   help="scoring: also these beam:K sources with every branching's KV cache copied per child (no shared "
                        "prefixes: modules/kv_cache.py)")
    p.add_argument("--score-sentences", type=int, default=64, help="scoring: sentences per round")
    p.add_argument("--score-words", type=int, default=20, help="scoring: mean words per sentence (1-3 subwords each)")
    p.add_argument("--score-sources", nargs="+", default=["self", "beam:1", "beam:4", "beam:16"],
                   help="scoring: tag sources of the position decoder besides given")
    p.add_argument("--score-rounds", type=int, default=3, help="scoring: measured rounds (after one unmeasured run)")
    a = p.parse_args()
    if a.quick:
        a.embed_dim, a.ffn, a.layers, a.tokens, a.repeats, a.warmup = 64, 256, 2, 64, 1, 0
        a.score_sentences, a.score_words, a.score_rounds, a.score_prune_k = 4, 8, 2, 4

    import torch
    import sipe_fairseq  # noqa: F401  (registers the models)
    from fairseq.data import Dictionary

    from sipe_fairseq.structure.sources import parse_source

    for src in a.score_sources:
        try:
            if parse_source(src).kind == "given":
                raise ValueError("given is always run")
        except ValueError as e:
            p.error(f"--score-sources {src}: {e}")
    if bool(a.data) != bool(a.path):
        p.error("--data and --path go together (real sentences scored by a checkpoint)")
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
