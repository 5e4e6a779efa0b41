"""Scores of text under a SiPE (or stock fairseq) checkpoint, the one module for

* whole splits (perplexity, ``sipe-eval-lm``, Table 2's PPL): :func:`score_split`,
  :func:`summarize`, :func:`perplexity_markdown`;
* single sentences (BLiMP, SyntaxGym, minimal pairs): the entry point for sentence scores.
  :func:`score_sentence_batch` gives whole-sentence scores (BLiMP, minimal pairs),
  :func:`sentence_logprob_fn` per-token scores (SyntaxGym's regions), under any structure source:
  ``given`` tags in plain forwards here (decoders left to right, encoders by
  pseudo-log-likelihood), every other source (and a GiLT model's given graph) through the
  structure engine (:func:`sipe_fairseq.structure.scoring.score_encoded`, with a progress bar:
  :func:`score_encoded_with_progress`).

Tag log-probabilities come from :func:`~sipe_fairseq.modules.tag_heads.tag_log_probs`.

Splits: Perplexity p(x | tags), the joint bound -log p(x, tags), and both broken down by position type.

A SiPE decoder is conditioned on parser tags, and the tags carry information about later words
(the last word's ``EOS`` non-terminal announces the end of the sentence). So besides the
conditional perplexity that ``fairseq-eval-lm`` prints, this module reports

* the joint score ``-log p(x, tags) = LM NLL + terminal NLL + non-terminal NLL`` (every tagged
  position's tags are predicted from its left context, see ``data/lm_dataset.py``), an upper bound
  on ``-log p(x)`` comparable with a model that sees no tags (for which joint = LM);
* the LM NLL by target type: the end-of-sentence token, word-initial subwords, continuation
  subwords. A gain confined to ``eos`` is information the tags leak, not modelling.

Sentences: Per-token log-probabilities of single sentences under a decoder LM or a masked-LM encoder.

Decoders. A sentence is scored as fairseq-eval-lm scores it with ``--sample-break-mode eos``: the
input is ``</s> x_1 .. x_n`` and the targets ``x_1 .. x_n </s>``; tags shift with the tokens.
Sentences are batched (right-padded; the models are causal, so padding never affects real
positions).

Encoders (masked LMs: ``sipe_roberta``/``sipe_deberta``/``sipe_modernbert``, fairseq ``roberta``).
The pseudo-log-likelihood of Salazar et al. (2020), ``PLL(x) = sum_p log p(x_p | x_{\\p})``: the
input is ``<s> x_1 .. x_n </s>``, as ``hexatag_mlm``/``masked_lm`` blocks are built (tags
``<notag>`` at ``<s>`` and ``</s>``); for every sentence token ``x_1 .. x_n`` (subword pieces; the
specials ``<s>`` and ``</s>`` are not scored, as in Salazar et al.) one copy has ``x_p`` replaced by
the model dictionary's ``<mask>`` and its tags by ``<notag>``, exactly as training masks them
(m_p = 0), so a masked position carries no tag signal. All copies of a sentence run in one
forward pass (right-padded; padding is masked out of attention). Models that see no tags get none.

:func:`score_sentence_batch` is the one entry point for whole-sentence scores used by the
minimal-pair evaluations (BLiMP): under ``given`` (a model that is not GiLT) it dispatches on the model
kind (:func:`model_kind`) through :data:`SENTENCE_SCORERS`, otherwise to the structure engine.
"""
import math
from collections import defaultdict
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.models import FairseqEncoderModel, FairseqLanguageModel

from ..data.lm_dataset import DEFAULT_PLACEMENT, tag_targets
from ..data.tag_dictionary import NOTAG_ID, TAG_HEADS
from ..data.tag_timing import fixed_target_positions, time_sentence_streams
from ..modules.arc_scorer import arc_losses
from ..modules.tag_heads import tag_log_probs
from ..structure.family import StructureOptions, family_of, takes_tags
from ..structure.record import SentenceScore
from ..structure.scoring import score_encoded
from .progress import progress
from .reports.tables import table

