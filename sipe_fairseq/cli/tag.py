"""``sipe-tag``: raw or pre-tokenized sentences -> dependency trees (CoNLL-U) and hexatags.

    sipe-tag sentences.txt -o parsed.conllu --tags-out parsed.hexatag
    sipe-tag words.txt --pretokenized --backend hexatagger:ck/checkpoint_best.pt --tags-out out.hexatag

One input line is one sentence (lines end at ``\\n`` only: :mod:`sipe_fairseq.hexatag.lines`; every line is read
and decoded before the first is tagged: a line that is not UTF-8, named ``FILE:LINE``, or an empty input is refused
with exit status 2 and nothing written). Every input line gives exactly one tag line (``sipe-hexatag`` format) and
one CoNLL-U block whose ``# sent_id`` is the input line number (``--segment-sentences``:
one of each per sentence of the line, by the backend's sentence boundaries, ``# sent_id`` LINE-K). A line that is empty
or that the backend cannot parse gives an empty tag line and a comment-only CoNLL-U block
(``# sipe_tag_error = ...``); it is reported on stderr with its line number and counted in the
summary. Exit status: 0 ok, 1 some lines failed (or a ``--workers`` process died, killed or out of memory: one
line naming its batch's lines; the output files are not written, tags to stdout stop there), 2 usage, input or I/O
error, 3 the backend cannot be
loaded (a hexatagger checkpoint missing, refused by torch's weights-only loading or unreadable; a
spaCy pipeline not installed): one line naming it.
"""
import argparse
import contextlib
import logging
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence

import sipe_fairseq.checkpoints  # noqa: F401  registers the hexatagger backend
from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS
from sipe_fairseq.cli.output import atomic_open
from sipe_fairseq.hexatag import format_tags
from sipe_fairseq.hexatag.errors import InputError, WorkerDiedError, install_error_hook
from sipe_fairseq.hexatag.lines import input_name, read_lines
from sipe_fairseq.parsing import BackendLoadError
from sipe_fairseq.parsing.line_tagger import LineTagger, add_backend_arguments, tagged_line_conllu

logger = logging.getLogger(__name__)

@dataclass
class TaggingCounts:
    """What one ``sipe-tag`` run tagged (its summary line)."""
    lines: int = 0
    parsed: int = 0
    words: int = 0
    failed: int = 0
    lifted_trees: int = 0


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-tag", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 ok, 1 some lines failed (empty output for them), 2 usage, input or "
                                       "I/O error, 3 the backend cannot be loaded.")
    p.add_argument("input", nargs="?", default="-", help="one sentence per line (default: stdin)")
    p.add_argument("-o", "--output", metavar="FILE.conllu", help="CoNLL-U with heads (deprels: root/dep)")
    p.add_argument("--tags-out", metavar="FILE", help="hexatag lines in sipe-hexatag format (l/L1 r/EOS ...)")
    p.add_argument("--pretokenized", action="store_true", help="input words are whitespace-separated (no tokenizer)")
    p.add_argument("--segment-sentences", action="store_true",
                   help="a line may hold several sentences: one CoNLL-U block (sent_id LINE-K) and tag line per sentence, "
                        "split by the backend's sentence boundaries (spaCy)")
    add_backend_arguments(p)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    install_error_hook()  # its own logger, not logs.configure: the commands' one-line user errors here
    if not args.output and not args.tags_out:
        args.tags_out = "-"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sipe-tag: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        try:
            lines = read_lines(args.input)  # every line read and decoded before any is tagged
        except InputError as e:
            logger.error(str(e))
            return 2
        except OSError as e:
            logger.error(f"{input_name(args.input)}: {e.strerror or e}")
            return 2
        if not lines:
            logger.error(f"{input_name(args.input)}: empty input: no line to tag")
            return 2
        return run(args, lines)
    finally:
        logger.removeHandler(handler)


def run(args, lines: List[str]) -> int:
    """Tag ``lines`` into the output files, each written atomically (replaced when the run returns, left
    as they were if an exception interrupts it)."""
    with contextlib.ExitStack() as files:
        try:
            conllu = files.enter_context(atomic_open(args.output)) if args.output else None
            tags = (sys.stdout if args.tags_out == "-" else files.enter_context(atomic_open(args.tags_out))) \
                if args.tags_out else None
        except OSError as e:
            logger.error(f"{e.filename}: {e.strerror}")
            return 2
        return _tag(args, lines, conllu, tags)


def _tag(args, lines: List[str], conllu, tags) -> int:
    stats = TaggingCounts()
    name = args.input if args.input != "-" else "<stdin>"
    tagger = LineTagger(args.backend, args.pretokenized, args.batch_size, args.workers, args.threads,
                        progress=not args.no_progress, segment=args.segment_sentences)
    try:
        with tagger:
            for line in tagger.tag(lines, name=name):
                stats.lines += 1
                if line.ok:
                    stats.parsed += 1
                    stats.words += len(line.result[0])
                    stats.lifted_trees += int(line.lifts > 0)
                else:
                    stats.failed += 1
                    logger.warning(f"{name}:{line.lineno}: {line.result}")
                if tags is not None:
                    tags.write((format_tags(line.tags) if line.ok else "") + "\n")
                if conllu is not None:
                    conllu.write(tagged_line_conllu(line))
    except WorkerDiedError as e:  # a --workers process killed (out of memory) or exited: nothing is written
        logger.error(str(e))
        return 1
    except BackendLoadError as e:  # e.g. a missing or refused hexatagger checkpoint
        logger.error(str(e))
        return CHECKPOINT_EXIT_STATUS
    except ValueError as e:  # an unknown backend name
        logger.error(str(e))
        return 2
    logger.info(f"lines: {stats.lines}, parsed: {stats.parsed}, words: {stats.words}, failed: {stats.failed}, "
                f"non-projective parses lifted: {stats.lifted_trees}")
    return 1 if stats.failed else 0


if __name__ == "__main__":
    sys.exit(main())
