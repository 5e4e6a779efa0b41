"""Per-token log-probabilities of single sentences under a decoder LM (with or without tags).

A sentence is scored as fairseq-eval-lm scores it with ``--sample-break-mode eos``: the input is
``</s> x_1 .. x_n`` and the targets ``x_1 .. x_n </s>``; tags shift with the tokens. Sentences
are batched (right-padded; the models are causal, so padding never affects real positions).

:func:`score_sentence_batch` is the one entry point for whole-sentence scores used by the
minimal-pair evaluations (BLiMP): it dispatches on the model kind (:func:`model_kind`) through
:data:`SENTENCE_SCORERS`. Decoders are scored here; masked-LM encoders (pseudo-log-likelihood)
are a later extension: register a scorer under ``"encoder"``.
"""
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..criterions.hexatag_lm import TAG_HEADS
from ..data.tag_dictionary import FIRST_TAG_ID, NOTAG_ID
from .lm_scores import accepts_tags

Encoded = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _decoder_batches(model, encoded: Sequence[Encoded], eos: int, pad: int, batch_size: int
                     ) -> Iterator[Tuple[Sequence[Encoded], tuple, torch.Tensor]]:
    """Yields ``(chunk, net_output, log-probs)`` per batch of sentences."""
    model.eval()
    use_tags = accepts_tags(model)
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
        yield chunk, net_output, model.get_normalized_probs(net_output, log_probs=True).float()


@torch.no_grad()
def token_logprobs(model, encoded: Sequence[Encoded], eos: int, pad: int, batch_size: int = 32) -> List[torch.Tensor]:
    """``encoded``: (tokens, terminals, nonterminals) per sentence, tokens ending in ``</s>``.
    Returns, per sentence, the natural-log probability of each target token (including ``</s>``)."""
    out = []
    for chunk, _, lprobs in _decoder_batches(model, encoded, eos, pad, batch_size):
        for i, (t, _, _) in enumerate(chunk):
            out.append(lprobs[i, : len(t)].gather(-1, t[:, None]).squeeze(-1))
    return out


@torch.no_grad()
def decoder_sentence_scores(model, encoded: Sequence[Encoded], dictionary, batch_size: int = 32,
                            joint: bool = False, placement: str = "first_subword") -> List[float]:
    """Summed log-probability (nats) of each sentence's tokens including the final ``</s>``:
    ``log p(x | tags)``; with ``joint``, plus the log-probability the model's tag heads give each
    word's tags from its left context, at the anchors the task trained them on (``placement``,
    the ``hexatag_lm`` task's ``--tag-head-placement``): ``log p(x, tags)``, which equals
    ``log p(x)`` for a model that sees no tags."""
    from ..data.lm_dataset import tag_targets

    eos, pad = dictionary.eos(), dictionary.pad()
    starts = (eos, dictionary.bos())
    out = []
    for chunk, net_output, lprobs in _decoder_batches(model, encoded, eos, pad, batch_size):
        extra = net_output[1] if isinstance(net_output, tuple) and len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        tag_lp = {}
        if joint and accepts_tags(model):
            tag_lp = {kind: F.log_softmax(extra[f"{kind}_logits"].float(), -1)
                      for kind, _ in TAG_HEADS if extra.get(f"{kind}_logits") is not None}
        for i, (t, a, b) in enumerate(chunk):
            n = len(t)
            score = lprobs[i, :n].gather(-1, t[:, None]).sum().item()
            if tag_lp:
                src = torch.cat([t.new([eos]), t[:-1]])
                src_terms = torch.cat([a.new([NOTAG_ID]), a[:-1]])
            for (kind, n_cls), future in zip(TAG_HEADS, (a, b)):
                if kind not in tag_lp:
                    continue
                target = tag_targets(src, src_terms, future, starts, NOTAG_ID, placement)
                cls = target - FIRST_TAG_ID
                pos = ((cls >= 0) & (cls < n_cls)).nonzero().squeeze(-1)
                score += tag_lp[kind][i, pos].gather(-1, cls[pos][:, None]).sum().item()
            out.append(score)
    return out


def model_kind(model) -> str:
    """``"decoder"`` (fairseq language models: causal, scored left to right) or ``"encoder"``
    (masked LMs such as RoBERTa)."""
    from fairseq.models import FairseqEncoderModel, FairseqLanguageModel

    if isinstance(model, FairseqLanguageModel):
        return "decoder"
    if isinstance(model, FairseqEncoderModel):
        return "encoder"
    raise TypeError(f"cannot score sentences with a {type(model).__name__}: not a fairseq language model or encoder")


# model kind -> scorer(model, encoded, dictionary, batch_size=, joint=, placement=) -> per-sentence log-likelihoods
SENTENCE_SCORERS: Dict[str, Callable[..., List[float]]] = {"decoder": decoder_sentence_scores}


def score_sentence_batch(model, encoded: Sequence[Encoded], dictionary, batch_size: int = 32,
                         joint: bool = False, placement: str = "first_subword") -> List[float]:
    """Whole-sentence log-likelihood (nats) of each encoded sentence, by model kind (``joint``
    and ``placement``: see :func:`decoder_sentence_scores`)."""
    kind = model_kind(model)
    if kind not in SENTENCE_SCORERS:
        raise NotImplementedError(f"no sentence scorer for {kind} models ({type(model).__name__}); masked-LM "
                                  f"pseudo-log-likelihood is not implemented yet (register it in SENTENCE_SCORERS)")
    return SENTENCE_SCORERS[kind](model, encoded, dictionary, batch_size=batch_size, joint=joint, placement=placement)
