"""``sipe-generate``: prompts -> continuations with the tags (SiPE) or arcs (GiLT) the model chose, as dependency structures.

    sipe-generate --path ck/checkpoint_best.pt --data data-bin prompts.txt --sampling --nbest 3 --seed 1
    sipe-generate --path ck/checkpoint_best.pt --data data-bin prompts.txt --beam 4 --prompt-tags spacy

One prompt per line (an empty line: generate from nothing). The prompt is split into words
(:func:`~sipe_fairseq.parsing.split_words`, or the parser's words with ``--prompt-tags SPEC``) and
encoded as ``sipe-preprocess`` encoded the data (the data directory's ``spm.model`` and
``dict.txt``). With ``--prompt-tags SPEC`` (a parser backend: ``spacy[:MODEL]``,
``hexatagger:CHECKPOINT``) the prompt's words keep the parser's tags (a parse of the prompt alone
closes its tree on the last word: that word's pair is chosen by the model); otherwise the model
chooses the prompt's tags too. A GiLT checkpoint (``gilt_txl``) chooses each word's arcs instead;
with ``--prompt-tags SPEC`` the prompt's words get the arcs of the parse's tree (each arc belongs to
its later word, as ``sipe-preprocess`` writes them). Generation is fairseq's generator through the
task's ``build_generator`` (:mod:`sipe_fairseq.models.generation`).

Output (stdout): per hypothesis one CoNLL-U block: ``# prompt``, ``# text``, ``# score`` (log p of
the generated tokens given the tags, natural log, summed), ``# tags`` (``*``: from the prompt's
parse), and one row per word with the decoded head (DEPREL ``root``/``dep``) and ``Hexatag=t,n``
in MISC. A GiLT model's blocks have ``# arcs`` (per word ``word/h->d,...``, ``*``: the prompt's)
and graph rows (:func:`~sipe_fairseq.models.gilt_generation.graph_rows`: a word may have several
heads or none, so HEAD is filled only for a word with exactly one head and DEPS lists them all).
A model without tags (``--sipe-injection none``) generates as a plain LM: the blocks have ``_`` heads.
Exit status: 0 ok, 2 usage or I/O error, 3 a checkpoint or parser backend cannot be
loaded (one line naming it).
"""
import argparse
import logging
import sys
from typing import List, Optional, Sequence

import torch

from sipe_fairseq.checkpoints import CHECKPOINT_EXIT_STATUS, CheckpointError, load_lm
from sipe_fairseq.cli import logs

logger = logging.getLogger(__name__)


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sipe-generate", description=__doc__.split("\n\n")[0],
                                epilog="Exit status: 0 ok, 2 usage or I/O error, 3 checkpoint or parser cannot be loaded.")
    p.add_argument("prompts", nargs="?", default="-", help="one prompt per line (default: stdin)")
    p.add_argument("--path", required=True, metavar="CHECKPOINT", help="a hexatag_lm decoder or gilt_txl checkpoint")
    p.add_argument("--data", required=True, metavar="DIR", help="its sipe-preprocess directory (dict.txt, spm.model)")
    p.add_argument("--beam", type=int, default=1, help="beam size (with --sampling: samples drawn per prompt)")
    p.add_argument("--nbest", type=int, default=1, help="hypotheses printed per prompt (<= --beam)")
    p.add_argument("--sampling", action="store_true", help="sample words and tags (default: beam search, argmax tags)")
    p.add_argument("--sampling-topk", type=int, default=-1, help="sample from the k most likely words")
    p.add_argument("--temperature", type=float, default=1.0, help="word sampling temperature")
    p.add_argument("--max-len", type=int, default=50, help="at most this many generated tokens (fairseq --max-len-b)")
    p.add_argument("--seed", type=int, default=1, help="random seed")
    p.add_argument("--prompt-tags", metavar="SPEC", default=None,
                   help="parse each prompt with this backend and keep its tags (GiLT: its tree's arcs) "
                        "(default: the model chooses them)")
    return p


def conllu_block(prompt: str, words: List[str], hypo: dict, nth: int, index: int) -> str:
    lines = [f"# sent_id = {index + 1}.{nth + 1}", f"# prompt = {prompt}", f"# text = {' '.join(words)}",
             f"# score = {float(hypo['positional_scores'].sum()):.4f}"]
    if "arcs" in hypo:  # GiLT: a graph
        from sipe_fairseq.models.gilt_generation import format_arcs, graph_rows

        lines.append(f"# arcs = {format_arcs(words, hypo)}")
        return "\n".join(lines + graph_rows(words, hypo)) + "\n\n"
    tags = hypo.get("tags")
    if tags is not None:
        lines.append("# tags = " + " ".join(f"{t}/{n}{'*' if o == 'prompt' else ''}"
                                            for (t, n), o in zip(tags, hypo["tag_origin"])))
    heads = hypo.get("heads")
    for i, w in enumerate(words):
        head = "_" if heads is None else str(heads[i])
        rel = "_" if heads is None else ("root" if heads[i] == 0 else "dep")
        misc = "_" if tags is None else f"Hexatag={tags[i][0]},{tags[i][1]}"
        lines.append(f"{i + 1}\t{w}\t_\t_\t_\t_\t{head}\t{rel}\t_\t{misc}")
    return "\n".join(lines) + "\n\n"


