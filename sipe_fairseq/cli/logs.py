"""Logging set-up of the plugin's commands, in one place.

Importing fairseq configures the root logger itself (its ``wav2vec2_classification`` model calls
``logging.basicConfig(level=DEBUG)`` at import time), and a plain ``basicConfig`` afterwards does
nothing: a command that imports fairseq before its ``main`` runs kept fairseq's level and default
format whatever it asked for. :func:`configure` replaces that default set-up, so every command logs
what it declares, always to stderr (stdout carries the reports); ``LOGLEVEL`` (fairseq's variable)
overrides the root level, as for ``fairseq-train``. A set-up made by whoever calls ``main()`` in
process (an application, a notebook, pytest's capture) is left alone.

:func:`configure` is also where a command installs the one-line user errors
(:func:`~sipe_fairseq.hexatag.errors.install_error_hook`): importing the package changes nothing global, a
command's ``main()`` does.
"""
import logging
import os
import sys
from typing import Optional

from sipe_fairseq.hexatag.errors import install_error_hook

FAIRSEQ_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"  # fairseq_cli's
SHORT_FORMAT = "%(levelname)s %(name)s: %(message)s"


def configure(level: str = "INFO", fmt: str = FAIRSEQ_FORMAT, plugin_level: Optional[int] = None) -> None:
    """Root logger at ``level`` (or ``$LOGLEVEL``) on stderr with ``fmt``; with ``plugin_level`` the
    plugin's own loggers (``sipe_fairseq.*``) at that level, e.g. WARNING for fairseq and INFO for the
    plugin's counts and checks. Installs the one-line user errors (idempotent)."""
    install_error_hook()
    if _unconfigured_or_default(logging.getLogger()):
        logging.basicConfig(format=fmt, level=os.environ.get("LOGLEVEL", level).upper(), stream=sys.stderr, force=True)
    if plugin_level is not None:
        logging.getLogger("sipe_fairseq").setLevel(plugin_level)


def _unconfigured_or_default(root: logging.Logger) -> bool:
    """No handler yet, or only the one a bare ``logging.basicConfig()`` installs (a plain
    StreamHandler with logging's default format): nobody chose this set-up, so a command may."""
    return all(type(h) is logging.StreamHandler and h.formatter is not None and h.formatter._fmt == logging.BASIC_FORMAT
               for h in root.handlers)
