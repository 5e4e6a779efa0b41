"""Progress bars of the evaluation commands (``sipe-eval blimp|syntaxgym|report|attention``,
``sipe-eval-lm``): tqdm on stderr, so stdout carries only the reports. As in ``sipe-preprocess``,
a bar is shown only when stderr is a terminal (tqdm's ``disable=None``) and never with
``--no-progress`` (:func:`set_progress` ``("off")``, as :func:`sipe_fairseq.cli.options.configure_progress`
sets it); :func:`set_progress` ``("on")`` forces it (tests)."""
import sys
from typing import Iterable, Optional

from tqdm import tqdm

MODES = {"auto": None, "on": False, "off": True}  # mode -> tqdm's ``disable``
_mode = "auto"


def set_progress(mode: str) -> None:
    """``auto`` (a bar when stderr is a terminal), ``on`` (always) or ``off`` (never), process-wide."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"progress mode must be one of {sorted(MODES)}, got {mode!r}")
    _mode = mode


def progress(iterable: Optional[Iterable] = None, desc: str = "", unit: str = " batch", total: Optional[int] = None) -> tqdm:
    """A tqdm bar on stderr under the current mode (removed from the terminal when it closes)."""
    return tqdm(iterable, desc=desc, unit=unit, total=total, disable=MODES[_mode], file=sys.stderr, leave=False)
