"""``sipe-eval-lm``: conditional perplexity, the joint bound and the position-type breakdown for
one or several checkpoints on the same ``sipe-preprocess`` directory, side by side.

    sipe-eval-lm DATA --path none=ckpt_none/checkpoint_best.pt --path position=ckpt_pos/checkpoint_best.pt

Works for ``hexatag_lm`` checkpoints and for stock ``language_modeling`` ones (no tags): every
model is scored through a ``hexatag_lm`` task built from its own task settings, so all see the
same blocks and the same position types.
"""
import argparse
import json
import logging
import os
import sys
from collections import OrderedDict

import fairseq  # noqa: F401
import torch
from fairseq import checkpoint_utils
from omegaconf import OmegaConf

import sipe_fairseq
from sipe_fairseq.checkpoint_compat import allow_fairseq_checkpoint_globals
from sipe_fairseq.eval.lm_scores import markdown, score_split

logger = logging.getLogger(__name__)


def checkpoint_specs(specs) -> "OrderedDict[str, str]":
    """``["name=ckpt.pt", "other.pt"]`` -> ``{name: path}`` (a bare path names itself); raises
    ``ValueError`` for a name given twice or a missing file."""
    out = OrderedDict()
    for spec in specs or ():
        name, sep, path = spec.partition("=")
        name, path = (name, path) if sep else (spec, spec)
        if name in out:
            raise ValueError(f"checkpoint name {name!r} given twice")
        if not os.path.exists(path):
            raise FileNotFoundError(f"checkpoint {path} not found")
        out[name] = path
    return out


# tasks whose checkpoints are masked-LM encoders (scored by pseudo-log-likelihood, not by eval-lm)
MASKED_LM_TASKS = ("hexatag_mlm", "masked_lm")


def load(path: str, data: str, context_window: int = 0):
    """(model, task) for a checkpoint, scored on ``data``: a ``hexatag_lm`` task for decoders
    (``hexatag_lm`` and stock ``language_modeling`` checkpoints), a ``hexatag_mlm`` task for
    masked-LM encoders (``hexatag_mlm`` and stock ``masked_lm`` ones, e.g. fairseq ``roberta``),
    built from the checkpoint's own task settings; the encoder task's dictionary is ``dict.txt``
    with ``<mask>`` appended, as in training."""
    from sipe_fairseq.tasks.hexatag_lm import HexatagLanguageModelingTask, HexatagLMConfig
    from sipe_fairseq.tasks.hexatag_mlm import HexatagMaskedLMTask, HexatagMLMConfig

    # legacy fairseq models (e.g. roberta) store an argparse.Namespace in the checkpoint: allow just that class
    allow_fairseq_checkpoint_globals()
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    saved = OmegaConf.to_container(state["cfg"]["task"], resolve=True)
    if saved.get("_name") in MASKED_LM_TASKS:
        if context_window:
            raise ValueError(f"{path}: a masked-LM encoder ({saved['_name']} checkpoint) has no --context-window")
        config, task_cls = HexatagMLMConfig, HexatagMaskedLMTask
    else:
        config, task_cls = HexatagLMConfig, HexatagLanguageModelingTask
    fields = set(config.__dataclass_fields__)
    cfg = OmegaConf.merge(OmegaConf.structured(config), {k: v for k, v in saved.items() if k in fields})
    cfg.data = data
    cfg.tokens_per_sample -= context_window  # as fairseq-eval-lm does
    task = task_cls.setup_task(cfg)
    allow_fairseq_checkpoint_globals()
    models, _ = checkpoint_utils.load_model_ensemble([path], arg_overrides={"data": data}, task=task)
    return models[0], task


def evaluate(path, data, split="valid", context_window=0, max_tokens=4096, batch_size=None):
    model, task = load(path, data, context_window)
    return score_split(model, task, split, context_window, max_tokens, batch_size)


def main(argv=None):
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="sipe-eval-lm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="a sipe-preprocess data directory")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT", help="checkpoint (repeatable)")
    p.add_argument("--gen-subset", default="valid", help="split to score (default: valid)")
    p.add_argument("--context-window", type=int, default=0, help="as fairseq-eval-lm --context-window")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--json", help="also write the scores as JSON here")
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--tags", default=None, metavar="SOURCES",
                   help="also score every sentence alone under these tag sources, comma-separated: given, self, beam:K "
                        "(eval/prefix_tags.py), e.g. given,self,beam:4")
    p.add_argument("--tags-unconstrained", action="store_true", help="self/beam: any tag pair, not only valid prefixes")
    p.add_argument("--tags-max-sentences", type=int, default=None, help="score the first N sentences only with --tags")
    args = p.parse_args(argv)
    if args.tags:
        from sipe_fairseq.eval.prefix_tags import parse_tag_source

        for source in args.tags.split(","):
            try:
                parse_tag_source(source)
            except ValueError as e:
                p.error(f"--tags: {e}")  # exit status 2
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    results = {name: evaluate(path, args.data, args.gen_subset, args.context_window, args.max_tokens, args.batch_size)
               for name, path in checkpoint_specs(args.path).items()}
    print(markdown(results))
    if args.tags:  # issue 12: tags from the prefix only
        from sipe_fairseq.eval.prefix_tags import markdown_tag_sources, score_split_tag_sources

        sources = [x for x in args.tags.split(",") if x]
        by_tags = {name: score_split_tag_sources(*load(path, args.data), args.gen_subset, sources, not args.tags_unconstrained,
                                                 args.tags_max_sentences)
                   for name, path in checkpoint_specs(args.path).items()}
        print(markdown_tag_sources(by_tags))
        results = {name: dict(results[name], tag_sources=by_tags[name]) for name in results}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
