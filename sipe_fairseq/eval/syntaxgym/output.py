"""SyntaxGym report tables (markdown) from a ``sipe-syntaxgym/1`` report."""
from ..reports.tables import table


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def report_markdown(report: dict) -> str:
    """Suite accuracies (% of scored items passing all predictions), one column per checkpoint;
    then per-prediction accuracies for suites with several predictions, and unscored items."""
    names = report["models"]
    eq = report["equality"]
    lines = [f"SyntaxGym: % of items passing every prediction; surprisal in bits; parser: {report.get('parser', '?')};"
             f" '=' within {eq['atol']:g} + {eq['rtol']:g}*|b|.", "",
             "Tags: a column named by its model alone uses the parser's tags (given: a parse of each whole sentence); "
             "`[self]`: tags the model chose from the prefix; `[beam:K]`: the beam's running-bound increments; "
             "`[mix:K]`: the beam read as a mixture (exact surprisals).", ""]
    lines += table(["suite", "items", "scored", *names],
                   [*([sname, s["items"], "/".join(map(str, sorted({s["scores"][n]["scored"] for n in names}))),
                       *(_pct(s["scores"][n]["accuracy"]) for n in names)] for sname, s in report["suites"].items()),
                    ["**overall** (mean over suites)", sum(s["items"] for s in report["suites"].values()), "",
                     *(f"**{_pct(report['overall'][n]['accuracy'])}**" for n in names)]],
                   "lrr" + "r" * len(names))
    multi = [(sn, s) for sn, s in report["suites"].items() if len(s["predictions"]) > 1]
    if multi:
        lines += [""] + table(["suite", "prediction", *names],
                              [[sname, f"{j + 1}: `{f}`", *(_pct(s["scores"][n]["prediction_accuracy"][j]) for n in names)]
                               for sname, s in multi for j, f in enumerate(s["predictions"])],
                              "ll" + "r" * len(names))
    unscored = [(sn, n, u) for sn, s in report["suites"].items() for n in names for u in s["scores"][n]["unscored"]]
    if unscored:
        lines += ["", f"Unscored (left out of the suite denominators): {len(unscored)} sentence(s)", ""]
        lines += table(["suite", "model", "item", "condition", "reason"],
                       [[sname, n, u["item"], u["condition"], u["reason"]] for sname, n, u in unscored], "llrll")
    diff = report.get("prefix_tag_differences")
    if diff:
        heads = diff.get("heads_differ")
        heads_note = "" if heads is None else (
            f" The parser's dependency heads of those words differ in {heads} of the {diff['compared']} items; the two "
            "need not go together (a head at or after the critical region changes no tag before it, while a later "
            "word's attachment can change an earlier word's tags), and the model sees only the tags.")
        lines += ["", f"Given tags before the critical region: in {diff['differ']} of {diff['compared']} items, conditions "
                  "with identical words before the critical region have different hexatags (terminal, non-terminal) on "
                  "those words, the tags the model has been given when it predicts the region's first token, i.e. the "
                  f"tags carry information from the critical region on ({diff['not_compared']} items have no two such "
                  f"conditions).{heads_note} More broadly, {diff.get('common_prefix_differ', 0)} of {diff['items']} items "
                  "have two conditions that tag their shared initial words differently.", ""]
        lines += table(["suite", "critical region", "items compared", "tags differ", "heads differ",
                        "shared initial words tagged differently"],
                       [[sname, r["critical_region"], r["compared"], r["differ"], r.get("heads_differ", "-"),
                         r.get("common_prefix_differ", 0)] for sname, r in diff["suites"].items()])
        shown = 20
        for d in diff["list"][:shown]:
            lines.append(f"- {d['suite']} item {d['item']} ({', '.join(d['conditions'])}): first at word "
                         f"{d['first_differing_word']} {d['word']!r} of \"{d['prefix']}\"")
        if len(diff["list"]) > shown:
            lines.append(f"- ... and {len(diff['list']) - shown} more (all in the JSON report)")
    return "\n".join(lines) + "\n"
