"""``sipe-eval attention``: the options of the attention analysis (:mod:`sipe_fairseq.eval.attention`),
and the run that loads the checkpoints, measures the arcs' masses, draws and writes the reports."""
import argparse
import logging
from collections import OrderedDict

import torch

import sipe_fairseq
from sipe_fairseq.cli.output import write_json
from sipe_fairseq.checkpoints import CheckpointSpecs
from sipe_fairseq.cli.options import add_data_argument, add_device_argument, add_dictionary_mismatch_argument, int_at_least
from sipe_fairseq.data.encode import SentenceEncoder
from sipe_fairseq.eval import attention
from sipe_fairseq.eval.attention import (DIRECTIONS, AttentionAnalysisError, analyse, attention_markdown,
                                         parse_layers, plot_sentence, relation_arcs, sentence_attention, word_spans)
from sipe_fairseq.hexatag import HexatagError
from sipe_fairseq.structure.family import masked_lm
from sipe_fairseq.hexatag.conllu_io import read_conllu

logger = logging.getLogger(__name__)

HELP = "attention mass along dependency arcs (e.g. verb -> object), averaged over layers and heads (appendix C)"
DESCRIPTION = attention.__doc__


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_data_argument(p)
    add_dictionary_mismatch_argument(p)
    add_device_argument(p)
    p.add_argument("--conllu", required=True, help="parsed corpus (CoNLL-U): words, heads and DEPREL labels")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint (repeatable, one column each; the first is the reference of the comparison)")
    p.add_argument("--relation", default="obj", help="DEPREL of the arcs, subtypes included (default: %(default)s)")
    p.add_argument("--direction", choices=DIRECTIONS, default="head-dep",
                   help="query -> key: head-dep (verb -> object, appendix C) or dep-head (default: %(default)s)")
    p.add_argument("--layers", default=None, help="1-based layers to average, e.g. '2-3' (default: all)")
    p.add_argument("--max-sentences", type=int_at_least(0), default=0, help="read at most this many sentences (0: all)")
    p.add_argument("--plot", metavar="PNG", help="draw one sentence's averaged maps here")
    p.add_argument("--plot-sentence", type=int_at_least(0), default=None,
                   help="0-based index of the sentence to draw (default: the first with an arc every model scores)")
    p.add_argument("--json", metavar="OUT", help="write the report (every arc's masses) as JSON here")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except (AttentionAnalysisError, FileNotFoundError) as e:
        logger.error("%s", e)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    sipe_fairseq.register()
    layers = parse_layers(args.layers)
    try:
        checkpoints = CheckpointSpecs.parse(args.path, args.data, allow_dictionary_mismatch=args.allow_dictionary_mismatch,
                                            device=args.device)
    except ValueError as e:
        raise AttentionAnalysisError(str(e)) from e
    try:
        sentences = list(read_conllu(args.conllu))
    except HexatagError as e:  # ConlluError names file:line
        raise AttentionAnalysisError(str(e)) from e
    encoder = SentenceEncoder(args.data, allow_dictionary_mismatch=args.allow_dictionary_mismatch)
    models = OrderedDict()
    for name in checkpoints.names():  # every model at once: a sentence is measured only where all of them see it
        ck = checkpoints.load(name)  # its dictionary checked against --data's
        model = ck.model
        n_layers = len(getattr(getattr(model, "decoder", None) or model.encoder, "layers", []))
        if layers is not None and any(i >= n_layers for i in layers):
            raise AttentionAnalysisError(f"{ck.path}: --layers {args.layers} outside 1..{n_layers}")
        models[name] = (model, not masked_lm(model))
    report = analyse(models, sentences, encoder, args.relation, args.direction, layers, args.max_sentences)
    report.update(data=args.data, conllu=args.conllu, checkpoints=checkpoints.paths())
    print(attention_markdown(report), end="")
    if args.plot:
        visible = [r["sentence"] for r in report["arcs"] if all(v is not None for v in r["mass"].values())]
        k = args.plot_sentence if args.plot_sentence is not None else (visible[0] if visible else None)
        if k is None or not 0 <= k < len(sentences):
            raise AttentionAnalysisError(f"--plot: no sentence to draw (index {k}, {len(sentences)} sentences)")
        sent = sentences[k]
        tokens, terms, nts, firsts = encoder.encode(sent.words, sent.heads)
        maps = {name: sentence_attention(m, tokens, terms, nts, encoder.dictionary, layers) for name, (m, _) in models.items()}
        d = encoder.dictionary
        pieces = [d[int(t)] for t in tokens]  # x_1 .. x_n </s>
        labels = {name: [d[d.eos()]] + pieces[:-1] if causal else [d[d.bos()]] + pieces for name, (_, causal) in models.items()}
        spans = word_spans(firsts, len(tokens) - 1, offset=1)
        boxes = [(spans[h], spans[dep]) if args.direction == "head-dep" else (spans[dep], spans[h])
                 for h, dep in relation_arcs(sent.deprels, sent.heads, args.relation)]
        plot_sentence(args.plot, maps, labels, boxes, f"{args.conllu}:{sent.line} ({args.relation}, {args.direction})")
        print(f"map of sentence {k} ({args.conllu}:{sent.line}) written to {args.plot}")
    if args.json:
        write_json(args.json, report, indent=1, ensure_ascii=False)
    return 0
