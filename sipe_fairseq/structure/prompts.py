"""Prompts -> continuations with the structure the model chooses: the generation loop of ``sipe-generate``
and of :func:`sipe_fairseq.hub.load` ``(...).generate`` (returns values and logs; prints nothing).

A prompt is split into words (:func:`~sipe_fairseq.parsing.split_words`, or a parser's words with its tree)
and encoded as ``sipe-preprocess`` encoded the data (a :class:`~sipe_fairseq.data.encode.SentenceEncoder`).
Every prompt is encoded and checked against the model's positions before the first is generated from: a
prompt is never cut, one that leaves no room is refused (:class:`PromptError`, naming it), one whose
continuation the positions shorten below ``max_len`` is named in a warning. Generation is fairseq's
generator through the task's ``build_generator`` and ``inference_step``
(:mod:`sipe_fairseq.structure.generation`); ``max_len`` counts the tokens generated after the prompt.
"""
import argparse
import logging
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence

import torch

from ..data.gilt.arcs import per_word, tree_arcs
from ..data.tag_dictionary import NOTAG_ID
from ..hexatag.conllu_io import conllu_sentence, hexatag_misc, plain_deprels
from ..parsing import parse_each, split_words
from .family import family_of
from ..hexatag.errors import NonFiniteScoreError
from .generation import (WORD_MARK, StructuredSequenceGenerator, format_arcs, graph_columns, hypothesis_words,
                         refuse_non_finite)

logger = logging.getLogger(__name__)


class PromptError(ValueError):
    """A prompt that cannot be generated from (one line naming it)."""


@dataclass
class GenerationSettings:
    """How continuations are drawn (the options of ``sipe-generate``)."""
    beam: int = 1  # beam size (with sampling: samples drawn per prompt)
    nbest: int = 1  # hypotheses kept per prompt (<= beam)
    sampling: bool = False  # sample words and structure (default: beam search, argmax structure)
    sampling_topk: int = -1  # sample from the k most likely words (-1: all)
    temperature: float = 1.0
    max_len: int = 50  # tokens generated after the prompt (</s> not counted)
    seed: int = 1
    continue_word: bool = False  # the first generated token may continue the prompt's last word

    def problem(self) -> Optional[str]:
        """The first value out of range, as one line (None: all fine)."""
        if self.beam < 1 or self.nbest < 1 or self.max_len < 1:
            return f"beam {self.beam}, nbest {self.nbest}, max_len {self.max_len}: expected integers >= 1"
        if self.nbest > self.beam:
            return f"--nbest {self.nbest} is larger than --beam {self.beam}"
        if self.sampling_topk == 0 or self.sampling_topk < -1:
            return f"--sampling-topk {self.sampling_topk}: expected k >= 1 (or -1: all words)"
        if not self.temperature > 0:
            return f"--temperature {self.temperature}: expected a value > 0"
        return None


@dataclass
class Continuation:
    """One generated hypothesis: ``words`` (the prompt's first), ``score`` (log p of the generated tokens
    given the structure, natural log, summed) and ``hypo`` (fairseq's hypothesis with the structure the
    generator attached: SiPE ``tags``, ``tag_origin``, ``heads``; GiLT ``arcs``, ``arc_origin``, ``arc_counts``)."""
    prompt: str
    index: int  # the prompt's index
    nth: int  # the hypothesis's rank for its prompt
    words: List[str]
    score: float
    hypo: dict = field(repr=False)

    @property
    def text(self) -> str:
        return " ".join(self.words)

    @property
    def tags(self):
        return self.hypo.get("tags")

    @property
    def heads(self):
        return self.hypo.get("heads")

    @property
    def arcs(self):
        return self.hypo.get("arcs")

    def conllu(self) -> str:
        """The CoNLL-U block ``sipe-generate`` writes for this hypothesis: ``# sent_id``, ``# prompt``,
        ``# text``, ``# score``, then ``# tags`` (``*``: the prompt's) and one row per word with the decoded
        head and ``Hexatag=t,n``, or ``# arcs`` and graph rows (GiLT)."""
        words, hypo = self.words, self.hypo
        comments = [("sent_id", f"{self.index + 1}.{self.nth + 1}"), ("prompt", self.prompt), ("text", self.text),
                    ("score", f"{float(hypo['positional_scores'].sum()):.4f}")]
        if "arcs" in hypo:  # GiLT: a graph
            comments.append(("arcs", format_arcs(words, hypo)))
            return conllu_sentence(words, comments=comments, **graph_columns(hypo))
        tags, heads = hypo.get("tags"), hypo.get("heads")
        if tags is not None:
            comments.append(("tags", " ".join(f"{t}/{n}{'*' if o == 'prompt' else ''}"
                                              for (t, n), o in zip(tags, hypo["tag_origin"]))))
        return conllu_sentence(words, heads, None if heads is None else plain_deprels(heads), comments,
                               misc=None if tags is None else [hexatag_misc(t) for t in tags])


def _words_of_plain(hypo, dictionary) -> List[str]:
    text = "".join(dictionary[int(t)] for t in hypo["tokens"][:-1])
    return [w for w in text.split(WORD_MARK) if w]


def _prompt_name(index: int) -> str:
    return f"prompt {index + 1}"


