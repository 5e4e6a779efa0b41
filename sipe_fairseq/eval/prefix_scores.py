"""Whole splits scored under structure sources (``--tags given,self,beam:K``), summarized and
tabulated: the aggregation around the structure engine (:mod:`sipe_fairseq.structure`). Sentence sets
(BLiMP, SyntaxGym) call the engine's entry point themselves (:func:`~sipe_fairseq.structure.scoring.score_encoded`).
What a source's numbers are and how its rows are labelled is the source's own (:mod:`sipe_fairseq.structure.sources`).

Every sentence is scored alone (a ``</s>`` starts it, as ``--sample-break-mode eos``). A row per
source: perplexity per token and per word (words + ``</s>``), bits per token by position type, the
structure's bits per word, and for ``given`` a second row ``given-joint`` with the structure paid for.
SiPE rows add the chosen tags' accuracy against the given ones; GiLT rows the arc F1 of the scored
graph against the gold graph. What each number is:

* SiPE ``given-joint``: ``-log p(x, tags)`` with the parse's tags, an upper bound on ``-log p(x)``;
* GiLT ``given-joint``: the gold arcs priced as independent Bernoullis (the training loss). It is
  not a bound for the count-then-top-c model that ``self`` and ``beam`` score (there a gold graph
  that is no count's top-c has probability 0), so its label says "training joint";
* ``self``: exact; ``beam:K``: SiPE a bound, GiLT the beam approximation of the marginal over counts;
  ``mix:K``: exact, the beam read as a mixture (normalized at every target).
"""
import math
import os
import time
from dataclasses import replace
from typing import Dict, List, Optional, Sequence, Tuple

from fairseq import utils
from fairseq.data import data_utils

from ..data.gilt.arc_streams import load_arc_stream
from ..data.gilt.arcs import arc_f1, arc_matches
from ..data.gilt.arcs import decode_words
from ..data.lm_dataset import task_placement
from ..data.tag_dictionary import TAG_KINDS
from ..data.tag_streams import load_tag_streams
from ..hexatag.constrained import PAIRS
from ..hexatag.errors import EvaluationError, NonFiniteScoreError, WorkerDiedError
from ..structure.arcs import flat_arcs
from ..structure.family import StructureOptions, family_named, family_of
from ..structure.record import POSITION_TYPES, SentenceScore, joint_token_logprobs
from ..structure.scoring import beyond_positions, plan, score_sentences
from ..structure.sentences import sentence_of
from ..structure.sources import Given, parse_source
from .progress import progress
from .shards import interleave, shard_indices
from .reports.tables import table


def default_sources(model) -> List[str]:
    """The source when none is asked for: GiLT ``self`` (its own graph), others ``given``."""
    return [family_of(model).default_source]


def sources_for(model, requested: Optional[Sequence[str]]) -> List[str]:
    return list(requested) if requested else default_sources(model)


# ------------------------------------------------------------------------------ a data split
def load_split_sentences(task, split: str):
    """``(sentences, counts)`` of a ``sipe-preprocess`` split in file order: each a
    :class:`~sipe_fairseq.structure.sentences.Sentence` with its given tags and, where the data
    has ``{split}.arcs``, its gold graph; ``counts``: ``split_sentences`` and ``empty_sentences``
    (a line of no word: not scored, counted)."""
    path = utils.split_paths(task.args.data)[0]
    raw = data_utils.load_indexed_dataset(os.path.join(path, split), task.source_dictionary, task.args.dataset_impl)
    if raw is None:
        raise FileNotFoundError(f"{path}: no split {split!r} ({split}.bin/.idx)")
    streams = load_tag_streams(path, split, raw, TAG_KINDS, task.args.dataset_impl)
    arcs = None
    if os.path.exists(os.path.join(path, f"{split}.arcs.idx")):  # GiLT's given graph (sipe-preprocess writes it)

        arcs, n_words = load_arc_stream(path, split, raw, streams["terminal"], task.args.dataset_impl)
    d = task.source_dictionary
    out, empty = [], 0
    for i in range(len(raw)):
        tokens, terms, nts = raw[i].long(), streams["terminal"][i].long(), streams["nonterminal"][i].long()
        if len(tokens) < 2:
            empty += 1
            continue
        graph = decode_words(arcs[i].tolist(), int(n_words[i])) if arcs is not None else None
        out.append(sentence_of(i, tokens, terms, nts, d, d.eos(), graph))
    return out, {"split_sentences": len(raw), "empty_sentences": empty}


