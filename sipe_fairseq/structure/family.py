"""The one place that tells the model families apart: what structure a decoder reads, and the
:class:`~.policy.StructurePolicy` that chooses it from the prefix.

* ``"arcs"``: GiLT decoders (``gilt_txl``, ``gilt_transformer_lm``): they read graph features and
  predict arcs (:class:`~.arcs.ArcPolicy`);
* ``"hexatags"``: SiPE decoders with an injection (``sipe_txl``, ``sipe_rope``,
  ``sipe_transformer_lm``): they read hexatags (:class:`~.hexatags.HexatagPolicy`);
* ``"none"``: every other left-to-right LM (``--sipe-injection none``, stock ``transformer_lm``).

Code outside ``structure/`` never compares family names: it asks :func:`family_of` for the model's
:class:`Family` (what the family reads, predicts and is scored with by default) or the policy itself.

Every decoder (and encoder) declares what it is, with class (or instance) attributes read here only:
``structure`` (one of :data:`STRUCTURES`; a module that declares nothing, such as fairseq's own
decoders, is ``"none"``) and ``takes_tags`` (its forward takes the hexatag streams ``src_terminals`` and
``src_nonterminals``; default False). GiLT decoders declare both through
:class:`~sipe_fairseq.models.gilt_arcs.GiltArcsMixin`.
"""
from dataclasses import dataclass

from .arcs import ArcPolicy
from .hexatags import HexatagPolicy
from .options import StructureOptions

STRUCTURES = ("hexatags", "arcs", "none")


def structure_of(model) -> str:
    """``"hexatags"``, ``"arcs"`` or ``"none"``: what a decoder LM's decoder (or a module itself, e.g. an
    encoder) declares it reads."""
    net = getattr(model, "decoder", model)
    declared = getattr(net, "structure", "none")
    if declared not in STRUCTURES:
        raise ValueError(f"{type(net).__name__} declares structure {declared!r}, not one of {STRUCTURES}")
    return declared


def takes_tags(model) -> bool:
    """Whether a decoder LM's decoder (or a module itself) takes the hexatag streams as input."""
    return bool(getattr(getattr(model, "decoder", model), "takes_tags", False))


def masked_lm(model) -> bool:
    """Whether ``model`` is a masked-LM encoder (an encoder and no decoder: RoBERTa-style, ``hexatag_mlm``,
    fairseq ``masked_lm``), scored by pseudo-log-likelihood rather than left to right: the one test of it."""
    return getattr(model, "decoder", None) is None and getattr(model, "encoder", None) is not None


def is_gilt(model) -> bool:
    return structure_of(model) == "arcs"


@dataclass(frozen=True)
class Family:
    """What callers outside ``structure/`` need to know of a model family (they never compare names).

    ``name``: the declared structure (one of :data:`STRUCTURES`; the ``model`` field of score rows);
    ``reads_tags``: the hexatag streams change its output (SiPE with an injection);
    ``predicts_arcs``: GiLT: it reads graph features, predicts arcs (arc F1 against the gold graph) and
    takes the words (``src_words``); its ``given`` structure is a tree's arcs, which only the structure
    engine can feed (the graph features are built per prefix), so ``given`` needs the sentences' trees
    and runs through :mod:`.scoring`, not one plain forward;
    ``default_source``: the ``--tags`` source when none is asked for (GiLT ``self``: its own graph;
    the others ``given``)."""
    name: str
    reads_tags: bool
    predicts_arcs: bool
    default_source: str


FAMILIES = {"hexatags": Family("hexatags", reads_tags=True, predicts_arcs=False, default_source="given"),
            "arcs": Family("arcs", reads_tags=False, predicts_arcs=True, default_source="self"),
            "none": Family("none", reads_tags=False, predicts_arcs=False, default_source="given")}


def family_of(model) -> Family:
    """The :class:`Family` of a decoder LM (its decoder's declaration) or of a module itself (an encoder)."""
    return FAMILIES[structure_of(model)]


def family_named(name: str) -> Family:
    """The :class:`Family` of a structure name recorded in a score row (``row["model"]``)."""
    if name not in FAMILIES:
        raise ValueError(f"structure {name!r}: not one of {STRUCTURES}")
    return FAMILIES[name]


def policy_for(model, options: StructureOptions = None, needs_heads: bool = True):
    """The model's :class:`~.policy.StructurePolicy`, or None for a model without structure.
    ``ValueError`` when the model cannot choose its structure (``needs_heads``: a source other than
    ``given`` asks it to)."""
    options = options or StructureOptions()
    kind = structure_of(model)
    if masked_lm(model):
        raise ValueError(f"{type(model).__name__} is not a left-to-right decoder (masked-LM encoders are scored with "
                         "given tags only)")
    if kind == "arcs":
        policy = ArcPolicy(model, options.count_beam, options.count_rule)
        policy.mass = options.mass
        return policy
    if kind == "hexatags":
        policy = HexatagPolicy(model, options.placement, options.constrained, options.use_cache, options.top_pairs,
                               options.abstain)
        policy.mass = options.mass
        policy.pair_mass = options.pair_mass
        if needs_heads and not policy.has_heads:
            raise ValueError("choosing tags from the prefix needs the model's tag heads (it was trained with "
                             "--sipe-tag-heads off)")
        return policy
    return None
