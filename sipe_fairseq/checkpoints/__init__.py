"""Loading checkpoints of every kind (layer 4, beside models/tasks/criterions). The reader imports no
task: it finds the task a checkpoint names in fairseq's registry.

- :mod:`.compat`: the weights-only allowlist (``argparse.Namespace``, numpy scalars) for fairseq
  checkpoints under torch >= 2.6.
- :mod:`.load`: :func:`read_checkpoint` (the one place a checkpoint file is read; a missing, refused
  or unreadable file raises :class:`CheckpointError` naming it), :func:`load_lm` (decoders and
  masked-LM encoders, scored through ``hexatag_lm``/``hexatag_mlm`` tasks), :func:`load_with_task`
  (taggers, GLUE classifiers: the checkpoint's own task), :func:`load_tagger`. :class:`CheckpointError`
  and :data:`CHECKPOINT_EXIT_STATUS` are defined in :mod:`sipe_fairseq.hexatag.errors`.
- :mod:`.encoder_init`: warm start of a hexatagger's encoder (``sipe_tagger --init-encoder CKPT``).
- :mod:`.gilt_init`: warm start of a ``gilt_transformer_lm`` (``--gilt-init-from CKPT``).
- :mod:`.specs`: ``--path [NAME=]CKPT`` specs and the one loader of them (:class:`CheckpointSpecs`,
  :func:`load_checkpoint`: ``load_lm`` plus the one dictionary check of every command).
- :mod:`.hexatagger`: the ``hexatagger:CKPT`` parser backend, registered into
  :mod:`sipe_fairseq.parsing` on import.

Importing this package stays light (torch and fairseq are imported when a checkpoint is loaded).
"""
from . import hexatagger  # noqa: F401  registers the hexatagger parser backend
from .compat import allow_fairseq_checkpoint_globals  # noqa: F401
from .load import (  # noqa: F401
    CHECKPOINT_EXIT_STATUS, MASKED_LM_TASKS, CheckpointError, load_lm, load_tagger, load_with_task, read_checkpoint,
)
from .specs import (  # noqa: F401
    CheckpointSpecs, LoadedCheckpoint, check_dictionary, load_checkpoint, parse_checkpoint_specs,
)