def parse_prompts(backend, prompts: Sequence[str], where: Callable[[int], str] = _prompt_name) -> List[Optional[tuple]]:
    """Each non-empty prompt parsed by ``backend`` (``(words, heads)``; None for an empty prompt);
    :class:`PromptError` names a prompt the parser fails on."""
    parses: List[Optional[tuple]] = [None] * len(prompts)
    nonempty = [i for i, p in enumerate(prompts) if p.strip()]
    for i, parse in zip(nonempty, parse_each(backend, [prompts[i] for i in nonempty])):
        if isinstance(parse, Exception):
            raise PromptError(f"{where(i)}: the parser failed on the prompt: {parse}")
        parses[i] = parse
    return parses


def build_generator(model, task, settings: GenerationSettings):
    """The task's generator for ``settings``; ``ValueError`` for a model that cannot choose the structure it
    reads (no tag heads, no arc scorer)."""
    gen_args = argparse.Namespace(beam=settings.beam, sampling=settings.sampling, sampling_topk=settings.sampling_topk,
                                  temperature=settings.temperature, max_len_a=0, max_len_b=settings.max_len, min_len=1,
                                  continue_word=settings.continue_word)
    generator = refuse_non_finite(task.build_generator([model], gen_args))  # a NaN: one line, not fairseq's assert
    generator.log_structure = False  # the structure is returned with each hypothesis
    return generator


def encode_prompts(prompts: Sequence[str], encoder, limit: int, max_len: int, parses=None,
                   where: Callable[[int], str] = _prompt_name) -> list:
    """``(words, heads, tokens, terminals, nonterminals)`` per prompt, every one checked against the model's
    ``limit`` positions first (:class:`PromptError`: no room left; a warning: the continuation is shortened)."""
    encoded = []
    for index, prompt in enumerate(prompts):
        parse = parses[index] if parses is not None else None
        words, heads = parse if parse is not None else (split_words(prompt), None)
        tokens, terms, nts, _ = encoder.encode(words, heads)
        n = len(tokens) - 1  # the prompt's tokens (without </s>), all forced: the continuation starts after them
        room = limit - 1 - n  # fairseq: at most limit - 1 tokens before the final </s>
        if room < 1:
            raise PromptError(f"{where(index)}: prompt of {len(words)} words is {n} tokens; the model's {limit} "
                              f"positions leave no room for a continuation (at most {limit - 2} prompt tokens); "
                              "prompts are never cut")
        if room < max_len:
            logger.warning(f"{where(index)}: prompt of {n} tokens: at most {room} tokens generated after it, not "
                           f"--max-len {max_len} (the model's {limit} positions)")
        encoded.append((words, heads, tokens, terms, nts))
    return encoded


def generate(model, task, prompts: Sequence[str], encoder, settings: GenerationSettings, parses=None,
             where: Callable[[int], str] = _prompt_name, generator=None) -> List[List[Continuation]]:
    """Per prompt, its ``settings.nbest`` continuations. ``parses``: per prompt ``(words, heads)`` from a
    parser (its structure is kept) or None (the model chooses it); ``generator``: from
    :func:`build_generator` (built here when None). Every prompt is encoded and checked before the first
    is generated from; the random state is seeded once with ``settings.seed``. A model whose next-token
    log-probabilities come out NaN or infinite: :class:`~sipe_fairseq.hexatag.errors.NonFiniteScoreError` naming
    the prompt (a ``ValueError``)."""
    problem = settings.problem()
    if problem:
        raise ValueError(problem)
    model.eval()
    d = task.source_dictionary
    generator = refuse_non_finite(generator) if generator is not None else build_generator(model, task, settings)
    structured = isinstance(generator, StructuredSequenceGenerator)
    limit = int(generator.max_len)  # the model's positions: fairseq's generator ends every hypothesis by then
    encoded = encode_prompts(prompts, encoder, limit, settings.max_len, parses, where)
    graphs = family_of(model).predicts_arcs
    torch.manual_seed(settings.seed)
    out: List[List[Continuation]] = []
    for index, prompt in enumerate(prompts):
        words, heads, tokens, terms, nts = encoded[index]
        eos = torch.tensor([d.eos()])
        notag = torch.tensor([NOTAG_ID])
        sample = {"id": torch.tensor([index]), "net_input": {
            "src_tokens": torch.cat([eos, tokens[:-1]])[None], "src_lengths": torch.tensor([len(tokens)]),
            "src_terminals": torch.cat([notag, terms[:-1]])[None], "src_nonterminals": torch.cat([notag, nts[:-1]])[None]}}
        if heads is not None and graphs:  # the parse's tree as the prompt words' arcs
            sample["prompt_arcs"] = [per_word(tree_arcs(heads), len(heads))]
        # max_len counts the tokens after the prompt (the structured generator adds the prompt's length;
        # a plain LM's fairseq generator counts the forced prompt too)
        generator.max_len_b = settings.max_len if structured else len(tokens) - 1 + settings.max_len
        try:
            with torch.no_grad():
                hypos = task.inference_step(generator, [model], sample)[0]
        except NonFiniteScoreError as e:  # named by the prompt: nothing of any prompt is returned
            raise e.naming(f"{where(index)} ({prompt!r})") from None
        out.append([Continuation(prompt, index, nth, hypothesis_words(hypo, d) if "word_starts" in hypo
                                 else _words_of_plain(hypo, d), float(hypo["positional_scores"].sum()), hypo)
                    for nth, hypo in enumerate(hypos[:settings.nbest])])
    counts = [c for per_prompt in out for c in per_prompt]
    logger.info(f"prompts: {len(out)}, hypotheses: {len(counts)}, with a tree: "
                f"{sum(c.heads is not None for c in counts)}, with a graph: {sum(c.arcs is not None for c in counts)}")
    return out