def _words_of_plain(hypo, dictionary) -> List[str]:
    from sipe_fairseq.models.generation import WORD_MARK

    text = "".join(dictionary[int(t)] for t in hypo["tokens"][:-1])
    return [w for w in text.split(WORD_MARK) if w]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = get_parser().parse_args(argv)
    logs.configure("WARNING", "sipe-generate: %(levelname)s: %(message)s", plugin_level=logging.INFO)
    if args.nbest > args.beam:
        logger.error(f"--nbest {args.nbest} is larger than --beam {args.beam}")
        return 2
    try:
        src = sys.stdin if args.prompts == "-" else open(args.prompts, encoding="utf-8")
        with src:
            prompts = [line.rstrip("\n") for line in src]
    except (OSError, UnicodeDecodeError) as e:
        logger.error(f"{args.prompts}: {e}")
        return 2
    try:
        model, task = load_lm(args.path, args.data)
    except (CheckpointError, FileNotFoundError) as e:
        logger.error(str(e))
        return CHECKPOINT_EXIT_STATUS
    return run(args, prompts, model, task)


def run(args, prompts: List[str], model, task) -> int:
    from sipe_fairseq.data.arcs import per_word, tree_arcs
    from sipe_fairseq.data.encode import SentenceEncoder
    from sipe_fairseq.data.tag_dictionary import NOTAG_ID
    from sipe_fairseq.models.generation import hypothesis_words
    from sipe_fairseq.models.gilt_lm import is_gilt
    from sipe_fairseq.parsing import BackendLoadError, get_parser as get_backend, parse_each, split_words

    model.eval()
    d = task.source_dictionary
    encoder = SentenceEncoder(args.data, d)
    parses: List[Optional[tuple]] = [None] * len(prompts)
    if args.prompt_tags:
        try:
            backend = get_backend(args.prompt_tags)
        except (BackendLoadError, ValueError) as e:
            logger.error(str(e))
            return CHECKPOINT_EXIT_STATUS
        nonempty = [i for i, p in enumerate(prompts) if p.strip()]
        for i, parse in zip(nonempty, parse_each(backend, [prompts[i] for i in nonempty])):
            if isinstance(parse, Exception):
                logger.error(f"{args.prompts}:{i + 1}: the parser failed on the prompt: {parse}")
                return 2
            parses[i] = parse
    gen_args = argparse.Namespace(beam=args.beam, sampling=args.sampling, sampling_topk=args.sampling_topk,
                                  temperature=args.temperature, max_len_a=0, max_len_b=args.max_len, min_len=1)
    try:
        generator = task.build_generator([model], gen_args)
    except ValueError as e:  # a model that cannot choose the tags or arcs it reads (no tag heads, no arc scorer)
        logger.error(f"{args.path}: {e}")
        return CHECKPOINT_EXIT_STATUS
    generator.print_structure = False
    torch.manual_seed(args.seed)
    out = sys.stdout
    counts = {"prompts": 0, "hypotheses": 0, "trees": 0, "graphs": 0}
    for index, prompt in enumerate(prompts):
        words, heads = parses[index] if parses[index] is not None else (split_words(prompt), None)
        tokens, terms, nts, _ = encoder.encode(words, heads)
        eos = torch.tensor([d.eos()])
        notag = torch.tensor([NOTAG_ID])
        sample = {"id": torch.tensor([index]), "net_input": {
            "src_tokens": torch.cat([eos, tokens[:-1]])[None], "src_lengths": torch.tensor([len(tokens)]),
            "src_terminals": torch.cat([notag, terms[:-1]])[None], "src_nonterminals": torch.cat([notag, nts[:-1]])[None]}}
        if heads is not None and is_gilt(model):  # the parse's tree as the prompt words' arcs
            sample["prompt_arcs"] = [per_word(tree_arcs(heads), len(heads))]
        with torch.no_grad():
            hypos = task.inference_step(generator, [model], sample)[0]
        counts["prompts"] += 1
        for nth, hypo in enumerate(hypos[:args.nbest]):
            words_out = hypothesis_words(hypo, d) if "word_starts" in hypo else _words_of_plain(hypo, d)
            out.write(conllu_block(prompt, words_out, hypo, nth, index))
            counts["hypotheses"] += 1
            counts["trees"] += int(hypo.get("heads") is not None)
            counts["graphs"] += int("arcs" in hypo)
    out.flush()
    logger.info(f"prompts: {counts['prompts']}, hypotheses: {counts['hypotheses']}, with a tree: {counts['trees']}, "
                f"with a graph: {counts['graphs']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
