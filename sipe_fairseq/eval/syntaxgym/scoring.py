"""SyntaxGym scoring: region surprisals of encoded sentences under a checkpoint, and the
evaluation of every suite's predictions on them (suite and overall accuracies)."""
import json
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ...hexatag.errors import NonFiniteScoreError
from ...structure.options import BATCH_SENTENCES
from ...structure.sentences import too_long
from .formula import EQUALITY_ATOL, EQUALITY_RTOL, evaluate_formula
from .suites import SuiteSentence, Suite

LN2 = math.log(2.0)


def region_token_spans(sentence: SuiteSentence) -> List[Tuple[int, int, int]]:
    """``(region number, first token, end token)`` per region; the final ``</s>`` is in none."""
    toks, _, _, firsts = sentence.encoded
    bounds = list(firsts) + [len(toks) - 1]
    return [(num, bounds[a], bounds[b]) for num, a, b in sentence.condition.spans()]


def region_surprisals(sentence: SuiteSentence, logprobs) -> Dict[int, float]:
    """Region number -> summed ``-log2 p`` of its tokens, from natural-log token probabilities."""
    lp = [float(x) for x in logprobs]
    return {num: (0.0 - sum(lp[a:b])) / LN2 for num, a, b in region_token_spans(sentence)}  # empty: 0.0, not -0.0


def score_regions(model, sentences: Sequence[SuiteSentence], eos: int, pad: int,
                    batch_size: int = BATCH_SENTENCES, logprob_fn: Optional[Callable] = None):
    """Region surprisals per sentence (``None`` with a reason for those it cannot score):
    returns ``(surprisals, failures)`` as lists aligned with ``sentences``. ``logprob_fn``: the column's
    per-token log-probabilities (:func:`~sipe_fairseq.eval.syntaxgym.columns.engine_logprobs`); one with
    ``wants_heads`` (GiLT ``given``: the parse as a graph) also gets each sentence's tree (``heads=``). A score that
    is not finite: :class:`~sipe_fairseq.hexatag.errors.NonFiniteScoreError` naming the sentence."""
    if logprob_fn is None:
        raise ValueError("score_regions: no logprob_fn (a column's per-token scores: syntaxgym.columns.engine_logprobs)")
    failures = [s.failure if s.failure is not None else too_long(model, len(s.encoded[0])) for s in sentences]
    todo = [k for k, f in enumerate(failures) if f is None]
    kwargs = {"heads": [sentences[k].heads for k in todo]} if getattr(logprob_fn, "wants_heads", False) else {}
    try:
        lps = logprob_fn(model, [sentences[k].encoded[:3] for k in todo], eos, pad, batch_size, **kwargs) if todo else []
    except NonFiniteScoreError as e:  # named by its suite, item, condition and text: nothing is counted
        if e.index is None:
            raise
        s = sentences[todo[e.index]]
        raise e.naming(f"suite {s.suite} item {s.item} condition {s.condition.name}: sentence "
                       f"{' '.join(s.words)!r}") from None
    out: List[Optional[Dict[int, float]]] = [None] * len(sentences)
    for k, lp in zip(todo, lps):
        out[k] = region_surprisals(sentences[k], lp)
    return out, failures


# ----------------------------------------------------------------------------- evaluation


