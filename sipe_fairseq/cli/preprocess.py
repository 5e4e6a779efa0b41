"""``sipe-preprocess``: CoNLL-U (or raw text and a parser) -> fairseq data directory with aligned hexatag streams.

    sipe-preprocess --train en_ewt-ud-train.conllu --valid en_ewt-ud-dev.conllu \\
        --test en_ewt-ud-test.conllu --destdir data-bin/ewt
    sipe-preprocess --input-format text --parser spacy --train train.txt --valid valid.txt \\
        --destdir data-bin/txt --save-conllu parsed/

With ``--input-format text`` (one raw sentence per line) or ``tokenized`` (one sentence of
whitespace-separated words per line), every file is first parsed as ``sipe-tag`` parses it (same
backends and options), then processed exactly as CoNLL-U: the result equals ``sipe-tag`` followed
by ``sipe-preprocess`` on its CoNLL-U. Empty lines are skipped (a data directory has no empty
sentence; ``fairseq-preprocess`` would keep them as ``</s>``-only sentences), and lines the backend
cannot parse are refused (``parse-failed``); both are reported with file:line and counted in
manifest.json.

Exit status: 0 on success, 1 on an error (including any refused sentence with --fail-on-refusal),
3 when the parser backend cannot be loaded (e.g. a missing or refused hexatagger checkpoint).
See :mod:`sipe_fairseq.data.preprocess` for the directory layout.
"""
import argparse
import logging
import sys
from typing import Optional, Sequence

import sipe_fairseq.checkpoints  # noqa: F401  registers the hexatagger backend
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS
from sipe_fairseq.cli import logs
from sipe_fairseq.parsing import BackendLoadError
from sipe_fairseq.parsing.line_tagger import add_backend_arguments

logger = logging.getLogger(__name__)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-preprocess", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n\n")[2].replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    io = p.add_argument_group("input/output")
    io.add_argument("--train", required=True, metavar="FILE", help="training data (dictionaries come from it)")
    io.add_argument("--valid", metavar="FILE[,FILE2]", help="validation data; more files -> valid1, valid2..")
    io.add_argument("--test", metavar="FILE[,FILE2]", help="test data; more files -> test1, test2..")
    io.add_argument("--input-format", choices=("conllu", "text", "tokenized"), default="conllu",
                    help="conllu (default); text: one raw sentence per line, tokenized: one sentence of "
                         "whitespace-separated words per line, both parsed with --backend")
    io.add_argument("--destdir", required=True, metavar="DIR", help="output data directory")
    io.add_argument("--keep-text", action="store_true", help="also write the subword text as {split}.tok")
    io.add_argument("--save-conllu", metavar="DIR", help="text input: keep the parses as DIR/{split}.conllu "
                    "(as sipe-tag -o writes them; written even when --fail-on-refusal stops)")
    sw = p.add_argument_group("subwords")
    sw.add_argument("--spm-model", metavar="FILE", help="use this sentencepiece model instead of training one")
    sw.add_argument("--srcdict", metavar="FILE", help="reuse this dict.txt (e.g. of the pre-training data) instead of "
                    "building one from --train, as fairseq-preprocess --srcdict; needs --spm-model (its sentencepiece "
                    "model) or --no-split; with --deprel, dict.deprel.txt beside it is reused too")
    sw.add_argument("--spm-vocab-size", type=int, default=8000, metavar="N", help="pieces of the trained model (default 8000)")
    sw.add_argument("--spm-model-type", choices=("unigram", "bpe"), default="unigram")
    sw.add_argument("--no-split", action="store_true", help="no subwords: each (already tokenized) word is one token")
    rc = p.add_argument_group("raw corpora (text input)")
    rc.add_argument("--segment-sentences", action="store_true",
                    help="a line may hold several sentences: split it by the backend's sentence boundaries (one tree each)")
    rc.add_argument("--documents", choices=("none", "blank-lines", "wikitext"), default="none",
                    help="keep document boundaries as empty sentences (for --sample-break-mode complete_doc): documents "
                         "start after blank lines, or at WikiText title lines '= Title ='; default none: blank lines skipped")
    rc.add_argument("--drop-headings", action="store_true",
                    help="drop WikiText heading lines ('= Title =', '= = Section = =', ..), counted in manifest.json")
    tr = p.add_argument_group("trees and tags")
    tr.add_argument("--deprel", action="store_true", help="also write a UD deprel stream (dict.deprel.txt)")
    tr.add_argument("--arcs", choices=("tree", "deps"), default="tree",
                    help="GiLT arc stream {split}.arcs: the basic tree (HEAD) or the enhanced graph (DEPS column)")
    tr.add_argument("--strict", action="store_true", help="refuse non-projective trees instead of lifting them")
    tr.add_argument("--fail-on-refusal", action="store_true", help="exit with an error if any sentence is refused")
    fs = p.add_argument_group("fairseq passthrough")
    fs.add_argument("--workers", type=int, default=1, metavar="N",
                    help="processes for reading/encoding, and backend processes for text input")
    fs.add_argument("--thresholdsrc", type=int, default=0, metavar="N", help="map tokens seen < N times to <unk>")
    fs.add_argument("--nwordssrc", type=int, default=-1, metavar="N", help="number of tokens to keep (with specials)")
    fs.add_argument("--padding-factor", type=int, default=8, metavar="N", help="pad dict.txt to a multiple of N")
    add_backend_arguments(p, workers=False, default=None, note=" (text input)")
    return p


def _files(value: Optional[str]):
    return [v for v in value.split(",") if v] if value else []


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.input_format == "conllu":
        given = [o for o, v in (("--backend", args.backend), ("--save-conllu", args.save_conllu),
                                ("--segment-sentences", args.segment_sentences), ("--drop-headings", args.drop_headings),
                                ("--documents", args.documents != "none")) if v]
        if given:
            parser.error(f"{', '.join(given)}: only with --input-format text or tokenized")
    logs.configure("INFO")
    # lazy (heavy): data.preprocess imports torch and fairseq, after the arguments are checked
    from sipe_fairseq.data.preprocess import PreprocessError, PreprocessOptions, preprocess

    opts = PreprocessOptions(
        train=args.train, destdir=args.destdir, valid=_files(args.valid), test=_files(args.test),
        spm_model=args.spm_model, srcdict=args.srcdict, spm_vocab_size=args.spm_vocab_size, spm_model_type=args.spm_model_type,
        no_split=args.no_split, deprel=args.deprel, strict=args.strict, fail_on_refusal=args.fail_on_refusal,
        keep_text=args.keep_text, workers=max(1, args.workers), thresholdsrc=args.thresholdsrc,
        nwordssrc=args.nwordssrc, padding_factor=args.padding_factor, input_format=args.input_format,
        backend=args.backend, batch_size=args.batch_size, threads=args.threads, save_conllu=args.save_conllu,
        progress=not args.no_progress, segment=args.segment_sentences, documents=args.documents,
        drop_headings=args.drop_headings, arcs=args.arcs,
    )
    try:
        preprocess(opts)
    except BackendLoadError as e:
        logger.error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except (PreprocessError, OSError, UnicodeDecodeError) as e:
        logger.error("%s", e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
