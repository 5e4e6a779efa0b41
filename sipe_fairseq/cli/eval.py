"""``sipe-eval``: evaluations of SiPE (and stock fairseq) checkpoints, one subcommand each.

    sipe-eval blimp --data DATA --path none=ck_none/checkpoint_best.pt --blimp blimp/ --cache parses.jsonl

A subcommand is a module of :mod:`sipe_fairseq.cli.eval_commands` with ``HELP`` (one line), ``DESCRIPTION``
(the subcommand's ``--help`` text), ``add_arguments(parser)`` and ``run(args) -> int``; add it to
:data:`SUBCOMMANDS`.

Exit status: 0 ok, 1 nothing scored (``blimp``: a model scored no pair; ``syntaxgym``: no suite), a score
that is not finite (one line naming the column, the sentence and the tag source; nothing written) or an output
that cannot be written (disk full, file too large, a closed pipe: one line naming it),
2 bad input (as each subcommand documents; also an option out of range, or an output path such as
``--json``, ``--markdown``, ``--plot``, ``--out``, ``--*-out`` or ``--cache`` that cannot be written: checked
before any work starts), 3 a checkpoint is missing, refused by torch's weights-only loading (untrusted
content) or not a fairseq checkpoint (one line naming it).
"""
import argparse
import logging
import sys

from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError
from sipe_fairseq.cli import logs
from sipe_fairseq.cli.allocator import keep_freed_memory
from sipe_fairseq.cli.eval_commands import (attention, blimp, glue, merge, reading_times, report, scale, seeds, sweep_plot,
                                            syntaxgym, tagger)
from sipe_fairseq.cli.options import add_progress_argument, configure_progress, output_path_problem
from sipe_fairseq.hexatag.errors import DataError, NonFiniteScoreError, WorkerDiedError
from sipe_fairseq.structure.memory import MemoryBudgetError

SUBCOMMANDS = {"blimp": blimp, "syntaxgym": syntaxgym, "report": report, "sweep-plot": sweep_plot,
               "attention": attention, "seeds": seeds, "scale": scale, "glue": glue, "tagger": tagger,
               "reading-times": reading_times, "merge": merge}
LONG_RUNNING = {"blimp", "syntaxgym", "report", "attention"}  # these get progress bars and --no-progress


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in SUBCOMMANDS.items():
        sp = sub.add_parser(name, help=module.HELP, description=module.DESCRIPTION,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sp)
        if name in LONG_RUNNING:
            add_progress_argument(sp)
        sp.set_defaults(run=module.run)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    keep_freed_memory()
    logs.configure("WARNING", logs.SHORT_FORMAT, plugin_level=logging.DEBUG if args.verbose else logging.INFO)
    configure_progress(args)
    problem = output_path_problem(args)  # before anything is loaded or scored: the results would be lost
    if problem:
        logging.getLogger("sipe-eval").error("%s", problem)
        return 2
    try:
        return args.run(args)
    except CheckpointError as e:
        logging.getLogger("sipe-eval").error("%s", e)
        return CHECKPOINT_EXIT_STATUS
    except MemoryBudgetError as e:  # a tag source that cannot fit the memory, even one sentence at a time
        logging.getLogger("sipe-eval").error("%s", e)
        return 2
    except DataError as e:  # a --data directory that cannot be used (no dict.txt, a malformed line: FILE:LINE)
        logging.getLogger("sipe-eval").error("%s", e)
        return 2
    except (NonFiniteScoreError, WorkerDiedError) as e:  # a score that came out NaN or infinite, a worker process
        # killed: nothing written, no accuracy
        logging.getLogger("sipe-eval").error("%s", e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
