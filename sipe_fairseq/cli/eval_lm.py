"""``sipe-eval-lm``: conditional perplexity, the joint bound and the position-type breakdown for
one or several checkpoints on the same ``sipe-preprocess`` directory, side by side; with ``--tags
given,self,beam:K`` also every sentence scored alone under each tag source (conditional and joint
bound with the given tags, ``self`` exact, ``beam:K`` bound), per token and per word, each with its
position-type breakdown (:mod:`sipe_fairseq.structure`, :mod:`sipe_fairseq.eval.prefix_scores`). GiLT
checkpoints (``gilt_txl``, task ``gilt_lm``) take the same options: their structure is a graph (given: the
data's ``{split}.arcs``; self: the greedy graph; beam:K: the beam over graphs with ``--gilt-count-beam``
counts per hypothesis), with the arc F1 of their own graphs against the gold one.

    sipe-eval-lm DATA --path none=ckpt_none/checkpoint_best.pt --path position=ckpt_pos/checkpoint_best.pt

With ``--num-shards N --shard-id I`` the tag sources score every N-th sentence (``i % N == I``) and ``--json``
writes a shard file; ``sipe-eval merge`` joins the shards into this command's report (docs/scaling.md).

Works for ``hexatag_lm`` checkpoints and for stock ``language_modeling`` ones (no tags): every
model is scored through a ``hexatag_lm`` task built from its own task settings, so all see the
same blocks and the same position types.

Exit status: 0 ok, 1 nothing scored (no token of the split, or no sentence under a tag source), a score
that is not finite, sentences longer than a model's learned positions, 2 usage error (an option out of
range, ``--tags ""``, a checkpoint name given twice, an output path that cannot be written, ``--num-shards``/
``--shard-id`` out of range or without ``--tags`` and ``--json``: checked before anything is loaded; a tag source
that cannot fit ``--max-memory`` even one sentence at a time), 3 a checkpoint is missing, refused by torch's
weights-only loading (untrusted content), not a fairseq checkpoint, holds non-finite weights, or was trained on
another data directory (its recorded ``dict.txt`` and ``spm.model`` sha256 and tag dictionaries;
``--allow-dictionary-mismatch``).
"""
import argparse
import logging
import os
import sys

import torch
from fairseq import utils
from fairseq.data import data_utils

import sipe_fairseq
from sipe_fairseq.cli import logs
from sipe_fairseq.cli.allocator import keep_freed_memory
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, CheckpointSpecs, load_checkpoint
from sipe_fairseq.cli.options import (add_device_argument, add_progress_argument, add_shard_arguments, add_structure_arguments,
                                      configure_progress, int_at_least, output_path_problem, shard_problem,
                                      structure_options)
from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.eval.finite import first_non_finite
from sipe_fairseq.hexatag.errors import NonFiniteScoreError
from sipe_fairseq.eval.reports.report import layer_info
from sipe_fairseq.eval.prefix_scores import (check_sources_fit, markdown_tag_sources, records_to_json, score_split_records,
                                             score_split_sources)
from sipe_fairseq.eval.shards import FORMAT, fingerprint, shard_block
from sipe_fairseq.eval.perplexity import perplexity_markdown, score_split
from sipe_fairseq.tasks.sipe_data import EvaluationError

logger = logging.getLogger(__name__)


def evaluate_lm(path, data, split="valid", context_window=0, max_tokens=4096, batch_size=None, tags=None,
                options=None, allow_dictionary_mismatch=False, shard=None, device="cpu"):
    """:func:`~sipe_fairseq.eval.perplexity.score_split` of one checkpoint (loaded once by
    :func:`~sipe_fairseq.checkpoints.specs.load_checkpoint`: its dictionary checked against ``data``'s); with
    ``tags`` (tag sources), also ``tag_sources``: every sentence scored alone under each
    (:func:`~sipe_fairseq.eval.prefix_scores.score_split_sources`: hexatags for SiPE checkpoints,
    graphs for GiLT ones; ``options``: :class:`~sipe_fairseq.structure.family.StructureOptions`). ``shard``:
    ``(num_shards, shard_id)``: the tag sources score that share of the sentences (:mod:`sipe_fairseq.eval.shards`)
    and the row keeps their per-sentence records (``tag_records``, for ``sipe-eval merge``) instead of
    ``tag_sources``; the split's own perplexity (one contiguous stream, which ``--context-window`` does not let
    divide into sentences) is computed whole by shard 0 alone, the other shards' rows hold only ``run``."""
    loaded = load_checkpoint(path, data, allow_dictionary_mismatch, context_window, device=device)
    model, task = loaded.model, loaded.task
    if tags:  # a tag source that cannot fit the memory budget: refused before anything is scored
        check_sources_fit(model, task, split, tags, options)
    rows = score_split(model, task, split, context_window, max_tokens, batch_size) if not shard or shard[1] == 0 else {}
    rows["run"] = run_record(model, task, data, split)  # what sipe-eval seeds checks before it averages
    if tags:
        if context_window:  # the tag sources score sentences alone: a task without the context-window shortening
            loaded = load_checkpoint(path, data, allow_dictionary_mismatch, device=device)
            model, task = loaded.model, loaded.task
        try:
            if shard:
                rows["tag_records"] = records_to_json(score_split_records(model, task, split, tags, options, shard))
            else:
                rows["tag_sources"] = score_split_sources(model, task, split, tags, options)
        except NonFiniteScoreError as e:  # the checkpoint too (exit status 1, nothing written)
            raise NonFiniteScoreError(f"{path}: {e}", e.index, e.source, e.detail) from None
    return rows


