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
import stat
from dataclasses import MISSING
from typing import Callable, Dict, Iterable, Optional

from sipe_fairseq.eval.progress import set_progress
from sipe_fairseq.eval.shards import check_shard
from sipe_fairseq.structure.memory import parse_size
from sipe_fairseq.structure.options import StructureOptions, check_value, command_line_fields, range_text
from sipe_fairseq.structure.sources import parse_sources

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
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def width_of(options: StructureOptions) -> Dict[str, float]:
    """How wide a report's ``beam:K`` and ``mix:K`` columns searched: ``mass`` and ``top_pairs``, and ``pair_mass``
    when it prunes (``--tags-pair-mass`` below 1)."""
    width = {"mass": options.mass, "top_pairs": options.top_pairs}
    if options.pair_mass < 1:
        width["pair_mass"] = options.pair_mass
    return width


def width_line(sources, width: Dict[str, float]) -> str:
    """A report's line saying how wide its beam and mix columns searched ("" without such a column)."""
    if not any(str(s).startswith(("beam:", "mix:")) for s in sources or ()):
        return ""
    pairs = "every allowed pair" if not width["top_pairs"] else f"the heads' {width['top_pairs']} best allowed pairs"
    return (f"\nbeam:K and mix:K columns: at most K hypotheses per word, kept until their share of the prefix mass "
            f"reaches {width['mass']:g} (--tags-mass), each expanded with {pairs} (--tags-top-pairs)"
            + (f", of which the best are kept until their share of the word's expansions' mass reaches "
               f"{width['pair_mass']:g} (--tags-pair-mass)" if width.get("pair_mass", 1) < 1 else "")
            + " (the pairs: SiPE checkpoints only).\n")


def unwritable(path: str) -> Optional[str]:
    """Why ``path`` cannot be written as a file (None: it can): a directory, a parent directory that
    does not exist or is not writable, an existing file that is not writable, a block device. What the writer
    writes in place (a FIFO, a character device, ``/dev/stdout``: :func:`~sipe_fairseq.data.writers.atomic_open`)
    needs only to be writable itself; a symbolic link's target is what is replaced, in the target's directory."""
    if os.path.isdir(path):
        return "it is a directory"
    if os.path.exists(path) and not os.path.isfile(path):
        if stat.S_ISBLK(os.stat(path).st_mode):
            return "it is a block device (a report is never written over a disk)"
        return None if os.access(path, os.W_OK) else "it is not writable"
    parent = os.path.dirname(os.path.realpath(path))
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
    """``--data``: the sipe-preprocess directory whose dictionary and sentencepiece model encode the inputs. A
    directory that is missing, empty, without ``dict.txt`` or with a malformed one is refused before any work, in
    one line with exit status 2, where the checkpoints are parsed
    (:class:`~sipe_fairseq.checkpoints.specs.CheckpointSpecs`, :func:`~sipe_fairseq.data.dictionary.check_data_directory`:
    a one-line error, which argparse's ``type`` could not give without its usage lines)."""
    p.add_argument("--data", required=True, help="the sipe-preprocess data directory the checkpoints were trained on "
                                                 "(its dict.txt and spm.model encode the sentences)")


def device_problem(spec: str) -> Optional[str]:
    """One line saying why ``spec`` is no device this process can score on (``cpu``, ``cuda``, ``cuda:N``, ``mps``;
    a CUDA or MPS device this torch build or machine does not have), None when it is fine."""
    import torch  # lazy (heavy): the options module is imported by every command before it needs torch

    try:
        device = torch.device(spec)
    except (RuntimeError, ValueError) as e:
        return f"--device {spec!r}: not a device ({str(e).splitlines()[0]}); expected cpu, cuda, cuda:N or mps"
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return f"--device {spec}: no CUDA device here (torch {torch.__version__}); use --device cpu"
        if device.index is not None and device.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            return f"--device {spec}: only {count} CUDA devices here (cuda:0 .. cuda:{count - 1})"
    elif device.type == "mps" and not torch.backends.mps.is_available():
        return f"--device {spec}: no MPS device here; use --device cpu"
    elif device.type not in ("cpu", "cuda", "mps"):
        return f"--device {spec}: not a device the commands score on; expected cpu, cuda, cuda:N or mps"
    return None


