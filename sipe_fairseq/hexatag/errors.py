"""The plugin's error classes and exit statuses, in its lowest layer so that every layer can raise
and catch them (pure Python: no torch, no fairseq).

* The hexatag core's errors (:class:`HexatagError` and its subclasses), all ``ValueError``.
* The user errors (:data:`USER_ERRORS`): :class:`DataError`, :class:`EvaluationError`,
  :class:`OptionError`, :class:`CheckpointError`. Each message is one line naming the file or the
  option. A command stops on one with that line, without a traceback (the ``sys.excepthook`` of
  :func:`install_error_hook`), and exit status 1; :class:`UsageError` (a criterion's option)
  exits 2 as argparse does, :class:`CheckpointError` exits :data:`CHECKPOINT_EXIT_STATUS` as every
  ``sipe-*`` command that cannot read or use a checkpoint.

Importing this module (or any of the package) changes nothing global: the hook is installed only where a
command runs (the ``sipe-*`` commands' logging set-up, :func:`sipe_fairseq.cli.logs.configure`, and the
plugin's tasks set up by a ``fairseq-*`` command, :func:`sipe_fairseq.tasks.sipe_data.install_command_error_hook`).
In Python the user errors are ordinary exceptions.
"""
import os
import sys

CHECKPOINT_EXIT_STATUS = 3  # every sipe-* command: a checkpoint is missing, refused or unreadable


class HexatagError(ValueError):
    """A tag sequence or tree that cannot be encoded or decoded."""


class TreeError(HexatagError):
    """An ill-formed dependency tree (no single root, a cycle, a head out of range)."""


class NonProjectiveError(TreeError):
    """A non-projective tree given where a projective one is required (strict mode)."""


class ConlluError(HexatagError):
    """Malformed CoNLL-U input; the message names the file and line."""

    def __init__(self, path, line, message):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}")


class DataError(ValueError):
    """A data directory that cannot be used as it is; the message names the file (and the first bad
    sentence) in one line (:mod:`sipe_fairseq.data.validate`)."""


class EvaluationError(RuntimeError):
    """An evaluation that cannot give a meaningful result (e.g. it scored no token)."""


class NonFiniteScoreError(EvaluationError, ValueError):
    """A score that came out NaN or infinite (finite weights that overflow in the forward pass): refused where
    it is made, naming the sentence and the source, never written nor counted. A user error (exit status 1)
    for a command, a ``ValueError`` for the Python interface."""


class OptionError(ValueError):
    """Options that cannot work together (e.g. ``--task gilt_lm`` with blocks that cut sentences, or
    generation with a model that cannot choose the structure it reads), or data the options cannot
    take (a ``gilt_lm`` sentence longer than ``--tokens-per-sample``)."""


class UsageError(OptionError):
    """An option value out of its range, or options that cannot go together, in a fairseq command: a
    criterion's dataclass fields, which fairseq's argparse does not check. One line and exit status
    :data:`USAGE_EXIT_STATUS`, as argparse's own usage errors."""


USAGE_EXIT_STATUS = 2


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded; the message is one line naming the file."""


USER_ERRORS = (DataError, EvaluationError, OptionError, CheckpointError)


def install_error_hook() -> bool:
    """Make an uncaught user error (:data:`USER_ERRORS`) end the process with one line on stderr,
    ``sipe_fairseq: error: <message>``, and its exit status (1; :class:`UsageError`: 2; :class:`CheckpointError`:
    :data:`CHECKPOINT_EXIT_STATUS`) instead of a traceback; any other exception goes to the hook that was in
    place. For commands only (see the module docstring). Idempotent: True when it installed the hook, False
    when it was already there."""
    if getattr(sys.excepthook, "sipe_one_line_errors", False):
        return False
    sys.excepthook = _one_line_errors(sys.excepthook)
    return True


def _one_line_errors(previous):
    def hook(exc_type, exc, tb):
        if not issubclass(exc_type, USER_ERRORS):
            previous(exc_type, exc, tb)
            return
        sys.stderr.flush()
        print(f"sipe_fairseq: error: {exc}", file=sys.stderr, flush=True)
        for kind, code in ((CheckpointError, CHECKPOINT_EXIT_STATUS), (UsageError, USAGE_EXIT_STATUS)):
            if issubclass(exc_type, kind):  # a checkpoint that cannot be used (as the sipe-* commands), an option
                sys.stdout.flush()
                os._exit(code)  # the interpreter would exit 1 after the hook

    hook.sipe_one_line_errors = True
    hook.previous = previous
    return hook
