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

Before it averages, :func:`check_groups` compares what the rows of a group were scored on: each
``sipe-eval-lm`` row records (``run``) its ``split``, the split's ``sentences``, the ``data`` directory and
the checkpoint's ``arch`` and ``injection``, and each tag source the sentences it scored. Rows that differ in
any are refused (exit status 2, naming the field and both rows) unless ``--allow-mixed``. Rows from reports
written before ``run`` was recorded (and BLiMP/SyntaxGym rows alone) cannot be checked: one warning names
them. A score that is missing or not finite in a report is refused (exit status 2), as are a report without a row
and impossible numbers (a perplexity below 1, an accuracy outside 0-100: :func:`score_problem`).

With ``--baseline``, each row is paired with the baseline's row of the same seed only when both were scored on
the same split, sentences and data (:func:`check_baseline`, the check of ``sipe-eval scale`` too): otherwise one
line naming the field and both rows, exit status 2 (``--allow-mixed``: a warning).
"""
import json
import math
import os
import logging
import re
import statistics
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

from ...structure.sources import Given, parse_source, split_label
from .paired import REPLICATES, Items, paired_difference
from .tables import table as markdown_table

logger = logging.getLogger(__name__)

BLOCKS = "blocks p(x|tags)"
SEED_SUFFIX = r"-s(\d+)$"  # a row name's seed suffix (NAME-s1): the default of every --seed-suffix
SUITE_KEYS = ("suites", "suite_items")  # what a model's suite reports add to its row


class SeedsError(ValueError):
    pass


def read_reports(paths: Sequence[str], suffix: str = SEED_SUFFIX) -> "OrderedDict[str, dict]":
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
        if not (suite if suite is not None else report):
            raise SeedsError(f"{path}: an empty report (no row scored): nothing to average")
        for name, row in (suite or report).items():
            if seed and not pattern.search(name):
                name = name + seed.group(0)
            if name in rows:  # a model's perplexities and its suite accuracies merge; the same score twice is an error
                old = rows[name]
                if (set(old) & set(row)) - set(SUITE_KEYS) or set(old.get("suites", {})) & set(row.get("suites", {})):
                    raise SeedsError(f"{path}: row {name!r} also in an earlier report")
                merged = {key: {**old.get(key, {}), **row.get(key, {})} for key in SUITE_KEYS}
                old.update(row)
                old.update({key: value for key, value in merged.items() if value})
                continue
            rows[name] = dict(row)
    return rows


def suite_rows(report: dict):
    """``{NAME: {"suites": {"BLiMP given": %, ...}, "suite_items": {"BLiMP given": Items as JSON, ...}}}`` of a
    BLiMP or SyntaxGym report, None for others. The items (each pair or suite item a model scored) are those
    of a paired comparison (:mod:`~sipe_fairseq.eval.reports.paired`); reports written before they were recorded
    have none."""
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
        row = rows.setdefault(name, {"suites": {}})
        row["suites"][f"{kind} {source}"] = acc
        items = _suite_items(report, col)
        if items is not None:
            row.setdefault("suite_items", {})[f"{kind} {source}"] = items.to_json()
    return rows


def _suite_items(report: dict, col: str):
    """The scored pairs (BLiMP: one stratum) or suite items (SyntaxGym: stratified by suite) of column ``col``."""
    keys, num, strata = [], [], []
    if isinstance(report.get("per_pair"), dict):
        for key, correct in zip(report["per_pair"]["keys"], report["per_pair"]["correct"].get(col, [])):
            if correct is not None:
                keys.append(key), num.append(float(correct)), strata.append("")
    elif isinstance(report.get("items"), list):
        for item in report["items"]:
            result = (item.get("results") or {}).get(col) or {}
            if result.get("scored"):
                keys.append(f"{item['suite']}/{item['item']}"), num.append(float(bool(result["pass"])))
                strata.append(item["suite"])
    if not keys:
        return None
    return Items("accuracy", keys, num, [1.0] * len(keys), strata)


def row_items(row: dict, per: str = "token") -> Dict[str, Items]:
    """The items of each score of a row that recorded them: a ``sipe-eval-lm`` tag source's sentences
    (perplexity per token or per word) and the suites' pairs or items."""
    out = {}
    for source, r in (row.get("tag_sources") or {}).items():
        sentences = r.get("per_sentence") if isinstance(r, dict) else None
        if sentences:
            n = len(sentences["nll"])
            out[source] = Items("ppl", [str(i) for i in range(n)], sentences["nll"],
                                sentences["tokens" if per == "token" else "words"], [""] * n)
    for score, items in (row.get("suite_items") or {}).items():
        out[score] = Items.from_json(items)
    return out


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


