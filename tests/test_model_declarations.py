"""Models declare what they are (structure/family.py reads the declarations, nothing is probed): the
structure a decoder reads and whether its forward takes the hexatag streams."""
import pytest
import torch

from sipe_fairseq.models.gilt_arcs import GiltArcsMixin
from sipe_fairseq.models.gilt_lm import GiltDecoder
from sipe_fairseq.models.gilt_transformer_lm import GiltTransformerDecoder
from sipe_fairseq.models.sipe_encoder import SiPEEncoder
from sipe_fairseq.models.sipe_lm import SiPEDecoder
from sipe_fairseq.models.sipe_transformer_lm import SiPETransformerDecoder
from sipe_fairseq.structure.family import is_gilt, structure_of, takes_tags


def test_declared_classes():
    assert issubclass(GiltDecoder, GiltArcsMixin) and issubclass(GiltTransformerDecoder, GiltArcsMixin)
    assert GiltDecoder.structure == GiltTransformerDecoder.structure == "arcs"
    assert SiPETransformerDecoder.structure == "hexatags"
    assert SiPEDecoder.takes_tags and SiPETransformerDecoder.takes_tags and SiPEEncoder.takes_tags
    assert GiltTransformerDecoder.takes_tags and not GiltDecoder.takes_tags


def test_family_reads_the_declaration():
    plain = torch.nn.Linear(2, 2)  # declares nothing, as fairseq's own decoders
    assert structure_of(plain) == "none" and not takes_tags(plain) and not is_gilt(plain)

    class Wrapped(torch.nn.Module):
        decoder = type("D", (), {"structure": "arcs", "takes_tags": False})()

    assert structure_of(Wrapped()) == "arcs" and is_gilt(Wrapped())
    bad = type("B", (), {"structure": "trees"})()
    with pytest.raises(ValueError, match="trees"):
        structure_of(bad)