def _device(text: str) -> str:
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem.split(": ", 1)[1])  # argparse names the option
    return text


def add_device_argument(p) -> None:
    """``--device``: where every checkpoint is put (the one loader, :mod:`sipe_fairseq.checkpoints.specs`); checked by
    :func:`device_problem` before any work (exit status 2)."""
    p.add_argument("--device", default="cpu", metavar="DEVICE", type=_device,
                   help="cpu (default), cuda, cuda:N or mps: where the models run (the structure search and the "
                        "scores follow the model's device)")


DICTIONARY_MISMATCH_HELP = ("load a checkpoint whose recorded data (dict.txt and spm.model sha256, tag dictionaries) "
                            "differs from --data's, or a --data whose spm.model is missing, with a warning (default: "
                            "refused, exit status 3)")


def add_dictionary_mismatch_argument(p) -> None:
    """``--allow-dictionary-mismatch``: the override every refusal of a checkpoint's data offers (the data
    fingerprint, :mod:`sipe_fairseq.data.fingerprint`; a missing ``spm.model``), passed to
    :class:`~sipe_fairseq.checkpoints.specs.CheckpointSpecs` and the raw-text encoder."""
    p.add_argument("--allow-dictionary-mismatch", action="store_true", help=DICTIONARY_MISMATCH_HELP)


TAGS_HELP = ("structure sources, comma-separated (one column per checkpoint and source): given (a parse of the whole "
             "sentence: the data's or the tree source's tags; GiLT: its graph), self (the model's own choice from the "
             "prefix: an exact, normalized log q(x)), beam:K (a word-synchronous beam: a bound on log p(x)), mix:K (the "
             "beam read as a mixture: exact and normalized), untagged (SiPE: every word <notag>); "
             "see sipe_fairseq/structure/sources.py")