def run_record(model, task, data: str, split: str) -> dict:
    """What a row was scored on: ``split``, its ``sentences``, the ``data`` directory, the checkpoint's ``arch``
    and ``injection`` (``sipe-eval seeds`` refuses to average rows that differ in any), and the model's size,
    ``parameters`` (the sum of its parameters' sizes, as fairseq-train's "num. shared model params";
    ``sipe-eval scale`` reads it; reports written before it was recorded have none)."""
    info = layer_info(getattr(getattr(model, "decoder", model), "cfg", None))
    raw = data_utils.load_indexed_dataset(os.path.join(utils.split_paths(data)[0], split), task.source_dictionary)
    return {"split": split, "sentences": None if raw is None else len(raw), "data": os.path.abspath(data),
            "arch": info.get("arch") or type(model).__name__, "injection": info.get("injection") or "none",
            "parameters": sum(p.numel() for p in model.parameters())}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-eval-lm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="a sipe-preprocess data directory")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT", help="checkpoint (repeatable)")
    p.add_argument("--gen-subset", default="valid", help="split to score (default: valid)")
    p.add_argument("--context-window", type=int_at_least(0), default=0, help="as fairseq-eval-lm --context-window (>= 0)")
    p.add_argument("--max-tokens", type=int_at_least(1), default=4096, help="tokens per batch (default: %(default)s)")
    p.add_argument("--batch-size", type=int_at_least(1), default=None, help="sentences per batch")
    p.add_argument("--json", help="also write the scores as JSON here (checked writable before anything runs)")
    p.add_argument("--allow-dictionary-mismatch", action="store_true",
                   help="score a checkpoint whose recorded data (dict.txt, spm.model, tag dictionaries) differs from "
                        "DATA's, with a warning (default: refused, exit status 3)")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")
    add_structure_arguments(p, "none: no sentence scored alone (e.g. given,self,beam:4,mix:4)")
    add_device_argument(p)
    add_shard_arguments(p)  # items: the sentences scored under --tags (needs --tags)
    add_progress_argument(p)
    return p


def main(argv=None):
    logs.configure("WARNING", logs.SHORT_FORMAT, plugin_level=logging.INFO)  # fairseq quiet, the plugin's counts shown
    args = build_parser().parse_args(argv)
    keep_freed_memory()
    configure_progress(args)
    sources = args.tags  # checked by argparse (exit status 2)
    problem = output_path_problem(args, ("json",)) or shard_problem(args)
    if problem is None and args.num_shards is not None and not sources:
        problem = "--num-shards: sipe-eval-lm shares the sentences scored under --tags; give --tags"
    if problem:
        logger.error("%s", problem)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    try:
        options = structure_options(args)
        paths = CheckpointSpecs.parse(args.path, args.data).paths()
        shard = None if args.num_shards is None else (args.num_shards, args.shard_id)
        fp = shard and fingerprint("eval-lm", args, paths, args.data, split=args.gen_subset)  # before any work
        results = {name: evaluate_lm(path, args.data, args.gen_subset, args.context_window, args.max_tokens,
                                     args.batch_size, sources, options, args.allow_dictionary_mismatch, shard,
                                     args.device)
                   for name, path in paths.items()}  # one at a time
        if shard:
            return _write_shard(args, results, fp)
        return report_results(results, args.gen_subset, args.json)
    except CheckpointError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except EvaluationError as e:  # nothing scored (README: exit status 1, not a perplexity of 1.00 or NaN)
        logger.error("%s", e)
        return 1
    except ValueError as e:  # a name given twice, --context-window with an encoder
        logger.error("%s", e)
        return 2


def _write_shard(args, results: dict, fp: dict) -> int:
    """A shard's file (eval/shards.py): per checkpoint its ``run``, shard 0's split rows, the share's records."""
    bad = first_non_finite({name: {k: v for k, v in r.items() if k != "tag_records"} for name, r in results.items()})
    if bad:
        raise EvaluationError(f"split {args.gen_subset!r}: a score is not finite ({bad}): nothing reported")
    first = next(iter(results.values()))["tag_records"]
    items = len(first["gold"])
    write_json(args.json, {"format": FORMAT, "command": "eval-lm",
                           "shard": shard_block(args.shard_id, args.num_shards, items, first["total"], fp),
                           "checkpoints": results})
    logger.info("shard %d of %d: %d of %d sentences written to %s (join the shards with sipe-eval merge)",
                args.shard_id, args.num_shards, items, first["total"], args.json)
    return 0


def report_results(results: dict, split: str, json_path=None, markdown_path=None) -> int:
    """Check, print and write the rows of a run (or of its shards joined, ``sipe-eval merge``): exit status 1 (one
    line) when a tag source scored no token or a score is not finite, nothing written."""
    try:
        empty = [f"{name} [{source}]" for name, r in results.items() for source, row in (r.get("tag_sources") or {}).items()
                 if not row.get("tokens")]
        if empty:
            raise EvaluationError(f"split {split!r}: no token scored under --tags for {', '.join(empty)}, "
                                  "so no perplexity")
        bad = first_non_finite(results)
        if bad:  # never a NaN in the table or the JSON
            raise EvaluationError(f"split {split!r}: a score is not finite ({bad}): nothing reported")
    except EvaluationError as e:  # nothing scored (README: exit status 1, not a perplexity of 1.00 or NaN)
        logger.error("%s", e)
        return 1
    text = perplexity_markdown({name: {k: v for k, v in r.items() if k not in ("tag_sources", "run")}
                                for name, r in results.items()})
    if any("tag_sources" in r for r in results.values()):  # tags from the prefix only, per checkpoint side by side
        text += "\n" + markdown_tag_sources({name: r["tag_sources"] for name, r in results.items()})
    print(text)
    if markdown_path:
        write_text(markdown_path, text + "\n")
    if json_path:
        write_json(json_path, results, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
