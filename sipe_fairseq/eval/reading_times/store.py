"""Scores of the stories kept between runs (``sipe-eval reading-times --scores DIR``).

Scoring the corpus is the run's cost (the structure's mixture in context: minutes per checkpoint); the
regression, the bootstrap and the comparisons over seeds take seconds. With ``--scores DIR`` each checkpoint's
scores under each source are written to ``DIR/<key>.json`` once, and a later run that asks for the same scores
reads them instead: add a checkpoint to a table, change ``--baseline``, ``--structural``, ``--folds`` or the
bootstrap, and only what is new is scored.

The key is the sha256 of what the numbers depend on: the checkpoint file's bytes, the data directory's
fingerprint (dictionary, sentencepiece model, tag layout; not its path), the source, the structure options that
change a number (not ``--workers``, ``--max-memory`` or the batch sizes, which change the work and the last
float32 digits only), the context rule, the device, the corpus's sentences (words, heads, stories) and the
plugin's version. A file whose content does not carry its own key, or cannot be read, is scored again, with a
warning, and replaced. Code changes within one version are not seen: empty the folder after changing the
scoring code.
"""
import hashlib
import importlib.metadata as md
import json
import logging
import os
from dataclasses import asdict
from typing import List, Optional, Tuple

from sipe_fairseq.data.fingerprint import data_fingerprint
from sipe_fairseq.data.writers import atomic_open

from .analysis import ScoredSentence
from .corpus import Corpus

logger = logging.getLogger(__name__)

FORMAT = "sipe-reading-scores/1"
# the structure options that change the work or the last float32 digits only, not the numbers compared
WORK_ONLY = ("workers", "max_memory", "batch_sentences", "max_sentences", "share_prefixes", "use_cache")


def corpus_sha256(corpus: Corpus) -> str:
    """The sha256 of the sentences the models score: per sentence its story, words and heads, in corpus order."""
    text = json.dumps([[s.item, list(s.words), list(s.heads)] for s in corpus.sentences], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def score_key(checkpoint_sha256: str, data: str, source: str, options: dict, context: str, device: str,
              corpus_digest: str) -> Tuple[str, dict]:
    """``(key, what)``: the hex key of one checkpoint's scores under ``source`` (``checkpoint_sha256``: its file's
    sha256, :func:`~sipe_fairseq.data.writers.sha256_file`, hashed once per checkpoint) and the material it hashes."""
    data_fp = dict(data_fingerprint(data) or {})
    data_fp.pop("data", None)
    what = {"format": FORMAT, "version": _version(), "checkpoint_sha256": checkpoint_sha256, "data": data_fp,
            "source": source, "options": {k: v for k, v in sorted(options.items()) if k not in WORK_ONLY},
            "context": context, "device": str(device or "cpu"), "corpus_sha256": corpus_digest}
    key = hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode("utf-8")).hexdigest()
    return key, what


def _version() -> str:
    try:
        return md.version("sipe_fairseq")
    except md.PackageNotFoundError:
        return "unknown"


def path_of(folder: str, key: str) -> str:
    return os.path.join(folder, f"{key}.json")


def load(folder: str, key: str) -> Optional[Tuple[List[ScoredSentence], str, bool]]:
    """``(scored, kind, corrected)`` kept under ``key``, or None: no such file, or one that cannot be used (warned)."""
    path = path_of(folder, key)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            stored = json.load(f)
        if stored.get("format") != FORMAT or stored.get("key") != key:
            raise ValueError("its key is not its name")
        scored = [ScoredSentence(**s) for s in stored["sentences"]]
        return scored, str(stored["kind"]), bool(stored["corrected"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        logger.warning("%s: stored scores not used (%s): scoring again", path, e)
        return None


def keep(folder: str, key: str, what: dict, name: str, scored: List[ScoredSentence], kind: str,
         corrected: bool) -> str:
    """Keeps ``scored`` under ``key`` (atomically: a run stopped part way leaves no file); its path."""
    os.makedirs(folder, exist_ok=True)
    path = path_of(folder, key)
    record = {"format": FORMAT, "key": key, "what": what, "checkpoint": name, "kind": kind, "corrected": corrected,
              "sentences": [asdict(s) for s in scored]}
    with atomic_open(path) as f:
        f.write(json.dumps(record, ensure_ascii=False))
    return path
