"""What a checkpoint records of the data directory it was trained on, and the comparison at load.

A model's embedding rows mean the symbols of its ``dict.txt`` in their order: scored against another
dictionary of the same size (a sentencepiece model retrained with the same vocabulary size) it runs and
prints a wrong perplexity. The plugin's tasks therefore store, in every checkpoint they save (fairseq's
``task_state``, :mod:`sipe_fairseq.tasks.sipe_data`), :func:`data_fingerprint` of their data directory:

* ``dictionary_sha256``: the sha256 of ``dict.txt`` (as ``manifest.json`` records it);
* ``spm_sha256``: the sha256 of ``spm.model`` (``manifest.json``'s ``settings.spm.sha256`` where the
  file is absent; None for a directory without sentencepiece);
* ``tag_layout``: the symbols of ``dict.terminal.txt`` and ``dict.nonterminal.txt`` in order (the tag
  heads' classes);
* ``data``: the directory's absolute path (named in the refusal, not compared).

:func:`fingerprint_mismatch` says in one line what differs (both hashes, both directories), or None.
"""
import json
import os
from typing import Optional

from .writers import sha256_file

KEY = "sipe_data"  # the entry of fairseq's task_state
TAG_KINDS = ("terminal", "nonterminal")


def _symbols(path: str) -> Optional[list]:
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return [line.split(" ")[0].rstrip("\n") for line in f if line.strip()]


def data_fingerprint(folder: str) -> Optional[dict]:
    """The fingerprint of a data directory (module docstring); None when it has no ``dict.txt``."""
    dictionary = os.path.join(folder, "dict.txt")
    if not os.path.isfile(dictionary):
        return None
    spm = os.path.join(folder, "spm.model")
    spm_sha = sha256_file(spm) if os.path.isfile(spm) else None
    if spm_sha is None and os.path.isfile(os.path.join(folder, "manifest.json")):
        try:
            with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
                spm_sha = ((json.load(f).get("settings") or {}).get("spm") or {}).get("sha256")
        except (OSError, ValueError, AttributeError):
            spm_sha = None
    layout = {kind: _symbols(os.path.join(folder, f"dict.{kind}.txt")) for kind in TAG_KINDS}
    return {"data": os.path.abspath(folder), "dictionary_sha256": sha256_file(dictionary), "spm_sha256": spm_sha,
            "tag_layout": layout}


def fingerprint_mismatch(saved: dict, current: dict) -> Optional[str]:
    """One line naming what differs between the checkpoint's data (``saved``) and the data directory it is
    loaded with (``current``), or None when they agree."""
    where = f"the checkpoint was trained on {saved.get('data')}, the data directory is {current.get('data')}"
    for key, what in (("dictionary_sha256", "dict.txt"), ("spm_sha256", "spm.model")):
        a, b = saved.get(key), current.get(key)
        if a is not None and b is not None and a != b:
            return f"{what} differs: sha256 {a} (checkpoint) vs {b} (data); {where}"
    a, b = saved.get("tag_layout") or {}, current.get("tag_layout") or {}
    for kind in TAG_KINDS:
        if a.get(kind) is not None and b.get(kind) is not None and a[kind] != b[kind]:
            return f"dict.{kind}.txt differs: tags {a[kind]} (checkpoint) vs {b[kind]} (data); {where}"
    return None