def given_tags(sentences) -> List[List[Tuple[str, str]]]:
    """The given tag pairs per word of each sentence ([] without tags)."""
    return [[PAIRS[p] for p in s.pairs] if s.pairs is not None else [] for s in sentences]


def gold_arc_set(per_word) -> set:
    """Per-word (heads, dependents) lists -> the set of arcs (head, dependent)."""
    return set(flat_arcs(per_word))


def arc_scores(pred: Sequence, gold: Sequence) -> Dict[str, float]:
    """Arc precision, recall and F1 (percent, :func:`~sipe_fairseq.data.gilt.arcs.arc_f1`) of predicted arc lists
    against gold arc sets, summed over sentences."""
    p, r, f1 = arc_f1(*arc_matches(pred, gold))
    return {"arc_precision": 100.0 * p, "arc_recall": 100.0 * r, "arc_f1": 100.0 * f1}


def source_summary(scores: Sequence[SentenceScore], given: Optional[Sequence[Sequence[Tuple[str, str]]]] = None,
              joint: bool = False) -> Dict[str, float]:
    """Perplexity per token and per word (words + ``</s>``) of the summed log-probabilities, the
    position-type breakdown (bits per token), how many sentences' structures form a tree, and with
    ``given`` (the sentences' own tags) the chosen tags' accuracy. ``joint``: of the joint score
    (a word's structure cost in its word-initial position's bits). ``bits.tags_per_word``: the
    structure's cost per word, in bits. ``live_per_word``: the hypotheses a beam keeps at each word's
    ranking, per word (1 for given and self); ``positions_per_token``: decoder positions run per token
    (every row of every step; 1 for given and self)."""
    if joint:
        scores = [SentenceScore(s.source, s.joint, joint_token_logprobs(s), s.position_types, s.tags, s.tag_logprobs,
                                s.complete, s.joint, s.restarts, s.extra) for s in scores]
    nll = -sum(s.logprob for s in scores)
    tokens = sum(s.n_tokens for s in scores)
    words = sum(s.n_words + 1 for s in scores)
    out = {"sentences": len(scores), "tokens": tokens, "words": words, "nll": nll,
           "ppl": math.exp(nll / tokens) if tokens else float("nan"),
           "ppl_per_word": math.exp(nll / words) if words else float("nan"),
           "joint_ppl": math.exp(-sum(s.joint for s in scores) / tokens) if tokens else float("nan"),
           "complete": sum(s.complete for s in scores), "restarts": sum(s.restarts for s in scores),
           "word_start_mismatch": sum(bool(s.extra.get("word_start_mismatch")) for s in scores)}
    if scores and all("positions" in s.extra for s in scores):  # the search's work (docs/evaluation.md)
        n_words = sum(s.n_words for s in scores)
        out["positions_per_token"] = sum(s.extra["positions"] for s in scores) / tokens if tokens else float("nan")
        out["live_per_word"] = sum(s.extra["live_hypotheses"] for s in scores) / n_words if n_words else float("nan")
    n_tags = sum(len(s.tag_logprobs) for s in scores)
    out["bits.tags_per_word"] = -sum(x for s in scores for x in s.tag_logprobs) / n_tags / math.log(2) if n_tags \
        else float("nan")
    for kind in POSITION_TYPES:
        lp = [x for s in scores for x, k in zip(s.token_logprobs, s.position_types) if k == kind]
        out[f"tokens.{kind}"] = len(lp)
        out[f"bits.{kind}"] = -sum(lp) / len(lp) / math.log(2) if lp else float("nan")
    if given is not None:
        pairs = [(c, g) for s, gs in zip(scores, given) for c, g in zip(s.tags, gs)]
        if pairs:
            out["terminal_acc"] = 100.0 * sum(c[0] == g[0] for c, g in pairs) / len(pairs)
            out["nonterminal_acc"] = 100.0 * sum(c[1] == g[1] for c, g in pairs) / len(pairs)
        if any(s.tags for s in scores):
            out["eos_last_word"] = sum(bool(s.tags) and s.tags[-1][1] == "EOS" for s in scores)
            out["eos_inside"] = sum(sum(t[1] == "EOS" for t in s.tags[:-1]) for s in scores)
    return out


