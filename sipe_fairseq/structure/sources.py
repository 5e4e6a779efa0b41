"""The structure sources of ``--tags`` (one grammar for every family and every command).

* ``given``: the structure of a parse of the whole sentence (SiPE: the data's or the parser's
  hexatags; GiLT: the data's ``{split}.arcs`` or the parser's tree as arcs): the conditional
  ``log p(x | S)``, and beside it a joint score with the structure paid for;
* ``self``: the model's own structure, chosen greedily from the prefix: a function of the prefix,
  so ``q(x) = prod_t p(x_t | x_<t, S(x_<t))`` is normalized and its perplexity exact;
* ``beam:K``: a word-synchronous beam of width K over structures: a lower bound on the model's
  marginal ``log sum_S p(x, S)`` (SiPE) or GiLT's beam approximation of it;
* ``mix:K``: the same beam read as a language model: each target's probability is the mixture of the
  live hypotheses' predictions weighted by their posterior given the prefix, so ``q_K(x)`` is
  normalized and its perplexity exact (the marginal itself when K covers every structure);
* ``untagged`` (SiPE): every word ``<notag>``, the model as a plain LM: exact ``p(x)`` (meaningful for a
  model trained with ``--tag-dropout``).
"""
from dataclasses import dataclass
from typing import List, Tuple

WIDTHS = ("beam", "mix")
KINDS = ("given", "self", "beam", "mix", "untagged")  # beam and mix take a width: beam:K, mix:K


@dataclass(frozen=True)
class Source:
    kind: str  # given | self | beam | mix | untagged
    k: int = 1  # beam width (1 for given and self)

    def __str__(self) -> str:
        return f"{self.kind}:{self.k}" if self.kind in WIDTHS else self.kind


def parse_source(spec: str) -> Source:
    """``"given"``, ``"self"``, ``"untagged"``, ``"beam:K"``, ``"mix:K"`` (K >= 1) -> :class:`Source`;
    ``ValueError`` naming the accepted forms otherwise."""
    spec = spec.strip()
    if spec in ("given", "self", "untagged"):
        return Source(spec)
    kind, sep, k = spec.partition(":")
    if kind in WIDTHS and sep and k.isdigit() and int(k) >= 1:
        return Source(kind, int(k))
    raise ValueError(f"tag source {spec!r}: expected given, self, untagged, beam:K or mix:K with K >= 1")


def parse_sources(spec: str) -> List[str]:
    """``"given,self,beam:4"`` -> ``["given", "self", "beam:4"]`` (each checked, duplicates dropped,
    order kept); ``ValueError`` for an empty list or a bad item."""
    out = []
    for part in (x.strip() for x in spec.split(",")):
        if not part:
            continue
        name = str(parse_source(part))
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError(f"tag sources {spec!r}: expected a comma-separated list of given, self, untagged, beam:K, mix:K")
    return out


def source_label(name: str, source: str) -> str:
    """The column of checkpoint ``name`` under ``source``: the name alone for ``given``,
    ``"name [self]"`` / ``"name [beam:4]"`` otherwise."""
    return name if source == "given" else f"{name} [{source}]"


def split_label(label: str) -> Tuple[str, str]:
    """Inverse of :func:`source_label`: ``"pos [beam:4]"`` -> ("pos", "beam:4"), ``"pos"`` -> ("pos", "given")."""
    if label.endswith("]") and " [" in label:
        name, _, source = label[:-1].rpartition(" [")
        try:
            parse_source(source)
            return name, source
        except ValueError:
            pass
    return label, "given"
