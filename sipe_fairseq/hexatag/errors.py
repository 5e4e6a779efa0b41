"""The plugin's error classes and exit statuses, in its lowest layer so that every layer can raise
and catch them (pure Python: no torch, no fairseq).

* The hexatag core's errors (:class:`HexatagError` and its subclasses), all ``ValueError``.
* The user errors (:data:`USER_ERRORS`): :class:`DataError`, :class:`EvaluationError`,
  :class:`OptionError`, :class:`CheckpointError`, :class:`OutputError` (an output that cannot be written:
  disk full, file too large, a closed pipe). Each message is one line naming the file or the option. A
  command stops on one with that line, without a traceback (the ``sys.excepthook`` of
  :func:`install_error_hook`), and exit status 1; :class:`UsageError` (a criterion's option)
  exits 2 as argparse does, :class:`CheckpointError` exits :data:`CHECKPOINT_EXIT_STATUS` as every
  ``sipe-*`` command that cannot read or use a checkpoint. A write to a closed stdout (``| head``) ends the
  same way, one line and exit status 1.
* Ctrl-C (an uncaught ``KeyboardInterrupt``) ends a command with the one line ``sipe_fairseq: interrupted``
  and exit status 130, killed by SIGINT as the interpreter itself ends then (so that a shell loop stops too);
  the outputs are written through the atomic writer (:mod:`sipe_fairseq.data.writers`), so nothing partial
  remains.

Importing this module (or any of the package) changes nothing global: the hook is installed only where a
command runs (the ``sipe-*`` commands' logging set-up, :func:`sipe_fairseq.cli.logs.configure`, and the
plugin's tasks set up by a ``fairseq-*`` command, :func:`sipe_fairseq.tasks.sipe_data.install_command_error_hook`).
In Python the user errors are ordinary exceptions.
"""
import os
import signal
import sys

CHECKPOINT_EXIT_STATUS = 3  # every sipe-* command: a checkpoint is missing, refused or unreadable


class HexatagError(ValueError):
    """A tag sequence or tree that cannot be encoded or decoded."""


class TreeError(HexatagError):
    """An ill-formed dependency tree (no single root, a cycle, a head out of range)."""


class NonProjectiveError(TreeError):
    """A non-projective tree given where a projective one is required (strict mode)."""


class InputError(ValueError):
    """A line of an input file that cannot be read (:mod:`sipe_fairseq.hexatag.lines`: bytes that are not UTF-8,
    an empty line where a sentence is due): one line, ``FILE:LINE: message``. Commands end on it with exit
    status 2 (an input error); ``path``, ``line`` and ``reason`` (the message alone) are kept."""

    def __init__(self, path, line, message):
        self.path, self.line, self.reason = str(path), line, message
        super().__init__(f"{path}:{line}: {message}")

    def __reduce__(self):  # its arguments, not its message: it crosses to and from worker processes
        return type(self), (self.path, self.line, self.reason)


class ConlluError(HexatagError, InputError):
    """Malformed CoNLL-U input; the message names the file and line (an :class:`InputError` too)."""


class DataError(ValueError):
    """A data directory that cannot be used as it is; the message names the file (and the first bad
    sentence) in one line (:mod:`sipe_fairseq.data.validate`)."""


class EvaluationError(RuntimeError):
    """An evaluation that cannot give a meaningful result (e.g. it scored no token)."""


class NonFiniteScoreError(EvaluationError, ValueError):
    """A score that came out NaN or infinite (finite weights that overflow in the forward pass): refused where
    it is made, naming the sentence and the source, never written nor counted. A user error (exit status 1)
    for a command, a ``ValueError`` for the Python interface. ``index``: the sentence's 0-based index in the
    scorer's input (None: unknown), ``source``: what it was scored under, ``detail``: the message without its
    subject (``"under given: log-probability is nan (...)"``), so that a caller that knows the sentence's text
    names it (:meth:`naming`)."""

    def __init__(self, message: str, index=None, source=None, detail=None):
        super().__init__(message)
        self.index, self.source, self.detail = index, source, detail if detail is not None else message

    def naming(self, subject: str) -> "NonFiniteScoreError":
        """The same error with ``subject`` (e.g. ``"sentence 3 ('The dog runs.')"``) in place of its own."""
        return NonFiniteScoreError(f"{subject} {self.detail}", self.index, self.source, self.detail)