def _sources(text: str):
    try:
        return parse_sources(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _field_type(f) -> Callable[[str], object]:
    """argparse ``type`` of a :class:`~sipe_fairseq.structure.options.StructureOptions` field: the
    conversion, then the field's own range check (:func:`~sipe_fairseq.structure.options.check_value`)."""
    integer = f.type in (int, Optional[int])

    def parse(text: str):
        try:
            value = memory_size(text) if f.metadata.get("size") else int(text) if integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {range_text(f.metadata, integer)}, got {text!r}") from None
        try:
            return check_value(f, value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = range_text(f.metadata, integer)
    return parse


def _dest(f) -> str:
    return f.metadata["flag"].lstrip("-").replace("-", "_")


class _Refused(argparse.Action):
    """An option of :class:`~sipe_fairseq.structure.options.StructureOptions` that this command cannot use:
    given, it is a usage error (exit status 2) naming the option and why."""

    def __init__(self, option_strings, dest, reason: str = "", **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.reason = reason

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: {self.reason}")


# the options of a data split's sentences, which the commands that score files of sentences (BLiMP pairs,
# SyntaxGym suites) refuse: one line each, exit status 2
SPLIT_ONLY = {"max_sentences": "this command scores every sentence of its input (the first N of a split: sipe-eval-lm, "
                               "sipe-eval report)",
              "batch_sentences": "this command's --batch-size sets the sentences scored together"}


def add_structure_arguments(p, default_sources: str, refuse: Optional[Dict[str, str]] = None,
                            defaults: Optional[Dict[str, object]] = None) -> None:
    """``--tags`` (default: ``default_sources``, the command's) and every command-line option of
    :class:`~sipe_fairseq.structure.options.StructureOptions`, generated from its declarations; the
    fields named in ``refuse`` (``{field: why this command cannot use it}``) are refused when given;
    ``defaults``: the command's own defaults of some fields (the suites' ``SUITE_WIDTH``)."""
    refuse, defaults = refuse or {}, defaults or {}
    p.add_argument("--tags", type=_sources, default=None, metavar="SOURCES",
                   help=f"{TAGS_HELP}. Default: {default_sources}")
    for f in command_line_fields():
        meta, flag = f.metadata, f.metadata["flag"]
        if f.name in refuse:
            p.add_argument(flag, dest=_dest(f), action=_Refused, reason=refuse[f.name], nargs=0 if f.type is bool else None,
                           metavar=None if f.type is bool else meta["metavar"], default=argparse.SUPPRESS,
                           help=f"not taken here: {refuse[f.name]}")
        elif f.type is bool:
            p.add_argument(flag, dest=_dest(f), action="store_true" if meta["negate"] == f.default else "store_false",
                           help=meta["help"])
        else:
            default = defaults.get(f.name, f.default)
            default_note = "" if default in (None, MISSING) or meta.get("size") else " (default: %(default)s)"
            p.add_argument(flag, dest=_dest(f), default=default, metavar=meta["metavar"], choices=meta["choices"],
                           type=None if meta["choices"] else _field_type(f), help=meta["help"] + default_note)


def structure_options(args: argparse.Namespace, **code_set) -> StructureOptions:
    """The :class:`~sipe_fairseq.structure.options.StructureOptions` of a command's parsed options (the
    refused ones keep their defaults); ``code_set``: fields the code sets (``placement``)."""
    values = {}
    for f in command_line_fields():
        if hasattr(args, _dest(f)):
            value = getattr(args, _dest(f))
            values[f.name] = (not value) if f.metadata["negate"] else value
    return StructureOptions(**values, **code_set)


def add_shard_arguments(p: argparse.ArgumentParser, output: str = "json") -> None:
    """``--num-shards N --shard-id I`` (as ``fairseq-generate``): score the items whose 0-based index ``i`` has
    ``i % N == I`` (:mod:`sipe_fairseq.eval.shards`) and write a shard file for ``sipe-eval merge`` with ``--json``
    (``output``: the option naming the shard file). Checked by :func:`shard_problem` (one line, exit status 2)."""
    p.add_argument("--num-shards", type=int, default=None, metavar="N",
                   help="score a share of the items on this machine: those whose 0-based index i has i %% N == "
                        f"--shard-id (round-robin); --{output} then writes a shard file, joined by sipe-eval merge "
                        "(docs/scaling.md) (default: no sharding)")
    p.add_argument("--shard-id", type=int, default=None, metavar="I", help="this shard, 0 <= I < N (with --num-shards)")


def shard_problem(args: argparse.Namespace, output: str = "json") -> Optional[str]:
    """One line naming what is wrong with a command's ``--num-shards``/``--shard-id`` (None: fine or not sharded):
    one without the other, a value out of range, or a sharded run without its shard file (the option ``output``:
    ``--json``, or ``--output`` for ``sipe-surprisal``, whose ``--json`` is a flag) or with ``--markdown`` (the merge
    writes the table)."""
    n, i = getattr(args, "num_shards", None), getattr(args, "shard_id", None)
    if n is None and i is None:
        return None
    if n is None or i is None:
        return "--num-shards and --shard-id go together"
    try:
        check_shard(n, i)
    except ValueError as e:
        return str(e)
    if not getattr(args, output, None):
        return f"--num-shards: a shard needs --{output} (its shard file, for sipe-eval merge)"
    if getattr(args, "markdown", None):
        return "--markdown: a shard writes no table (sipe-eval merge --markdown writes the joined one)"
    return None


def add_progress_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars (default: shown on stderr when stderr is a terminal)")


def configure_progress(args: argparse.Namespace) -> None:
    """Apply a command's ``--no-progress``."""
    set_progress("off" if getattr(args, "no_progress", False) else "auto")