POSITION_TYPES = ("eos", "word_initial", "continuation")
Encoded = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]


# ----------------------------------------------------------------------- splits: perplexity
@torch.no_grad()
def score_batches(model, batches: Iterable[dict], eos: int, pad: int) -> Dict[str, float]:
    """Sum NLLs (nats) over batches of a ``hexatag_lm`` dataset; returns sums and counts."""
    model.eval()
    use_tags = takes_tags(model)
    inputs = {"src_tokens", "src_lengths"} | ({"src_words"} if family_of(model).predicts_arcs else set())  # GiLT's words
    sums = defaultdict(float)
    for sample in progress(batches, desc="perplexity"):
        if "net_input" not in sample:
            continue
        net = dict(sample["net_input"])
        if not use_tags:
            net = {k: v for k, v in net.items() if not k.startswith("src_") or k in inputs}
        out = model(**net)
        lprobs = model.get_normalized_probs(out, log_probs=True, sample=sample)
        target = sample["target"]
        scored = target.ne(pad)
        nll = -lprobs.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1).float()
        kinds = {
            "eos": scored & target.eq(eos),
            "word_initial": scored & target.ne(eos) & sample["word_start_target"].bool(),
        }
        kinds["continuation"] = scored & ~kinds["eos"] & ~kinds["word_initial"]
        sums["lm_nll"] += nll[scored].sum().item()
        sums["tokens"] += int(scored.sum())
        for name, mask in kinds.items():
            sums[f"lm_nll.{name}"] += nll[mask].sum().item()
            sums[f"tokens.{name}"] += int(mask.sum())
        arcs = out[1].get("arcs") if isinstance(out[1], dict) else None
        if arcs is not None and "gilt_head" in sample:  # GiLT: the gold graph paid for, -log P_arcs(G_gold)
            bce, _, _, n_words, *_ = arc_losses(arcs, sample["gilt_head"], sample["gilt_dep"])
            sums["arcs_nll"] += float(bce)
            sums["arcs_count"] += n_words
        for kind, n in TAG_HEADS:
            logits = out[1].get(f"{kind}_logits") if use_tags else None
            if logits is None:
                continue
            scores = tag_log_probs(logits, sample[f"{kind}_target"], n)
            sums[f"{kind}_nll"] += scores.nll().item()
            sums[f"{kind}_count"] += int(scores.tagged.sum())
    return dict(sums)


def score_split(model, task, split: str, context_window: int = 0, max_tokens: int = 4096, batch_size=None):
    """Load ``split`` in a ``hexatag_lm`` task and score it with ``model`` through the task's
    eval-lm data loader (as ``fairseq-eval-lm``); returns :func:`summarize` rows."""
    if model_kind(model) != "decoder":
        raise ValueError(f"{type(model).__name__} is a masked-LM encoder: perplexity needs a left-to-right decoder "
                         "(encoders are scored by pseudo-log-likelihood, e.g. sipe-eval blimp)")
    task.load_dataset(split)
    itr = task.eval_lm_dataloader(dataset=task.dataset(split), max_tokens=max_tokens, batch_size=batch_size,
                                  max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
                                  context_window=context_window)
    d = task.source_dictionary
    return summarize(score_batches(model, itr, eos=d.eos(), pad=d.pad()))


