"""How structure is chosen from the prefix: :class:`StructureOptions`, the one declaration of the
``--tags*`` and ``--gilt-count-*`` options of every command that takes ``--tags``.

Each field is declared with :func:`structure_option`: its default, its help text and, for a command-line
option, its flag and its range. Commands generate their argparse options from these declarations
(``sipe_fairseq.cli.options.add_structure_arguments``), and :meth:`StructureOptions.__post_init__`
checks every value against the same range (:func:`check_value`), so a library caller gets the same
one-line ``ValueError`` as a command-line user gets argparse's usage error. A new option is one field.
"""
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Tuple

from ..data.lm_dataset import DEFAULT_PLACEMENT, PLACEMENTS
from .arcs import COUNT_RULES, DEFAULT_COUNT_BEAM

BATCH_SENTENCES = 256  # sentences scored together (a beam's batch is capped by its rows: scoring.BEAM_ROWS)


def structure_option(default: Any, help: str, flag: Optional[str] = None, metavar: Optional[str] = None,
                     low: Optional[float] = None, above: Optional[float] = None, high: Optional[float] = None,
                     choices: Optional[Tuple[str, ...]] = None, negate: bool = False, size: bool = False):
    """A :class:`StructureOptions` field: ``flag`` (None: not a command-line option), the range
    ``low <= value`` (or ``above < value``) ``<= high``, or ``choices``; ``negate``: a boolean field set
    False by its flag (``--tags-unconstrained`` -> ``constrained=False``); ``size``: bytes, written on the
    command line as ``512M`` or ``2G`` (:func:`~.memory.parse_size`)."""
    meta = dict(help=help, flag=flag, metavar=metavar, low=low, above=above, high=high, choices=choices, negate=negate,
                size=size)
    return field(default=default, metadata=meta)


def range_text(meta: dict, integer: bool) -> str:
    """``"an integer >= 1"``, ``"a number in [0, 1]"``, ``"a number in (0, 1]"``, ... for a field's range."""
    what = "an integer" if integer else "a number"
    low, above, high = meta.get("low"), meta.get("above"), meta.get("high")
    if high is not None and (low is not None or above is not None):
        return f"{what} in {'[' if low is not None else '('}{low if low is not None else above:g}, {high:g}]"
    if low is not None:
        return f"{what} >= {low:g}"
    if above is not None:
        return f"{what} > {above:g}"
    return f"{what} <= {high:g}" if high is not None else what


def check_value(f, value):
    """``value`` if it is within field ``f``'s declared range or choices, else ``ValueError`` with the
    expected range (``"expected an integer >= 1, got 0"``); None passes for a field whose default is None."""
    meta = f.metadata
    if value is None and f.default is None:
        return value
    if meta.get("choices") is not None:
        if value not in meta["choices"]:
            raise ValueError(f"expected one of {', '.join(meta['choices'])}, got {value!r}")
        return value
    if all(meta.get(k) is None for k in ("low", "above", "high")):
        return value
    integer = f.type in (int, Optional[int])
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and (not integer or int(value) == value)
    if ok:
        ok = ((meta["low"] is None or value >= meta["low"]) and (meta["above"] is None or value > meta["above"])
              and (meta["high"] is None or value <= meta["high"]))
    if not ok:
        raise ValueError(f"expected {range_text(meta, integer)}, got {value}")
    return value


