"""SyntaxGym suites: reading and checking suite JSON, splitting regions into words, and the
sentences (one per item and condition) with their trees and encodings."""
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ...hexatag import TreeError, check_tree
from ...hexatag.errors import InputError
from ...hexatag.lines import read_text
from ...parsing.tokenize import split_words
from ..progress import progress
from .formula import FormulaError, Node, SyntaxGymError, parse_formula

logger = logging.getLogger(__name__)


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
        data = json.loads(read_text(path))  # the one reader: a byte that is not UTF-8 named by file:line
    except InputError as e:
        raise SyntaxGymError(f"{e.path}:{e.line}: cannot read suite JSON: {e.reason}") from None
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
class SuiteSentence:
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


def sentences_of(suites: Sequence[Suite]) -> List[SuiteSentence]:
    out = []
    for s in suites:
        for it in s.items:
            for c in it.conditions.values():
                out.append(SuiteSentence(s.name, it.number, c, failure=None if c.words else "empty sentence (no words)"))
    return out


def parse_sentences(sentences: Sequence[SuiteSentence], parser, batch_size: int = 256) -> None:
    """Set ``heads`` from ``parser.parse_words`` (``parser=None``: no tags). A batch the parser
    refuses (``ValueError`` such as :class:`~sipe_fairseq.parsing.base.ParseError`, or ``KeyError``
    from gold trees) is redone sentence by sentence; a sentence whose parse fails or is not one tree
    gets ``failure``. Other exceptions (e.g. spaCy not installed) propagate."""
    if parser is None:
        return

    refused = (ValueError, KeyError)
    todo = [s for s in sentences if s.failure is None]
    for start in progress(range(0, len(todo), batch_size), desc="parse"):
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


def encode_sentences(sentences: Sequence[SuiteSentence], encoder) -> None:
    """Encode every scorable sentence with a :class:`~sipe_fairseq.data.encode.SentenceEncoder`."""
    for s in sentences:
        if s.failure is None:
            try:
                s.encoded = encoder.encode(s.words, s.heads)
            except Exception as e:  # noqa: BLE001 - e.g. a tree the hexatag encoder refuses
                s.failure = f"encoding error: {type(e).__name__}: {e}"


def read_suites(paths: Sequence[Union[str, Path]]) -> Tuple[List[Suite], List[SuiteSentence]]:
    """The suites of files and directories (checked by :func:`load_suite`; names must differ) and
    their sentences (:func:`sentences_of`), before any parser or model is loaded."""
    suites = [load_suite(p) for p in find_suites(paths)]
    names = [s.name for s in suites]
    if len(set(names)) != len(names):
        raise SyntaxGymError(f"two suites share a name: {names}")
    sentences = sentences_of(suites)
    logger.info("SyntaxGym: %d suites, %d items, %d sentences", len(suites), sum(len(s.items) for s in suites),
                len(sentences))
    return suites, sentences


def tree_and_encode(sentences: Sequence[SuiteSentence], source, encoder) -> None:
    """Parse (a tree source without ``parse_words``, e.g. ``--parser none``, gives no tags) and encode."""
    parse_sentences(sentences, source if hasattr(source, "parse_words") else None)
    encode_sentences(sentences, encoder)
