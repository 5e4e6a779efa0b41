"""Reading a setting that a configuration may lack: the one place for ``getattr(cfg, name, default)``.

A declared field is read as ``cfg.name``: fairseq fills a task's fields from its dataclass, and the
models fill theirs (``models/_common.py: declared_defaults``). :func:`setting` is for a configuration
that may truly lack the field: one of another kind (fairseq's ``language_modeling`` task has no tag
timing, a stock model's config no pooler settings, fairseq's generation options no ``continue_word``).
"""
from typing import Any


def setting(cfg, name: str, default: Any = None) -> Any:
    """``cfg.name``, or ``default`` when ``cfg`` (which may be None) has no such field."""
    return getattr(cfg, name, default)


def task_setting(task, name: str, default: Any = None) -> Any:
    """:func:`setting` of a task's configuration (``task.args``)."""
    return setting(getattr(task, "args", None), name, default)