def per_sentence(scores: Sequence[SentenceScore], joint: bool = False) -> Dict[str, list]:
    """The items of a paired comparison (:mod:`~sipe_fairseq.eval.reports.paired`): each sentence's negative
    log-probability (``joint``: of the joint score), its tokens and its words (``</s>`` included), in the
    split's order."""
    return {"nll": [-(s.joint if joint else s.logprob) for s in scores], "tokens": [s.n_tokens for s in scores],
            "words": [s.n_words + 1 for s in scores]}


def check_sources_fit(model, task, split: str, sources: Sequence[str], options: Optional[StructureOptions] = None) -> None:
    """:class:`~sipe_fairseq.structure.memory.MemoryBudgetError` when a source of :func:`score_split_sources`
    cannot fit the memory budget even one sentence at a time: a command checks before it scores anything."""
    options = options or StructureOptions()
    sentences = load_split_sentences(task, split)[0][:options.max_sentences]
    for source in sources:
        plan(model, sentences, source, options, options.batch_sentences)


def score_split_sources(model, task, split: str, sources: Sequence[str],
                        options: Optional[StructureOptions] = None) -> Dict[str, Dict[str, float]]:
    """Every sentence of ``split`` scored alone under each source; ``{source: source_summary(...)}`` and,
    for ``given``, ``given-joint``. ``options.max_sentences`` scores the first N only (the counts say
    so), ``options.batch_sentences`` at a time. The placement is the checkpoint's own (the task's
    ``--tag-head-placement``). The scoring (:func:`score_split_records`), then the rows (:func:`split_source_rows`)."""
    return split_source_rows(score_split_records(model, task, split, sources, options))


def score_split_records(model, task, split: str, sources: Sequence[str], options: Optional[StructureOptions] = None,
                        shard: Optional[Tuple[int, int]] = None) -> dict:
    """The per-sentence scores of :func:`score_split_sources` (its arguments) and what its rows need besides:
    ``{"sources", "family", "common", "gold", "gold_arcs", "scores": {source: [SentenceScore]}, "seconds", "total"}``.
    ``shard``: ``(num_shards, shard_id)``, the sentences of that share only (:mod:`sipe_fairseq.eval.shards`; the
    refusals and the counts of the whole split are the same on every shard)."""
    options = replace(options or StructureOptions(), placement=task_placement(task))
    batch_sentences = options.batch_sentences
    sentences, counts = load_split_sentences(task, split)
    if options.max_sentences is not None:
        sentences = sentences[:options.max_sentences]
    for source in sources:  # every source within the memory budget before any is scored (structure/memory.py)
        plan(model, sentences, source, options, batch_sentences)
    family = family_of(model)
    if family.predicts_arcs and any(s.arcs is None for s in sentences) and any(parse_source(x).needs_parse for x in sources):
        raise ValueError(f"split {split!r}: tag source 'given' for a GiLT model needs the data's {split}.arcs")
    longer, limit, refusal = beyond_positions(model, [s.n for s in sentences])
    if refusal:  # as --inference-tags self (tasks/hexatag_lm.py): the same sentences, the same answer
        raise EvaluationError(f"split {split!r}: {refusal}")
    total = len(sentences)
    indices = shard_indices(total, *shard) if shard else list(range(total))
    sentences = [sentences[i] for i in indices]
    d = task.source_dictionary
    common = dict(counts, longer_than_max_positions=longer, max_positions=limit, placement=options.placement,
                  constrained=options.constrained, model=family.name)
    if family.predicts_arcs:
        common.update(count_beam=options.count_beam, count_rule=options.count_rule)
    else:
        if options.top_pairs:
            common.update(top_pairs=options.top_pairs)
        if options.pair_mass < 1.0:
            common.update(pair_mass=options.pair_mass)
    if options.mass < 1.0:
        common.update(mass=options.mass)
    if family.reads_tags and options.abstain:
        common.update(abstain=options.abstain)
    arcs_wanted = family.predicts_arcs and any(not parse_source(x).needs_parse for x in sources)
    out = {"sources": list(sources), "family": family.name, "common": common, "gold": given_tags(sentences),
           "gold_arcs": [gold_arc_set(s.arcs) for s in sentences] if arcs_wanted else None, "scores": {},
           "seconds": {}, "total": total}
    for source in sorted(sources, key=lambda x: not parse_source(x).needs_parse):  # given first: search errors need it
        start = time.time()
        bar = progress(desc=f"tags {source}", unit=" sent", total=len(sentences))
        try:
            out["scores"][source] = score_sentences(model, sentences, source, options, d.eos(), d.pad(), batch_sentences,
                                                    progress=bar.update) if sentences else []
        except NonFiniteScoreError as e:  # named by the split and its place there (1-based, the data's order)
            raise e.naming(f"split {split!r} sentence {indices[e.index] + 1}") from None
        except WorkerDiedError as e:  # the batch's sentences, named as above
            raise e.naming(lambda i: f"split {split!r} sentence {indices[i] + 1}") from None
        finally:
            bar.close()
        out["seconds"][source] = time.time() - start
    return out


