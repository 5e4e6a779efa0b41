"""Optimizers registered with fairseq (layer 4, beside models and tasks): ``grouped_adam``."""
from . import grouped_adam  # noqa: F401  (registers the optimizer)