def summarize(sums: Dict[str, float]) -> Dict[str, Dict[str, float]]:
    """Per-token NLL (nats and bits) and perplexities from :func:`score_batches` sums."""
    rows = {}

    def row(nll, count):
        mean = nll / count if count else float("nan")
        return {"count": int(count), "nll": mean, "bits": mean / math.log(2), "ppl": math.exp(mean) if count else float("nan")}

    rows["lm"] = row(sums["lm_nll"], sums["tokens"])
    for name in POSITION_TYPES:
        rows[f"lm.{name}"] = row(sums.get(f"lm_nll.{name}", 0.0), sums.get(f"tokens.{name}", 0))
    words = sums.get("tokens.word_initial", 0) + sums.get("tokens.eos", 0)
    rows["lm.per_word"] = row(sums["lm_nll"], words)
    tag_nll = 0.0
    for kind in [k for k, _ in TAG_HEADS] + ["arcs"]:  # arcs: a GiLT model's gold graph (bits per word)
        if sums.get(f"{kind}_count"):
            rows[kind] = row(sums[f"{kind}_nll"], sums[f"{kind}_count"])
            tag_nll += sums[f"{kind}_nll"]
    rows["joint"] = row(sums["lm_nll"] + tag_nll, sums["tokens"])  # -log p(x, tags) per token
    rows["joint.per_word"] = row(sums["lm_nll"] + tag_nll, words)
    rows["joint"]["sees_tags"] = rows["joint.per_word"]["sees_tags"] = bool(tag_nll)
    return rows


def perplexity_markdown(results: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """Side-by-side table: one column per model, rows = score (perplexity per token / per word)."""
    names = list(results)
    rows = []
    labels = [
        ("lm", "ppl p(x \\| tags) per token (fairseq-eval-lm)"),
        ("joint", "ppl joint -log p(x,tags) per token (bound on p(x))"),
        ("lm.per_word", "ppl p(x \\| tags) per word"),
        ("joint.per_word", "ppl joint per word"),
        ("lm.eos", "bits/token at </s>"),
        ("lm.word_initial", "bits/token at word-initial subwords"),
        ("lm.continuation", "bits/token at continuation subwords"),
        ("terminal", "bits/tag terminal"),
        ("nonterminal", "bits/tag non-terminal"),
        ("arcs", "bits/word gold arcs (GiLT)"),
    ]
    for key, label in labels:
        cells = []
        for n in names:
            r = results[n].get(key)
            if r is None or not r["count"]:
                cells.append("-")
            elif key in ("lm", "joint", "lm.per_word", "joint.per_word"):
                cells.append(f"{r['ppl']:.3f}")
            else:
                cells.append(f"{r['bits']:.3f}")
        rows.append([label, *cells])
    lines = table(["score", *names], rows)
    counts = {n: results[n]["lm"]["count"] for n in names}
    lines.append(f"\ntokens scored: {counts}; a model without tag heads has joint = LM (it sees no tags); a GiLT model's "
                 "p(x | tags) is p(x | gold graph) and its joint pays for the gold arcs as independent Bernoullis "
                 "(the training loss: not a bound for the count-then-top-c model that --tags self/beam:K score).")
    return "\n".join(lines)


# ----------------------------------------------------------------------- sentences: decoders
def timed_encoded(model, encoded: Sequence[Encoded]) -> Sequence[Encoded]:
    """Sentences' word-aligned tags as the model's ``--tag-timing`` feeds them (unchanged for ``paper``)."""
    timing = str(getattr(getattr(model, "decoder", model), "tag_timing", "paper"))
    if timing == "paper":
        return encoded
    return [(t, *time_sentence_streams(a, b, timing)) for t, a, b in encoded]


def _decoder_batches(model, encoded: Sequence[Encoded], eos: int, pad: int, batch_size: int
                     ) -> Iterator[Tuple[Sequence[Encoded], tuple, torch.Tensor]]:
    """Yields ``(chunk, net_output, log-probs)`` per batch of sentences."""
    if isinstance(model, FairseqEncoderModel):
        raise TypeError(f"{type(model).__name__} is a masked-LM encoder: left-to-right token log-probabilities "
                        "need a decoder (score encoders with score_sentence_batch: pseudo-log-likelihood)")
    model.eval()
    use_tags = takes_tags(model)
    encoded = timed_encoded(model, encoded)
    for start in progress(range(0, len(encoded), batch_size), desc="score"):
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
                            joint: bool = False, placement: str = DEFAULT_PLACEMENT) -> List[float]:
    """Summed log-probability (nats) of each sentence's tokens including the final ``</s>``:
    ``log p(x | tags)``; with ``joint``, plus the log-probability the model's tag heads give each
    word's tags from its left context, at the anchors the task trained them on (``placement``,
    the ``hexatag_lm`` task's ``--tag-head-placement``): ``log p(x, tags)``, which equals
    ``log p(x)`` for a model that sees no tags."""
    eos, pad = dictionary.eos(), dictionary.pad()
    starts = (eos, dictionary.bos())
    timing = str(getattr(getattr(model, "decoder", model), "tag_timing", "paper"))
    out = []
    for chunk, net_output, lprobs in _decoder_batches(model, encoded, eos, pad, batch_size):
        extra = net_output[1] if isinstance(net_output, tuple) and len(net_output) > 1 and isinstance(net_output[1], dict) else {}
        heads = {}
        if joint and takes_tags(model):
            heads = {kind: extra[f"{kind}_logits"] for kind, _ in TAG_HEADS if extra.get(f"{kind}_logits") is not None}
        for i, (t, a, b) in enumerate(chunk):
            n = len(t)
            score = lprobs[i, :n].gather(-1, t[:, None]).sum().item()
            if heads:
                src = torch.cat([t.new([eos]), t[:-1]])
                src_terms = torch.cat([a.new([NOTAG_ID]), a[:-1]])
            for (kind, n_cls), future in zip(TAG_HEADS, (a, b)):  # the tags as the model's timing feeds them
                if kind not in heads:
                    continue
                target = tag_targets(src, src_terms, future, starts, NOTAG_ID, placement)
                if kind == "nonterminal":  # nt-delay: word 1's EOS is a fixed start marker
                    target[fixed_target_positions(src, starts, timing)] = NOTAG_ID
                score += tag_log_probs(heads[kind][i, :n], target, n_cls).logprob.sum().item()
            out.append(score)
    return out


