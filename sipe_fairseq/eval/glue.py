"""GLUE metrics and the evaluation of a fine-tuned ``hexatag_sentence_prediction`` checkpoint.

    sipe-eval glue --data glue-bin/CoLA --path ck/checkpoint_best.pt --split valid
    sipe-eval glue --model-flags --path lm/checkpoint_best.pt   # flags to fine-tune an LM

prints the task's GLUE metric (CoLA: Matthews corr.; SST-2, MNLI, QNLI, RTE, WNLI: accuracy;
MRPC, QQP: F1 and accuracy; STS-B: Pearson and Spearman), in percent, over every example of the
split. The metric functions are plain numpy (the same definitions as scikit-learn/scipy, which
fairseq's ``sentence_prediction`` criterion uses while training).
"""
import logging
from typing import Dict, Optional

import numpy as np
import torch
from fairseq import utils

from ..checkpoints.load import load_with_task
from ..data.glue import glue_task
from ..data.settings import setting

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- metrics


def accuracy(preds, labels) -> float:
    preds, labels = np.asarray(preds), np.asarray(labels)
    return float((preds == labels).mean()) if len(labels) else float("nan")


def f1(preds, labels, positive=1) -> float:
    """Binary F1 of class ``positive`` (0 when it is never predicted nor present, as scikit-learn)."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    tp = float(((preds == positive) & (labels == positive)).sum())
    fp = float(((preds == positive) & (labels != positive)).sum())
    fn = float(((preds != positive) & (labels == positive)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews_corr(preds, labels) -> float:
    """Matthews correlation coefficient (multi-class form of Gorodkin 2004, = scikit-learn's);
    0 when undefined (a constant prediction or label vector)."""
    preds, labels = np.asarray(preds), np.asarray(labels)
    classes = np.unique(np.concatenate([preds, labels]))
    c = np.array([[np.sum((labels == a) & (preds == b)) for b in classes] for a in classes], dtype=np.float64)
    t, p, n, correct = c.sum(1), c.sum(0), c.sum(), np.trace(c)
    denom = np.sqrt((n * n - (p * p).sum()) * (n * n - (t * t).sum()))
    return float((correct * n - (t * p).sum()) / denom) if denom else 0.0


def _ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties get their average rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    xs = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def pearson(preds, labels) -> float:
    x, y = np.asarray(preds, dtype=np.float64), np.asarray(labels, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    denom = np.sqrt((x * x).sum() * (y * y).sum())
    return float((x * y).sum() / denom) if denom else float("nan")


def spearman(preds, labels) -> float:
    return pearson(_ranks(np.asarray(preds, dtype=np.float64)), _ranks(np.asarray(labels, dtype=np.float64)))


def glue_metrics(metric: str, preds, labels, positive=1) -> Dict[str, float]:
    """The GLUE scores of one task, in percent: ``metric`` is mcc | accuracy | acc_and_f1 |
    pearson_and_spearman (accuracy is added for every classification task)."""
    if metric == "pearson_and_spearman":
        p, s = pearson(preds, labels), spearman(preds, labels)
        return {"pearson": 100 * p, "spearman": 100 * s, "corr": 50 * (p + s)}
    out = {"accuracy": 100 * accuracy(preds, labels)}
    if metric == "mcc":
        out = {"mcc": 100 * matthews_corr(preds, labels), **out}
    elif metric == "acc_and_f1":
        ff = f1(preds, labels, positive)
        out = {"f1": 100 * ff, **out, "acc_and_f1": 50 * (ff + out["accuracy"] / 100)}
    elif metric != "accuracy":
        raise ValueError(f"unknown GLUE metric {metric!r}")
    return out


# ----------------------------------------------------------------------------- predictions
def predict(model, task, split: str = "valid", max_tokens: Optional[int] = 8192, batch_size: Optional[int] = None):
    """(predictions, targets) over every example of ``split``, in dataset order: class ids, or
    regression values."""
    task.load_dataset(split)
    ds = task.dataset(split)
    head = setting(task.cfg, "classification_head_name", "sentence_classification_head")  # fairseq's task: absent
    itr = task.get_batch_iterator(ds, max_tokens=max_tokens, max_sentences=batch_size,
                                  max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
                                  ignore_invalid_inputs=False, required_batch_size_multiple=1).next_epoch_itr(shuffle=False)
    model.eval()
    ids, preds, targets = [], [], []
    with torch.no_grad():
        for sample in itr:
            if not sample:
                continue
            logits, _ = model(**sample["net_input"], features_only=True, classification_head_name=head)
            ids.append(sample["id"])
            preds.append(logits.view(-1).float() if task.cfg.regression_target else logits.argmax(-1))
            if "target" in sample:
                targets.append(sample["target"].view(-1))
    if not ids:
        raise ValueError(f"split {split!r} is empty")
    order = torch.cat(ids).argsort()
    n = len(order)
    if n != len(ds):
        raise RuntimeError(f"scored {n} of {len(ds)} examples of {split}")
    preds = torch.cat(preds)[order].numpy()
    targets = torch.cat(targets)[order].numpy() if targets else None
    return preds, targets


def evaluate_glue(path: str, data: Optional[str] = None, split: str = "valid", task_name: Optional[str] = None,
             max_tokens: Optional[int] = 8192, batch_size: Optional[int] = None) -> Dict[str, object]:
    """Predict ``split`` and score it with the task's GLUE metric; returns a result row."""
    model, task = load_with_task(path, data)
    name = task_name or task.cfg.glue_task or (task.glue_info or {}).get("task")
    if not name:
        raise ValueError("unknown GLUE task: pass --task-name (the data directory has no glue.json)")
    spec = glue_task(name)
    preds, targets = predict(model, task, split, max_tokens, batch_size)
    if targets is None:
        raise ValueError(f"split {split!r} has no labels (a GLUE test split?)")
    positive = 1
    if not spec.regression:
        labels = [task.label_dictionary[i + task.label_dictionary.nspecial] for i in range(spec.num_classes)]
        if spec.positive is not None:
            positive = labels.index(spec.positive)
    scores = glue_metrics(spec.metric, preds, targets, positive)
    return {"task": spec.name, "split": split, "n": int(len(targets)), "metric": spec.metric, **scores}
