"""GLUE TSVs -> a fairseq ``sentence_prediction`` directory with aligned hexatag streams
(``sipe-glue-preprocess``).

Layout of the destination directory (fairseq's GLUE layout, as ``examples/roberta`` builds it, plus
tags; splits ``train``, ``valid``, ``valid1``, ``test``, ``test1`` as in fairseq's
``preprocess_GLUE_tasks.sh``)::

    input0/dict.txt                    the PRE-TRAINING dict.txt, byte for byte
    input0/dict.{terminal,nonterminal}.txt
    input0/{split}.bin/.idx            first sentence: subword ids + </s>
    input0/{split}.{terminal,nonterminal}.bin/.idx   one tag id per token (as sipe-preprocess)
    input1/...                         second sentence (pair tasks only), same files
    label/dict.txt                     classification: the task's labels in a fixed order
    label/{split}.bin/.idx             classification: label id + </s> per example (fairseq-preprocess)
    label/{split}.label                label text per example (regression: the score / 5, as fairseq)
    spm.model                          copy of the pre-training sentencepiece model (if any)
    glue.json                          task, metric, classes, parser, counts per split

Sentences are parsed (one tree per input, see :mod:`sipe_fairseq.parsing`) and encoded with
the pre-training directory's :class:`~sipe_fairseq.data.encode.SentenceEncoder`, so pieces, ids
and tag placement are exactly those of the pre-training data.

*Nothing is dropped silently.* A sentence whose parse fails (parser error, invalid tree) is kept
with every tag ``<notag>`` (words from a rule-based tokenizer when the parser gave none); it is
logged with ``file:line`` and counted (``parse_failed``). A row that cannot be read (too few
fields, unknown label, bad score) is refused: logged with ``file:line`` and counted by reason.
``fail_on_parse_error`` / ``fail_on_refusal`` turn either into an error before anything is written.
"""
import json
import logging
import os
import shutil
from collections import Counter
from dataclasses import dataclass, field
from itertools import chain
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
from fairseq.data import Dictionary
from tqdm import tqdm

from ..hexatag import HexatagError, encode_tree
from ..parsing import ParseError, parse_each, split_words, tree_source_stats
from .encode import SentenceEncoder
from .tag_dictionary import FIRST_TAG_ID, NOTAG, NOTAG_ID, TAG_KINDS, build_tag_dictionary, tag_names
from .writers import sha256_file, write_manifest, write_streams, write_text

logger = logging.getLogger(__name__)

Column = Union[int, str]  # an index (headerless files) or a header name


@dataclass(frozen=True)
class GlueTask:
    """Where a GLUE task's TSVs keep their texts and labels (official GLUE layouts)."""

    name: str
    folder: str
    text: Tuple[Column, ...]             # one column (single sentence) or two (pair)
    label: Column
    labels: Optional[Tuple[str, ...]]    # class labels in id order; None: regression
    metric: str                          # mcc | accuracy | acc_and_f1 | pearson_and_spearman
    files: Tuple[Tuple[str, str], ...] = (("train", "train.tsv"), ("valid", "dev.tsv"), ("test", "test.tsv"))
    test_text: Optional[Tuple[str, ...]] = None   # header names in test.tsv, when they differ
    positive: Optional[str] = None       # positive class for F1

    @property
    def pair(self) -> bool:
        return len(self.text) == 2

    @property
    def regression(self) -> bool:
        return self.labels is None

    @property
    def num_classes(self) -> int:
        return 1 if self.labels is None else len(self.labels)