# ----------------------------------------------------------------------- encoders: PLL
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
    limit = max_positions(model)
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
            r += lengths[i]
    return out


def encoder_sentence_scores(model, encoded: Sequence[Encoded], dictionary, batch_size: int = 64,
                            joint: bool = False, placement: str = DEFAULT_PLACEMENT) -> List[float]:
    """Pseudo-log-likelihood (nats) of each sentence (:func:`pseudo_log_likelihoods`, summed);
    ``batch_size`` counts masked copies per forward pass. ``placement`` does not apply: an
    encoder's tag heads predict a masked first subword's own tags."""
    return [lp.sum().item() for lp in pseudo_log_likelihoods(model, encoded, dictionary, batch_size, joint)]


# ---------------------------------------------------------------------------- dispatch
def model_kind(model) -> str:
    """``"decoder"`` (fairseq language models: causal, scored left to right) or ``"encoder"``
    (masked LMs such as RoBERTa: pseudo-log-likelihood)."""
    if isinstance(model, FairseqLanguageModel):
        return "decoder"
    if isinstance(model, FairseqEncoderModel):
        return "encoder"
    raise TypeError(f"cannot score sentences with a {type(model).__name__}: not a fairseq language model or encoder")


def max_positions(model) -> Optional[int]:
    """The most positions ``model`` accepts (the smallest of a tuple), or None if it does not say."""
    try:
        m = model.max_positions()
    except Exception:  # noqa: BLE001 - a model without max_positions()
        return None
    if isinstance(m, (tuple, list)):
        m = min((x for x in m if x is not None), default=None)
    return int(m) if m else None


def positions_needed(model, tokens: torch.Tensor) -> int:
    """Positions a sentence ``x_1 .. x_n </s>`` takes: ``n + 1`` for a decoder (input ``</s> x_1 .. x_n``),
    ``n + 2`` for an encoder (``<s> x_1 .. x_n </s>``)."""
    return len(tokens) + (1 if isinstance(model, FairseqEncoderModel) else 0)


