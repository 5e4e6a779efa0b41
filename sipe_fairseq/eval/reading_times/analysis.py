"""From the scored sentences to the report: zone values, the regressions, the intervals, the tables."""
import math
from collections import Counter
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence

import numpy as np

from .align import MAX_UNALIGNED, align
from .compare import Design, group_of, paired
from .corpus import Corpus
from .predictors import BASELINE, STRUCTURAL, SURPRISAL, EXCLUSIONS, UnigramCounts, ZoneScore, build_table
from .regression import FOLDS, REPLICATES, bootstrap, delta_ll, design, fold_ids, interval, ols

SHOW_FAILURES = 5  # unaligned words named in the error line


@dataclass
class ScoredSentence:
    """What a model gave for one sentence: its words and per word surprisal (bits); the structure's surprisal
    and entropy per word when the scores carry them (else None); ``error``: why it was not scored;
    ``context_dropped``: preceding sentences left out of its context (the model's positions)."""
    words: Sequence[str]
    surprisal: Sequence[float]
    structure_surprisal: Optional[Sequence[float]] = None
    structure_entropy: Optional[Sequence[float]] = None
    error: Optional[str] = None
    context_dropped: int = 0


class AlignmentError(RuntimeError):
    """More than MAX_UNALIGNED of the zones unaligned (exit status 1), the first failures named."""


def zone_scores(corpus: Corpus, scored: Sequence[ScoredSentence]):
    """``({(item, zone): ZoneScore}, alignment report)``: each sentence's model words aligned to its zones; the
    report counts per story the unaligned zones and model words (and the unscored sentences) and lists them."""
    zones = {(z.item, z.zone): z for story in corpus.stories.values() for z in story}
    out, unaligned, per_story = {}, [], {}
    for k, (sentence, result) in enumerate(zip(corpus.sentences, scored)):
        keys = list(dict.fromkeys(sentence.zones))
        counts = per_story.setdefault(sentence.item, Counter())
        counts["zones"] += len(keys)
        if result.error is not None:
            counts["unaligned_zones"] += len(keys)
            counts["unscored_sentences"] += 1
            unaligned += [{"story": key[0], "zone": key[1], "word": zones[key].word, "sentence": k + 1,
                           "reason": f"sentence not scored: {result.error}"} for key in keys]
            continue
        a = align([(key, zones[key].word) for key in keys], result.words)
        counts["model_words"] += len(result.words)
        counts["unaligned_zones"] += len(a.unaligned_zones)
        counts["unaligned_model_words"] += len(a.unaligned_words)
        unaligned += [{"story": key[0], "zone": key[1], "word": text, "sentence": k + 1, "reason": why}
                      for key, text, why in a.unaligned_zones]
        unaligned += [{"story": sentence.item, "model_word": i + 1, "word": text, "sentence": k + 1, "reason": why}
                      for i, text, why in a.unaligned_words]
        for key, idx in a.zone_words.items():
            ss = None if result.structure_surprisal is None else sum(result.structure_surprisal[i] for i in idx)
            se = None if result.structure_entropy is None else result.structure_entropy[idx[-1]]
            out[key] = ZoneScore(sum(result.surprisal[i] for i in idx), [result.words[i] for i in idx], ss, se)
    stories = {item: {c: v.get(c, 0) for c in ("zones", "model_words", "unaligned_zones", "unaligned_model_words",
                                                "unscored_sentences")} for item, v in sorted(per_story.items())}
    n = sum(s["zones"] for s in stories.values())
    bad = sum(s["unaligned_zones"] for s in stories.values())
    report = {"zones": n, "unaligned_zones": bad, "unaligned_fraction": bad / n if n else 0.0,
              "unaligned_model_words": sum(s["unaligned_model_words"] for s in stories.values()),
              "per_story": stories, "unaligned": unaligned}
    return out, report


def check_alignment(report: dict, where: str) -> None:
    """:class:`AlignmentError` when more than MAX_UNALIGNED of the zones are unaligned."""
    if report["unaligned_fraction"] > MAX_UNALIGNED:
        first, seen = [], set()
        for u in report["unaligned"]:  # one per sentence: the first few sentences that fail
            if (u["story"], u["sentence"]) in seen or len(first) == SHOW_FAILURES:
                continue
            seen.add((u["story"], u["sentence"]))
            reason = u["reason"] if len(u["reason"]) <= 120 else u["reason"][:117] + "..."
            first.append(f"story {u['story']} sentence {u['sentence']} {u['word']!r} ({reason})")
        raise AlignmentError(f"{where}: {report['unaligned_zones']} of {report['zones']} words unaligned "
                             f"({100 * report['unaligned_fraction']:.2f}%, more than {100 * MAX_UNALIGNED:g}%); first: "
                             + "; ".join(first))