def evaluate_suites(suites: Sequence[Suite], sentences: Sequence[SuiteSentence], models: Dict[str, Tuple[object, int, int]],
                    batch_size: int = BATCH_SENTENCES, atol: float = EQUALITY_ATOL, rtol: float = EQUALITY_RTOL,
                    logprob_fn: Optional[Callable] = None) -> dict:
    """Score the (parsed, encoded) sentences under every model ``{name: (model, eos, pad)}`` (or a
    zero-argument callable returning that triple, so models are loaded one at a time; a fourth
    element is that column's own ``logprob_fn``, e.g. a ``--tags`` source) and evaluate
    the predictions. Returns the report (see :func:`report_markdown`)."""
    index = {(s.suite, s.item, s.condition.name): k for k, s in enumerate(sentences)}
    names = list(models)
    per_model = {}
    for name in names:
        spec = models[name]
        model, eos, pad, *own_fn = spec() if callable(spec) else spec  # (model, eos, pad[, logprob_fn of this column])
        try:
            per_model[name] = score_regions(model, sentences, eos, pad, batch_size, own_fn[0] if own_fn else logprob_fn)
        except NonFiniteScoreError as e:  # the column too
            raise NonFiniteScoreError(f"{name}: {e}", e.index, e.source, e.detail) from None
        del model
    report = {"format": "sipe-syntaxgym/1", "models": names, "unit": "bits",
              "equality": {"atol": atol, "rtol": rtol}, "suites": {}, "items": [], "overall": {}}
    for suite in suites:
        srow = {"path": suite.path, "items": len(suite.items), "predictions": [p.formula for p in suite.predictions],
                "region_meta": suite.region_meta, "scores": {}}
        rows = []
        for item in suite.items:
            keys = {c: index[(suite.name, item.number, c)] for c in item.conditions}
            irow = {"suite": suite.name, "item": item.number,
                    "sentences": {c: " ".join(sentences[k].words) for c, k in keys.items()},
                    "results": {}}
            for name in names:
                surps, fails = per_model[name]
                bad = {c: fails[k] for c, k in keys.items() if fails[k] is not None}
                if bad:
                    irow["results"][name] = {"scored": False, "reasons": bad}
                    continue
                values = {c: surps[k] for c, k in keys.items()}
                preds = [evaluate_formula(p.node, values, atol, rtol) for p in suite.predictions]
                irow["results"][name] = {"scored": True, "pass": all(preds), "predictions": preds,
                                         "surprisals": {c: {str(r): v for r, v in regs.items()} for c, regs in values.items()}}
            rows.append(irow)
        report["items"] += rows
        srow["scores"] = suite_scores(rows, names, len(suite.predictions))
        report["suites"][suite.name] = srow
    report["overall"] = overall_scores(report["suites"], names)
    return report


def suite_scores(item_rows: Sequence[dict], names: Sequence[str], n_predictions: int) -> Dict[str, dict]:
    """A suite's scores per column from its items' rows (``report["items"]``, in the suite's order): the share of
    scored items that pass, per prediction, and the unscored items with their reasons. Used by
    :func:`evaluate_suites` and by ``sipe-eval merge`` on shards' items."""
    out = {}
    for name in names:
        passed, scored, unscored, prediction_passed = 0, 0, [], [0] * n_predictions
        for irow in item_rows:
            res = irow["results"][name]
            if not res["scored"]:
                unscored += [{"item": irow["item"], "condition": c, "reason": r} for c, r in res["reasons"].items()]
                continue
            scored += 1
            passed += int(res["pass"])
            for j, v in enumerate(res["predictions"]):
                prediction_passed[j] += int(v)
        out[name] = {"accuracy": passed / scored if scored else None, "passed": passed, "scored": scored,
                     "unscored_items": len({u["item"] for u in unscored}), "unscored": unscored,
                     "prediction_accuracy": [p / scored if scored else None for p in prediction_passed],
                     "predictions_evaluated": scored * n_predictions}
    return out


def overall_scores(suites: Dict[str, dict], names: Sequence[str]) -> Dict[str, dict]:
    """Per column the mean over the suites' accuracies (suites that scored no item left out, counted)."""
    out = {}
    for name in names:
        accs = [s["scores"][name]["accuracy"] for s in suites.values()]
        scored = [a for a in accs if a is not None]
        out[name] = {"accuracy": sum(scored) / len(scored) if scored else None,
                     "suites": len(scored), "suites_unscored": len(accs) - len(scored)}
    return out


def merge_reports(reports: Sequence[dict]) -> dict:
    """One ``sipe-syntaxgym/1`` report from per-model reports of :func:`evaluate_suites` on the same
    suites and sentences (as ``sipe-eval report`` scores one checkpoint at a time)."""
    out = json.loads(json.dumps(reports[0]))
    for rep in reports[1:]:
        out["models"] += rep["models"]
        out["overall"].update(rep["overall"])
        for sname, s in rep["suites"].items():
            out["suites"][sname]["scores"].update(s["scores"])
        for mine, theirs in zip(out["items"], rep["items"]):
            mine["results"].update(theirs["results"])
    return out


# ----------------------------------------------------------------------------- given tags' leak
def critical_region(suite: Suite) -> Optional[int]:
    """The suite's critical region: the lowest region number a prediction refers to (``*``
    references excluded), or None when no prediction names a region."""
    numbers = [r.region for p in suite.predictions for r in p.node.refs() if r.region is not None]
    return min(numbers) if numbers else None


