"""The one road beside the structure engine: masked-LM encoders (``sipe_roberta``/``sipe_deberta``/
``sipe_modernbert``, fairseq ``roberta``), scored by the pseudo-log-likelihood of Salazar et al. (2020),
``PLL(x) = sum_p log p(x_p | x_{\\p})``. Every decoder goes through the engine
(:func:`sipe_fairseq.structure.scoring.score_sentences`); whether a model is a masked-LM encoder is
decided once, by :func:`sipe_fairseq.structure.family.masked_lm`.

The input is ``<s> x_1 .. x_n </s>``, as ``hexatag_mlm``/``masked_lm`` blocks are built (tags ``<notag>``
at ``<s>`` and ``</s>``); for every sentence token ``x_1 .. x_n`` (subword pieces; the specials ``<s>`` and
``</s>`` are not scored, as in Salazar et al.) one copy has ``x_p`` replaced by the model dictionary's
``<mask>`` and its tags by ``<notag>``, exactly as training masks them (m_p = 0), so a masked position
carries no tag signal. All copies of a sentence run in one forward pass (right-padded; padding is masked
out of attention). Models that see no tags get none. Only ``given`` tags apply (an encoder sees the whole
sentence: it cannot choose structure from a prefix). A term that comes out NaN or infinite is refused
(:func:`check_finite`), as the engine refuses one.
"""
from typing import Iterator, List, Sequence, Tuple

import torch
import torch.nn.functional as F

from ..data.tag_dictionary import NOTAG_ID, TAG_HEADS
from ..hexatag.errors import NonFiniteScoreError
from ..modules.tag_heads import tag_log_probs
from ..structure.family import family_of
from ..structure.sentences import max_positions
from .progress import progress

Encoded = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]
SOURCE = "given (pseudo-log-likelihood)"  # what a non-finite score of this road was scored under


def _mask_index(model, dictionary) -> int:
    """The ``<mask>`` id of ``model``'s own dictionary (its task's: dict.txt + ``<mask>``), after
    checking that ``dictionary`` (the one the sentences were encoded with) gives the same ids."""
    own = getattr(getattr(model, "encoder", None), "dictionary", None)
    if own is None:
        raise TypeError(f"{type(model).__name__}: no encoder dictionary, cannot find its <mask> symbol")
    if "<mask>" not in own.indices:
        raise ValueError(f"{type(model).__name__}: its dictionary ({len(own)} symbols) has no <mask> symbol; "
                         "pseudo-log-likelihood needs a masked-LM checkpoint (--task hexatag_mlm or masked_lm)")
    n = len(dictionary)
    if own.symbols[:n] != dictionary.symbols[:n] or len(own) < n:
        raise ValueError(f"{type(model).__name__}: the sentences were encoded with a dictionary of {n} symbols that "
                         f"is not the first {n} of the model's ({len(own)} symbols, <mask> appended): token ids "
                         "would disagree; pass the data directory the model was trained on")
    return own.index("<mask>")


def _copy_groups(lengths: Sequence[int], batch_size: int) -> Iterator[List[int]]:
    """Consecutive sentences whose masked copies (one per token) fit ``batch_size`` rows; a
    sentence is never split, so a longer one gets a forward pass of its own."""
    group, rows = [], 0
    for i, n in enumerate(lengths):
        if group and rows + n > batch_size:
            yield group
            group, rows = [], 0
        group.append(i)
        rows += n
    if group:
        yield group


