"""UAS of the spaCy backend on a UD CoNLL-U file with gold tokenization.

    python examples/tagger/spacy_ud_uas.py EWT_DIR/en_ewt-ud-test.conllu

Parses the gold (syntactic) words of every sentence with ``SpacyParser.parse_words`` and compares
the heads with (a) the original UD gold heads and (b) the projectivized gold heads
(``projectivize``, as used by ``sipe-preprocess`` / ``sipe-eval tagger``). Also reports
UAS by gold deprel and UAS excluding the relations whose head choice differs between UD
(content-word heads) and ClearNLP-style dependencies (function-word heads).
"""
import argparse
import json
import sys
import time
from collections import Counter

from sipe_fairseq.parsing import SpacyParser
from sipe_fairseq.hexatag import projectivize, read_conllu

FUNCTION_RELS = ("case", "cop", "aux", "aux:pass", "mark", "cc", "punct")


BE = {"be", "is", "am", "are", "was", "were", "been", "being", "'s", "'re", "'m", "s"}


def ud_like(doc):
    """Rough ClearNLP -> UD head conversion of one spaCy parse (1-based heads, 0 = root) for three
    constructions only: conj chains -> all conjuncts on the first one, cc -> the following conjunct;
    prep/agent + pobj -> pobj heads the phrase (preposition becomes its case dependent);
    be + attr/acomp -> the predicate heads the clause (copula and be's other dependents move to it)."""
    h = [t.head.i if t.head.i != t.i else -1 for t in doc]
    dep = [t.dep_ for t in doc]
    kids = lambda j: [i for i in range(len(h)) if h[i] == j]  # noqa: E731
    orig = list(h)
    for i in range(len(h)):  # conj: climb the chain
        if dep[i] == "conj":
            j = orig[i]
            while j >= 0 and dep[j] == "conj":
                j = orig[j]
            h[i] = j
    for i in range(len(h)):  # cc: to the next conjunct of the same head
        if dep[i] == "cc" and orig[i] >= 0:
            right = [c for c in range(i + 1, len(h)) if dep[c] == "conj" and (orig[c] == orig[i] or h[c] == orig[i])]
            if right:
                h[i] = right[0]
    for p in range(len(h)):  # prep + pobj
        if dep[p] in ("prep", "agent"):
            objs = [c for c in kids(p) if dep[c] in ("pobj", "pcomp")]
            if objs:
                c = objs[0]
                h[c], h[p] = h[p], c
                for x in kids(p):
                    if x != c:
                        h[x] = c
    for v in range(len(h)):  # copula
        if doc[v].lower_ in BE or doc[v].lemma_ == "be":
            preds = [c for c in kids(v) if dep[c] in ("attr", "acomp")]
            if preds:
                a = preds[0]
                h[a], h[v] = h[v], a
                for x in kids(v):
                    if x != a:
                        h[x] = a
    return [0 if x < 0 else x + 1 for x in h]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("conllu")
    p.add_argument("--model", default="")
    p.add_argument("--json")
    args = p.parse_args(argv)
    sents = list(read_conllu(args.conllu))
    words = [[w if w and not any(c.isspace() for c in w) else (w.replace(" ", "_") or "_") for w in s.words]
             for s in sents]
    n_ws = sum(a != b for s, ws in zip(sents, words) for a, b in zip(s.words, ws))
    parser = SpacyParser(args.model)
    parser.nlp  # load before timing
    t0 = time.perf_counter()
    pred = parser.parse_words(words)
    dt = time.perf_counter() - t0
    tot = Counter()
    per_rel = Counter()
    per_rel_ok = Counter()
    exact = Counter()
    for s, ph in zip(sents, pred):
        proj, _ = projectivize(s.heads)
        ok_o = [a == b for a, b in zip(ph, s.heads)]
        ok_p = [a == b for a, b in zip(ph, proj)]
        tot["words"] += len(ph)
        tot["orig"] += sum(ok_o)
        tot["proj"] += sum(ok_p)
        exact["orig"] += all(ok_o)
        exact["proj"] += all(ok_p)
        ge = {frozenset((i, h)) for i, h in enumerate(s.heads, 1) if h}
        pe = {frozenset((i, h)) for i, h in enumerate(ph, 1) if h}
        tot["undirected_gold_edges"] += len(ge)
        tot["undirected_shared"] += len(ge & pe)
        for rel, o, pp in zip(s.deprels, ok_o, ok_p):
            base = rel.split(":")[0] if rel not in FUNCTION_RELS else rel
            per_rel[base] += 1
            per_rel_ok[base] += o
            if rel not in FUNCTION_RELS:
                tot["content_words"] += 1
                tot["content_orig"] += o
                tot["content_proj"] += pp
            if rel not in FUNCTION_RELS + ("det",):
                tot["content_nodet_words"] += 1
                tot["content_nodet_orig"] += o
    from spacy.tokens import Doc
    conv_ok = conv_ok_content = 0
    conv_rel = Counter()
    for s, ws in zip(sents, words):
        doc = parser.nlp(Doc(parser.nlp.vocab, words=ws, sent_starts=[True] + [False] * (len(ws) - 1)))
        ch = ud_like(doc)
        for rel, a, b in zip(s.deprels, ch, s.heads):
            conv_ok += a == b
            conv_ok_content += (a == b) and rel not in FUNCTION_RELS
            conv_rel[rel.split(":")[0] if rel not in FUNCTION_RELS else rel] += a == b
    n = len(sents)
    res = {
        "file": args.conllu, "model": parser.spec, "sentences": n, "words": tot["words"],
        "words_with_whitespace_replaced": n_ws, "parse_seconds": round(dt, 2),
        "uas_original_gold": 100 * tot["orig"] / tot["words"],
        "uas_projectivized_gold": 100 * tot["proj"] / tot["words"],
        "exact_original_gold": 100 * exact["orig"] / n, "exact_projectivized_gold": 100 * exact["proj"] / n,
        "excluded_relations": list(FUNCTION_RELS),
        "words_excluding": tot["content_words"],
        "uas_excluding_original": 100 * tot["content_orig"] / tot["content_words"],
        "uas_excluding_projectivized": 100 * tot["content_proj"] / tot["content_words"],
        "uas_excluding_plus_det_original": 100 * tot["content_nodet_orig"] / tot["content_nodet_words"],
        "undirected_edge_overlap": 100 * tot["undirected_shared"] / tot["undirected_gold_edges"],
        "uas_after_rough_ud_conversion": 100 * conv_ok / tot["words"],
        "uas_after_rough_ud_conversion_excluding": 100 * conv_ok_content / tot["content_words"],
        "spacy_root_fixed_sentences": parser.stats["root_fixed_sentences"],
        "per_deprel": {r: {"words": per_rel[r], "uas": 100 * per_rel_ok[r] / per_rel[r],
                           "errors": per_rel[r] - per_rel_ok[r],
                           "uas_converted": 100 * conv_rel[r] / per_rel[r]}
                       for r in sorted(per_rel, key=lambda r: -(per_rel[r] - per_rel_ok[r]))},
    }
    print(f"{res['model']} on {args.conllu}: {n} sentences, {tot['words']} words, parse {dt:.1f}s")
    print(f"UAS vs original gold      {res['uas_original_gold']:.2f}  (exact {res['exact_original_gold']:.2f})")
    print(f"UAS vs projectivized gold {res['uas_projectivized_gold']:.2f}  (exact {res['exact_projectivized_gold']:.2f})")
    print(f"UAS excluding {','.join(FUNCTION_RELS)} ({tot['content_words']} words): "
          f"{res['uas_excluding_original']:.2f} (orig) / {res['uas_excluding_projectivized']:.2f} (proj); "
          f"also excluding det: {res['uas_excluding_plus_det_original']:.2f}")
    print(f"undirected edge overlap with original gold (non-root arcs, direction ignored): "
          f"{res['undirected_edge_overlap']:.2f}")
    print(f"after a rough ClearNLP->UD conversion (conj/cc, prep+pobj, copula): UAS "
          f"{res['uas_after_rough_ud_conversion']:.2f}; excluding the relations above "
          f"{res['uas_after_rough_ud_conversion_excluding']:.2f}")
    print("| gold deprel | words | UAS | head errors | share of all errors | UAS after rough conversion |")
    print("|---|---:|---:|---:|---:|---:|")
    errs = tot["words"] - tot["orig"]
    for r, d in list(res["per_deprel"].items())[:15]:
        share = 100 * d["errors"] / errs
        print(f"| {r} | {d['words']} | {d['uas']:.1f} | {d['errors']} | {share:.1f}% | {d['uas_converted']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