def _prefix(sentence: SuiteSentence, critical: int):
    """(words, tag pairs per word, parser heads per word or None) of the regions before ``critical``
    in the condition's order, or None when the condition lacks that region or the sentence has no
    encoding."""
    regions = [r.number for r in sentence.condition.regions]
    if critical not in regions or sentence.encoded is None:
        return None
    _, terms, nts, firsts = sentence.encoded
    n = sum(len(r.words) for r in sentence.condition.regions[:regions.index(critical)])
    heads = None if sentence.heads is None else tuple(sentence.heads[:n])
    return tuple(sentence.words[:n]), tuple((int(terms[q]), int(nts[q])) for q in firsts[:n]), heads


def _common_prefix_differs(prefixes) -> bool:
    """Whether two of the ``(words, tags)`` prefixes tag their longest common initial words differently."""
    for i, (wa, ta, _) in enumerate(prefixes):
        for wb, tb, _ in prefixes[i + 1:]:
            n = 0
            while n < min(len(wa), len(wb)) and wa[n] == wb[n]:
                n += 1
            if ta[:n] != tb[:n]:
                return True
    return False


def prefix_tag_differences(suites: Sequence[Suite], sentences: Sequence[SuiteSentence]) -> dict:
    """Items whose conditions have identical words before the critical region
    (:func:`critical_region`) but different given tags on them: with tags from a parse of the
    whole sentence the model sees information from the critical region and after.
    Returns counts per suite and the list (suite, item, the conditions, the first differing word).
    Conditions are grouped by their prefix words; items without a critical region, and
    conditions that lack it or could not be encoded, are counted as not compared.

    What ``differ`` compares: the hexatag pair (terminal, non-terminal) of each word before the
    critical region's first word -- the tags the model has been given when it predicts the
    region's first token. ``heads_differ`` counts, among the same compared items, those where
    the parser's dependency heads of those words differ. The two need not go together: a head at
    or after the critical region (a subject attached to the verb, or to a later word) changes no
    tag before it, so the model's input before the region can be identical while the parses
    differ; and a later word's attachment can change an earlier word's tags with its head unchanged.
    ``common_prefix_differ`` counts more broadly the items where some two conditions tag a shared
    initial run of words (before the critical region, however long) differently."""
    by_key = {(s.suite, s.item, s.condition.name): s for s in sentences}
    out = {"items": 0, "compared": 0, "differ": 0, "heads_differ": 0, "not_compared": 0, "common_prefix_differ": 0,
           "suites": {}, "list": []}
    for suite in suites:
        crit = critical_region(suite)
        row = {"items": len(suite.items), "compared": 0, "differ": 0, "heads_differ": 0, "common_prefix_differ": 0,
               "critical_region": crit}
        for item in suite.items:
            out["items"] += 1
            groups: Dict[tuple, List[Tuple[str, tuple]]] = {}
            heads: Dict[tuple, set] = {}
            prefixes = []
            for cname in item.conditions:
                pre = None if crit is None else _prefix(by_key[(suite.name, item.number, cname)], crit)
                if pre is not None:
                    groups.setdefault(pre[0], []).append((cname, pre[1]))
                    heads.setdefault(pre[0], set()).add(pre[2])
                    prefixes.append(pre)
            if _common_prefix_differs(prefixes):
                row["common_prefix_differ"] += 1
            shared = [g for g in groups.values() if len(g) > 1]
            if not shared:
                out["not_compared"] += 1
                continue
            row["compared"] += 1
            row["heads_differ"] += any(len(heads[w]) > 1 for w, g in groups.items() if len(g) > 1)
            for words, g in ((w, g) for w, g in groups.items() if len(g) > 1):
                if len({tags for _, tags in g}) > 1:
                    first = min(k for k in range(len(words)) if len({tags[k] for _, tags in g}) > 1)
                    row["differ"] += 1
                    out["list"].append({"suite": suite.name, "item": item.number, "conditions": [c for c, _ in g],
                                        "prefix": " ".join(words), "first_differing_word": first + 1,
                                        "word": words[first]})
                    break
        for key in ("compared", "differ", "heads_differ", "common_prefix_differ"):
            out[key] += row[key]
        out["suites"][suite.name] = row
    return out
