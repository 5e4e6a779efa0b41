"""Per-token log-probabilities of single sentences under a decoder LM (with or without tags).

A sentence is scored as fairseq-eval-lm scores it with ``--sample-break-mode eos``: the input is
``</s> x_1 .. x_n`` and the targets ``x_1 .. x_n </s>``; tags shift with the tokens. Sentences
are batched (right-padded; the models are causal, so padding never affects real positions).
"""
from typing import List, Sequence, Tuple

import torch

from ..data.tag_dictionary import NOTAG_ID
from .lm_scores import accepts_tags


@torch.no_grad()
def token_logprobs(model, encoded: Sequence[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]], eos: int, pad: int,
                   batch_size: int = 32) -> List[torch.Tensor]:
    """``encoded``: (tokens, terminals, nonterminals) per sentence, tokens ending in ``</s>``.
    Returns, per sentence, the natural-log probability of each target token (including ``</s>``)."""
    model.eval()
    use_tags = accepts_tags(model)
    out = []
    for start in range(0, len(encoded), batch_size):
        chunk = encoded[start:start + batch_size]
        width = max(len(t) for t, _, _ in chunk)
        src = torch.full((len(chunk), width), pad, dtype=torch.long)
        terms = torch.full_like(src, NOTAG_ID)
        nts = torch.full_like(src, NOTAG_ID)
        for i, (t, a, b) in enumerate(chunk):
            n = len(t)
            src[i, 0], src[i, 1:n] = eos, t[:-1]
            terms[i, 1:n], nts[i, 1:n] = a[:-1], b[:-1]
        kwargs = {"src_terminals": terms, "src_nonterminals": nts} if use_tags else {}
        net_output = model(src, src_lengths=torch.tensor([len(t) for t, _, _ in chunk]), **kwargs)
        lprobs = model.get_normalized_probs(net_output, log_probs=True).float()
        for i, (t, _, _) in enumerate(chunk):
            out.append(lprobs[i, : len(t)].gather(-1, t[:, None]).squeeze(-1))
    return out
