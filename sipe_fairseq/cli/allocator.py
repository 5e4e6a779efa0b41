"""Keep freed memory in the process for reuse while a command searches over structures (glibc only).

The structure engine allocates and frees tensors of megabytes at every decoder step (the KV cache as it
grows, the reorders' gathers, the logits over the vocabulary). glibc serves a block that large with
``mmap`` and gives it back to the system on ``free``, so the next step's block is faulted in again page
by page: on the EWT walkthrough checkpoints a quarter of ``mix:16``'s CPU time was the kernel's
(docs/benchmarks.md, "Freed memory kept for reuse"). :func:`keep_freed_memory` raises glibc's mmap and
trim thresholds (``mallopt``) so that freed blocks stay in the heap and are reused; the price is a peak
resident size that does not shrink before the command ends.

The commands that search (``sipe-eval-lm``, ``sipe-eval``, ``sipe-surprisal``, ``sipe-generate``) call it
first; ``SIPE_MALLOC=system`` keeps glibc's own settings. The library does not call it: a Python caller
owns its process (``sipe_fairseq.hub`` users may call it themselves). Elsewhere than glibc it does nothing.
"""
import ctypes
import logging
import os

from sipe_fairseq.structure.memory import c_function

logger = logging.getLogger(__name__)

# mallopt parameters (glibc's malloc.h) and the values set: blocks up to 2 GiB from the heap, no trimming
# below 2 GiB of free heap top, 256 MiB of padding on each heap growth
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
SETTINGS = ((M_MMAP_THRESHOLD, 2 ** 31 - 1), (M_TRIM_THRESHOLD, 2 ** 31 - 1), (M_TOP_PAD, 2 ** 28))
OPT_OUT = "SIPE_MALLOC"


def keep_freed_memory() -> bool:
    """Set glibc's thresholds (module docstring); True when every ``mallopt`` call succeeded, False when
    ``SIPE_MALLOC=system`` or the C library has no ``mallopt``."""
    if os.environ.get(OPT_OUT, "") == "system":
        return False
    mallopt = c_function("mallopt")
    if mallopt is None:
        logger.debug("no mallopt in this C library: the allocator keeps its own settings")
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(param, value) == 1 for param, value in SETTINGS)
