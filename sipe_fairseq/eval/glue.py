"""GLUE metrics and the evaluation of a fine-tuned ``hexatag_sentence_prediction`` checkpoint.

    python -m sipe_fairseq.eval.glue --data glue-bin/CoLA --path ck/checkpoint_best.pt --split valid
    python -m sipe_fairseq.eval.glue --model-flags --path lm/checkpoint_best.pt   # flags to fine-tune an LM

prints the task's GLUE metric (CoLA: Matthews corr.; SST-2, MNLI, QNLI, RTE, WNLI: accuracy;
MRPC, QQP: F1 and accuracy; STS-B: Pearson and Spearman), in percent, over every example of the
split. The metric functions are plain numpy (the same definitions as scikit-learn/scipy, which
fairseq's ``sentence_prediction`` criterion uses while training).
"""
import argparse
import json
import logging
import sys
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..checkpoints.load import CHECKPOINT_EXIT_STATUS, CheckpointError, load_with_task, read_checkpoint

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


# ----------------------------------------------------------------------------- model flags

# head settings are left to the fine-tuning command; the rest are task settings or interpolations
_NOT_MODEL_FLAGS = {"_name", "tokens_per_sample", "max_target_positions", "pooler_dropout", "pooler_activation_fn",
                    "tie_adaptive_weights", "load_checkpoint_heads", "spectral_norm_classification_head"}


def _legacy_model_options(arch: str):
    """``{dest: (flag, default, is_switch)}`` of an argparse-configured fairseq model (e.g. ``roberta``)."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    cls = ARCH_MODEL_REGISTRY.get(arch)
    if cls is None or not hasattr(cls, "add_args"):
        return None
    parser = argparse.ArgumentParser(add_help=False)
    cls.add_args(parser)
    return {a.dest: (a.option_strings[0], a.default, a.nargs == 0) for a in parser._actions if a.option_strings}


def model_flags(path: str) -> List[str]:
    """fairseq-train flags that rebuild the model body of a (pre-trained) checkpoint: ``--arch`` and
    every field of the model's config with its saved value (booleans only when they differ from the
    default, as fairseq's store_true/store_false flags require), so ``--finetune-from-model`` or
    ``--restore-file`` loads it strictly. Encoders get ``--max-positions``, their pre-training length
    (``sipe_roberta``'s learned positions are sized by it, as RoBERTa's). fairseq's argparse models
    (``roberta``) are read through their ``add_args``. Classification-head settings are left to the
    fine-tuning command."""
    from fairseq.models import ARCH_MODEL_NAME_REGISTRY, MODEL_DATACLASS_REGISTRY
    from omegaconf import OmegaConf

    state = read_checkpoint(path)  # registers the sipe models; allows the Namespace of legacy checkpoints
    cfg = state["cfg"]
    model = OmegaConf.to_container(cfg, resolve=True)["model"] if OmegaConf.is_config(cfg["model"]) else vars(cfg["model"])
    arch = model.get("_name") or model.get("arch")
    dc = MODEL_DATACLASS_REGISTRY.get(ARCH_MODEL_NAME_REGISTRY.get(arch, arch))
    if dc is not None:
        defaults = dc()
        options = {name: ("--" + name.replace("_", "-"), getattr(defaults, name), isinstance(model.get(name), bool))
                   for name in dc.__dataclass_fields__}
    else:
        options = _legacy_model_options(arch)
        if options is None:
            raise ValueError(f"{path}: architecture {arch!r} is neither a dataclass nor an argparse fairseq model")
    flags = ["--arch", arch]
    for name, (flag, default, switch) in options.items():
        if name in _NOT_MODEL_FLAGS or name not in model or model[name] is None:
            continue
        value = model[name]
        if switch:
            if bool(value) != bool(default):
                flags.append(flag)
        elif dc is not None or value != default:  # an argparse default needs no flag
            flags += [flag, str(value)]
    return flags


# ----------------------------------------------------------------------------- predictions


def predict(model, task, split: str = "valid", max_tokens: Optional[int] = 8192, batch_size: Optional[int] = None):
    """(predictions, targets) over every example of ``split``, in dataset order: class ids, or
    regression values."""
    import torch
    from fairseq import utils

    task.load_dataset(split)
    ds = task.dataset(split)
    head = getattr(task.cfg, "classification_head_name", "sentence_classification_head")
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


def evaluate(path: str, data: Optional[str] = None, split: str = "valid", task_name: Optional[str] = None,
             max_tokens: Optional[int] = 8192, batch_size: Optional[int] = None) -> Dict[str, object]:
    """Predict ``split`` and score it with the task's GLUE metric; returns a result row."""
    from ..data.glue import glue_task

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


def main(argv: Optional[Sequence[str]] = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m sipe_fairseq.eval.glue", description=__doc__.split("\n")[0])
    p.add_argument("--data", help="sipe-glue-preprocess directory (default: the checkpoint's)")
    p.add_argument("--path", required=True, help="fine-tuned checkpoint")
    p.add_argument("--task-name", help="GLUE task (default: from the data's glue.json)")
    p.add_argument("--split", default="valid", help="split to score (default: valid)")
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--json", action="store_true", help="print the result row as JSON")
    p.add_argument("--model-flags", action="store_true",
                   help="only print the fairseq-train flags that rebuild --path's model (e.g. a pre-trained LM) and exit")
    args = p.parse_args(argv)
    try:
        if args.model_flags:
            import shlex

            print(" ".join(shlex.quote(f) for f in model_flags(args.path)))
            return 0
        row = evaluate(args.path, args.data, args.split, args.task_name, args.max_tokens, args.batch_size)
    except CheckpointError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    if args.json:
        print(json.dumps(row, sort_keys=True))
    else:
        scores = " | ".join(f"{k} {v:.2f}" for k, v in row.items() if isinstance(v, float))
        print(f"{row['task']} {row['split']} (n={row['n']}): {scores}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