RUN_FIELDS = ("split", "sentences", "data", "arch", "injection")  # sipe-eval-lm's row["run"]


def run_fields(row: dict) -> Dict[str, object]:
    """What a row was scored on (``RUN_FIELDS`` of its ``run``, each tag source's sentence count); {} for a row
    of a report written before ``run`` was recorded."""
    run = row.get("run")
    if not isinstance(run, dict):
        return {}
    out = {f: run.get(f) for f in RUN_FIELDS}
    for source, r in (row.get("tag_sources") or {}).items():
        if isinstance(r, dict) and "sentences" in r:
            out[f"tag source {source} sentences"] = r["sentences"]
    return out


COMPARED_FIELDS = ("split", "sentences", "data")  # a row and its baseline (arch and injection differ by design)


def check_baseline(row: dict, base: dict, label: str, base_label: str, allow_mixed: bool = False,
                   error: type = SeedsError) -> None:
    """The one check of a row against its baseline (``sipe-eval seeds --baseline``, ``sipe-eval scale``): ``error``
    (``allow_mixed``: a warning) when they were scored on different splits, sentence counts or data, or their tag
    sources on different sentence counts; rows that record nothing (older reports) are not checked."""
    a, b = run_fields(row), run_fields(base)
    for key in [k for k in a if k in b and (k in COMPARED_FIELDS or k.startswith("tag source "))]:
        if a[key] != b[key]:
            line = f"{key} differs between row {label} ({a[key]}) and its baseline {base_label} ({b[key]})"
            if not allow_mixed:
                raise error(f"{line}: not compared (--allow-mixed compares them anyway)")
            logger.warning(f"{line}; compared anyway (--allow-mixed)")
            return


def check_groups(rows: "OrderedDict[str, dict]", suffix: str = SEED_SUFFIX, allow_mixed: bool = False) -> List[str]:
    """:class:`SeedsError` for the first group whose rows were scored on different splits, sentence counts, data
    or models (module docstring); with ``allow_mixed`` a warning instead. Returns the rows that record nothing
    to compare (a warning names them)."""
    unchecked = []
    for group, names in group_by_seed(list(rows), suffix).items():
        if len(names) < 2:
            continue
        records = [(n, run_fields(rows[n])) for n in names]
        unchecked += [n for n, r in records if not r and ("lm" in rows[n] or "tag_sources" in rows[n])]
        records = [(n, r) for n, r in records if r]
        for field in dict.fromkeys(f for _, r in records for f in r):
            have = [(n, r[field]) for n, r in records if field in r]
            differ = [(n, v) for n, v in have if v != have[0][1]]
            if differ:
                line = (f"group {group!r}: {field} differs between rows {have[0][0]!r} ({have[0][1]}) and "
                        f"{differ[0][0]!r} ({differ[0][1]})")
                if not allow_mixed:
                    raise SeedsError(f"{line}: not averaged (--allow-mixed averages them anyway)")
                logger.warning(f"{line}; averaged anyway (--allow-mixed)")
                break
    if unchecked:
        logger.warning(f"rows {', '.join(unchecked)} record no split, sentence count, data or model (reports of an older "
                       "sipe-eval-lm): averaged without checking that they belong together")
    return unchecked


def group_by_seed(names: Sequence[str], suffix: str = SEED_SUFFIX) -> "OrderedDict[str, List[str]]":
    """``{"position": ["position-s1", "position-s2"], ...}``; a name without the suffix is its own group."""
    pattern = re.compile(suffix)
    groups = OrderedDict()
    for name in names:
        groups.setdefault(pattern.sub("", name), []).append(name)
    return groups


