"""The plugin's one pool of worker processes, one pipe each: the structure search's batches
(:mod:`sipe_fairseq.structure.workers`, ``--workers`` of the scoring commands), the parser's batches of
``sipe-tag --workers`` and ``sipe-preprocess --workers`` (:mod:`sipe_fairseq.parsing.line_tagger`) and a suite's
parse (:mod:`sipe_fairseq.parsing.parallel`).

A worker is handed its next item only when it has returned one, so the parent knows which item each worker
holds. It waits on the pipes and on the processes' sentinels together: a worker that ends without answering
(killed: the system's out-of-memory killer sends SIGKILL; or exited) raises
:class:`~.errors.WorkerDiedError` naming what that item covers and the cause, and the other workers are
terminated. (:class:`multiprocessing.Pool` waits for a dead worker's task forever.) An exception the job raises in
a worker is raised in the parent, as one process would raise it. Workers ignore SIGINT: Ctrl-C stops the parent,
which terminates them.

``method``: ``"fork"`` (the job and what it reads are inherited, not pickled: load first, then fork) or
``"spawn"`` (the job and ``start``'s arguments are pickled: module-level functions; each worker loads what it
needs in ``start``), None: the platform's default. Pure standard library: every layer may use it.
"""
import multiprocessing
import os
import signal
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Sequence, Tuple

from .errors import WorkerDiedError


def cgroup_cpus(root: str = "/") -> Optional[float]:
    """The CPUs a cgroup v2 ``cpu.max`` (``"QUOTA PERIOD"``) allows this process, None without a quota; read under
    ``root`` (tests fake it): the process's own group (``/proc/self/cgroup``'s ``0::/path``) and every one above it."""
    try:
        line = next(x for x in Path(root, "proc/self/cgroup").read_text().splitlines() if x.startswith("0::"))
    except (OSError, StopIteration):
        return None
    mount = Path(root, "sys/fs/cgroup")
    path, out = mount / line[3:].strip().strip("/"), []
    while True:
        try:
            quota, period = Path(path, "cpu.max").read_text().split()[:2]
            if quota != "max" and int(period) > 0:
                out.append(int(quota) / int(period))
        except (OSError, ValueError):
            pass
        if path == mount or mount not in path.parents:
            break
        path = path.parent
    return min(out) if out else None


