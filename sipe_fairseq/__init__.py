"""sipe_fairseq: Syntax-informed Positional Embeddings as a fairseq plugin.

``--user-dir sipe_fairseq`` imports this package after fairseq; fairseq auto-imports only the
``tasks``/``models`` of a user dir, so :func:`register` imports the criterions and optimizers too. Importing
``sipe_fairseq.hexatag`` alone stays free of torch and fairseq (nothing is registered then);
scripts that load checkpoints call :func:`register` first.
"""
import sys

__version__ = "0.1.0"


def register() -> None:
    """Import the fairseq-registered modules (tasks, models, criterions, optimizers) and the checkpoint layer
    (which registers the ``hexatagger`` parser backend); idempotent. Layer 4 only: nothing above the
    tasks (no ``eval``, no ``cli``)."""
    # lazy (heavy): importing sipe_fairseq, e.g. for sipe_fairseq.hexatag, stays free of torch and fairseq
    from . import checkpoints, criterions, models, optim, tasks  # noqa: F401
    from .checkpoints.compat import allow_fairseq_checkpoint_globals

    allow_fairseq_checkpoint_globals()


if "fairseq" in sys.modules:  # loaded as a fairseq --user-dir (or after fairseq)
    register()
