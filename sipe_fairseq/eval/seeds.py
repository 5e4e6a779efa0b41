"""Mean and spread over seeds of ``sipe-eval-lm --json`` reports (section 5).

    sipe-eval seeds runs/ewt/section5/*.json [--per word] [--markdown table.md] [--json table.json]

Every report holds one or more named rows (``--path NAME=CKPT``). Rows whose names differ only by a
seed suffix (``NAME-s1``, ``NAME-s2``, ...; ``--seed-suffix`` sets the pattern) form one group; for each
group and score the table shows ``mean ± sd`` (sample standard deviation over seeds) and, beside it,
``[min, max]`` and the number of seeds. Scores:

* ``blocks p(x|tags)``: the conditional perplexity of ``sipe-eval-lm`` without ``--tags`` (blocks of
  complete sentences, what ``fairseq-eval-lm`` prints);
* one column per tag source of ``--tags`` (every sentence scored alone): ``given`` (conditional),
  ``given-joint`` (joint bound), ``self`` (exact), ``beam:K`` (bound), as
  :func:`~sipe_fairseq.eval.prefix_scores.markdown_tag_sources` names them.

``sipe-eval blimp --json`` and ``sipe-eval syntaxgym --json`` reports may be given too (``blimp-s1.json``:
the seed is the file's suffix): each column ``NAME`` / ``NAME [SOURCE]`` adds the overall accuracy (%) as
score ``BLiMP SOURCE`` / ``SyntaxGym SOURCE`` to row ``NAME-sSEED`` (BLiMP: mean over pairs; SyntaxGym: mean
over suites), so one table holds a model's perplexities and its accuracies.

A group missing a score in some seeds shows the seeds it has (n); a report that cannot be read is one
line naming the file and exit status 2.
"""
import json
import os
import logging
import re
import statistics
from collections import OrderedDict
from typing import Dict, List, Sequence

from ..structure.sources import split_label
from .tables import table as markdown_table

logger = logging.getLogger(__name__)

BLOCKS = "blocks p(x|tags)"


class SeedsError(ValueError):
    pass


def read_reports(paths: Sequence[str], suffix: str = r"-s(\d+)$") -> "OrderedDict[str, dict]":
    """``{row name: row}`` over all reports, in the order given; a score seen twice for a name is an error. A row
    whose name has no seed suffix, in a file whose name has one (``position`` in ``position-s2.json``,
    as ``examples/ewt/section5.sh`` writes them), takes the file's suffix."""
    rows = OrderedDict()
    pattern = re.compile(suffix)
    for path in paths:
        try:
            with open(path) as f:
                report = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise SeedsError(f"{path}: not a sipe-eval-lm --json report ({e})") from None
        if not isinstance(report, dict):
            raise SeedsError(f"{path}: not a sipe-eval-lm, blimp or syntaxgym --json report (expected an object)")
        stem = re.sub(r"\.json$", "", os.path.basename(path))
        seed = pattern.search(stem)
        suite = suite_rows(report)
        if suite is None and not all(isinstance(r, dict) for r in report.values()):
            raise SeedsError(f"{path}: not a sipe-eval-lm, blimp or syntaxgym --json report")
        for name, row in (suite or report).items():
            if seed and not pattern.search(name):
                name = name + seed.group(0)
            if name in rows:  # a model's perplexities and its suite accuracies merge; the same score twice is an error
                old = rows[name]
                if (set(old) & set(row)) - {"suites"} or set(old.get("suites", {})) & set(row.get("suites", {})):
                    raise SeedsError(f"{path}: row {name!r} also in an earlier report")
                suites = {**old.get("suites", {}), **row.get("suites", {})}
                old.update(row)
                if suites:
                    old["suites"] = suites
                continue
            rows[name] = dict(row)
    return rows


def suite_rows(report: dict):
    """``{NAME: {"suites": {"BLiMP given": %, ...}}}`` of a BLiMP or SyntaxGym report, None for others."""
    if not ("models" in report or "suites" in report) or not isinstance(report.get("overall"), dict):
        return None
    if "paradigms" in report:  # sipe-eval blimp: overall accuracy over pairs, in %
        kind, accuracy = "BLiMP", dict(report["overall"]["accuracy"])
    else:  # sipe-eval syntaxgym: mean over suites, a fraction
        kind = "SyntaxGym"
        accuracy = {col: (None if r["accuracy"] is None else 100.0 * r["accuracy"]) for col, r in report["overall"].items()}
    rows = OrderedDict()
    for col, acc in accuracy.items():
        if acc is None:
            continue
        name, source = split_label(col)
        rows.setdefault(name, {"suites": {}})["suites"][f"{kind} {source}"] = acc
    return rows


