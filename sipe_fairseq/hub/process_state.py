"""The process-wide logging and warnings set-up that loading a model from Python leaves as the user had it.

Importing fairseq configures the root logger: ``fairseq/models/wav2vec/wav2vec2_classification.py`` calls
``logging.basicConfig(level=DEBUG)`` (a stderr handler, root at DEBUG), and torch, numpy and scipy add warnings
filters on import. In a command that is the command's business (:mod:`sipe_fairseq.cli.logs`); in a user's
interpreter the next ``import matplotlib.pyplot`` would print its debug lines. :func:`process_state_kept`
puts the root logger's level and handlers and ``warnings.filters`` back as they were when it was entered.
Pure Python (no torch, no fairseq): :mod:`sipe_fairseq.hub` enters it before it imports them.
``sys.excepthook`` is not restored: nothing the hub runs may change it (tests/test_import_side_effects.py).
"""
import contextlib
import logging
import warnings
from typing import Iterator


@contextlib.contextmanager
def process_state_kept() -> Iterator[None]:
    """On exit, the root logger's level and handlers (the same handler objects, in the same order) and
    ``warnings.filters`` (and ``warnings.showwarning``) as on entry, whatever ran inside; nestable."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    with warnings.catch_warnings():  # restores warnings.filters and showwarning on exit
        try:
            yield
        finally:
            for handler in list(root.handlers):
                if handler not in handlers:
                    root.removeHandler(handler)
            if root.handlers != handlers:  # one removed or reordered inside: put the user's list back
                for handler in list(root.handlers):
                    root.removeHandler(handler)
                for handler in handlers:
                    root.addHandler(handler)
            root.setLevel(level)


@contextlib.contextmanager
def quiet_loading(names=("fairseq", "sipe_fairseq")) -> Iterator[None]:
    """Inside: the loggers ``names`` that set no level of their own log at the root logger's level of entry (the
    user's: WARNING by default), whatever the root logger becomes inside (fairseq's ``basicConfig(level=DEBUG)``
    on a later import); on exit their levels as on entry. So ``hub.load`` logs nothing at the default level, and
    a user who configured logging sees what the configuration asks for."""
    level = logging.getLogger().level
    loggers = [logging.getLogger(name) for name in names]
    saved = [lg.level for lg in loggers]
    for lg in loggers:
        if lg.level == logging.NOTSET:
            lg.setLevel(level)
    try:
        yield
    finally:
        for lg, old in zip(loggers, saved):
            lg.setLevel(old)
