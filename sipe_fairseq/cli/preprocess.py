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
from dataclasses import MISSING, fields
from typing import Optional, Sequence

import sipe_fairseq.checkpoints  # noqa: F401  registers the hexatagger backend
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS
from sipe_fairseq.cli import logs
from sipe_fairseq.parsing import BackendLoadError
from sipe_fairseq.parsing.line_tagger import add_backend_arguments

logger = logging.getLogger(__name__)


def _files(value: Optional[str]):
    return [v for v in value.split(",") if v] if value else []


def get_parser() -> argparse.ArgumentParser:
    """The options of :class:`~sipe_fairseq.data.preprocess.options.PreprocessOptions`, generated from its
    fields (their help, group, choices and defaults), and the parser backend's (shared with ``sipe-tag``)."""
    from sipe_fairseq.data.preprocess.options import GROUPS, PreprocessOptions  # lazy (heavy): data.preprocess imports torch

    p = argparse.ArgumentParser(prog="sipe-preprocess", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                epilog=__doc__.split("\n\n")[2].replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    groups = {name: p.add_argument_group(name) for name in GROUPS}
    for f in fields(PreprocessOptions):
        meta = f.metadata
        if meta["group"] is None:  # the backend's options, below
            continue
        g = groups[meta["group"]]
        flag = meta["flag"] or "--" + f.name.replace("_", "-")
        if f.type is bool:
            g.add_argument(flag, dest=f.name, action="store_true", help=meta["help"])
            continue
        required = f.default is MISSING and f.default_factory is MISSING
        kw = dict(dest=f.name, metavar=meta["metavar"], choices=meta["choices"], help=meta["help"])
        if meta["files"]:
            kw.update(type=_files, default=[])
        elif required:
            kw.update(required=True)
        else:
            kw.update(default=f.default, help=meta["help"] + (" (default: %(default)s)" if f.default is not None else ""))
            if f.type is int:
                kw.update(type=int)
        g.add_argument(flag, **kw)
    add_backend_arguments(p, workers=False, default=None, note=" (text input)")
    return p


def options_from_args(args: argparse.Namespace):
    """The :class:`~sipe_fairseq.data.preprocess.options.PreprocessOptions` of parsed ``sipe-preprocess`` options."""
    from sipe_fairseq.data.preprocess.options import PreprocessOptions  # lazy (heavy): as in get_parser

    values = {f.name: getattr(args, f.name) for f in fields(PreprocessOptions) if hasattr(args, f.name)}
    values.update(workers=max(1, args.workers), progress=not args.no_progress)
    return PreprocessOptions(**values)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.input_format == "conllu":
        given = [o for o, v in (("--backend", args.backend), ("--save-conllu", args.save_conllu),
                                ("--segment-sentences", args.segment), ("--drop-headings", args.drop_headings),
                                ("--documents", args.documents != "none")) if v]
        if given:
            parser.error(f"{', '.join(given)}: only with --input-format text or tokenized")
    logs.configure("INFO")
    # lazy (heavy): data.preprocess imports torch and fairseq, after the arguments are checked
    from sipe_fairseq.data.preprocess import PreprocessError, preprocess

    opts = options_from_args(args)
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