def available_cores(root: str = "/") -> int:
    """The cores this process may use: its affinity mask (``os.sched_getaffinity``; ``os.cpu_count`` where there is
    none), at most its cgroup's CPU quota rounded down (:func:`cgroup_cpus`), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    quota = cgroup_cpus(root)
    if quota is not None:
        cores = min(cores, int(quota))
    return max(1, cores)


def can_fork() -> bool:
    """Whether worker processes can be forked here (Linux; not Windows; macOS's default is ``spawn``)."""
    return "fork" in multiprocessing.get_all_start_methods()


class WorkerPool:
    """``workers`` processes that each run ``start(*start_args)`` once, then ``job(item)`` for every item they are
    handed (:meth:`map`); a context manager (:meth:`close` on exit). ``what``: the work, for the message of a worker
    that dies (``"scoring"``, ``"parsing"``)."""

    def __init__(self, job: Callable, workers: int, start: Optional[Callable] = None, start_args: tuple = (),
                 method: Optional[str] = "fork", what: str = "scoring"):
        self.what = what
        context = multiprocessing.get_context(method)
        self.processes, self.pipes = [], []
        try:
            for _ in range(max(1, workers)):
                ours, theirs = context.Pipe()
                process = context.Process(target=_serve, args=(theirs, job, start, start_args), daemon=True)
                process.start()
                theirs.close()
                self.processes.append(process)
                self.pipes.append(ours)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def map(self, items: Iterable, cost: Optional[Callable] = None, covers: Optional[Callable] = None,
            names: Optional[Callable] = None) -> Iterator[Tuple[object, object]]:
        """``(item, job(item))`` for every item, in the order of ``items``, as the workers return them. Without a
        ``cost``, ``items`` may be any iterable, read as the workers take them (a stream is never held whole);
        ``cost``: the items are handed out most costly first (ties in order: the longest is not left to run alone at
        the end). A worker that dies raises :class:`~.errors.WorkerDiedError` with ``covers(item)`` (the indices,
        0-based in the caller's input, that the item holds; default: the item's position) and ``names(item)`` (what
        the message calls them; default ``input sentence N``); a job that raises in a worker raises here."""
        if not self.processes:
            raise RuntimeError("WorkerPool.map after close()")
        if cost is not None:
            items = list(items)
            pending = iter([(k, items[k]) for k in dealing_order(items, cost)])
        else:
            pending = enumerate(items)
        holding, done = {}, {}  # holding: worker -> (position, item) it has

        def died(w: int) -> WorkerDiedError:
            process = self.processes[w]
            process.join(timeout=5)
            k, item = holding[w]
            return WorkerDiedError(covers(item) if covers else [k], exit_cause(process.exitcode),
                                   names(item) if names else None, self.what)

        def hand(w: int) -> None:
            nxt = next(pending, None)
            if nxt is not None:
                holding[w] = nxt
                try:
                    self.pipes[w].send(nxt[1])
                except OSError:  # the process ended after its last answer
                    raise died(w) from None

        following = 0
        try:
            for w in range(len(self.processes)):
                hand(w)
            while holding:
                ready = set(wait([self.pipes[w] for w in holding] + [self.processes[w].sentinel for w in holding]))
                for w in [w for w in holding if self.pipes[w] in ready or self.processes[w].sentinel in ready]:
                    if not self.pipes[w].poll():  # the process ended with nothing in its pipe
                        raise died(w)
                    try:  # an answer sent before the process ended is read; half of one raises EOFError
                        kind, result = self.pipes[w].recv()
                    except (EOFError, OSError):
                        raise died(w) from None
                    if kind == "error":
                        raise result
                    k, item = holding.pop(w)
                    done[k] = (item, result)
                    hand(w)
                while following in done:
                    yield done.pop(following)
                    following += 1
        finally:
            if holding:  # stopped early (an error, or the caller's): answers are still on their way; the pool ends
                self.close()

    def close(self) -> None:
        """Every worker asked to return, then joined; one that does not return at once (it holds an item: the
        caller stopped early) is terminated."""
        for process, pipe in zip(self.processes, self.pipes):
            if process.is_alive():
                try:
                    pipe.send(None)
                except OSError:
                    pass
        for process in self.processes:
            process.join(timeout=0.5)
            if process.is_alive():
                process.terminate()
                process.join()
        for pipe in self.pipes:
            pipe.close()
        self.processes, self.pipes = [], []


def dealing_order(items: Sequence, cost: Optional[Callable] = None) -> list:
    """The order the workers are handed ``items`` in (indices): the most costly first, ties in order; the given order
    without a ``cost``."""
    if cost is None:
        return list(range(len(items)))
    return sorted(range(len(items)), key=lambda k: -cost(items[k]))


def _serve(pipe, job, start, start_args) -> None:
    """A worker: items from ``pipe`` until ``None``, each answered ``("ok", job(item))``, or ``("error", the
    exception)`` when the job raises (a user's error, e.g. a sentence the parser refuses: the parent raises it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and terminates the workers
    try:
        if start is not None:
            start(*start_args)
    except Exception as e:  # noqa: BLE001  raised in the parent for the first item
        failed = e
    else:
        failed = None
    while True:
        item = pipe.recv()
        if item is None:
            return
        try:
            if failed is not None:
                raise failed
            pipe.send(("ok", job(item)))
        except Exception as e:  # noqa: BLE001  the parent raises it, as one process would
            try:
                pipe.send(("error", e))
            except Exception:  # noqa: BLE001  an exception that does not pickle: its line
                pipe.send(("error", RuntimeError(f"{type(e).__name__}: {e}")))


def exit_cause(exitcode: Optional[int]) -> str:
    """How a worker process ended, for :class:`~.errors.WorkerDiedError`."""
    if exitcode is None:
        return "stopped answering"
    if exitcode >= 0:
        return f"exited with status {exitcode}"
    try:
        name = signal.Signals(-exitcode).name
    except ValueError:
        name = f"signal {-exitcode}"
    if -exitcode == getattr(signal, "SIGKILL", None):
        return (f"was killed by {name} (what the system's out-of-memory killer sends: a lower --max-memory or fewer "
                "--workers may fit)")
    return f"was killed by {name}"