def split_source_rows(records: dict) -> Dict[str, Dict[str, float]]:
    """The rows of :func:`score_split_sources` from its :func:`score_split_records` (of a run, or of its shards
    joined by :func:`merge_split_records`: the same numbers from the same per-sentence scores)."""
    sources, gold, common = records["sources"], records["gold"], records["common"]
    family = family_named(records["family"])
    results = {}
    given_scores = None
    for source in sorted(sources, key=lambda x: not parse_source(x).needs_parse):  # given first: search errors need it
        src = parse_source(source)
        scores = records["scores"][source]
        row = source_summary(scores, gold)
        row["per_sentence"] = per_sentence(scores)
        if any("abstained" in s.extra for s in scores):
            row["abstained_words"] = sum(s.extra.get("abstained", 0) for s in scores)
        row.update(common, seconds=records["seconds"][source])
        if family.predicts_arcs and not src.needs_parse:
            row.update(arc_scores([s.extra["arcs"] for s in scores], records["gold_arcs"]))
        if given_scores is not None and family.reads_tags and src.number == "bound":
            row.update(search_errors(given_scores, scores))
        results[source] = row
        if src.number == "conditional":  # beside it, the row that pays for the given structure
            given_scores = scores
            joint = source_summary(scores, gold, joint=True)
            joint["per_sentence"] = per_sentence(scores, joint=True)
            joint.update(common, seconds=row["seconds"])
            results[GIVEN_JOINT] = joint
    order = [k for source in sources
             for k in ((source, GIVEN_JOINT) if parse_source(source).number == "conditional" else (source,))]
    return {k: results[k] for k in order}


# what a shard keeps of a sentence's score: the fields the rows read (not the search's traces)
KEPT_EXTRA = ("positions", "live_hypotheses", "word_start_mismatch", "abstained", "arcs")


def records_to_json(records: dict) -> dict:
    """:func:`score_split_records` as JSON (a shard's file): every sentence's score with the fields the rows read."""
    def score(s: SentenceScore) -> dict:
        extra = {k: s.extra[k] for k in KEPT_EXTRA if k in s.extra}
        if "arcs" in extra:
            extra["arcs"] = [list(a) for a in extra["arcs"]]
        return {"source": s.source, "logprob": s.logprob, "token_logprobs": list(s.token_logprobs),
                "position_types": list(s.position_types), "tags": [list(t) for t in s.tags],
                "tag_logprobs": list(s.tag_logprobs), "complete": s.complete, "joint": s.joint, "restarts": s.restarts,
                "extra": extra}

    return {**records, "gold": [[list(p) for p in g] for g in records["gold"]],
            "gold_arcs": None if records["gold_arcs"] is None else [sorted(map(list, g)) for g in records["gold_arcs"]],
            "scores": {source: [score(s) for s in scores] for source, scores in records["scores"].items()}}


