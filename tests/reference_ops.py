"""Plain-autograd references of the fused score terms (test and benchmark code, not used by the
models): the tests compare the in-place kernels of ``sipe_fairseq.modules.gated_bd`` and the
per-class gathers of the attention with these direct computations; and one ordinary full forward of a
decoder with fixed tags (:func:`full_forward_logprobs`), the reference the structure engine's ``given`` is
compared with."""
import torch

from sipe_fairseq.data.tag_dictionary import NOTAG_ID
from sipe_fairseq.data.tag_timing import time_sentence_streams
from sipe_fairseq.modules.attention import _disentangled_spos
from sipe_fairseq.modules.injections import class_onehot, per_class_scores
from sipe_fairseq.modules.positional import rel_shift
from sipe_fairseq.structure.family import takes_tags


def _gated_bd(q_pos, r, gate, onehot, scale):
    """Eq. 6's (1 + c) * BD as bd + bd * c, with c_ij = gate[i, cls_j] spread by the one-hot (plain
    autograd reference of :func:`gated_bd.gated_bd_add`, which the forward uses)."""
    bd = rel_shift(torch.matmul(q_pos * scale, r.transpose(-1, -2)))  # scale the (T, d) side, not (T, T)
    return torch.addcmul(bd, bd, torch.matmul(gate, onehot))


def _gated_spos(q, k, pos_q, pos_k, gate, onehot, scale):
    """Eq. 13's (1 + c) * S_pos (plain autograd reference of :func:`gated_bd.gated_spos_add`)."""
    spos = _disentangled_spos(q, k, pos_q, pos_k, scale)
    return torch.addcmul(spos, spos, torch.matmul(gate, onehot))


def class_scores(query: torch.Tensor, proj: torch.Tensor, cls: torch.Tensor, scale: float) -> torch.Tensor:
    """<query_i, P[cls_j]> * scale for every (i, j): (B, H, T, T), via 11 classes (reference form;
    the attention adds the per-class table directly, see ``SiPEAttention``)."""
    per_class = per_class_scores(query, proj, scale)
    return torch.matmul(per_class, class_onehot(cls, proj.size(0), per_class.dtype))


@torch.no_grad()
def full_forward_logprobs(model, encoded, eos: int):
    """Per sentence ``(tokens x_1 .. x_n </s>, terminals, nonterminals)`` (word-aligned tags, as
    ``SentenceEncoder`` gives them): the log-probability of each target ``x_1 .. x_n </s>`` from one
    ordinary full forward of the decoder, alone (no batch, no padding, no cache), as fairseq-eval-lm's
    ``--sample-break-mode eos`` feeds it: input ``</s> x_1 .. x_{n-1}``, the tags shifted with the tokens
    (``<notag>`` at the first position), timed as the model's ``--tag-timing`` feeds them, passed only to a
    model that takes tags. Float32 log-probs (``get_normalized_probs(...).float()``), one (n,) tensor each."""
    model.eval()
    use_tags = takes_tags(model)
    timing = str(getattr(model.decoder, "tag_timing", "paper"))
    out = []
    for t, a, b in encoded:
        if timing != "paper":
            a, b = time_sentence_streams(a, b, timing)
        n = len(t)
        src = torch.cat([t.new_tensor([eos]), t[:-1]])[None]
        terms, nts = torch.full_like(src, NOTAG_ID), torch.full_like(src, NOTAG_ID)
        terms[0, 1:n], nts[0, 1:n] = a[:-1], b[:-1]
        kwargs = {"src_terminals": terms, "src_nonterminals": nts} if use_tags else {}
        net_output = model(src, src_lengths=torch.tensor([n]), **kwargs)
        lprobs = model.get_normalized_probs(net_output, log_probs=True).float()
        out.append(lprobs[0, :n].gather(-1, t[:, None]).squeeze(-1))
    return out
