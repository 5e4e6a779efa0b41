"""The marginal over tag sequences as a training objective (``--tag-marginal K``, criterion ``hexatag_lm``).

Per sentence s of a block, the LM term is ``-log sum_{T in S_s} p(x_s, T)``: the sum of the joint
p(x_s | T) p_heads(T) over a set S_s of distinct tag sequences. S_s holds the parse's tags, the heads'
constrained argmax after the gold prefix (:func:`.own_tags.choice_scores`) and K - 2 draws from the
heads' distribution renormalized over the allowed units; sequences that repeat one already in the set
are dropped. For any such set the sum is at most the model's marginal ``sum_T p(x, T)``, so the
objective is a bound on -log p(x), and its gradient weighs each sequence by its share of the set's mass
(an EM-like posterior): the LM learns to predict under the tags its heads would choose, and the heads
learn the tags that explain the text. This is the training that matches scoring with ``--tags mix:K``
(the beam's mixture), where ``--tag-sampling`` (one sequence per sentence) trains a bound on it.

A unit's head cost is its log-prob under the heads' full distribution (as the structure engine's
``beam:K`` and ``given-joint`` score it); the draws follow the gold prefix's automaton state, so a
drawn sequence need not be one the constrained beam can reach. One batched forward of K copies of the
block: the cost of a training step is about K plain ones (plus one no-grad forward for the choices).
Sentences are delimited by the inputs in ``starts`` (``</s>``); a sentence conditions on the block's
earlier sentences with the same copy's tags.
"""
import torch

from ..data.tag_dictionary import FIRST_TAG_ID, TAG_HEADS
from ..data.tag_timing import sentence_start_inputs
from ..hexatag import NONTERMINALS, TERMINALS
from ..modules.tag_heads import tag_log_probs
from .own_tags import _PAIR_N, _PAIR_T, choice_scores


def marginal_variants(model, sample, timing: str, starts, k: int):
    """K versions of the sample's fed tags and tag targets: ``(terms, nts, t_target, n_target)``, each
    (K, B, T); copy 0 is the parse's, copy 1 the heads' constrained argmax after the gold prefix, copies
    2.. draws (torch's generator). Also ``(rows, cols, units)``: the chosen words and each copy's unit
    there, (K, words) PAIRS columns (copy 0: gold)."""
    net = sample["net_input"]
    terms, nts = net["src_terminals"], net["src_nonterminals"]
    t_target, n_target = sample["terminal_target"], sample["nonterminal_target"]
    out = [x.unsqueeze(0).repeat(k, *([1] * x.dim())) for x in (terms, nts, t_target, n_target)]
    scored = choice_scores(model, sample, timing, starts) if k > 1 else None
    if scored is None:
        empty = torch.zeros(k, 0, dtype=torch.long, device=terms.device)
        return (*out, (empty[0], empty[0], empty))
    rows, cols, score, gold = scored
    picks = [gold, score.argmax(1)]
    if k > 2:
        picks.append(torch.multinomial(torch.softmax(score, 1), k - 2, replacement=True).t())
    units = torch.cat([p.view(-1, len(rows)) for p in picks])[:k]
    anchor = cols - 1
    pt, pn = _PAIR_T.to(terms.device)[units], _PAIR_N.to(terms.device)[units]  # (K, words)
    has_t = (t_target[rows, anchor] >= FIRST_TAG_ID) & (t_target[rows, anchor] < FIRST_TAG_ID + len(TERMINALS))
    has_n = (n_target[rows, anchor] >= FIRST_TAG_ID) & (n_target[rows, anchor] < FIRST_TAG_ID + len(NONTERMINALS))
    for c in range(1, k):
        out[0][c, rows, cols] = FIRST_TAG_ID + pt[c]
        out[1][c, rows, cols] = FIRST_TAG_ID + pn[c]
        out[2][c, rows[has_t], anchor[has_t]] = FIRST_TAG_ID + pt[c, has_t]
        out[3][c, rows[has_n], anchor[has_n]] = FIRST_TAG_ID + pn[c, has_n]
    return (*out, (rows, cols, units))


def sentence_ids(src_tokens: torch.Tensor, starts) -> torch.Tensor:
    """(B, T) long: each target position's sentence in the block, ``b * (T + 1) + i`` where i counts the
    start inputs at or before it (a target after an input ``</s>`` begins the next sentence)."""
    is_start = sentence_start_inputs(src_tokens, starts)
    B, T = src_tokens.shape
    base = torch.arange(B, device=src_tokens.device)[:, None] * (T + 1)
    return base + is_start.long().cumsum(1)


def marginal_nll(model, sample, timing: str, starts, k: int, padding_idx: int):
    """``(nll, lm_nll, net_output, stats)``: ``-sum_s log sum_{T in S_s} p(x_s, T)`` (summed over the
    block's sentences), copy 0's LM NLL and output (the parse's tags: the logged LM term and the tag
    losses) and ``stats``: ``sentences``, ``distinct`` (sequences summed over, all sentences),
    ``gold_share`` (summed over sentences: the share of the set's mass on the parse's tags)."""
    net = sample["net_input"]
    terms, nts, t_target, n_target, (rows, cols, units) = marginal_variants(model, sample, timing, starts, k)
    B = terms.size(1)
    stacked = {}
    for key, value in net.items():
        if torch.is_tensor(value) and value.dim() >= 1 and value.size(0) == B:
            value = value.repeat(k, *([1] * (value.dim() - 1)))
        stacked[key] = value
    stacked["src_terminals"], stacked["src_nonterminals"] = terms.flatten(0, 1), nts.flatten(0, 1)
    logits, extra = model(**stacked)
    lprobs = model.get_normalized_probs((logits, extra), log_probs=True)
    target = sample["target"].repeat(k, 1)
    keep = target != padding_idx
    lm = lprobs.gather(-1, target.clamp(min=0)[..., None]).squeeze(-1) * keep  # (K*B, T)
    joint = lm
    for (kind, n), tags in zip(TAG_HEADS, (t_target, n_target)):
        logits_k = extra.get(f"{kind}_logits")
        if logits_k is not None:
            joint = joint + tag_log_probs(logits_k, tags.flatten(0, 1), n).logprob.to(lm.dtype)
    src = net["src_tokens"]
    sid = sentence_ids(src, starts)  # (B, T)
    groups = B * (src.size(1) + 1)
    per = joint.new_zeros(k, groups).index_add_(1, sid.flatten(), joint.view(k, -1))  # (K, groups)
    # a copy whose units in a sentence repeat an earlier copy's is left out of that sentence's sum
    word_group = sid[rows, cols]
    dup = torch.zeros(k, groups, dtype=torch.bool, device=per.device)
    for c in range(1, k):
        for e in range(c):
            diff = per.new_zeros(groups).index_add_(0, word_group, (units[c] != units[e]).to(per.dtype))
            dup[c] |= diff == 0
    per = per.masked_fill(dup, -torch.inf)
    total = torch.logsumexp(per, 0)  # (groups,)
    has = sample["target"] != padding_idx  # (B, T) the targets that count
    used = torch.zeros(groups, dtype=torch.bool, device=per.device)
    used[sid[has]] = True
    nll = -total[used].sum()
    with torch.no_grad():
        share = (per[0, used] - total[used]).exp().sum()
        stats = {"sentences": int(used.sum()), "distinct": int((~dup[:, used]).sum()), "gold_share": float(share)}
    extra0 = {key: (v[:B] if torch.is_tensor(v) and v.dim() >= 1 and v.size(0) == k * B else v)
              for key, v in extra.items()}
    return nll, -lm[:B].sum(), (logits[:B], extra0), stats