def row_scores(row: dict, per: str = "token") -> Dict[str, float]:
    """Perplexities of one ``sipe-eval-lm`` row: ``BLOCKS`` and one per tag source."""
    out = {}
    key = "lm" if per == "token" else "lm.per_word"
    if key in row and isinstance(row[key], dict):
        out[BLOCKS] = row[key]["ppl"]
    for source, r in (row.get("tag_sources") or {}).items():
        out[source] = r["ppl"] if per == "token" else r["ppl_per_word"]
    out.update(row.get("suites") or {})
    return out


def group_by_seed(names: Sequence[str], suffix: str = r"-s(\d+)$") -> "OrderedDict[str, List[str]]":
    """``{"position": ["position-s1", "position-s2"], ...}``; a name without the suffix is its own group."""
    pattern = re.compile(suffix)
    groups = OrderedDict()
    for name in names:
        groups.setdefault(pattern.sub("", name), []).append(name)
    return groups


def aggregate(rows: "OrderedDict[str, dict]", per: str = "token", suffix: str = r"-s(\d+)$") -> "OrderedDict[str, dict]":
    """``{group: {score: {"mean", "sd", "min", "max", "n", "seeds"}}}``; ``sd`` is nan for one seed."""
    out = OrderedDict()
    for group, names in group_by_seed(list(rows), suffix).items():
        per_score = OrderedDict()
        for name in names:
            for score, value in row_scores(rows[name], per).items():
                per_score.setdefault(score, []).append((name, value))
        out[group] = OrderedDict()
        for score, pairs in per_score.items():
            values = [v for _, v in pairs]
            out[group][score] = {"mean": statistics.fmean(values),
                                 "sd": statistics.stdev(values) if len(values) > 1 else float("nan"),
                                 "min": min(values), "max": max(values), "n": len(values),
                                 "seeds": [n for n, _ in pairs]}
    return out


def _cell(s: dict) -> str:
    if s["n"] == 1:
        return f"{s['mean']:.2f} (1 seed)"
    return f"{s['mean']:.2f} ± {s['sd']:.2f} [{s['min']:.2f}, {s['max']:.2f}] (n={s['n']})"


def _score_order(score: str):
    """blocks, given, given-joint, self, then beam:K and beam-word:K by K (the JSON keeps keys sorted),
    then the BLiMP and SyntaxGym accuracies in the same order of sources."""
    fixed = [BLOCKS, "given", "given-joint", "self"]
    suite = 0
    for i, kind in enumerate(("BLiMP ", "SyntaxGym "), 1):
        if score.startswith(kind):
            suite, score = i, score[len(kind):]
    if score in fixed:
        return (suite, fixed.index(score), 0, "")
    kind, _, k = score.partition(":")
    return (suite, len(fixed) + (kind != "beam"), int(k) if k.isdigit() else 0, score)


def seeds_markdown(table: "OrderedDict[str, dict]", per: str = "token") -> str:
    scores = []
    for group in table.values():
        scores += [s for s in group if s not in scores]
    scores.sort(key=_score_order)
    suites_only = bool(scores) and all(s.startswith(("BLiMP ", "SyntaxGym ")) for s in scores)
    lines = markdown_table(["accuracy %" if suites_only else f"perplexity per {per}", *scores],
                           [[name, *(_cell(group[s]) if s in group else "-" for s in scores)] for name, group in table.items()])
    lines.append("")
    lines.append("mean ± sample sd over seeds [min, max] (n seeds). "
                 f"{BLOCKS}: blocks of complete sentences; the tag-source columns score every sentence alone"
                 + ("; BLiMP / SyntaxGym: overall accuracy in % (pairs / mean over suites) under each tag source."
                    if any(s.startswith(("BLiMP ", "SyntaxGym ")) for s in scores) else "."))
    return "\n".join(lines)