GLUE_TASKS: Dict[str, GlueTask] = {t.name: t for t in (
    # CoLA: no header in train/dev: source, label, original label ("*"), sentence; test.tsv: index, sentence
    GlueTask("cola", "CoLA", text=(3,), label=1, labels=("0", "1"), metric="mcc", test_text=("sentence",)),
    GlueTask("sst-2", "SST-2", text=("sentence",), label="label", labels=("0", "1"), metric="accuracy"),
    # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String
    GlueTask("mrpc", "MRPC", text=("#1 String", "#2 String"), label="Quality", labels=("0", "1"),
             metric="acc_and_f1", positive="1"),
    # QQP: id, qid1, qid2, question1, question2, is_duplicate (test: id, question1, question2)
    GlueTask("qqp", "QQP", text=("question1", "question2"), label="is_duplicate", labels=("0", "1"),
             metric="acc_and_f1", positive="1"),
    # STS-B: index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score
    GlueTask("sts-b", "STS-B", text=("sentence1", "sentence2"), label="score", labels=None,
             metric="pearson_and_spearman"),
    # MNLI: index, promptID, pairID, genre, 4 parse columns, sentence1, sentence2, label1[..5], gold_label
    GlueTask("mnli", "MNLI", text=("sentence1", "sentence2"), label="gold_label",
             labels=("contradiction", "entailment", "neutral"), metric="accuracy",
             files=(("train", "train.tsv"), ("valid", "dev_matched.tsv"), ("valid1", "dev_mismatched.tsv"),
                    ("test", "test_matched.tsv"), ("test1", "test_mismatched.tsv"))),
    GlueTask("qnli", "QNLI", text=("question", "sentence"), label="label", labels=("entailment", "not_entailment"),
             metric="accuracy"),
    GlueTask("rte", "RTE", text=("sentence1", "sentence2"), label="label", labels=("entailment", "not_entailment"),
             metric="accuracy"),
    GlueTask("wnli", "WNLI", text=("sentence1", "sentence2"), label="label", labels=("0", "1"), metric="accuracy"),
)}
_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "mnli-m": "mnli"}
STSB_SCALE = 0.2  # fairseq's preprocess_GLUE_tasks.sh divides STS-B scores by 5
REFUSAL_REASONS = ("malformed-row", "bad-label", "bad-score", "encoding-error")