def perplexity(scored: Sequence[ScoredSentence]) -> Optional[float]:
    """2 ** (mean word surprisal) over the scored sentences' words (``</s>`` is not a word)."""
    bits = [s for r in scored if r.error is None for s in r.surprisal]
    return 2 ** (sum(bits) / len(bits)) if bits else None


def analyse(corpus: Corpus, scores: Mapping, counts: UnigramCounts, structural: bool = False, folds: int = FOLDS,
            replicates: int = REPLICATES, seed: int = 0) -> dict:
    """The regressions of one model and source: ΔLL per word of surprisal over the baseline (and of the
    structural predictors over baseline + surprisal), held out over ``folds``, with bootstrap 95% intervals."""
    table = build_table(corpus.stories, scores, counts, structural)
    out = {"words": len(table), "excluded": table.excluded, "excluded_per_story": table.excluded_per_story,
           "stories": int(len(np.unique(table.story))), "folds": folds, "replicates": replicates, "seed": seed}
    names = list(BASELINE + SURPRISAL + (STRUCTURAL if structural else ()))
    if len(table) <= len(names) + 1 or out["stories"] < 2:
        out["error"] = f"{len(table)} words in {out['stories']} stories kept: too few for {len(names) + 1} coefficients"
        return out
    X, y = design(table.columns, names), table.rt
    fid = fold_ids(len(y), folds, seed)
    nb, ns = 1 + len(BASELINE), 1 + len(BASELINE) + len(SURPRISAL)
    comparisons = {"surprisal": (list(range(nb)), list(range(ns)))}
    if structural:
        comparisons["structural"] = (list(range(ns)), list(range(len(names) + 1)))
    draws = bootstrap(X, y, table.story, comparisons, fid, replicates, seed)
    out["delta_ll"] = {}
    for name, (small, large) in comparisons.items():
        est, per_word = delta_ll(X[:, small], X[:, large], y, fid)
        per_story = {int(s): float(per_word[table.story == s].mean()) for s in np.unique(table.story)}
        out["delta_ll"][name] = {"estimate": est, "ci95": interval(draws[name]), "per_story": per_story}
    beta = ols(X, y)
    out["coefficients_ms"] = dict(zip(["intercept"] + names, map(float, beta)))
    return out


def _num(x, digits=4):
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def _cell(d: Optional[dict]) -> str:
    if not d:
        return "n/a"
    ci = d.get("ci95")
    return f"{1000 * d['estimate']:.2f} [{1000 * ci[0]:.2f}, {1000 * ci[1]:.2f}]" if ci else f"{1000 * d['estimate']:.2f}"


def markdown(rows: List[dict], counts: dict, structural: bool) -> str:
    """The table of every checkpoint and source, and the lines that say how it was measured."""
    head = "| checkpoint | source | scoring | ppl/word | words kept | unaligned | ΔLL surprisal ×10⁻³ [95%] |"
    rule = "|---|---|---|---:|---:|---:|---:|"
    if structural:
        head, rule = head + " ΔLL structure ×10⁻³ [95%] |", rule + "---:|"
    lines = [head, rule]
    for r in rows:
        a = r["analysis"]
        structure = a.get("delta_ll", {}).get("structural") if r.get("structure_scores") else None
        cells = [r["checkpoint"], r["source"], r["scoring"], _num(r["perplexity_per_word"], 2), str(a.get("words", 0)),
                 f"{r['alignment']['unaligned_zones']}/{r['alignment']['zones']}",
                 _cell(a.get("delta_ll", {}).get("surprisal"))]
        if structural:
            cells.append(_cell(structure) if r.get("structure_scores") else
                         f"none under {r['source']}" if r.get("reads_structure") else "no structure")
        lines.append("| " + " | ".join(cells) + " |")
    first = rows[0]["analysis"] if rows else {}
    excluded = ", ".join(f"{k}: {v}" for k, v in first.get("excluded", {}).items())
    lines += ["", f"ΔLL: held-out Gaussian log-likelihood per word (nats ×10⁻³), {first.get('folds')} folds; surprisal "
                  "at t, t-1, t-2 over the baseline (length and log frequency at t, t-1, t-2; position in the sentence)"
                  + ("; structure surprisal and entropy at t, t-1 over baseline + surprisal" if structural else "")
                  + f". 95% interval: {first.get('replicates')} bootstrap replicates (stories, then words within them; "
                    f"seed {first.get('seed')}).",
              f"Excluded words (first row; {len(EXCLUSIONS)} rules, in order): {excluded}.",
              "ppl/word: 2 ** the mean word surprisal over the scored words (</s> not counted); unaligned: words the "
              "model's words do not cover (listed in the JSON).",
              f"Log frequency: {counts.get('source')} ({counts.get('tokens')} words, {counts.get('types')} types; "
              f"{counts.get('formula')})."]
    return "\n".join(lines) + "\n"


