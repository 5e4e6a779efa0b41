"""Which scorer a checkpoint gets under a structure source (``--tags given|self|beam:K``): the one
place that tells a SiPE decoder (its structure is hexatags, :mod:`.prefix_tags`) from a GiLT decoder
(``gilt_txl``: its structure is a graph, :mod:`.gilt_scoring`, gilt-facts.md section 4).

The sources mean the same for both families:

* ``given``: the structure of a parse of the whole sentence (SiPE: the data's or the parser's hexatags;
  GiLT: the data directory's ``{split}.arcs`` gold graph, or the parser's tree as arcs, made as
  ``sipe-preprocess`` makes the arc stream: ``tree_arcs(heads)``): the conditional ``log p(x | S)``, and
  beside it the joint bound with the structure paid for;
* ``self``: the model's own structure, chosen greedily from the prefix (SiPE: constrained argmax tags;
  GiLT: argmax count and top-c arcs per word): an exact, normalized ``log q(x)``;
* ``beam:K``: a beam of width K over structures (GiLT: ``count_beam`` counts per hypothesis,
  ``--gilt-count-beam``): a bound (SiPE) or the beam approximation of the marginal (GiLT), per token
  the increments of the running logsumexp.

A GiLT checkpoint reads no hexatags; when no source is asked for, it is scored with ``self`` (the
structure from its own predictions), a SiPE one with ``given`` (:func:`default_sources`).
"""
import logging
from typing import Callable, Dict, List, Optional, Sequence

import torch

from ..models.gilt_lm import is_gilt
from . import gilt_scoring, prefix_tags

logger = logging.getLogger(__name__)

DEFAULT_COUNT_BEAM = 5  # counts each GiLT hypothesis branches on (gilt-facts.md section 4: scorebeamsize 5)


def default_sources(model) -> List[str]:
    """The structure source when none is asked for: GiLT ``self`` (its own graph), others ``given``."""
    return ["self"] if is_gilt(model) else ["given"]


def sources_for(model, requested: Optional[Sequence[str]]) -> List[str]:
    """``requested`` (parsed ``--tags``), or :func:`default_sources` when it is None."""
    return list(requested) if requested else default_sources(model)


def gold_graph(heads: Optional[Sequence[int]]):
    """A tree's HEAD column -> per word (heads, dependents) among earlier nodes, as ``sipe-preprocess``
    writes the arc stream (``--arcs tree``); None without a tree."""
    from ..data.arcs import per_word, tree_arcs

    if heads is None:
        return None
    return per_word(tree_arcs([int(h) for h in heads]), len(heads))


# ------------------------------------------------------------------------------ whole splits
def score_split_sources(model, task, split: str, sources: Sequence[str], constrained: bool = True,
                        max_sentences: Optional[int] = None, count_beam: int = DEFAULT_COUNT_BEAM
                        ) -> Dict[str, Dict[str, float]]:
    """Every sentence of ``split`` scored alone under each source: ``{source: row}`` as
    :func:`~sipe_fairseq.eval.prefix_tags.score_split_tag_sources` (GiLT rows add ``arc_f1`` against
    the gold graph for ``self`` and ``beam:K``)."""
    if is_gilt(model):
        from fairseq import utils

        data = utils.split_paths(task.args.data)[0]
        return gilt_scoring.score_split_sources(model, data, split, task.source_dictionary, sources, count_beam,
                                                max_sentences)
    return prefix_tags.score_split_tag_sources(model, task, split, sources, constrained, max_sentences)


# ------------------------------------------------------------------------------ single sentences
def score_encoded(model, encoded, source: str, dictionary, placement: str = "first_subword", constrained: bool = True,
                  heads: Optional[Sequence[Optional[Sequence[int]]]] = None, count_beam: int = DEFAULT_COUNT_BEAM,
                  batch_size: int = 64) -> List[prefix_tags.SentenceScore]:
    """:class:`~sipe_fairseq.eval.prefix_tags.SentenceScore` per ``(tokens, terminals, nonterminals)``
    sentence (BLiMP, SyntaxGym). ``heads``: each sentence's tree (HEAD column) or None, the GiLT
    ``given`` graph; word starts come from the tags or from sentencepiece's U+2581."""
    encoded = [tuple(e[:3]) for e in encoded]
    if not is_gilt(model):
        return prefix_tags.score_sentences(model, encoded, source, placement, constrained, dictionary=dictionary,
                                           eos=dictionary.eos(), pad=dictionary.pad(), batch_sentences=batch_size)
    model.eval()
    eos = dictionary.eos()
    out = []
    with torch.no_grad():
        for i, (tokens, terminals, _) in enumerate(encoded):
            tokens = tokens.long()
            words = gilt_scoring.words_of(tokens, prefix_tags.word_starts(tokens, terminals, dictionary))
            gold = gold_graph(heads[i]) if heads is not None else None
            if gold is not None and len(gold) != len(words):
                raise ValueError(f"sentence {i}: a tree of {len(gold)} words for {len(words)} encoded words")
            out.append(gilt_scoring.score_source(model, words, eos, source, count_beam, gold))
    return out


def sentence_logprob_fn(model, source: str, dictionary, placement: str = "first_subword", constrained: bool = True,
                        count_beam: int = DEFAULT_COUNT_BEAM) -> Callable:
    """A ``logprob_fn(model, encoded, eos, pad, batch_size[, heads=])`` returning per-token log-probs
    (the signature of :func:`~sipe_fairseq.eval.scoring.token_logprobs`, which SyntaxGym takes) for
    ``model`` under ``source``; beam rows are the running logsumexp's increments, so a region's
    surprisal is the difference of the prefix marginal at its boundaries. A function that needs the
    trees (GiLT ``given``) has ``wants_heads = True``."""
    if not is_gilt(model):
        if source == "given":
            from .scoring import token_logprobs

            return token_logprobs
        return prefix_tags.tag_source_logprob_fn(source, dictionary, placement, constrained)

    def fn(model, encoded, eos, pad, batch_size, heads=None):
        scores = score_encoded(model, encoded, source, dictionary, placement, constrained, heads, count_beam, batch_size)
        return [torch.tensor(s.token_logprobs, dtype=torch.float64) for s in scores]

    fn.wants_heads = True
    return fn


# ------------------------------------------------------------------------------ fairseq-eval-lm
def self_structured_sample(model, sample: dict, dictionary, placement: str = "first_subword",
                           constrained: bool = True) -> dict:
    """``fairseq-eval-lm --inference-tags self`` (tasks ``hexatag_lm`` and ``gilt_lm``): the sample with
    the model's own structure as input: hexatags (:func:`~sipe_fairseq.eval.prefix_tags.self_tagged_sample`)
    or the greedy graph (:func:`~sipe_fairseq.eval.gilt_scoring.self_graph_sample`)."""
    if is_gilt(model):
        return gilt_scoring.self_graph_sample(model, sample, dictionary)
    return prefix_tags.self_tagged_sample(model, sample, dictionary, placement, constrained)


def _register_inference_tagger() -> None:
    from ..tasks.hexatag_lm import INFERENCE_TAGGERS

    INFERENCE_TAGGERS["self"] = self_structured_sample


_register_inference_tagger()