class WorkerDiedError(EvaluationError):
    """A worker process (:mod:`sipe_fairseq.hexatag.pool`: ``--workers``) that ended without returning its
    item: killed (the system's out-of-memory killer sends SIGKILL), or exited. The run stops there and nothing
    is written; the message is one line naming the item's sentences and the cause. ``indices``: the item's
    sentences (0-based, in the caller's input), ``cause``: how the process ended, ``names``: what the message calls
    them (default ``input sentence N``, counted from 1; a caller that knows the sentences renames them:
    :meth:`naming`), ``what``: the work (``scoring``, ``parsing``). A user error (exit status 1) for a command."""

    SHOWN = 4  # sentences named in the message; the rest are counted

    def __init__(self, indices, cause: str, names=None, what: str = "scoring"):
        self.indices, self.cause, self.what = list(indices), cause, what
        self.names = list(names) if names is not None else [f"input sentence {i + 1}" for i in self.indices]
        shown = "; ".join(self.names[:self.SHOWN])
        more = f"; and {len(self.names) - self.SHOWN} more" if len(self.names) > self.SHOWN else ""
        stopped = "the search stopped" if what == "scoring" else "the run stopped"
        super().__init__(f"a worker process {cause} while {what} {len(self.indices)} sentences ({shown}{more}): "
                         f"{stopped} and nothing is written")

    def naming(self, name) -> "WorkerDiedError":
        """The same error with each sentence called ``name(index)`` (e.g. ``"sentence 3 ('The dog runs.')"``)."""
        return WorkerDiedError(self.indices, self.cause, [name(i) for i in self.indices], self.what)

    def __reduce__(self):
        return type(self), (self.indices, self.cause, self.names, self.what)


class OutputError(OSError):
    """An output that could not be written (``--output``, ``--json``, ``--markdown``, ``--plot``, a data
    directory's file): the disk is full, the file too large, the reader of a pipe went away. Raised by the one
    writer (:func:`sipe_fairseq.data.writers.atomic_open`) with ``errno``, ``strerror`` and the path as
    ``filename``; its message is one line naming the path and the reason. A regular file is left as it was (the
    temporary file is removed). A user error (exit status 1) for a command."""

    def __str__(self) -> str:
        return f"{self.filename}: cannot write: {self.strerror or 'error'}"


class OptionError(ValueError):
    """Options that cannot work together (e.g. ``--task gilt_lm`` with blocks that cut sentences, or
    generation with a model that cannot choose the structure it reads), or data the options cannot
    take (a ``gilt_lm`` sentence longer than ``--tokens-per-sample``)."""


class UsageError(OptionError):
    """An option value out of its range, or options that cannot go together, in a fairseq command: a
    criterion's dataclass fields, which fairseq's argparse does not check. One line and exit status
    :data:`USAGE_EXIT_STATUS`, as argparse's own usage errors."""


USAGE_EXIT_STATUS = 2
INTERRUPTED_EXIT_STATUS = 128 + signal.SIGINT  # 130: what a shell reports for a command ended by Ctrl-C
INTERRUPTED_LINE = "sipe_fairseq: interrupted"


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded; the message is one line naming the file."""


USER_ERRORS = (DataError, EvaluationError, OptionError, CheckpointError, OutputError)


def install_error_hook() -> bool:
    """Make an uncaught user error (:data:`USER_ERRORS`) end the process with one line on stderr,
    ``sipe_fairseq: error: <message>``, and its exit status (1; :class:`UsageError`: 2; :class:`CheckpointError`:
    :data:`CHECKPOINT_EXIT_STATUS`) instead of a traceback, and Ctrl-C (``KeyboardInterrupt``) with
    :data:`INTERRUPTED_LINE` and status :data:`INTERRUPTED_EXIT_STATUS` (:func:`_end_interrupted`); any other
    exception goes to the hook that was in place. For commands only (see the module docstring). Idempotent: True
    when it installed the hook, False when it was already there."""
    if getattr(sys.excepthook, "sipe_one_line_errors", False):
        return False
    sys.excepthook = _one_line_errors(sys.excepthook)
    return True


def _one_line_errors(previous):
    def hook(exc_type, exc, tb):
        if issubclass(exc_type, KeyboardInterrupt):
            _end_interrupted()
        if issubclass(exc_type, BrokenPipeError):  # stdout's reader went away (`| head`): one line, exit status 1
            _end_broken_pipe()
            return
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


def _end_broken_pipe() -> None:
    """A write to a closed pipe that no writer turned into an :class:`OutputError` (stdout: ``| head``): one line,
    and stdout onto ``/dev/null`` so that the interpreter's last flush of what is left adds no second one."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no file descriptor behind stdout
        pass
    print("sipe_fairseq: error: <stdout>: cannot write: the reader closed the pipe (Broken pipe)", file=sys.stderr,
          flush=True)


def _end_interrupted() -> None:
    """One line, then the end a shell expects of Ctrl-C: killed by SIGINT (the shell's status 130; a script's
    loop stops, as it does not for a plain exit 130), :data:`INTERRUPTED_EXIT_STATUS` if the signal cannot kill
    the process. Every ``with`` block has been left by then: the atomic writer removed its temporary files."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing more to say there
            pass
    try:
        print(INTERRUPTED_LINE, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except (OSError, ValueError):  # not the main thread, or no such signal here
        pass
    os._exit(INTERRUPTED_EXIT_STATUS)


def ignore_interrupts(*_) -> None:
    """The initializer of a command's worker processes: Ctrl-C reaches the terminal's whole process group, and a
    worker that took it would print its own traceback; the command (the parent) ends in one line and terminates
    its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