def glue_task(name: str) -> GlueTask:
    """The :class:`GlueTask` for a name such as ``cola``, ``CoLA``, ``sst2`` or ``STS-B``."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in GLUE_TASKS:
        raise ValueError(f"unknown GLUE task {name!r}; known: {sorted(GLUE_TASKS)}")
    return GLUE_TASKS[key]


class GluePreprocessError(RuntimeError):
    """Preprocessing cannot go on (missing input, bad header, refusals with fail_on_*)."""


# ----------------------------------------------------------------------------- reading


@dataclass
class GlueExample:
    line: int                     # 1-based line in the TSV
    texts: Tuple[str, ...]
    label: Optional[str]          # None in unlabelled (test) files


@dataclass
class GlueSplit:
    path: str
    examples: List[GlueExample] = field(default_factory=list)
    labelled: bool = True
    refused: Counter = field(default_factory=Counter)
    rows_read: int = 0


def _fields(raw: bytes, path: str, lineno: int) -> List[str]:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{lineno}: not UTF-8 ({e.reason})") from None
    return line.rstrip("\r\n").split("\t")


def read_glue_tsv(path: str, task: Union[str, GlueTask]) -> GlueSplit:
    """Read one GLUE TSV of ``task``: texts (and label, if the file has one) per row.

    Fields are split on tabs only (GLUE files are not CSV-quoted; quotes are text) and lines on
    ``\\n`` only. Headed files are read by column name; CoLA's train/dev have no header and are read
    by position (a CoLA file that starts with ``index<TAB>sentence`` is its unlabelled test file).
    Rows with too few fields, unknown labels or unparsable scores are refused (logged with
    ``file:line``, counted in ``refused``)."""
    task = glue_task(task) if isinstance(task, str) else task
    out = GlueSplit(path)
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    if lines and lines[-1] in (b"", b"\r"):
        lines.pop()
    if not lines:
        return out
    first = _fields(lines[0], path, 1)
    headed = not isinstance(task.text[0], int) or first == ["index", "sentence"]
    if headed:
        names = {n: i for i, n in enumerate(first)}
        want = task.text if all(c in names for c in task.text) else (task.test_text or task.text)
        missing = [c for c in want if c not in names]
        if missing:
            raise GluePreprocessError(f"{path}:1: header {first} lacks column(s) {missing} of {task.folder}")
        text_idx = [names[c] for c in want]
        label_idx = names.get(task.label) if isinstance(task.label, str) else None
        body, start = lines[1:], 2
    else:
        text_idx, label_idx, body, start = list(task.text), task.label, lines, 1
    out.labelled = label_idx is not None
    need = max(text_idx + ([label_idx] if out.labelled else [])) + 1
    for lineno, raw in enumerate(body, start):
        out.rows_read += 1
        try:
            fields = _fields(raw, path, lineno)
        except ValueError as e:
            out.refused["encoding-error"] += 1
            logger.warning("refused (encoding-error): %s", e)
            continue
        if len(fields) < need:
            out.refused["malformed-row"] += 1
            logger.warning("refused (malformed-row): %s:%d: %d fields, %s needs %d", path, lineno, len(fields), task.folder, need)
            continue
        label = None
        if out.labelled:
            label = fields[label_idx].strip()
            if task.regression:
                try:
                    value = float(label)
                    if not np.isfinite(value):
                        raise ValueError(label)
                except ValueError:
                    out.refused["bad-score"] += 1
                    logger.warning("refused (bad-score): %s:%d: score %r is not a number", path, lineno, label)
                    continue
            elif label not in task.labels:
                out.refused["bad-label"] += 1
                logger.warning("refused (bad-label): %s:%d: label %r not in %s", path, lineno, label, list(task.labels))
                continue
        out.examples.append(GlueExample(lineno, tuple(fields[i] for i in text_idx), label))
    return out


def glue_split_files(folder: str, task: Union[str, GlueTask], splits: Optional[Sequence[str]] = None) -> List[Tuple[str, str]]:
    """``[(split, path)]`` of the task's TSVs present in ``folder`` (``splits``: fairseq split names
    to keep, or TSV file stems such as ``dev_matched``; a requested split that is absent is an error)."""
    task = glue_task(task) if isinstance(task, str) else task
    found = [(s, os.path.join(folder, f)) for s, f in task.files if os.path.isfile(os.path.join(folder, f))]
    if splits is None:
        if not found:
            raise GluePreprocessError(f"{folder}: none of {[f for _, f in task.files]} exists (a GLUE {task.folder} folder?)")
        return found
    out = []
    for want in splits:
        match = [(s, p) for s, p in found if want in (s, os.path.splitext(os.path.basename(p))[0])]
        if not match:
            expected = [f for _, f in task.files]
            raise GluePreprocessError(f"{folder}: no {want} split of {task.folder} (expected one of {expected})")
        out += match
    return out


# ----------------------------------------------------------------------------- encoding


@dataclass
class EncodedSentence:
    tokens: np.ndarray
    terminal: np.ndarray
    nonterminal: np.ndarray
    failure: Optional[str] = None      # parse-error | invalid-tree (sentence kept with <notag>)
    detail: str = ""
    lifted: int = 0


def _parse_all(source, texts: Sequence[str], batch_size: int = 1024):
    """Parse each distinct text once; ``{text: (words, heads or None) | ParseError}``."""
    uniq = list(dict.fromkeys(texts))
    results = {}
    bar = tqdm(total=len(uniq), desc="parse", unit=" sent", disable=None)
    for s in range(0, len(uniq), batch_size):
        chunk = uniq[s:s + batch_size]
        for text, r in zip(chunk, parse_each(source, chunk, batch_size)):
            results[text] = r
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return results


def encode_parsed(encoder, text: str, parsed) -> EncodedSentence:
    """Tokens and tags of one sentence from its parse (or a parse failure, kept with ``<notag>``)."""
    failure, detail, tags, lifted = None, "", None, 0
    if isinstance(parsed, ParseError):
        words, failure, detail = split_words(text), "parse-error", str(parsed)
    else:
        words, heads = parsed
        if heads is not None:
            try:
                if len(heads) != len(words):
                    raise HexatagError(f"{len(words)} words but {len(heads)} heads")
                tags, _, lifted = encode_tree(list(heads))
            except HexatagError as e:  # TreeError / NonProjectiveError / length mismatch: unusable tree
                failure, detail = "invalid-tree", str(e)
    toks, terms, nts, _ = encoder.encode(list(words), tags=tags)
    return EncodedSentence(toks.numpy(), terms.numpy(), nts.numpy(), failure, detail, lifted)


# ----------------------------------------------------------------------------- writing


@dataclass
class GluePreprocessOptions:
    """Settings of :func:`preprocess_glue` (the ``sipe-glue-preprocess`` options)."""

    task: str
    glue_dir: str
    pretrain_data: str
    destdir: str
    splits: Optional[Sequence[str]] = None
    fail_on_parse_error: bool = False
    fail_on_refusal: bool = False
    limit: Optional[int] = None          # first N examples per split (quick runs)


def label_dictionary(task: GlueTask, counts: Optional[Counter] = None):
    """The task's labels in their fixed GLUE order (not by frequency): class id = index in
    ``task.labels`` (``label/dict.txt``; fairseq subtracts the 4 specials)."""
    d = Dictionary()
    for lab in task.labels:
        d.add_symbol(lab, n=int((counts or {}).get(lab, 0)))
    return d


def read_glue_info(data_dir: str) -> Optional[dict]:
    """``glue.json`` of a ``sipe-glue-preprocess`` directory, or None if it has none."""
    path = os.path.join(data_dir, "glue.json")
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_glue_splits(opts: GluePreprocessOptions, task: GlueTask) -> Dict[str, GlueSplit]:
    """Read step: every split's TSV (``limit`` applied), refusals checked against ``fail_on_refusal``."""
    if not os.path.isfile(os.path.join(opts.pretrain_data, "dict.txt")):
        raise GluePreprocessError(f"{opts.pretrain_data}: no dict.txt; --pretrain-data must be the sipe-preprocess "
                                  "directory the checkpoint was trained on")
    if os.path.exists(os.path.join(opts.destdir, "glue.json")):
        raise FileExistsError(f"{os.path.join(opts.destdir, 'glue.json')} exists; use a new --destdir")
    data = {}
    for split, path in glue_split_files(opts.glue_dir, task, opts.splits):
        d = read_glue_tsv(path, task)
        if opts.limit is not None:
            d.examples = d.examples[: opts.limit]
        if split == "train" and not d.labelled:
            raise GluePreprocessError(f"{path}: the training file has no {task.label!r} column")
        data[split] = d
        logger.info("[%s] %s: %d examples (%s), %d refused", split, path, len(d.examples),
                    "labelled" if d.labelled else "unlabelled", sum(d.refused.values()))
    refused = {s: dict(d.refused) for s, d in data.items() if d.refused}
    if refused and opts.fail_on_refusal:
        raise GluePreprocessError(f"refused rows {refused}; nothing written (--fail-on-refusal)")
    return data