@dataclass
class StructureOptions:
    """How structure is chosen from the prefix (the ``--tags*`` and ``--gilt-count-*`` options of every
    command that takes ``--tags``; ``placement`` and ``use_cache`` are set by the code, not by a flag)."""
    placement: str = structure_option(DEFAULT_PLACEMENT, choices=PLACEMENTS,
                                      help="SiPE: where the tag heads choose a word's pair (the checkpoint's "
                                           "--tag-head-placement)")
    constrained: bool = structure_option(True, flag="--tags-unconstrained", negate=True,
                                         help="self/beam/mix: any tag pair, not only valid prefixes")
    top_pairs: int = structure_option(0, flag="--tags-top-pairs", metavar="M", low=0,
                                      help="SiPE, beam:K: expand each hypothesis with its tag heads' M best allowed pairs only "
                                           "(the fast-track pruning of word-synchronous beams; 0: every allowed pair)")
    abstain: float = structure_option(0.0, flag="--tags-abstain", metavar="P", low=0.0, high=1.0,
                                      help="SiPE, self: leave a word <notag> when its best allowed pair has probability below P "
                                           "(0: never; for models trained with --tag-dropout)")
    mass: float = structure_option(1.0, flag="--tags-mass", metavar="P", above=0.0, high=1.0,
                                   help="beam:K and mix:K: keep a word's best hypotheses until their share of the summed prefix "
                                        "probability reaches P (K is the cap; 1: keep K)")
    pair_mass: float = structure_option(1.0, flag="--tags-pair-mass", metavar="Q", above=0.0, high=1.0,
                                        help="SiPE, beam:K and mix:K: of the pairs that expand a sentence's hypotheses at a "
                                             "word, keep the best until their share of the summed prefix probability of "
                                             "all of them (each hypothesis's times its pair's) reaches Q, at least one "
                                             "(after --tags-top-pairs; 1: keep every pair)")
    max_sentences: Optional[int] = structure_option(None, flag="--tags-max-sentences", metavar="N", low=1,
                                                    help="score the first N sentences of the split only under --tags")
    batch_sentences: int = structure_option(BATCH_SENTENCES, flag="--tags-batch-sentences", metavar="N", low=1,
                                            help="sentences of the split scored together under a tag source: larger is faster "
                                                 "and holds a KV cache of N x (hypotheses) x (length) positions per layer; "
                                                 "beam:K and mix:K at most 512/K")
    count_beam: int = structure_option(DEFAULT_COUNT_BEAM, flag="--gilt-count-beam", metavar="C", low=1,
                                       help="GiLT checkpoints, beam:K: counts each hypothesis branches on")
    count_rule: str = structure_option(COUNT_RULES[0], flag="--gilt-count-rule", choices=COUNT_RULES,
                                       help="GiLT, beam:K: top-then-allowed (the authors': the counts among the top C of all 30 "
                                            "that a word may take, c <= 2i - 1) or allowed-then-top (the top C among the allowed "
                                            "counts)")
    max_memory: int = structure_option(0, flag="--max-memory", metavar="SIZE", low=0, size=True,
                                       help="memory a tag source's batch may hold, e.g. 512M or 2G (estimated before scoring: "
                                            "sipe_fairseq/structure/memory.py; batches shrink to fit, a source that cannot fit "
                                            "even one sentence is refused with exit status 2; 0: half the available memory)")
    workers: int = structure_option(0, flag="--workers", metavar="N", low=0,
                                    help="worker processes that score the planned batches (forked after the model is loaded, "
                                         "one torch thread each, the memory budget split between them: "
                                         "sipe_fairseq/structure/workers.py); the numbers are those of one process. "
                                         "0: the cores available to this process")
    share_prefixes: str = structure_option(
        "contexts", flag="--tags-share-prefixes", choices=("contexts", "all", "none"),
        help="self, beam:K and mix:K: sentences of a batch that begin alike run their common inputs once, the others "
             "taking copies of its hypotheses and KV cache (sipe_fairseq/structure/search.py shared_forks; the numbers "
             "are the same): contexts, only a context fed before texts (a document's sentences, texts after one "
             "context); all, any common beginning too (the two sentences of a minimal pair: fewer positions but "
             "slower on a CPU, docs/benchmarks.md); none, every sentence alone")
    use_cache: bool = structure_option(True, help="SiPE: False runs the full prefix at every position (tests)")

    def __post_init__(self):
        for f in fields(self):
            try:
                check_value(f, getattr(self, f.name))
            except ValueError as e:
                raise ValueError(f"{f.metadata['flag'] or f.name}: {e}") from None


def command_line_fields():
    """The fields of :class:`StructureOptions` that are command-line options, in declaration order."""
    return [f for f in fields(StructureOptions) if f.metadata.get("flag")]


# the suites' (sipe-eval blimp, sipe-eval syntaxgym) own defaults for the width of their beam:K and mix:K columns,
# where they differ from the declarations above: on the whole EWT test split, mix:16 at P = 0.99 and M = 4 stays
# within 0.2% of the exact mix:16's perplexity on the word-aware SiPE and the GiLT walkthrough checkpoints, and is
# +2.3% on a first-subword-head position checkpoint (docs/benchmarks.md, "The default of the suites", "Pruning a
# word's expansions by mass"); --tags-mass 1 --tags-top-pairs 0 runs the exact mixture
SUITE_WIDTH = {"mass": 0.99, "top_pairs": 4}
