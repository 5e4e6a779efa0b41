"""The structure sources of ``--tags``: one class per source, which states everything the rest of the
code needs to know of it (one grammar for every family and every command).

* ``given``: the structure of a parse of the whole sentence (SiPE: the data's or the parser's
  hexatags; GiLT: the data's ``{split}.arcs`` or the parser's tree as arcs): the conditional
  ``log p(x | S)``, and beside it a joint score with the structure paid for;
* ``self``: the model's own structure, chosen greedily from the prefix: a function of the prefix,
  so ``q(x) = prod_t p(x_t | x_<t, S(x_<t))`` is normalized and its perplexity exact;
* ``beam:K``: a word-synchronous beam of width K over structures: a lower bound on the model's
  marginal ``log sum_S p(x, S)`` (SiPE) or GiLT's beam approximation of it;
* ``mix:K``: the same beam read as a language model: each target's probability is the mixture of the
  live hypotheses' predictions weighted by their posterior given the prefix, so ``q_K(x)`` is
  normalized and its perplexity exact (the marginal itself when K covers every structure);
* ``untagged`` (SiPE): every word ``<notag>``, the model as a plain LM: exact ``p(x)`` (meaningful for a
  model trained with ``--tag-dropout``).

A source is a :class:`Source` subclass registered with :func:`register_source`. Its class attributes say
what kind of number a sentence's ``logprob`` is (:data:`NUMBERS`), whether it takes a width ``K``, whether
it reads the sentence's parse, how the search treats a word's structure (``mode``), which families it
applies to and how tables label it; its methods give its memory estimate (hypotheses per sentence) and
how a finished search's numbers are read. Adding a source is one class (tests/test_tag_sources.py
registers a toy one from the test file alone).
"""
import math
from dataclasses import dataclass
from typing import ClassVar, Dict, List, Optional, Sequence, Tuple, Type

from .policy import BRANCH, FORCED, GREEDY

# what a sentence's logprob is under a source: log p(x | S) for a given S, an exact log q(x) of a normalized
# model of the words, or a lower bound on the model's log p(x)
NUMBERS = ("conditional", "exact", "bound")
FAMILIES = {"hexatags": "SiPE models (hexatags)", "arcs": "GiLT models (graphs)", "none": "models without structure"}
SIPE_PAIRS = 8  # SiPE: the most tag pairs a word may take after a valid prefix (hexatag.constrained: 8 of 10 at depth >= 2)
SOURCES: Dict[str, Type["Source"]] = {}


def register_source(cls: Type["Source"]) -> Type["Source"]:
    """Class decorator: ``--tags NAME`` (``NAME:K`` when the class ``takes_width``) parses to ``cls``."""
    if cls.number not in NUMBERS:
        raise ValueError(f"tag source {cls.name!r}: number {cls.number!r} is not one of {NUMBERS}")
    SOURCES[cls.name] = cls
    return cls


@dataclass(frozen=True)
class Source:
    """One structure source with its width ``k`` (1 for sources without one). Subclasses set the class
    attributes; ``str(source)`` is its spec (``"self"``, ``"beam:4"``)."""
    k: int = 1

    name: ClassVar[str] = ""
    number: ClassVar[str] = "exact"  # one of NUMBERS: what a sentence's logprob is
    takes_width: ClassVar[bool] = False  # spelled NAME:K
    needs_parse: ClassVar[bool] = False  # reads the sentence's own structure (a parse or the data's)
    mode: ClassVar[str] = GREEDY  # how the search treats a word's structure (structure.policy: FORCED/GREEDY/BRANCH)
    chooses: ClassVar[bool] = True  # the model chooses the structure: it needs its structure heads
    full_forward: ClassVar[bool] = False  # SiPE scores it in full forwards (the structure is known before the words)
    untagged: ClassVar[bool] = False  # every word fed <notag>
    families: ClassVar[Tuple[str, ...]] = tuple(FAMILIES)  # the model families it applies to
    rank: ClassVar[int] = 10  # where its columns sort in tables (then by K): given 0, self 2, beam 4, others 5
    title: ClassVar[str] = ""  # what tables say of its numbers (after "NAME: ")
    arcs_title: ClassVar[Optional[str]] = None  # the same for a GiLT model, when it differs

    @property
    def kind(self) -> str:
        return self.name

    @property
    def branches(self) -> bool:
        """Whether a sentence holds several hypotheses at once (a beam)."""
        return self.mode == BRANCH

    def __str__(self) -> str:
        return f"{self.name}:{self.k}" if self.takes_width else self.name

    def applies_to(self, family: str) -> Optional[str]:
        """None, or the line that refuses this source for a model of ``family``."""
        if family in self.families:
            return None
        return (f"tag source {self.name!r} does not apply to {FAMILIES.get(family, family)}, only to "
                f"{' and '.join(FAMILIES[f] for f in self.families)}")

    def label(self, arcs: bool = False) -> Tuple[str, bool]:
        """``(label, pays)``: the row label of a table (``"self: exact q(x)"``) and whether its numbers pay
        for the structure (a joint score or a bound)."""
        title = self.arcs_title if arcs and self.arcs_title else self.title
        return f"{self}: {title}", self.number == "bound"

    def short_label(self, arcs: bool = False) -> str:
        """The column label beside a checkpoint's name (``"self exact"``)."""
        return f"{self} {self.number}"

    def rows_per_sentence(self, words: int, family: str, top_pairs: int = 0, count_beam: int = 1) -> int:
        """Memory: the most decoder rows (hypotheses, and a SiPE beam's children) one sentence holds once
        ``words`` of its words have started (:mod:`.memory`)."""
        return 1

    def batch_cap(self, batch_sentences: int, rows: int) -> int:
        """The most sentences of one batch, for ``rows`` hypotheses a batch is sized for."""
        return batch_sentences

    def read(self, best_lm: Sequence[float], running: Sequence[float], mixed: Sequence[float],
             z: float) -> Tuple[float, List[float]]:
        """``(logprob, per-token)`` of a finished search: the best hypothesis' LM log-probs ``best_lm``, the
        running bound's increments ``running`` (summing to ``z``) or the mixture's ``mixed``."""
        return sum(best_lm), list(best_lm)


