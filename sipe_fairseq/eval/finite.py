"""Finite or refused: a score that comes out NaN or infinite is an error, never a number in a table.

:func:`first_non_finite` finds the first score of an evaluation's result that is not finite (a perplexity,
a negative log-likelihood, the bits of a position type that has tokens), naming where it is; the commands
raise :class:`~sipe_fairseq.hexatag.errors.EvaluationError` with that line (exit status 1).
:func:`json_safe` turns what remains NaN, the entries that do not apply (e.g. the tag bits of a model
without tags, the bits of a position type without tokens), into ``None``: JSON ``null``.
"""
import math
from typing import Mapping, Optional, Tuple

SCORES = ("nll", "ppl", "ppl_per_word", "joint_ppl", "bits")  # a result's entries that must be finite when counted


def _counted(row: Mapping, key: str) -> bool:
    """Whether ``row[key]`` scores something: its row counts tokens (``count``, ``tokens``), or for ``bits.X``
    the position type X has tokens (``tokens.X``)."""
    if key.startswith("bits."):
        kind = key[len("bits."):]
        return bool(row.get(f"tokens.{kind}", 0)) if f"tokens.{kind}" in row else False
    return bool(row.get("count", row.get("tokens", 0)))


def _bad(value) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def first_non_finite(rows: Mapping, path: Tuple[str, ...] = ()) -> Optional[str]:
    """``"a / lm / ppl = nan"`` for the first non-finite score of nested result dicts (None: all finite)."""
    for key, value in rows.items():
        if isinstance(value, Mapping):
            found = first_non_finite(value, path + (str(key),))
            if found:
                return found
        elif (key in SCORES or str(key).startswith("bits.")) and _bad(value) and _counted(rows, str(key)):
            return f"{' / '.join(path + (str(key),))} = {value}"
    return None


def json_safe(obj):
    """``obj`` with every non-finite float as ``None`` (JSON ``null``; ``json.dumps`` would write ``NaN``)."""
    if isinstance(obj, Mapping):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return None if _bad(obj) else obj