def structure_fields_present(scored: Sequence[ScoredSentence]) -> bool:
    ok = [r for r in scored if r.error is None]
    return bool(ok) and all(r.structure_surprisal is not None and r.structure_entropy is not None for r in ok)


def design_of(corpus: Corpus, scores: Mapping, counts: UnigramCounts, structural: bool = False) -> Design:
    """The regression data of one model and source (the kept words; columns: intercept, BASELINE, SURPRISAL and,
    with ``structural``, STRUCTURAL), for the comparisons over seeds (:mod:`.compare`)."""
    table = build_table(corpus.stories, scores, counts, structural)
    names = list(BASELINE + SURPRISAL + (STRUCTURAL if structural else ()))
    return Design(design(table.columns, names), table.rt, table.story,
                  list(zip(table.story.tolist(), table.zone.tolist())))


def compare_groups(rows: List[dict], designs: Mapping, baseline: Optional[str], replicates: int, seed: int = 0,
                   folds: int = FOLDS) -> List[dict]:
    """The paired comparisons over seeds (:mod:`.compare`): every group's ΔLL of surprisal against the
    ``baseline`` group's under the same source, and every group's structural ΔLL where each of its seeds has
    one. ``designs[(checkpoint, source)]``: ``{"surprisal": Design, "structural": Design or None}``."""
    groups: dict = {}
    for r in rows:
        name, s = group_of(r["checkpoint"])
        groups.setdefault((name, r["source"]), {})[0 if s is None else s] = (r["checkpoint"], r)
    nb, ns = 1 + len(BASELINE), 1 + len(BASELINE) + len(SURPRISAL)
    out = []
    for (name, source), members in groups.items():
        if baseline is not None and name != baseline and (baseline, source) in groups:
            mine = {s: designs[(ck, source)]["surprisal"] for s, (ck, _) in members.items()}
            theirs = {s: designs[(ck, source)]["surprisal"] for s, (ck, _) in groups[(baseline, source)].items()}
            result = paired(mine, theirs, list(range(nb)), list(range(ns)), replicates, seed, folds)
            out.append({"group": name, "source": source, "measure": "surprisal", "against": baseline, **result})
        if all(r.get("structure_scores") for _, r in members.values()):
            mine = {s: designs[(ck, source)]["structural"] for s, (ck, _) in members.items()}
            result = paired(mine, None, list(range(ns)), list(range(ns + len(STRUCTURAL))), replicates, seed, folds)
            out.append({"group": name, "source": source, "measure": "structural", "against": None, **result})
    return out


def markdown_paired(comparisons: List[dict]) -> str:
    """The table of the comparisons over seeds."""
    lines = ["| group | source | ΔLL of | against | seeds | words | mean ×10⁻³ | items 95% | seeds 95% | verdict |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---|"]

    def ci(v):
        return "n/a" if not v else f"[{1000 * v[0]:.2f}, {1000 * v[1]:.2f}]"
    for c in comparisons:
        if "error" in c:
            lines.append(f"| {c['group']} | {c['source']} | {c['measure']} | {c['against'] or '-'} | 0 | 0 | n/a | n/a | "
                         f"n/a | {c['error']} |")
            continue
        verdict = c["verdict"] + (f" (bound {1000 * c['equivalence_bound']:.2f})" if c.get("equivalence_bound") else "")
        lines.append(f"| {c['group']} | {c['source']} | {c['measure']} | {c['against'] or '-'} | {len(c['seeds'])} | "
                     f"{c['words']} | {1000 * c['mean']:.2f} | {ci(c['ci95_items'])} | {ci(c['ci95_seeds'])} | {verdict} |")
    lines += ["", "Paired over seeds (the rule of sipe-eval seeds): surprisal: the group's ΔLL minus the baseline "
                  "group's, seed s with seed s; structural: the group's ΔLL of the structural predictors. Both on the "
                  "words every seed of both sides keeps; items: bootstrap (stories, then words; the same draw for "
                  "every seed and side); seeds: Student's t. A verdict needs two seeds and both intervals on one side "
                  "of 0 (higher is better); bound: the largest difference the data exclude."]
    return "\n".join(lines) + "\n"
