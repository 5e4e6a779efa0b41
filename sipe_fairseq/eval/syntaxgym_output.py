"""SyntaxGym report tables (markdown) from a ``sipe-syntaxgym/1`` report."""


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
             "`[self]`: tags the model chose from the prefix; `[beam:K]`: the beam's running-bound increments.", "",
             "| suite | items | scored | " + " | ".join(names) + " |",
             "|---|---:|---:|" + "---:|" * len(names)]
    for sname, s in report["suites"].items():
        scored = sorted({s["scores"][n]["scored"] for n in names})
        lines.append(f"| {sname} | {s['items']} | {'/'.join(map(str, scored))} | "
                     + " | ".join(_pct(s["scores"][n]["accuracy"]) for n in names) + " |")
    lines.append(f"| **overall** (mean over suites) | {sum(s['items'] for s in report['suites'].values())} | | "
                 + " | ".join(f"**{_pct(report['overall'][n]['accuracy'])}**" for n in names) + " |")
    multi = [(sn, s) for sn, s in report["suites"].items() if len(s["predictions"]) > 1]
    if multi:
        lines += ["", "| suite | prediction | " + " | ".join(names) + " |", "|---|---|" + "---:|" * len(names)]
        for sname, s in multi:
            for j, f in enumerate(s["predictions"]):
                lines.append(f"| {sname} | {j + 1}: `{f}` | "
                             + " | ".join(_pct(s["scores"][n]["prediction_accuracy"][j]) for n in names) + " |")
    unscored = [(sn, n, u) for sn, s in report["suites"].items() for n in names for u in s["scores"][n]["unscored"]]
    if unscored:
        lines += ["", f"Unscored (left out of the suite denominators): {len(unscored)} sentence(s)", "",
                  "| suite | model | item | condition | reason |", "|---|---|---:|---|---|"]
        for sname, n, u in unscored:
            lines.append(f"| {sname} | {n} | {u['item']} | {u['condition']} | {u['reason']} |")
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
                  "have two conditions that tag their shared initial words differently.", "",
                  "| suite | critical region | items compared | tags differ | heads differ | shared initial words tagged "
                  "differently |", "|---|---:|---:|---:|---:|---:|"]
        for sname, r in diff["suites"].items():
            lines.append(f"| {sname} | {r['critical_region']} | {r['compared']} | {r['differ']} | "
                         f"{r.get('heads_differ', '-')} | {r.get('common_prefix_differ', 0)} |")
        shown = 20
        for d in diff["list"][:shown]:
            lines.append(f"- {d['suite']} item {d['item']} ({', '.join(d['conditions'])}): first at word "
                         f"{d['first_differing_word']} {d['word']!r} of \"{d['prefix']}\"")
        if len(diff["list"]) > shown:
            lines.append(f"- ... and {len(diff['list']) - shown} more (all in the JSON report)")
    return "\n".join(lines) + "\n"