@dataclass
class EncodedTexts:
    """Parse-and-encode step: the whitespace-normalized texts of every example and split, and each
    distinct sentence's encoding (parsed once)."""

    texts: Dict[str, List[Tuple[str, ...]]]
    encoded: Dict[str, EncodedSentence]
    parser_errors: int
    failed: int


def encode_glue_texts(opts: GluePreprocessOptions, data: Dict[str, GlueSplit], source, encoder) -> EncodedTexts:
    texts = {s: [tuple(" ".join(t.split()) for t in ex.texts) for ex in d.examples] for s, d in data.items()}
    parses = _parse_all(source, list(chain.from_iterable(chain.from_iterable(texts.values()))))
    n_errors = sum(isinstance(r, ParseError) for r in parses.values())
    encoded = {t: encode_parsed(encoder, t, r) for t, r in parses.items()}
    failed = sum(bool(e.failure) for e in encoded.values())
    if failed and opts.fail_on_parse_error:
        raise GluePreprocessError(f"{failed} sentences could not be parsed/tagged ({n_errors} parser errors); "
                                  "nothing written (--fail-on-parse-error)")
    return EncodedTexts(texts, encoded, n_errors, failed)


def write_glue_vocabulary(opts: GluePreprocessOptions, task: GlueTask, data: Dict[str, GlueSplit], enc: EncodedTexts):
    """Vocabulary step: the pre-training ``dict.txt`` (and ``spm.model``) copied byte for byte, the tag
    dictionaries (fixed layout; counts from train) per input, and the label dictionary (classification);
    returns the label dictionary or None."""
    os.makedirs(opts.destdir, exist_ok=True)
    inputs = [f"input{k}" for k in range(len(task.text))]
    for key in inputs:
        os.makedirs(os.path.join(opts.destdir, key), exist_ok=True)
        shutil.copyfile(os.path.join(opts.pretrain_data, "dict.txt"), os.path.join(opts.destdir, key, "dict.txt"))
    spm_path = os.path.join(opts.pretrain_data, "spm.model")
    if os.path.exists(spm_path):
        shutil.copyfile(spm_path, os.path.join(opts.destdir, "spm.model"))
    os.makedirs(os.path.join(opts.destdir, "label"), exist_ok=True)
    train_enc = [enc.encoded[t] for t in chain.from_iterable(enc.texts.get("train", []))]
    for kind in TAG_KINDS:
        ids = Counter(chain.from_iterable(getattr(e, kind).tolist() for e in train_enc))
        counts = {c: ids.get(FIRST_TAG_ID + i, 0) for i, c in enumerate(tag_names(kind))}
        counts[NOTAG] = ids.get(NOTAG_ID, 0)
        d = build_tag_dictionary(kind, counts)
        for key in inputs:
            d.save(os.path.join(opts.destdir, key, f"dict.{kind}.txt"))
    if task.regression:
        return None
    train_labels = Counter(ex.label for ex in data["train"].examples) if "train" in data else Counter()
    labels_d = label_dictionary(task, train_labels)
    labels_d.save(os.path.join(opts.destdir, "label", "dict.txt"))
    return labels_d


