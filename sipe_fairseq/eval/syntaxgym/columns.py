"""The columns of a SyntaxGym report: one per checkpoint and tag source (``model``, ``model [self]``, ...)."""

import logging
from dataclasses import replace
from typing import Optional

import torch

from ...data.lm_dataset import task_placement
from ...structure.family import StructureOptions
from ...structure.scoring import score_encoded
from ...structure.sources import source_label
from ..prefix_scores import sources_for
from ..progress import progress

logger = logging.getLogger(__name__)


def engine_logprobs(source: str, dictionary, options: Optional[StructureOptions] = None):
    """A column's ``logprob_fn(model, encoded, eos, pad, batch_size, heads=None)``: per sentence, the per-token
    natural-log probabilities of the structure engine under ``source``
    (:func:`~sipe_fairseq.structure.scoring.score_encoded`, called directly); beam rows are the running
    bound's increments, so a region's surprisal is the difference of the prefix score at its boundaries.
    ``heads``: each sentence's tree (GiLT's given graph)."""

    def fn(model, encoded, eos, pad, batch_size, heads=None):
        bar = progress(desc=f"tags {source}", unit=" sent", total=len(encoded))
        try:
            scores = score_encoded(model, encoded, source, dictionary, options, heads, batch_size, progress=bar.update)
        finally:
            bar.close()
        return [torch.tensor(s.token_logprobs, dtype=torch.float64) for s in scores]

    fn.wants_heads = True
    return fn


def tag_source_columns(name: str, model, task, dictionary, sources, options: Optional[StructureOptions] = None) -> dict:
    """``{column: (model, eos, pad, logprob_fn)}`` for :func:`evaluate_suites`: one column per tag
    source (:func:`~sipe_fairseq.structure.sources.source_label`; ``sources`` None: the model's default,
    given, for GiLT self), the per-token log-probs of
    :func:`engine_logprobs` at the checkpoint's own
    ``--tag-head-placement``: ``given`` = the parser's tags (GiLT: its tree as arcs), ``self`` =
    the model's own choice from the prefix, ``beam:K`` = the increments of the beam's running
    logsumexp, so a region's surprisal is the difference of the prefix marginal at its boundaries;
    ``options``: how structure is chosen (``--tags-*``, ``--gilt-count-*``)."""
    options = replace(options or StructureOptions(), placement=task_placement(task))
    d = dictionary
    return {source_label(name, src): (model, d.eos(), d.pad(), engine_logprobs(src, d, options))
            for src in sources_for(model, sources)}