@torch.no_grad()
def pseudo_log_likelihoods(model, encoded: Sequence[Encoded], dictionary, batch_size: int = 64,
                           joint: bool = False) -> List[torch.Tensor]:
    """Per sentence, ``log p(x_p | rest)`` at each sentence token ``x_1 .. x_n`` (``</s>`` is
    not scored): each token masked in turn (``<mask>``, tags ``<notag>``), every copy of a sentence
    in the same forward pass, at most ``batch_size`` copies per pass unless one sentence needs more.

    ``encoded``: (tokens, terminals, nonterminals) per sentence, tokens ending in ``</s>``
    (:class:`~sipe_fairseq.data.encode.SentenceEncoder`), ``dictionary`` the one that encoded them.
    With ``joint`` (models that see tags only), a masked first subword's term also adds the tag
    heads' ``log p(tau_p | rest) + log p(nu_p | rest)`` for the word's own tags: the pseudo-log-
    likelihood of the joint (token, tag) sequence, with the LM and tag heads predicting a masked
    position independently as ``hexatag_mlm`` trains them."""
    model.eval()
    enc = model.encoder
    mask = _mask_index(model, dictionary)
    use_tags = family_of(enc).reads_tags
    if use_tags and getattr(enc, "deprel", None) is not None:
        raise ValueError(f"{type(model).__name__} reads a deprel stream (--sipe-input-strategy "
                         f"{enc.cfg.sipe_input_strategy}); minimal-pair sentences are encoded without deprels")
    joint = joint and use_tags
    bos, eos, pad = dictionary.bos(), dictionary.eos(), dictionary.pad()
    limit = max_positions(model)  # the positions rule (structure.sentences)
    lengths = []
    for i, (t, a, b) in enumerate(encoded):
        if len(t) < 2 or int(t[-1]) != eos:
            raise ValueError(f"sentence {i}: expected tokens x_1 .. x_n </s> with n >= 1, got {t.tolist()}")
        if not (len(t) == len(a) == len(b)):
            raise ValueError(f"sentence {i}: {len(t)} tokens but {len(a)}/{len(b)} tags")
        if limit is not None and len(t) + 1 > limit:
            raise ValueError(f"sentence {i}: {len(t) + 1} tokens with <s> and </s>, more than the model's {limit} positions")
        lengths.append(len(t) - 1)
    out: List[torch.Tensor] = [None] * len(encoded)
    for group in progress(list(_copy_groups(lengths, batch_size)), desc="pseudo-log-likelihood"):
        rows, width = sum(lengths[i] for i in group), max(lengths[i] for i in group) + 2
        src = torch.full((rows, width), pad, dtype=torch.long)
        terms, nts = torch.full_like(src, NOTAG_ID), torch.full_like(src, NOTAG_ID)
        gold_terms, gold_nts = torch.full((rows,), NOTAG_ID), torch.full((rows,), NOTAG_ID)
        target = torch.empty(rows, dtype=torch.long)
        masked = torch.zeros_like(src, dtype=torch.bool)
        r = 0
        for i in group:
            t, a, b = encoded[i]
            n = lengths[i]
            block = slice(r, r + n)
            src[block, 0], src[block, 1:n + 2] = bos, t  # <s> x_1 .. x_n </s>, n copies
            terms[block, 1:n + 2], nts[block, 1:n + 2] = a, b
            copies, pos = torch.arange(r, r + n), torch.arange(1, n + 1)
            target[block], gold_terms[block], gold_nts[block] = t[:n], a[:n], b[:n]
            src[copies, pos] = mask
            terms[copies, pos] = nts[copies, pos] = NOTAG_ID  # m_p = 0 at the masked position
            masked[copies, pos] = True
            r += n
        kwargs = {"src_terminals": terms, "src_nonterminals": nts} if use_tags else {}
        lengths_t = (src != pad).sum(1)
        logits, extra = model(src, src_lengths=lengths_t, masked_tokens=masked, **kwargs)
        # one masked position per row: the flattened logits are in row order
        term = F.log_softmax(logits.float(), -1).gather(-1, target[:, None]).squeeze(-1)
        if joint:
            for (kind, n_cls), gold in zip(TAG_HEADS, (gold_terms, gold_nts)):
                tag_logits = extra.get(f"{kind}_logits") if isinstance(extra, dict) else None
                if tag_logits is None:
                    raise ValueError(f"--score joint: {type(model).__name__} sees tags but has no {kind} head "
                                     "(trained with --sipe-tag-heads off)")
                term += tag_log_probs(tag_logits[masked], gold, n_cls).logprob  # 0 where the word has no tags
        r = 0
        for i in group:
            out[i] = term[r:r + lengths[i]]
            check_finite(out[i], i)
            r += lengths[i]
    return out


def check_finite(token_logprobs: torch.Tensor, index: int) -> None:
    """This road's output boundary, as the engine's (:func:`~sipe_fairseq.structure.scoring.check_finite`):
    :class:`~sipe_fairseq.hexatag.errors.NonFiniteScoreError` naming sentence ``index`` (0-based, in the
    caller's order) when one of its tokens' pseudo-log-likelihood terms is NaN or infinite."""
    bad = (~torch.isfinite(token_logprobs)).nonzero()
    if len(bad):
        t = int(bad[0])
        detail = (f"under {SOURCE}: token {t + 1} is {float(token_logprobs[t])} (a non-finite score: the model's "
                  "forward pass overflows; nothing is written)")
        raise NonFiniteScoreError(f"sentence {index + 1} {detail}", index, SOURCE, detail)


def pll_sentence_scores(model, encoded: Sequence[Encoded], dictionary, batch_size: int = 64,
                        joint: bool = False) -> List[float]:
    """Pseudo-log-likelihood (nats) of each sentence (:func:`pseudo_log_likelihoods`, summed);
    ``batch_size`` counts masked copies per forward pass."""
    return [lp.sum().item() for lp in pseudo_log_likelihoods(model, encoded, dictionary, batch_size, joint)]
