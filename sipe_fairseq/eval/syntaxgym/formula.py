"""SyntaxGym prediction formulae: lexer, recursive-descent parser and evaluation (never ``eval``).

Grammar::

    formula  := or EOF                      the whole formula must be a truth value
    or       := and ('|' and)*
    and      := cmp ('&' cmp)*              '&' binds tighter than '|'
    cmp      := sum [('<' | '>' | '=') sum]  no chains: a < b < c is an error
    sum      := unary (('+' | '-') unary)*  left-associative
    unary    := '-' unary | primary
    primary  := NUMBER | ref | '(' or ')' | '[' or ']'
    ref      := '(' (INT | '*') ';' '%' NAME '%' ')'   '*' = the whole sentence (all regions)

``a = b`` holds when ``|a - b| <= atol + rtol * |b|`` (SyntaxGym's ``numpy.isclose`` with
atol 1e-3, rtol 1e-5 by default). A formula nested deeper than :data:`MAX_DEPTH` (groups, unary
minus, or operator chains) is a :class:`FormulaError`, never a ``RecursionError``.
"""
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

EQUALITY_ATOL = 1e-3  # SyntaxGym's defaults (syntaxgym-core prediction.py)
EQUALITY_RTOL = 1e-5
MAX_DEPTH = 64  # groups, unary minus and operators nested in one formula; real suites nest fewer than 10


class SyntaxGymError(ValueError):
    """A suite that cannot be evaluated (bad JSON layout, formula, or reference)."""



class FormulaError(SyntaxGymError):
    """A formula that does not parse; ``position`` is a 0-based character offset."""

    def __init__(self, message: str, formula: str, position: int, where: str = ""):
        self.message, self.formula, self.position, self.where = message, formula, position, where
        prefix = f"{where}: " if where else ""
        start = max(0, position - 40)  # a long formula is shown around the position only
        shown = ("..." if start else "") + formula[start:position + 40] + ("..." if position + 40 < len(formula) else "")
        caret = position - start + (3 if start else 0)
        super().__init__(f"{prefix}{message} at position {position}\n  {shown}\n  {' ' * caret}^")

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
        self.nesting = 0  # open groups and unary minus signs (bounds the parser's recursion)
        self.depths: Dict[int, int] = {}  # id(node) -> height of its tree (bounds evaluate's recursion)

    def enter(self, pos):
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise self.error(f"formula nested too deeply (more than {MAX_DEPTH} groups or signs)", pos)

    def node(self, node, *children):
        """``node`` after checking that its tree is at most :data:`MAX_DEPTH` high."""
        height = 1 + max(self.depths.get(id(c), 1) for c in children)
        if height > MAX_DEPTH:
            raise self.error(f"formula nested too deeply (more than {MAX_DEPTH} operators in a chain)", node.pos)
        self.depths[id(node)] = height
        return node

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
            expected = "a number" if kind == "num" else "a truth value (comparison)"
            raise self.error(f"{what} must be {expected}, found {found}", pos)
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
            left = self.node(BinOp(op, left, right, pos), left, right)
        return left

    def cmp(self):
        start = self.peek()[2]
        left = self.sum()
        if self.peek()[0] in ("<", ">", "="):
            op, _, pos = self.take()
            if self.peek()[0] in ("<", ">", "=") and self.peek()[2] == pos + 1:
                raise self.error(f"unknown operator {op + self.peek()[0]!r} "
                                 "(comparisons are <, > and = (approximately equal))", pos)
            self.need(left, "num", f"the left operand of {op!r}", start)
            rstart = self.peek()[2]
            right = self.need(self.sum(), "num", f"the right operand of {op!r}", rstart)
            left = self.node(BinOp(op, left, right, pos), left, right)
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
            left = self.node(BinOp(op, left, right, pos), left, right)
        return left

    def unary(self):
        if self.peek()[0] == "-":
            pos = self.take()[2]
            self.enter(pos)
            rstart = self.peek()[2]
            operand = self.need(self.unary(), "num", "the operand of unary '-'", rstart)
            self.nesting -= 1
            return self.node(Neg(operand, pos), operand)
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
            self.enter(pos)
            node = self.or_()
            self.nesting -= 1
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

