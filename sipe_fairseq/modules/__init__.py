"""Attention and injection building blocks (torch only: no file here imports fairseq; fairseq's own modules
extended, such as GiLT-GPT2's ``GraphKeyAttention``, live in ``sipe_fairseq/models``)."""
from .assembly import INJECTION_CHOICES, attach_injections, parse_injection
from .attention import SiPEAttention
from .injections import AttentionBias, DisentangledBias, Injection, PositionCoupling, RotaryPhase, TagContext, TagProjection
from .layer import SiPETransformerLayer
from .tag_embedding import FIRST_TAG_ID, NO_TAG_CLASS, HexatagEmbedding, tag_pair_classes
from .tag_heads import TagLogProbs, WordAwareInput, tag_head, tag_log_probs
