"""Batches of a structure search dealt to worker processes on one machine (``--workers``, ``workers=``).

:func:`~.scoring.score_sentences` plans its batches (shortest sentences first, each within the memory budget)
and scores them one after the other. With ``N > 1`` workers it forks ``N`` processes after the model is
loaded (the model's weights are shared copy-on-write, so loading is paid once) and deals them the planned
batches, the most positions first (so that the longest is not left to run alone at the end); each worker runs
one torch thread and returns its batch's scores, which the parent collects back in the planned order and puts in
input order. A batch's numbers do not depend on the process
that scores it: every per-sentence total is the one-process total (tests/test_workers.py, to 1e-12).

* **Count.** ``0`` (the default of the commands and of the Python interface) is :func:`available_cores`:
  the CPUs this process may run on (its affinity mask) and its cgroup's CPU quota (``cpu.max``), no more
  workers than planned batches. A search with one batch, or one core, forks nothing.
* **Memory.** The budget (``--max-memory``, :mod:`.memory`) is split: each worker plans for ``budget / N``.
  When a sentence does not fit that share, the count drops until it does (one worker: the whole budget, and
  the usual refusal when even that is too small).
* **Interrupts.** Workers ignore SIGINT; Ctrl-C stops the parent, which terminates them: the command ends
  with its one line and exit 130, and nothing partial is written.
* **A worker that dies** (killed: the out-of-memory killer sends SIGKILL; or exited) ends the search with
  :class:`~sipe_fairseq.hexatag.errors.WorkerDiedError`, one line naming the sentences of the batch it held and
  the cause (a command's exit status 1, nothing written); the other workers are terminated.
* **Platforms.** Workers need ``fork`` (Linux; the ``fork`` start method of :mod:`multiprocessing`). Where
  there is none (macOS's default ``spawn``, Windows), a search runs in one process and says so once in the
  log: a spawned worker would load the model again.
"""
import logging
import multiprocessing
import os
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import torch

from ..hexatag.pool import WorkerPool, available_cores, can_fork
from .memory import status_kb

logger = logging.getLogger(__name__)
_JOB: Optional[Callable[[List[int]], list]] = None  # the batch function a forked worker runs (set before the fork)
_WARNED: List[bool] = []


def worker_count(requested: int, batches: int) -> int:
    """The workers a search of ``batches`` planned batches runs with: ``requested`` (0: :func:`available_cores`), no
    more than the batches, 1 where workers cannot be forked."""
    n = available_cores() if not requested else int(requested)
    n = max(1, min(n, batches))
    if multiprocessing.current_process().daemon:  # a pool's own worker may not have children
        return 1
    if n > 1 and not can_fork():
        if not _WARNED:
            logger.info("no fork start method on this platform: scoring in one process (--workers needs fork)")
            _WARNED.append(True)
        return 1
    return n


def _reset_peak() -> Optional[int]:
    """Resets this process's resident peak to its resident set (``/proc/self/clear_refs``, ``5``) and returns that
    set in kB; None where the peak cannot be reset (it would be the parent's, inherited by the fork)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return None
    return status_kb("VmRSS")


_BASE_KB: List[Optional[int]] = [None]  # a worker's resident set when it started (after the fork)


def _start() -> None:
    torch.set_num_threads(1)
    _BASE_KB[0] = _reset_peak()


def _run(batch: List[int]) -> Tuple[int, Optional[int], list]:
    """``(pid, peak growth in bytes since the worker started or None, the batch's result)``."""
    result = _JOB(batch)
    peak = status_kb("VmHWM")
    growth = None if peak is None or _BASE_KB[0] is None else max(0, peak - _BASE_KB[0]) * 1024
    return os.getpid(), growth, result


def peak_line(peaks: dict) -> str:
    """One line of the workers' peak resident growth (each worker's largest, bytes by pid), in MiB."""
    if not peaks or any(v is None for v in peaks.values()):
        return f"{len(peaks)} workers (their peak memory is not measured on this platform)"
    sizes = sorted(peaks.values(), reverse=True)
    return (f"{len(sizes)} workers, peak resident memory above the forked model per worker: "
            f"{', '.join(f'{v / 2 ** 20:,.0f}' for v in sizes)} MiB (sum {sum(sizes) / 2 ** 20:,.0f} MiB)")


def run_batches(job: Callable[[List[int]], list], batches: Sequence[List[int]], workers: int,
                cost: Optional[Callable[[List[int]], float]] = None) -> Iterator[Tuple[List[int], list]]:
    """``(batch, job(batch))`` for every batch, in the order of ``batches``: in this process when ``workers`` is 1,
    else in ``workers`` forked processes (:class:`~sipe_fairseq.hexatag.pool.WorkerPool`: ``job`` and what it reads
    are inherited by the fork, not pickled; its result is pickled back). ``cost``: the batches are handed out most
    costly first (so that the longest is not left to run alone at the end) and their results put back in order as
    they come. A worker that ends without returning its batch (killed, out of memory) stops the search with
    :class:`~sipe_fairseq.hexatag.errors.WorkerDiedError` naming that batch's sentences and the cause; an error
    raised by ``job`` in a worker is raised here."""
    global _JOB
    if workers <= 1 or len(batches) <= 1:
        for b in batches:
            yield b, job(b)
        return
    _JOB = job
    peaks = {}
    try:
        with WorkerPool(_run, workers, start=_start, method="fork") as pool:
            for batch, (pid, growth, result) in pool.map(batches, cost, covers=list):
                peaks[pid] = growth if growth is None or peaks.get(pid) is None else max(growth, peaks[pid])
                yield batch, result
        logger.info("%s", peak_line(peaks))
    finally:
        _JOB = None
