"""``sipe-generate``: prompts -> continuations with the tags (SiPE) or arcs (GiLT) the model chose, as dependency structures.

    sipe-generate --path ck/checkpoint_best.pt --data data-bin prompts.txt --sampling --nbest 3 --seed 1
    sipe-generate --path ck/checkpoint_best.pt --data data-bin prompts.txt --beam 4 --prompt-tags spacy

One prompt per line (lines end at ``\\n`` only; an empty line: generate from nothing; an empty input is
refused). The prompt is split into words
(:func:`~sipe_fairseq.parsing.split_words`, or the parser's words with ``--prompt-tags SPEC``) and
encoded as ``sipe-preprocess`` encoded the data (the data directory's ``spm.model`` and
``dict.txt``). With ``--prompt-tags SPEC`` (a parser backend: ``spacy[:MODEL]``,
``hexatagger:CHECKPOINT``) the prompt's words keep the parser's tags (a parse of the prompt alone
closes its tree on the last word: that word's pair is chosen by the model); otherwise the model
chooses the prompt's tags too. A GiLT checkpoint (``gilt_txl``) chooses each word's arcs instead;
with ``--prompt-tags SPEC`` the prompt's words get the arcs of the parse's tree (each arc belongs to
its later word, as ``sipe-preprocess`` writes them). Generation is fairseq's generator through the
task's ``build_generator`` (:mod:`sipe_fairseq.structure.generation`).

Output (stdout): per hypothesis one CoNLL-U block: ``# prompt``, ``# text``, ``# score`` (log p of
the generated tokens given the tags, natural log, summed), ``# tags`` (``*``: from the prompt's
parse), and one row per word with the decoded head (DEPREL ``root``/``dep``) and ``Hexatag=t,n``
in MISC. A GiLT model's blocks have ``# arcs`` (per word ``word/h->d,...``, ``*``: the prompt's)
and graph rows (:func:`~sipe_fairseq.structure.generation.graph_rows`: a word may have several
heads or none, so HEAD is filled only for a word with exactly one head and DEPS lists them all).
A model without tags (``--sipe-injection none``) generates as a plain LM: the blocks have ``_`` heads.

Checked before anything is generated, each a line on stderr: option values (before any model is
loaded: ``--max-len``, ``--beam``, ``--nbest`` <= ``--beam``, ``--temperature`` > 0, the backend name of
``--prompt-tags``), the prompts (all read and decoded first: a line that is not UTF-8 is named and
nothing is written), and every prompt's length: ``--max-len`` counts the tokens generated after the
prompt, which is never cut; a prompt that leaves no room in the model's positions is refused with its
line and length, and one whose continuation the positions shorten is named in a warning.
Exit status: 0 ok, 1 a next-token log-probability that is not finite (the model's forward pass overflows:
one line naming the prompt, nothing written), 2 usage or input error (a bad option value, a prompt that is not
UTF-8 or too long, a prompt the parser fails on), 3 a checkpoint or parser backend cannot be loaded (one line
naming it and, for a file that is not a hexatagger, what it is).
"""
import argparse
import logging
import os
import sys
from typing import List, Optional, Sequence

from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, load_lm
from sipe_fairseq.cli import logs
from sipe_fairseq.cli.allocator import keep_freed_memory
from sipe_fairseq.cli.options import add_device_argument, float_above, int_at_least
from sipe_fairseq.data.encode import SentenceEncoder
from sipe_fairseq.hexatag.lines import read_lines
from sipe_fairseq.hexatag.errors import InputError, NonFiniteScoreError
from sipe_fairseq.parsing import BackendLoadError, resolve_parser
from sipe_fairseq.parsing import make_parser
from sipe_fairseq.structure.prompts import GenerationSettings, PromptError, build_generator, generate, parse_prompts

logger = logging.getLogger(__name__)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-generate", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 ok, 1 a score that is not finite, 2 usage or input error (checked "
                                       "before any model is loaded; prompts before any output), 3 checkpoint or parser "
                                       "cannot be loaded.")
    p.add_argument("prompts", nargs="?", default="-", help="one prompt per line, UTF-8 (default: stdin)")
    p.add_argument("--path", required=True, metavar="CHECKPOINT", help="a hexatag_lm decoder or gilt_txl checkpoint")
    p.add_argument("--data", required=True, metavar="DIR", help="its sipe-preprocess directory (dict.txt, spm.model)")
    p.add_argument("--beam", type=int_at_least(1), default=1, help="beam size (with --sampling: samples drawn per prompt)")
    p.add_argument("--nbest", type=int_at_least(1), default=1, help="hypotheses printed per prompt (<= --beam)")
    p.add_argument("--sampling", action="store_true", help="sample words and tags (default: beam search, argmax tags)")
    p.add_argument("--sampling-topk", type=int, default=-1, help="sample from the k most likely words (k >= 1; -1: all)")
    p.add_argument("--temperature", type=float_above(0.0), default=1.0, help="word sampling temperature (> 0)")
    p.add_argument("--max-len", type=int_at_least(1), default=50,
                   help="at most this many tokens generated after the prompt (</s> not counted; the prompt is never cut, "
                        "and the model's positions bound prompt + continuation)")
    p.add_argument("--seed", type=int, default=1, help="random seed")
    p.add_argument("--allow-dictionary-mismatch", action="store_true",
                   help="load a checkpoint whose recorded data (dict.txt, spm.model, tag dictionaries) differs from "
                        "--data's, with a warning (default: refused, exit status 3)")
    add_device_argument(p)
    p.add_argument("--continue-word", action="store_true",
                   help="the first generated token may continue the prompt's last word (default: it starts a new word, "
                        "so the prompt's words stay whole)")
    p.add_argument("--prompt-tags", metavar="SPEC", default=None,
                   help="parse each prompt with this backend and keep its tags (GiLT: its tree's arcs) "
                        "(default: the model chooses them)")
    return p


