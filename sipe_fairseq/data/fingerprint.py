"""What a checkpoint records of the data directory it was trained on, and the comparison at load.

A model's embedding rows mean the symbols of its ``dict.txt`` in their order: scored against another
dictionary of the same size (a sentencepiece model retrained with the same vocabulary size) it runs and
prints a wrong perplexity. The plugin's tasks therefore store, in every checkpoint they save (fairseq's
``task_state``, :mod:`sipe_fairseq.tasks.sipe_data`), :func:`data_fingerprint` of their data directory:

* ``dictionary_sha256``: the sha256 of ``dict.txt`` (as ``manifest.json`` records it);
* ``spm_sha256``: the sha256 of ``spm.model`` (``manifest.json``'s ``settings.spm.sha256`` where the
  file is absent; None for a directory without sentencepiece); ``spm_file``: whether ``spm.model`` is there
  (at load a checkpoint that recorded an ``spm_sha256`` needs the file itself: without it the raw-text
  encoder, :class:`~sipe_fairseq.data.encode.SentenceEncoder`, would make every word ``<unk>``);
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


def _manifest_spm_sha256(folder: str) -> Optional[str]:
    """``manifest.json``'s ``settings.spm.sha256`` (the sentencepiece model that encoded the data), or None."""
    try:
        with open(os.path.join(folder, "manifest.json"), encoding="utf-8") as f:
            return ((json.load(f).get("settings") or {}).get("spm") or {}).get("sha256")
    except (OSError, ValueError, AttributeError):
        return None


def spm_problem(folder: str) -> Optional[str]:
    """One line when ``folder``'s ``manifest.json`` records an ``spm.model`` (its sha256) that is not there
    or not that file: new sentences would not be encoded as the data was (a missing model makes every word
    ``<unk>``); None when it is fine or nothing is recorded. Checked by the raw-text encoder
    (:class:`~sipe_fairseq.data.encode.SentenceEncoder`)."""
    listed = _manifest_spm_sha256(folder)
    if listed is None:
        return None
    path = os.path.join(folder, "spm.model")
    if not os.path.isfile(path):
        return (f"spm.model is missing: {path}: no such file, {os.path.join(folder, 'manifest.json')} records sha256 "
                f"{listed} (the sentencepiece model that encoded the data): without it every raw-text word is "
                "encoded as <unk>")
    found = sha256_file(path)
    if found != listed:
        return (f"spm.model differs: {path} has sha256 {found}, {os.path.join(folder, 'manifest.json')} records "
                f"{listed} (the sentencepiece model that encoded the data)")
    return None


def data_fingerprint(folder: str) -> Optional[dict]:
    """The fingerprint of a data directory (module docstring); None when it has no ``dict.txt``."""
    dictionary = os.path.join(folder, "dict.txt")
    if not os.path.isfile(dictionary):
        return None
    spm = os.path.join(folder, "spm.model")
    spm_sha = sha256_file(spm) if os.path.isfile(spm) else _manifest_spm_sha256(folder)
    layout = {kind: _symbols(os.path.join(folder, f"dict.{kind}.txt")) for kind in TAG_KINDS}
    return {"data": os.path.abspath(folder), "dictionary_sha256": sha256_file(dictionary), "spm_sha256": spm_sha,
            "spm_file": os.path.isfile(spm), "tag_layout": layout}


def fingerprint_mismatch(saved: dict, current: dict) -> Optional[str]:
    """One line naming what differs between the checkpoint's data (``saved``) and the data directory it is
    loaded with (``current``), or None when they agree."""
    where = f"the checkpoint was trained on {saved.get('data')}, the data directory is {current.get('data')}"
    recorded = saved.get("spm_sha256")
    if recorded is not None and current.get("spm_file") is False:  # the manifest's hash is no sentencepiece model
        listed = current.get("spm_sha256")
        return (f"spm.model is missing: {os.path.join(str(current.get('data')), 'spm.model')}: no such file, the "
                f"checkpoint recorded sha256 {recorded} (data: no file; its manifest.json records "
                f"{listed or 'none'}): without it every raw-text word is encoded as <unk>; {where}")
    for key, what in (("dictionary_sha256", "dict.txt"), ("spm_sha256", "spm.model")):
        a, b = saved.get(key), current.get(key)
        if a is not None and b is not None and a != b:
            return f"{what} differs: sha256 {a} (checkpoint) vs {b} (data); {where}"
    a, b = saved.get("tag_layout") or {}, current.get("tag_layout") or {}
    for kind in TAG_KINDS:
        if a.get(kind) is not None and b.get(kind) is not None and a[kind] != b[kind]:
            return f"dict.{kind}.txt differs: tags {a[kind]} (checkpoint) vs {b[kind]} (data); {where}"
    return None