def write_glue_split(opts: GluePreprocessOptions, task: GlueTask, split: str, d: GlueSplit, enc: EncodedTexts,
                     encoder, labels_d) -> dict:
    """Streams step for one split: per input the token and tag streams, then the labels; returns its counts."""
    inputs = [f"input{k}" for k in range(len(task.text))]
    texts, encoded, vocab = enc.texts[split], enc.encoded, len(encoder.dictionary)
    st = Counter()
    for k, key in enumerate(inputs):
        sents = [encoded[t[k]] for t in texts]
        sizes = np.array([len(e.tokens) for e in sents], dtype=np.int64)
        cat = lambda attr: np.concatenate([getattr(e, attr) for e in sents]) if sents else np.zeros(0, np.int64)  # noqa: E731
        streams = {"": (cat("tokens"), vocab)}
        streams.update({f".{kind}": (cat(kind), FIRST_TAG_ID + len(tag_names(kind))) for kind in TAG_KINDS})
        write_streams(os.path.join(opts.destdir, key, split), sizes, streams)
        st["sentences"] += len(sents)
        st["tokens"] += int(sizes.sum())
        st["unk_tokens"] += int(sum((e.tokens == encoder.dictionary.unk()).sum() for e in sents))
        st["tagged_tokens"] += int(sum((e.terminal >= FIRST_TAG_ID).sum() for e in sents))
        st["trees_lifted"] += sum(e.lifted > 0 for e in sents)
        for e in sents:
            if e.failure:
                st[f"parse_failed_{e.failure}"] += 1
        st["max_tokens_per_example"] = max(st["max_tokens_per_example"], int(sizes.max()) if len(sizes) else 0)
    if len(inputs) == 2:
        both = [len(encoded[a].tokens) + len(encoded[b].tokens) for a, b in texts]
        st["max_tokens_per_example"] = max(both, default=0)
    failed_ex = [(ex.line, k, encoded[s]) for ex, t in zip(d.examples, texts) for k, s in enumerate(t) if encoded[s].failure]
    for line, k, e in failed_ex[:20]:
        logger.warning("parse failed (%s): %s:%d sentence %d kept with <notag> tags: %s",
                       e.failure, d.path, line, k + 1, e.detail)
    if len(failed_ex) > 20:
        logger.warning("... %d more sentences of %s with failed parses", len(failed_ex) - 20, d.path)
    if d.labelled:
        lp = os.path.join(opts.destdir, "label", split)
        if task.regression:
            write_text(lp + ".label", "".join(f"{float(ex.label) * STSB_SCALE:.6g}\n" for ex in d.examples))
        else:
            write_text(lp + ".label", "".join(ex.label + "\n" for ex in d.examples))
            ids = np.array([[labels_d.index(ex.label), labels_d.eos()] for ex in d.examples], dtype=np.int64).reshape(-1)
            write_streams(lp, np.full(len(d.examples), 2, dtype=np.int64), {"": (ids, len(labels_d))})
        st["labels"] = dict(sorted(Counter(ex.label for ex in d.examples).items())) if not task.regression else len(d.examples)
    st["parse_failed"] = len(failed_ex)
    logger.info("[%s] %d examples, %d tokens, %d unk, %d sentences with failed parses (kept, <notag>), %d refused rows",
                split, len(d.examples), st["tokens"], st["unk_tokens"], len(failed_ex), sum(d.refused.values()))
    return {
        "path": d.path, "sha256": sha256_file(d.path), "rows_read": d.rows_read, "examples": len(d.examples),
        "labelled": d.labelled, "refused": {r: d.refused.get(r, 0) for r in REFUSAL_REASONS},
        "rows_refused": sum(d.refused.values()), **{k: (int(v) if not isinstance(v, dict) else v) for k, v in st.items()},
    }