def records_from_json(obj: dict) -> dict:
    """The inverse of :func:`records_to_json`."""
    def score(d: dict) -> SentenceScore:
        extra = dict(d["extra"])
        if "arcs" in extra:
            extra["arcs"] = [tuple(a) for a in extra["arcs"]]
        return SentenceScore(**{**d, "tags": [tuple(t) for t in d["tags"]], "extra": extra})

    return {**obj, "gold": [[tuple(p) for p in g] for g in obj["gold"]],
            "gold_arcs": None if obj["gold_arcs"] is None else [set(map(tuple, g)) for g in obj["gold_arcs"]],
            "scores": {source: [score(d) for d in scores] for source, scores in obj["scores"].items()}}


def merge_split_records(parts: Sequence[dict], num_shards: int) -> dict:
    """One :func:`score_split_records` from its shards' (by shard id): the sentences back in the split's order;
    ``seconds``: the shards' sums."""
    first = parts[0]
    return {**first, "gold": interleave([p["gold"] for p in parts], num_shards),
            "gold_arcs": None if first["gold_arcs"] is None else interleave([p["gold_arcs"] for p in parts], num_shards),
            "scores": {source: interleave([p["scores"][source] for p in parts], num_shards) for source in first["scores"]},
            "seconds": {source: sum(p["seconds"][source] for p in parts) for source in first["seconds"]}}


def search_errors(given: Sequence[SentenceScore], beam: Sequence[SentenceScore]) -> Dict[str, int]:
    """Sentences whose parse's tags score higher jointly, log p(x, tags), than the beam's best hypothesis
    (search error: the beam missed a better sequence; otherwise the model prefers its own): SiPE only."""
    compared = [(g, b) for g, b in zip(given, beam) if g.tags]
    return {"search_errors": sum(g.joint > b.joint + 1e-6 for g, b in compared), "search_compared": len(compared)}


GIVEN_JOINT = "given-joint"  # the row beside given that pays for the given structure


def _predicts_arcs(row: dict) -> bool:
    """Whether a score row is a GiLT model's (its ``model`` field: the family's name)."""
    return family_named(row.get("model", "none")).predicts_arcs


def _source_label(source: str, row: dict) -> Tuple[str, bool]:
    """``(label, pays)`` of a row: the source's own (:meth:`~sipe_fairseq.structure.sources.Source.label`)."""
    arcs = _predicts_arcs(row)
    if source == GIVEN_JOINT:
        return f"given: {Given.joint_titles[int(arcs)]}", True
    return parse_source(source).label(arcs)


def _short_label(source: str, row: dict) -> str:
    return "given joint" if source == GIVEN_JOINT else parse_source(source).short_label(_predicts_arcs(row))


