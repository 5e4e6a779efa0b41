"""Options shared by the evaluation commands (``sipe-eval``, ``sipe-eval-lm``, ``sipe-generate``), checked
before any work starts.

* Numeric options are range-checked by argparse: ``type=int_at_least(1)``, ``float_at_least(0.0)``,
  ``float_above(0.0)``. A value out of range is a usage error (exit status 2, argparse's message
  ``argument --X: expected an integer >= 1, got -1``).
* Output paths (``--json``, ``--markdown``, ``--plot``, the report outputs, a parse cache) are checked
  writable before anything is loaded or scored (:func:`output_path_problem`), so that no result is
  computed only to be lost.
* ``--no-progress`` (:func:`add_progress_argument`, applied by :func:`configure_progress`) turns off the
  progress bars of :mod:`sipe_fairseq.eval.progress`.
"""
import argparse
import os
from typing import Callable, Dict, Iterable, Optional

from sipe_fairseq.eval.progress import set_progress

# the options whose value is a file the command writes (attribute names; absent ones are skipped)
OUTPUT_OPTIONS = ("json", "markdown", "plot", "out", "blimp_out", "syntaxgym_out", "ppl_out", "cache")


def int_at_least(low: int) -> Callable[[str], int]:
    """argparse ``type``: an integer >= ``low``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
    return value


def float_at_least(low: float) -> Callable[[str], float]:
    """argparse ``type``: a finite number >= ``low``."""
    def parse(text: str) -> float:
        value = _float(text, f"a number >= {low:g}")
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a number >= {low:g}, got {text}")
        return value

    parse.__name__ = f"number >= {low:g}"
    return parse


def float_above(low: float) -> Callable[[str], float]:
    """argparse ``type``: a finite number > ``low``."""
    def parse(text: str) -> float:
        value = _float(text, f"a number > {low:g}")
        if value <= low:
            raise argparse.ArgumentTypeError(f"expected a number > {low:g}, got {text}")
        return value

    parse.__name__ = f"number > {low:g}"
    return parse


def probability(text: str) -> float:
    """argparse type: a number in [0, 1], else one clear error naming the value."""
    value = _float(text, "a probability")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text!r}")
    return value


def memory_size(text: str) -> int:
    """argparse type: a size such as ``512M`` or ``2G`` (binary units) in bytes (``--max-memory``)."""
    from sipe_fairseq.structure.memory import parse_size  # lazy (heavy): structure imports torch; options stays light

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_max_memory_argument(p) -> None:
    """``--max-memory SIZE``: the memory budget of the tag sources' searches (structure/memory.py)."""
    p.add_argument("--max-memory", type=memory_size, default=0, metavar="SIZE",
                   help="memory a tag source's batch may hold, e.g. 512M or 2G (estimated before scoring: "
                        "sipe_fairseq/structure/memory.py; batches shrink to fit, a source that cannot fit even one "
                        "sentence is refused with exit status 2; default: half the available memory)")


def mass_fraction(text: str) -> float:
    """argparse type: a share of probability mass in (0, 1] (``--tags-mass``), else one clear error."""
    value = _float(text, "a share of probability mass")
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share of probability mass in (0, 1], got {text!r}")
    return value


# the suites' beam and mix width (issue 35: the setting measured within 0.2% of mix:16 at >= 5x its speed goes
# here, docs/benchmarks.md); 1 and 0: the K best over every allowed pair
SUITE_WIDTH = {"mass": 1.0, "top_pairs": 0}


def add_width_arguments(p, mass: float = SUITE_WIDTH["mass"], top_pairs: int = SUITE_WIDTH["top_pairs"]) -> None:
    """``--tags-mass`` and ``--tags-top-pairs``: how wide ``beam:K`` and ``mix:K`` search (the suites;
    ``sipe-eval-lm`` declares its own beside its other ``--tags`` options)."""
    p.add_argument("--tags-mass", type=mass_fraction, default=mass, metavar="P",
                   help="beam:K, mix:K: at each word's ranking keep a sentence's best hypotheses until their share of "
                        "the prefix mass reaches P, at most K, at least one (default %(default)s; 1: the K best)")
    p.add_argument("--tags-top-pairs", type=int_at_least(0), default=top_pairs, metavar="M",
                   help="SiPE, beam:K, mix:K: expand each hypothesis with its tag heads' M best allowed pairs only "
                        "(default %(default)s; 0: every allowed pair)")


def width_of(args) -> Dict[str, float]:
    """The ``mass`` and ``top_pairs`` of :func:`add_width_arguments` (StructureOptions fields)."""
    return {"mass": getattr(args, "tags_mass", 1.0), "top_pairs": getattr(args, "tags_top_pairs", 0)}


def width_line(sources, width: Dict[str, float]) -> str:
    """A report's line saying how wide its beam and mix columns searched ("" without such a column)."""
    if not any(str(s).startswith(("beam:", "mix:")) for s in sources or ()):
        return ""
    pairs = "every allowed pair" if not width["top_pairs"] else f"the heads' {width['top_pairs']} best allowed pairs"
    return (f"\nbeam:K and mix:K columns: at most K hypotheses per word, kept until their share of the prefix mass "
            f"reaches {width['mass']:g} (--tags-mass), each expanded with {pairs} (--tags-top-pairs).\n")


def unwritable(path: str) -> Optional[str]:
    """Why ``path`` cannot be written as a file (None: it can): a directory, a parent directory that
    does not exist or is not writable, an existing file that is not writable."""
    if os.path.isdir(path):
        return "it is a directory"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"directory {parent} does not exist"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return "the file is not writable"
    return None


def output_path_problem(args: argparse.Namespace, options: Iterable[str] = OUTPUT_OPTIONS) -> Optional[str]:
    """One line naming the first output option of ``args`` whose path cannot be written, or None."""
    for name in options:
        value = getattr(args, name, None)
        if not isinstance(value, str) or value in ("", "-"):
            continue
        reason = unwritable(value)
        if reason:
            return f"--{name.replace('_', '-')} {value}: cannot write there: {reason}"
    return None


def add_data_argument(p) -> None:
    """``--data``: the sipe-preprocess directory whose dictionary and sentencepiece model encode the inputs."""
    p.add_argument("--data", required=True, help="the sipe-preprocess data directory the checkpoints were trained on "
                                                 "(its dict.txt and spm.model encode the sentences)")


def add_count_beam_argument(p) -> None:
    """``--gilt-count-beam``: GiLT's count branching under ``beam:K``."""
    p.add_argument("--gilt-count-beam", type=int_at_least(1), default=5, metavar="C",
                   help="GiLT checkpoints, beam:K: counts each hypothesis branches on (default: %(default)s)")


def add_progress_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (default: shown on stderr when stderr is a terminal)")


def configure_progress(args: argparse.Namespace) -> None:
    """Apply a command's ``--no-progress``."""
    set_progress("off" if getattr(args, "no_progress", False) else "auto")
