"""The columns of a SyntaxGym report: one per checkpoint and tag source (``model``, ``model [self]``, ...)."""

import logging
from dataclasses import replace
from typing import Optional

from ...data.lm_dataset import task_placement
from ...structure.family import StructureOptions
from ...structure.sources import source_label
from ..prefix_scores import sources_for
from ..scoring import sentence_logprob_fn
logger = logging.getLogger(__name__)


def tag_source_columns(name: str, model, task, dictionary, sources, options: Optional[StructureOptions] = None) -> dict:
    """``{column: (model, eos, pad, logprob_fn)}`` for :func:`evaluate_suites`: one column per tag
    source (:func:`~sipe_fairseq.structure.sources.source_label`; ``sources`` None: the model's default,
    given, for GiLT self), the per-token log-probs of
    :func:`~sipe_fairseq.eval.scoring.sentence_logprob_fn` at the checkpoint's own
    ``--tag-head-placement``: ``given`` = the parser's tags (GiLT: its tree as arcs), ``self`` =
    the model's own choice from the prefix, ``beam:K`` = the increments of the beam's running
    logsumexp, so a region's surprisal is the difference of the prefix marginal at its boundaries;
    ``options``: how structure is chosen (``--tags-*``, ``--gilt-count-*``)."""
    options = replace(options or StructureOptions(), placement=task_placement(task))
    d = dictionary
    return {source_label(name, src): (model, d.eos(), d.pad(), sentence_logprob_fn(model, src, d, options))
            for src in sources_for(model, sources)}