def markdown_tag_sources(results: Dict[str, Dict[str, Dict[str, float]]]) -> str:
    """Per checkpoint, one row per source; then a side-by-side summary (one column per checkpoint x source)."""
    per_source = []
    for name, rows in results.items():
        for source, r in rows.items():
            label, pays = _source_label(source, r)
            shows_acc = "terminal_acc" in r and source != GIVEN_JOINT and not parse_source(source).needs_parse
            acc = f"{r['terminal_acc']:.1f} / {r['nonterminal_acc']:.1f}" if shows_acc else "-"
            if "arc_f1" in r:
                acc = f"arc F1 {r['arc_f1']:.1f}"
            tag_bits = r.get("bits.tags_per_word", float("nan"))
            tag_bits = f"{tag_bits:.3f}" if pays and not math.isnan(tag_bits) else "-"
            work = [f"{r[key]:.2f}" if key in r else "-" for key in ("live_per_word", "positions_per_token")]
            per_source.append([name, label, f"{r['ppl']:.2f}", f"{r['ppl_per_word']:.2f}", f"{r['bits.eos']:.3f}",
                               f"{r['bits.word_initial']:.3f}", f"{r['bits.continuation']:.3f}", tag_bits, acc,
                               r["complete"], f"{r['sentences']}/{r['split_sentences']}", *work])
    lines = table(["model", "tags", "ppl/token", "ppl/word", "bits </s>", "bits word-initial", "bits continuation",
                   "tag bits/word", "acc T / NT", "valid trees", "sentences", "live hyp/word", "positions/token"],
                  per_source, "ll" + "r" * 11)
    cols = [(name, source) for name, rows in results.items() for source in rows]
    if cols:
        summary = [[label, *(fmt.format(results[n][s][key]) for n, s in cols)]
                   for key, label, fmt in (("ppl", "ppl per token", "{:.2f}"), ("ppl_per_word", "ppl per word", "{:.2f}"),
                                           ("bits.eos", "bits/token at </s>", "{:.3f}"),
                                           ("bits.word_initial", "bits/token word-initial", "{:.3f}"),
                                           ("bits.continuation", "bits/token continuation", "{:.3f}"))]
        if any("arc_f1" in results[n][s] for n, s in cols):
            summary.append(["arc F1 vs gold (GiLT)", *(f"{results[n][s]['arc_f1']:.1f}" if "arc_f1" in results[n][s] else "-"
                                                       for n, s in cols)])
        lines += [""] + table(["score", *(f"{n} {_short_label(s, results[n][s])}" for n, s in cols)], summary)
    for name, rows in results.items():
        for source, r in rows.items():
            if "abstained_words" in r:
                lines.append(f"\n{name} {source}: {r['abstained_words']} of {r['words'] - r['sentences']} words left "
                             f"<notag> (heads below p = {r.get('abstain')}; scored as wrong in the tag accuracy).")
            if r.get("longer_than_max_positions") and source == next(iter(rows)):
                lines.append(f"\n{name}: {r['longer_than_max_positions']} of {r['sentences']} sentences are longer than "
                             f"the model's {r.get('max_positions')} positions: scored whole, in one pass (its positions "
                             "extend beyond those it was trained on).")
            if "search_errors" in r:
                lines.append(f"\n{name} {source}: the parse's tags score higher jointly than the beam's best "
                             f"hypothesis in {r['search_errors']} of {r['search_compared']} sentences (search errors).")
            if "mass" in r and source != GIVEN_JOINT and parse_source(source).branches:
                lines.append(f"\n{name} {source}: at each word the best hypotheses until their share of the prefix "
                             f"mass reaches {r['mass']:g} (--tags-mass), at most K.")
    empty = sum(rows[next(iter(rows))].get("empty_sentences", 0) for rows in results.values() if rows)
    lines.append("\nEvery sentence scored alone. given: the data's structure (a parse of the whole sentence), conditional "
                 "p(x|S) and beside it the joint score (a word's structure bits counted at its word-initial subword): for "
                 "SiPE -log p(x, tags), a bound comparable with any LM; for GiLT the gold arcs as independent Bernoullis "
                 "(the training loss, not a bound for the count-then-top-c model). self: exact perplexity with the "
                 "structure the model chooses from the prefix; beam:K: SiPE a bound log p(x) >= logsumexp_beam "
                 "log p(x, T), GiLT the beam approximation of the marginal over counts (docs/gilt-reference.md section 4). For "
                 "beam the position-type bits are the running bound's increments (structure costs included). "
                 "'valid trees' counts structures that form one tree; arc F1 against the gold graph. 'live hyp/word': "
                 "the hypotheses kept at each word's ranking (1 for given and self); 'positions/token': decoder "
                 "positions run per token (every hypothesis at every step)."
                 + (f" Sentences of no word, not scored: {empty}." if empty else ""))
    return "\n".join(lines)