def build_glue_manifest(opts: GluePreprocessOptions, task: GlueTask, source, enc: EncodedTexts, stats: Dict[str, dict]) -> dict:
    spm_path = os.path.join(opts.pretrain_data, "spm.model")
    return {
        "format": "sipe-glue/1",
        "task": task.name, "folder": task.folder, "pair": task.pair, "regression": task.regression,
        "num_classes": task.num_classes, "labels": list(task.labels) if task.labels else None,
        "metric": task.metric, "positive_label": task.positive,
        "label_scale": STSB_SCALE if task.regression else None,
        "parser": tree_source_stats(source),
        "distinct_sentences": len(enc.encoded), "distinct_sentences_parse_failed": enc.failed,
        "pretrain_data": {
            "path": os.path.abspath(opts.pretrain_data),
            "dict.txt": sha256_file(os.path.join(opts.pretrain_data, "dict.txt")),
            "spm.model": sha256_file(spm_path) if os.path.exists(spm_path) else None,
        },
        "limit": opts.limit,
        "splits": stats,
    }


def preprocess_glue(opts: GluePreprocessOptions, source) -> dict:
    """Build the directory described in the module docstring; ``source`` is a parser (or any tree
    source of :mod:`sipe_fairseq.parsing.sources`). Returns the manifest (also ``glue.json``).
    Steps: read -> parse and encode -> vocabulary -> streams -> manifest."""
    task = glue_task(opts.task)
    data = read_glue_splits(opts, task)
    encoder = SentenceEncoder(opts.pretrain_data)
    enc = encode_glue_texts(opts, data, source, encoder)
    labels_d = write_glue_vocabulary(opts, task, data, enc)
    stats = {split: write_glue_split(opts, task, split, d, enc, encoder, labels_d) for split, d in data.items()}
    manifest = build_glue_manifest(opts, task, source, enc, stats)
    write_manifest(os.path.join(opts.destdir, "glue.json"), manifest)
    logger.info("wrote %s", opts.destdir)
    return manifest