def settings_of(args) -> GenerationSettings:
    return GenerationSettings(beam=args.beam, nbest=args.nbest, sampling=args.sampling, sampling_topk=args.sampling_topk,
                              temperature=args.temperature, max_len=args.max_len, seed=args.seed,
                              continue_word=getattr(args, "continue_word", False))


def option_problem(args) -> Optional[str]:
    """The first option value argparse cannot check alone, as one line (None: all fine); no model is loaded."""
    problem = settings_of(args).problem()
    if problem:
        return problem
    if args.prompt_tags is not None:
        try:
            resolve_parser(args.prompt_tags)  # the backend's name only: loading it may load a model
        except ValueError as e:
            return f"--prompt-tags: {e}"
    if not os.path.isfile(os.path.join(args.data, "dict.txt")):
        return f"--data {args.data}: no dict.txt there: not a sipe-preprocess directory"
    return None


def read_prompts(name: str) -> List[str]:
    """Every prompt line of ``name`` (``-``: stdin), read and decoded before anything is generated by the one
    reader (:func:`sipe_fairseq.hexatag.lines.read_lines`: lines end at ``\\n`` only); :class:`PromptError`
    names a line that is not UTF-8, or an input without a line."""
    try:
        prompts = read_lines(name)
    except InputError as e:
        raise PromptError(f"{e}; no prompt was generated from") from None
    if not prompts:
        raise PromptError(f"{_name(name)}: empty input: no prompt to generate from (an empty line is an empty prompt)")
    return prompts


def _name(prompts: str) -> str:
    return "<stdin>" if prompts == "-" else prompts


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    keep_freed_memory()
    logs.configure("WARNING", "sipe-generate: %(levelname)s: %(message)s", plugin_level=logging.INFO)
    problem = option_problem(args)
    if problem:
        logger.error(problem)
        return 2
    try:
        prompts = read_prompts(args.prompts)
    except PromptError as e:
        logger.error(str(e))
        return 2
    except OSError as e:
        logger.error(f"{args.prompts}: {e.strerror or e}")
        return 2
    backend = None
    if args.prompt_tags:
        try:
            backend = make_parser(args.prompt_tags)
        except (BackendLoadError, CheckpointError, ValueError) as e:  # missing, refused, not a hexatagger, not installed
            logger.error(f"--prompt-tags {args.prompt_tags}: {e}")
            return CHECKPOINT_EXIT_STATUS
    try:
        model, task = load_lm(args.path, args.data, allow_dictionary_mismatch=args.allow_dictionary_mismatch,
                              device=args.device)
    except (CheckpointError, FileNotFoundError) as e:
        logger.error(str(e))
        return CHECKPOINT_EXIT_STATUS
    try:
        return run(args, prompts, model, task, backend)
    except PromptError as e:
        logger.error(str(e))
        return 2
    except NonFiniteScoreError as e:  # the model's forward pass overflows: one line naming the prompt, nothing written
        logger.error(str(e))
        return 1


def run(args, prompts: List[str], model, task, backend=None) -> int:
    """Generate from every prompt (``backend``: the ``--prompt-tags`` parser, loaded) and write one CoNLL-U
    block per hypothesis (:func:`sipe_fairseq.structure.prompts.generate`: every prompt is parsed, encoded
    and checked against the model's positions before the first is generated from)."""
    name = _name(args.prompts)
    where = lambda index: f"{name}:{index + 1}"  # noqa: E731
    parses = parse_prompts(backend, prompts, where) if backend is not None else None
    settings = settings_of(args)
    try:
        generator = build_generator(model, task, settings)
    except ValueError as e:  # a model that cannot choose the tags or arcs it reads (no tag heads, no arc scorer)
        logger.error(f"{args.path}: {e}")
        return CHECKPOINT_EXIT_STATUS
    encoder = SentenceEncoder(args.data, task.source_dictionary, allow_dictionary_mismatch=args.allow_dictionary_mismatch)
    results = generate(model, task, prompts, encoder, settings, parses, where, generator)
    out = sys.stdout
    for per_prompt in results:
        for continuation in per_prompt:
            out.write(continuation.conllu())
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