@register_source
class Given(Source):
    """A parse of the whole sentence: the conditional ``log p(x | S)`` (its joint beside it); SiPE in full forwards."""
    name, number, needs_parse, mode, chooses, full_forward, rank = "given", "conditional", True, FORCED, False, True, 0
    title, arcs_title = "p(x\\|tags) (conditional)", "p(x\\|G) (conditional)"
    joint_titles = ("joint bound p(x,tags)", "training joint (Bernoulli arcs; not a bound)")  # the given-joint row

    def short_label(self, arcs: bool = False) -> str:
        return "given p(x\\|G)" if arcs else "given p(x\\|tags)"


@register_source
class Self(Source):
    """The model's own structure, greedily from the prefix: an exact ``log q(x)``."""
    name, number, mode, rank, title = "self", "exact", GREEDY, 2, "exact q(x)"


@register_source
class Untagged(Source):
    """Every word ``<notag>``: the SiPE model as a plain LM, an exact ``log p(x)``."""
    name, number, mode, chooses, full_forward, untagged = "untagged", "exact", FORCED, False, True, True
    families, rank, title = ("hexatags", "none"), 5, "exact p(x), every word <notag>"


class Branching(Source):
    """A word-synchronous beam of width K (:mod:`.search`)."""
    takes_width, mode = True, BRANCH

    def rows_per_sentence(self, words: int, family: str, top_pairs: int = 0, count_beam: int = 1) -> int:
        if family == "none":
            return 1
        if family == "arcs":  # a hypothesis branches on its count_beam counts, ranked as they are made: K stay rows
            pairs, width = max(1, count_beam), self.k
        else:  # a hypothesis branches on the next word's allowed pairs, every child a row until the next word
            pairs = min(top_pairs, SIPE_PAIRS) if top_pairs > 0 else SIPE_PAIRS
            width = self.k * pairs
        if pairs == 1 or words * math.log(pairs) < math.log(width):  # every structure of the words so far
            return pairs ** words
        return width

    def batch_cap(self, batch_sentences: int, rows: int) -> int:
        return max(1, min(batch_sentences, rows // (8 * self.k)))


@register_source
class Beam(Branching):
    """The beam's lower bound on the marginal ``log sum_S p(x, S)`` (GiLT: its beam approximation)."""
    name, number, rank = "beam", "bound", 4
    title, arcs_title = "bound on p(x)", "beam marginal over counts"

    def short_label(self, arcs: bool = False) -> str:
        return str(self)

    def read(self, best_lm, running, mixed, z):
        return float(z), list(running)


@register_source
class Mix(Branching):
    """The beam read as a language model: each target's mixture over the live hypotheses, an exact ``log q_K(x)``."""
    name, number, rank, title = "mix", "exact", 5, "exact q(x), the beam's mixture"

    def short_label(self, arcs: bool = False) -> str:
        return str(self)

    def read(self, best_lm, running, mixed, z):
        return float(sum(mixed)), list(mixed)


def _accepted() -> str:
    """``"given, self, untagged, beam:K or mix:K"``: every registered source's form."""
    forms = [f"{n}:K" if c.takes_width else n for n, c in SOURCES.items()]
    return ", ".join(forms[:-1]) + " or " + forms[-1] if len(forms) > 1 else "".join(forms)


def parse_source(spec) -> Source:
    """``"given"``, ``"self"``, ``"untagged"``, ``"beam:K"``, ``"mix:K"`` (K >= 1; or any registered
    source) -> its :class:`Source`; a :class:`Source` is returned as it is; ``ValueError`` naming the
    accepted forms otherwise."""
    if isinstance(spec, Source):
        return spec
    spec = str(spec).strip()
    name, sep, k = spec.partition(":")
    cls = SOURCES.get(name)
    if cls is not None and not cls.takes_width and not sep:
        return cls()
    if cls is not None and cls.takes_width and sep and k.isdigit() and int(k) >= 1:
        return cls(int(k))
    raise ValueError(f"tag source {spec!r}: expected {_accepted()} with K >= 1")


def parse_sources(spec: str) -> List[str]:
    """``"given,self,beam:4"`` -> ``["given", "self", "beam:4"]`` (each checked, duplicates dropped,
    order kept); ``ValueError`` for an empty list or a bad item."""
    out = []
    for part in (x.strip() for x in spec.split(",")):
        if not part:
            continue
        name = str(parse_source(part))
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"tag sources {spec!r}: expected a comma-separated list of "
                         f"{', '.join(f'{n}:K' if c.takes_width else n for n, c in SOURCES.items())}")
    return out


def source_label(name: str, source: str) -> str:
    """The column of checkpoint ``name`` under ``source``: the name alone for ``given``,
    ``"name [self]"`` / ``"name [beam:4]"`` otherwise."""
    return name if source == "given" else f"{name} [{source}]"


def split_label(label: str) -> Tuple[str, str]:
    """Inverse of :func:`source_label`: ``"pos [beam:4]"`` -> ("pos", "beam:4"), ``"pos"`` -> ("pos", "given")."""
    if label.endswith("]") and " [" in label:
        name, _, source = label[:-1].rpartition(" [")
        try:
            parse_source(source)
            return name, source
        except ValueError:
            pass
    return label, "given"
