"""SyntaxGym under ``--num-shards N --shard-id I`` (:mod:`sipe_fairseq.eval.shards`): the items are numbered
across the suites in their order (suite by suite, each suite's items in file order); a shard scores the items its
index selects, and ``sipe-eval merge`` joins the shards' item rows into the report of one run, the suite and
overall scores computed from the item rows by the code of the run itself (:func:`.scoring.suite_scores`,
:func:`.scoring.overall_scores`)."""
from dataclasses import replace
from typing import Dict, List, Sequence

from ..shards import sum_counts
from .scoring import overall_scores, suite_scores
from .suites import Suite

COUNTED = ("items", "compared", "differ", "heads_differ", "not_compared", "common_prefix_differ")


def item_count(suites: Sequence[Suite]) -> int:
    return sum(len(s.items) for s in suites)


def share_of(suites: Sequence[Suite], indices: Sequence[int]) -> List[Suite]:
    """The suites with only the items at ``indices`` (numbered across the suites); every suite is kept, an empty
    one too (its scores come from the merge)."""
    keep, out, start = set(indices), [], 0
    for suite in suites:
        out.append(replace(suite, items=[it for k, it in enumerate(suite.items) if start + k in keep]))
        start += len(suite.items)
    return out


def shard_records(suites: Sequence[Suite], indices: Sequence[int], report: dict) -> dict:
    """What a merge needs: the whole suites' settings (their item counts), each item row's index, and the shard's
    report (its item rows: per column the predictions' outcomes and the region surprisals)."""
    return {"suites": {s.name: {"path": s.path, "items": len(s.items), "predictions": [p.formula for p in s.predictions],
                                "region_meta": s.region_meta} for s in suites},
            "item_index": list(indices), "report": report}


def merge_shard_records(records: Sequence[dict]) -> dict:
    """One ``sipe-syntaxgym/1`` report from the shards' :func:`shard_records` (in shard order): the item rows in
    the run's order, the suite and overall scores recomputed from them, the parser's counts and the given tags'
    prefix differences summed over the shards."""
    first = records[0]["report"]
    indexed = sorted(((i, row) for rec in records for i, row in zip(rec["item_index"], rec["report"]["items"])),
                     key=lambda x: x[0])
    order = {(row["suite"], row["item"]): i for i, row in reversed(indexed)}
    names = first["models"]
    report = dict(first, items=[row for _, row in indexed])
    report["suites"] = {}
    for name, meta in records[0]["suites"].items():
        rows = [row for row in report["items"] if row["suite"] == name]
        report["suites"][name] = {**meta, "scores": suite_scores(rows, names, len(meta["predictions"]))}
    report["overall"] = overall_scores(report["suites"], names)
    if "tree_source" in first:
        report["tree_source"] = sum_counts([rec["report"]["tree_source"] for rec in records])
    if "prefix_tag_differences" in first:
        report["prefix_tag_differences"] = _merge_differences([rec["report"]["prefix_tag_differences"] for rec in records],
                                                              order)
    return report


def _merge_differences(parts: Sequence[dict], order: Dict[tuple, int]) -> dict:
    """:func:`.scoring.prefix_tag_differences` of the whole run from the shards' (every count is a sum over items)."""
    out = {key: sum(p[key] for p in parts) for key in COUNTED}
    out["suites"] = {}
    for name, row in parts[0]["suites"].items():
        out["suites"][name] = {key: (sum(p["suites"][name][key] for p in parts) if key in COUNTED else value)
                               for key, value in row.items()}
    out["list"] = sorted((d for p in parts for d in p["list"]), key=lambda d: order.get((d["suite"], d["item"]), -1))
    return out
