"""``sipe-surprisal``: per-token or per-word surprisal of sentences, in lm-zoo's TSV layout.

    sipe-surprisal --path ck/checkpoint_best.pt sentences.txt > surprisals.tsv
    sipe-surprisal --path ck/checkpoint_best.pt --tags given,self,mix:16 --level word sentences.conllu

Input (a file, or ``-``: stdin): one sentence per line (split into words by the commands' tokenizer;
``given`` parses them with ``--parser``), or CoNLL-U (``--format conllu``, the default for a ``.conllu``
file: its words, and its trees as the structure of ``given``). Output (stdout or ``--output``): lm-zoo's
``get-surprisals`` layout, a header ``sentence_id	token_id	token	surprisal`` and one row per token
(``--level token``: the model's pieces, ``</s>`` included) or word (``--level word``: the sum over its
pieces), ids 1-based, surprisal in bits; with several ``--tags`` sources one column per source,
``surprisal[SOURCE]``. ``--json`` writes everything :meth:`sipe_fairseq.hub.LanguageModel.score`
returns instead (tokens, words, log-probabilities, the kind of number and the structure).

Exit status: 0 ok, 2 usage or input error (an option, an unreadable or empty input, an empty line, a
sentence longer than the model's positions: never cut), 3 the checkpoint or the parser cannot be loaded.
"""
import argparse
import io
import json
import logging
import sys
from typing import List, Optional, Sequence

from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError
from sipe_fairseq.cli import logs
from sipe_fairseq.cli.allocator import keep_freed_memory
from sipe_fairseq.cli.options import SPLIT_ONLY, add_structure_arguments, output_path_problem, structure_options
from sipe_fairseq.cli.output import write_text
from sipe_fairseq.hub.interface import load, surprisal_rows
from sipe_fairseq.hexatag.conllu_io import read_conllu_lines
from sipe_fairseq.parsing import DEFAULT_BACKEND, BackendLoadError

logger = logging.getLogger(__name__)


# the option of a data split that this command, which scores every sentence of its input, refuses
REFUSED = {"max_sentences": SPLIT_ONLY["max_sentences"]}


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-surprisal", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 ok, 2 usage or input error, 3 checkpoint or parser cannot be loaded.")
    p.add_argument("input", nargs="?", default="-", help="sentences, one per line, or CoNLL-U (default: stdin)")
    p.add_argument("--path", required=True, metavar="CHECKPOINT", help="a decoder checkpoint (SiPE, none, GiLT, stock)")
    p.add_argument("--data", default=None, metavar="DIR",
                   help="its sipe-preprocess directory (default: the one saved in the checkpoint)")
    add_structure_arguments(p, "given", refuse=REFUSED)
    p.add_argument("--level", choices=("token", "word"), default="token", help="rows per token (</s> included) or word")
    p.add_argument("--format", choices=("text", "conllu"), default=None,
                   help="input format (default: conllu for a .conllu file, else text)")
    p.add_argument("--parser", default=DEFAULT_BACKEND, metavar="SPEC",
                   help="parser of text input for given: spacy[:MODEL] or hexatagger:CHECKPOINT (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="write every field of the scores as JSON instead of the TSV")
    p.add_argument("--output", default=None, metavar="FILE", help="write here instead of stdout")
    return p


def read_input(name: str, fmt: Optional[str]) -> List:
    """The sentences of ``name`` (``-``: stdin): raw lines, or ``(words, heads)`` of a CoNLL-U file;
    ``ValueError`` naming the file and line of an empty line or a bad block."""
    text = sys.stdin.read() if name == "-" else open(name, encoding="utf-8").read()
    where = "<stdin>" if name == "-" else name
    if (fmt or ("conllu" if where.endswith(".conllu") else "text")) == "conllu":
        return [(s.words, s.heads) for s in read_conllu_lines(io.StringIO(text), where)]
    lines = text.splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            raise ValueError(f"{where}:{i}: empty line (one sentence per line)")
    return lines


def tsv(results: Sequence[Sequence], sources: Sequence[str], level: str) -> str:
    """lm-zoo's layout; one surprisal column per source (the rows of every source are the same units)."""
    columns = [surprisal_rows(r, level) for r in results]
    header = ["sentence_id", "token_id", "token"] + (["surprisal"] if len(sources) == 1 else
                                                      [f"surprisal[{s}]" for s in sources])
    lines = ["\t".join(header)]
    for row in zip(*columns):
        sid, tid, unit = row[0][:3]
        lines.append("\t".join([str(sid), str(tid), unit] + [f"{r[3]:.6f}" for r in row]))
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    keep_freed_memory()
    logs.configure("WARNING", "sipe-surprisal: %(levelname)s: %(message)s", plugin_level=logging.WARNING)
    sources = args.tags or ["given"]
    problem = output_path_problem(args, ("output",))
    if problem:
        logger.error(problem)
        return 2
    try:
        sentences = read_input(args.input, args.format)
    except (OSError, ValueError) as e:
        logger.error(f"{args.input}: {e.strerror}" if isinstance(e, OSError) and e.strerror else str(e))
        return 2
    try:
        lm = load(args.path, args.data, parser=args.parser, **vars(structure_options(args)))
        results = [lm.score(sentences, source) for source in sources]
    except (CheckpointError, BackendLoadError) as e:
        logger.error(str(e))
        return CHECKPOINT_EXIT_STATUS
    except ValueError as e:  # an empty sentence, one longer than the model's positions, a source the model cannot take
        logger.error(f"{'<stdin>' if args.input == '-' else args.input}: {e}")
        return 2
    if args.json:
        text = json.dumps([dict(r.to_dict(), sentence_id=i) for per_source in results
                           for i, r in enumerate(per_source, 1)], indent=1) + "\n"
    else:
        text = tsv(results, sources, args.level)
    if args.output:
        write_text(args.output, text)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
