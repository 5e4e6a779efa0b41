"""``sipe-hexatag``: dependency trees <-> hexatags, one line per sentence.

    sipe-hexatag encode en_ewt-ud-train.conllu -o train.hexatag   # l/L1 l/R1 r/L0 r/L0 r/EOS
    sipe-hexatag decode train.hexatag                             # 3 3 0 3 3

Exit status: 0 on success, 1 if errors were skipped with ``--keep-going``, 2 on the first error
otherwise (or a usage error).
"""
import argparse
import contextlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence, TextIO

from sipe_fairseq.cli.output import atomic_open
from sipe_fairseq.hexatag import ConlluError, HexatagError, decode, encode_tree, format_tags, parse_tags
from sipe_fairseq.hexatag.conllu_io import parse_sentence, sentence_blocks
from sipe_fairseq.hexatag.lines import iter_lines, undecodable
from sipe_fairseq.hexatag.errors import install_error_hook

logger = logging.getLogger(__name__)


@dataclass
class ConversionCounts:
    """What one ``sipe-hexatag`` run converted (its summary line)."""
    sentences: int = 0  # all sentences read, including bad ones (= output lines)
    words: int = 0
    lifted_trees: int = 0
    lifted_arcs: int = 0
    errors: int = 0


class _Stop(Exception):
    """Stop processing: the first bad sentence without ``--keep-going``, or an unreadable file."""


def get_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-o", "--output", metavar="OUT", help="write to OUT instead of stdout")
    common.add_argument("--keep-going", action="store_true",
                        help="report a bad sentence, print an empty line in its place and go on")
    parser = argparse.ArgumentParser(prog="sipe-hexatag", description="Dependency trees <-> hexatags.",
                                     epilog="Exit status: 0 ok, 1 errors skipped (--keep-going), 2 error.")
    sub = parser.add_subparsers(dest="command", required=True)
    enc = sub.add_parser("encode", parents=[common], help="CoNLL-U -> one line of T/N tags per sentence")
    enc.add_argument("files", nargs="+", metavar="FILE", help="CoNLL-U file(s), - for stdin")
    enc.add_argument("--strict", action="store_true",
                     help="fail on non-projective trees instead of projectivizing them by lifting")
    dec = sub.add_parser("decode", parents=[common], help="tag lines -> one line of 1-based heads (0 = root)")
    dec.add_argument("files", nargs="+", metavar="FILE", help="tag file(s) as written by encode, - for stdin")
    return parser


def _name(path: str) -> str:
    return "<stdin>" if path == "-" else path


def _lines(path: str) -> Iterator[str]:
    """The lines of a text input (``-``: stdin) by the one reader (:mod:`sipe_fairseq.hexatag.lines`: lines end at
    ``\n`` only); bytes that are not UTF-8 become lone surrogates, refused per line (``undecodable``) so that
    ``--keep-going`` can skip just the sentence that holds them."""
    try:
        for _, text in iter_lines(path, errors="surrogateescape"):
            yield text
    except OSError as e:
        raise _Stop(f"{path}: {e.strerror}") from e


def _bad(message: str, out: TextIO, stats: ConversionCounts, keep_going: bool) -> None:
    stats.errors += 1
    logger.error(message)
    if not keep_going:
        raise _Stop()
    out.write("\n")


def encode_files(args, out: TextIO, stats: ConversionCounts) -> None:
    for path in args.files:
        for start, block in sentence_blocks(_lines(path)):
            stats.sentences += 1
            try:
                sent = parse_sentence(block, _name(path), start)
                tags, _, lifts = encode_tree(sent.heads, strict=args.strict)
            except ConlluError as e:
                _bad(str(e), out, stats, args.keep_going)
            except HexatagError as e:  # NonProjectiveError with --strict
                _bad(f"{_name(path)}:{start}: {e}", out, stats, args.keep_going)
            else:
                stats.words += len(tags)
                stats.lifted_trees += int(lifts > 0)
                stats.lifted_arcs += lifts
                out.write(format_tags(tags) + "\n")


def decode_files(args, out: TextIO, stats: ConversionCounts) -> None:
    for path in args.files:
        for lineno, line in enumerate(_lines(path), 1):
            stats.sentences += 1
            try:
                bad = undecodable(line)
                if bad:
                    raise HexatagError(bad)
                heads = decode(parse_tags(line))
            except HexatagError as e:
                _bad(f"{_name(path)}:{lineno}: {e}", out, stats, args.keep_going)
            else:
                stats.words += len(heads)
                out.write(" ".join(map(str, heads)) + "\n")


@contextlib.contextmanager
def _log_to_stderr():
    """Send this module's log records to the current stderr while ``main`` runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sipe-hexatag: %(levelname)s: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.level, logger.propagate = saved


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    install_error_hook()  # its own logger, not logs.configure: Ctrl-C in one line (-o is written atomically)
    run = encode_files if args.command == "encode" else decode_files
    stats, status = ConversionCounts(), 0
    with _log_to_stderr(), contextlib.ExitStack() as files:  # -o: written atomically, replaced when main returns
        try:
            out = files.enter_context(atomic_open(args.output)) if args.output else sys.stdout
        except OSError as e:
            logger.error(f"{args.output}: {e.strerror}")
            return 2
        try:
            run(args, out, stats)
        except _Stop as e:
            if e.args:
                logger.error(e.args[0])
            status = 2
        except BrokenPipeError:  # e.g. piped into head: stop quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        status = status or (1 if stats.errors else 0)
        summary = f"sentences: {stats.sentences}, words: {stats.words}"
        if args.command == "encode":
            summary += f", non-projective trees lifted: {stats.lifted_trees} (arcs: {stats.lifted_arcs})"
        logger.info(f"{summary}, errors: {stats.errors}" + (" (stopped at the first error)" if status == 2 else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
