"""The one record of a sentence scored under a structure source, for every family."""
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

POSITION_TYPES = ("eos", "word_initial", "continuation")


@dataclass
class SentenceScore:
    """One sentence under one structure source (natural logs). Targets are ``x_1 .. x_n </s>``.

    ``tags`` (SiPE) holds the hexatag pair per word; a GiLT sentence keeps its graph in
    ``extra["arcs"]`` (``(head, dependent)`` pairs) and leaves ``tags`` empty. ``tag_logprobs`` is
    the structure's cost per word: SiPE the tag heads' ``log p(terminal) + log p(non-terminal)``;
    GiLT ``log pi(c)`` of the chosen count (self, beam) or, for ``given``, the gold arcs priced as
    independent Bernoullis (the training loss, not a probability of the count-then-top-c model).

    A sentence with a context (:func:`~.sentences.with_context`, :func:`~.sentences.after_prefix`) counts only
    its text: every field is the text's targets' and words', ``logprob`` is log p(text | context), and ``extra``
    has ``context_logprob``, ``context_tokens``, ``context_sentences``, ``context_dropped``. Under ``self`` and
    ``mix:K``, ``extra`` has per word (bits) ``structure_surprisal``, ``structure_entropy``,
    ``posterior_entropy``, ``lexical_surprisal`` and per sentence ``end_structure_surprisal``
    (docs/evaluation.md, "The structure's own surprisal")."""
    source: str
    logprob: float  # given: log p(x | S); self: log q(x) (exact); beam: the beam's log-sum over its hypotheses
    token_logprobs: List[float]  # per target (beam: increments of the running log-sum, summing to logprob)
    position_types: List[str]  # "eos" | "word_initial" | "continuation" per target
    tags: List[Tuple[str, str]]  # SiPE, per word: given, chosen (self) or the best final hypothesis's (beam)
    tag_logprobs: List[float]  # per word: the structure's cost (class docstring)
    complete: bool  # the structure forms one tree
    joint: float  # log p(x | S) + sum(tag_logprobs) of the scored structure; a model without structure: logprob
    restarts: int = 0  # SiPE self: words whose tags were chosen after an EOS-tagged word
    extra: Dict[str, object] = field(default_factory=dict)

    @property
    def n_tokens(self) -> int:
        return len(self.token_logprobs)

    @property
    def n_words(self) -> int:
        return sum(1 for k in self.position_types if k == "word_initial")


def position_types(n: int, starts) -> List[str]:
    """Per target of a sentence of ``n`` targets (the last is ``</s>``) with word starts ``starts``."""
    types = ["continuation"] * n
    for s in starts:
        types[s] = "word_initial"
    types[n - 1] = "eos"
    return types


def joint_token_logprobs(score: SentenceScore) -> List[float]:
    """Per target, ``log p(x, S)`` split over positions: the LM log-prob plus, at each word's first
    subword, that word's structure cost (they sum to ``score.joint``)."""
    out = list(score.token_logprobs)
    firsts = [q for q, k in enumerate(score.position_types) if k == "word_initial"]
    for q, lp in zip(firsts, score.tag_logprobs):
        out[q] += lp
    return out