def aggregate(rows: "OrderedDict[str, dict]", per: str = "token", suffix: str = SEED_SUFFIX) -> "OrderedDict[str, dict]":
    """``{group: {score: {"mean", "sd", "min", "max", "n", "seeds"}}}``; ``sd`` is nan for one seed."""
    out = OrderedDict()
    for group, names in group_by_seed(list(rows), suffix).items():
        per_score = OrderedDict()
        for name in names:
            scores = row_scores(rows[name], per)
            if not scores:
                raise SeedsError(f"row {name!r}: no score (no perplexity, tag source or accuracy): nothing to average")
            for score, value in scores.items():
                problem = score_problem(score, value)
                if problem:
                    raise SeedsError(f"row {name!r}: score {score!r} is {value!r}, {problem}: not averaged")
                per_score.setdefault(score, []).append((name, value))
        out[group] = OrderedDict()
        for score, pairs in per_score.items():
            values = [v for _, v in pairs]
            out[group][score] = {"mean": statistics.fmean(values),
                                 "sd": statistics.stdev(values) if len(values) > 1 else float("nan"),
                                 "min": min(values), "max": max(values), "n": len(values),
                                 "seeds": [n for n, _ in pairs]}
    return out


def score_problem(score: str, value) -> Optional[str]:
    """Why ``value`` cannot be the score ``score`` of a report (None: it can): not a finite number, a perplexity
    below 1 (exp of a negative log-loss), an accuracy outside [0, 100]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "not a finite number"
    if score.startswith(("BLiMP ", "SyntaxGym ")):
        return None if 0.0 <= value <= 100.0 else "not an accuracy in % (0 to 100)"
    return None if value >= 1.0 else "not a perplexity (at least 1: the exp of a log-loss, which is never negative)"


def _cell(s: dict) -> str:
    if s["n"] == 1:
        return f"{s['mean']:.2f} (1 seed)"
    return f"{s['mean']:.2f} ± {s['sd']:.2f} [{s['min']:.2f}, {s['max']:.2f}] (n={s['n']})"


def score_order(score: str):
    """blocks, then the sources in their own order (:attr:`~sipe_fairseq.structure.sources.Source.rank`: given,
    given-joint, self, ..., beam:K and mix:K by K; the JSON keeps keys sorted), then the BLiMP and SyntaxGym
    accuracies in the same order of sources."""
    suite = 0
    for i, kind in enumerate(("BLiMP ", "SyntaxGym "), 1):
        if score.startswith(kind):
            suite, score = i, score[len(kind):]
    if score == BLOCKS:
        return (suite, -1, 0, "")
    if score == "given-joint":
        return (suite, Given.rank, 1, "")
    try:
        src = parse_source(score)
    except ValueError:  # a score that is not a source's: after every source
        return (suite, 1 << 20, 0, score)
    return (suite, src.rank, src.k if src.takes_width else 0, score)


def seeds_markdown(table: "OrderedDict[str, dict]", per: str = "token") -> str:
    scores = []
    for group in table.values():
        scores += [s for s in group if s not in scores]
    scores.sort(key=score_order)
    suites_only = bool(scores) and all(s.startswith(("BLiMP ", "SyntaxGym ")) for s in scores)
    lines = markdown_table(["accuracy %" if suites_only else f"perplexity per {per}", *scores],
                           [[name, *(_cell(group[s]) if s in group else "-" for s in scores)] for name, group in table.items()])
    lines.append("")
    lines.append("mean ± sample sd over seeds [min, max] (n seeds). "
                 f"{BLOCKS}: blocks of complete sentences; the tag-source columns score every sentence alone"
                 + ("; BLiMP / SyntaxGym: overall accuracy in % (pairs / mean over suites) under each tag source."
                    if any(s.startswith(("BLiMP ", "SyntaxGym ")) for s in scores) else "."))
    return "\n".join(lines)


def compare(rows: "OrderedDict[str, dict]", baseline: str, per: str = "token", suffix: str = SEED_SUFFIX,
            replicates: int = REPLICATES, seed: int = 0, allow_mixed: bool = False) -> "OrderedDict[str, dict]":
    """``{group: {score: paired_difference(...)}}`` of every group against ``baseline`` (a group name), for the
    scores both recorded items for; seeds paired by the number in ``suffix``. ``SeedsError`` when the baseline
    is not a group, no score can be paired, or a row and its baseline at the same seed were scored on different
    splits, sentences or data (:func:`check_baseline`; ``allow_mixed``: a warning)."""
    pattern = re.compile(suffix)
    groups = group_by_seed(list(rows), suffix)
    if baseline not in groups:
        raise SeedsError(f"--baseline {baseline}: no such row (rows: {', '.join(groups)})")
    base_rows = {_seed_of(pattern, name): name for name in groups[baseline]}
    for group, names in groups.items():  # every pair checked before any is compared
        for name in names:
            base_name = base_rows.get(_seed_of(pattern, name))
            if group != baseline and base_name is not None:
                check_baseline(rows[name], rows[base_name], repr(name), repr(base_name), allow_mixed)

    def by_seed(names):
        out = OrderedDict()
        for name in names:
            for score, items in row_items(rows[name], per).items():
                out.setdefault(score, OrderedDict())[_seed_of(pattern, name)] = items
        return out

    base = by_seed(groups[baseline])
    table = OrderedDict()
    for group, names in groups.items():
        if group == baseline:
            continue
        for score, items in by_seed(names).items():
            if score in base and set(items) & set(base[score]):
                table.setdefault(group, OrderedDict())[score] = paired_difference(items, base[score], replicates, seed)
    if not table:
        raise SeedsError(f"--baseline {baseline}: no score with per-item records shared with another row (reports "
                         "written before per-item records, or no common seed)")
    return table


def _seed_of(pattern: "re.Pattern", name: str) -> str:
    """A row's seed (the suffix's group), or its name when it has none: rows are paired with the baseline by it."""
    m = pattern.search(name)
    return m.group(1) if m and m.groups() else name


def markdown_paired(table: "OrderedDict[str, dict]", baseline: str, per: str = "token") -> str:
    rows = []
    for group, scores in table.items():
        for score in sorted(scores, key=score_order):
            r = scores[score]
            rows.append([group, score if r["kind"] == "accuracy" else f"{score} (ppl per {per})",
                         " / ".join(f"{x:+.2f}" for x in r["per_seed"]), f"{r['mean']:+.2f}",
                         f"[{r['low']:+.2f}, {r['high']:+.2f}]", str(r["items"]),
                         "-" if r.get("seed_low") is None else f"[{r['seed_low']:+.2f}, {r['seed_high']:+.2f}]",
                         str(len(r["per_seed"])), r["verdict"], bound_cell(r)])
    lines = markdown_table([f"vs {baseline}", "score", "difference per seed", "mean", "95% interval over items",
                            "items", "95% interval over seeds", "seeds", "verdict", "excluded beyond (95%)"], rows)
    lines.append("")
    lines.append(f"row minus {baseline}, seeds paired; the item interval is a percentile bootstrap over items (sentences, "
                 f"pairs, suite items within their suite, {_replicates(table)} replicates) drawn once per replicate for "
                 "every seed of both rows; the seed interval is Student's t over the per-seed differences (two seeds or "
                 "more). Lower perplexity and higher accuracy are better; a verdict needs two seeds or more and both "
                 "intervals excluding 0 on the same side. " + BOUND_NOTE)
    return "\n".join(lines)


BOUND_NOTE = ("Excluded beyond (95%), on rows without a verdict: the equivalence bound E of two one-sided tests, "
              "|mean| + sqrt(h_seeds^2 + h_items^2) with the one-sided 95% half-widths over seeds (Student's t) and over "
              "items (the bootstrap's 5th-95th percentiles): a true difference larger than E in either direction is "
              "excluded at 95%; one within +-E is neither shown nor excluded ('no difference shown' is not equivalence).")


def bound_cell(r: dict, scale: float = 1.0, unit: str = "") -> str:
    """``±E`` (the bound x ``scale``, then ``unit``) for a "no difference shown" comparison with an equivalence bound
    (two seeds or more: :func:`~sipe_fairseq.eval.reports.paired.equivalence_bound`), else "-"."""
    if r["verdict"] != "no difference shown" or r.get("bound") is None:
        return "-"
    return f"±{r['bound'] * scale:.2f}{unit}"


def _replicates(table: "OrderedDict[str, dict]") -> str:
    counts = sorted({r["replicates"] for scores in table.values() for r in scores.values()})
    return "/".join(f"{n:,}" for n in counts)