def too_long(model, tokens: torch.Tensor) -> Optional[str]:
    """Why ``model`` cannot score the sentence ``tokens`` in one pass (more positions than it has), or None."""
    limit, need = max_positions(model), positions_needed(model, tokens)
    if limit is not None and need > limit:
        return f"too long: {need} tokens > the model's {limit} positions"
    return None


# model kind -> scorer(model, encoded, dictionary, batch_size=, joint=, placement=) -> per-sentence log-likelihoods
SENTENCE_SCORERS: Dict[str, Callable[..., List[float]]] = {"decoder": decoder_sentence_scores,
                                                           "encoder": encoder_sentence_scores}


def score_sentence_batch(model, encoded: Sequence[Encoded], dictionary, batch_size: int = 32,
                         joint: bool = False, source: str = "given", options: Optional[StructureOptions] = None,
                         heads=None) -> List[float]:
    """Whole-sentence log-likelihood (nats) of each encoded sentence under structure ``source``.
    ``given`` (a model that is not GiLT), by model kind: decoders :func:`decoder_sentence_scores`
    (``batch_size`` sentences per pass), encoders the pseudo-log-likelihood :func:`encoder_sentence_scores`
    (``batch_size`` masked copies per pass). Every other source, and a GiLT model's given graph (from
    ``heads``: each sentence's tree), through the structure engine (:func:`score_encoded_with_progress`,
    ``options``; ``batch_size`` sentences per batch): ``self``/``beam:K`` tags from the prefix only, the
    exact ``log q(x)`` (self) or the beam's bound on ``log p(x)`` (already joint); ``joint`` adds a GiLT
    given graph's arc cost, and for SiPE the tag heads' log p(tags) at ``options.placement``."""
    options = options or StructureOptions()
    if source != "given" or family_of(model).predicts_arcs:
        scores = score_encoded_with_progress(model, encoded, source, dictionary, options, heads, batch_size)
        return [s.joint if joint and source == "given" else s.logprob for s in scores]
    kind = model_kind(model)
    if kind not in SENTENCE_SCORERS:
        raise NotImplementedError(f"no sentence scorer for {kind} models ({type(model).__name__}) "
                                  "(register one in SENTENCE_SCORERS)")
    return SENTENCE_SCORERS[kind](model, encoded, dictionary, batch_size=batch_size, joint=joint,
                                  placement=options.placement)


# ---------------------------------------------------------------------------- structure sources
def score_encoded_with_progress(model, encoded: Sequence[Encoded], source: str, dictionary,
                                options: Optional[StructureOptions] = None, heads=None,
                                batch_sentences: int = 256) -> List[SentenceScore]:
    """:func:`sipe_fairseq.structure.scoring.score_encoded` with a progress bar (``tags SOURCE``)."""
    bar = progress(desc=f"tags {source}", unit=" sent", total=len(encoded))
    try:
        return score_encoded(model, encoded, source, dictionary, options, heads, batch_sentences, progress=bar.update)
    finally:
        bar.close()


def sentence_logprob_fn(model, source: str, dictionary, options: Optional[StructureOptions] = None):
    """A ``logprob_fn(model, encoded, eos, pad, batch_size, heads=None)`` returning per-token
    log-probs (the signature of :func:`token_logprobs`, which SyntaxGym takes) under ``source``; beam
    rows are the running bound's increments, so a region's surprisal is the difference of the prefix
    score at its boundaries. ``wants_heads``: GiLT's ``given`` needs trees."""
    arcs = family_of(model).predicts_arcs
    if not arcs and source == "given":
        return token_logprobs

    def fn(model, encoded, eos, pad, batch_size, heads=None):
        scores = score_encoded_with_progress(model, encoded, source, dictionary, options, heads=heads,
                                             batch_sentences=batch_size)
        return [torch.tensor(s.token_logprobs, dtype=torch.float64) for s in scores]

    fn.wants_heads = arcs
    return fn
