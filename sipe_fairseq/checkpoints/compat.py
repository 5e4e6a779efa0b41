"""Loading fairseq checkpoints under torch >= 2.6, which unpickles weights-only by default.

fairseq writes two kinds of plain data that the weights-only unpickler refuses: the
``argparse.Namespace`` of argparse-configured models (its ``roberta``, for one) and numpy scalars
(the best validation metric when scikit-learn computed it: MCC, F1, Pearson). This allows just these
types, process-wide (a ``safe_globals`` context would drop a registration made inside it, e.g. by a
module imported while loading).
"""
import argparse

_done = False


def allow_fairseq_checkpoint_globals() -> None:
    """Idempotent: add the Namespace and numpy scalar types to torch's weights-only allowlist."""
    global _done
    if _done:
        return
    # lazy (heavy): importing sipe_fairseq.checkpoints stays free of torch and numpy
    import numpy as np
    import torch

    try:
        from numpy._core.multiarray import scalar as np_scalar  # numpy >= 2
    except ImportError:
        from numpy.core.multiarray import scalar as np_scalar
    dtypes = [type(np.dtype(t)) for t in (np.float64, np.float32, np.int64, np.int32, np.bool_)]
    torch.serialization.add_safe_globals([argparse.Namespace, np_scalar, np.dtype] + dtypes)
    _done = True
