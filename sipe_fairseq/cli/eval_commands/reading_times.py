"""``sipe-eval reading-times``: the options of the reading-time evaluation (:mod:`sipe_fairseq.eval.reading_times`),
and the run that loads each checkpoint through the Python interface (:mod:`sipe_fairseq.hub`), scores the
stories' sentences, counts the training data's words and writes the reports."""
import argparse
import inspect
import logging
import os
from collections import Counter
from typing import Dict, List, Optional, Tuple

from sipe_fairseq.checkpoints import parse_checkpoint_specs
from sipe_fairseq.cli.options import (SPLIT_ONLY, add_device_argument, add_dictionary_mismatch_argument,
                                      add_structure_arguments, int_at_least, structure_options)
from sipe_fairseq.cli.output import write_json, write_text
from sipe_fairseq.eval import reading_times
from sipe_fairseq.eval.reading_times import (AlignmentError, ReadingTimesError, ScoredSentence, UnigramCounts, analyse,
                                             check_alignment, markdown, perplexity, read_corpus, zone_scores)
from sipe_fairseq.eval.reading_times.analysis import (compare_groups, design_of, markdown_paired,
                                                      structure_fields_present)
from sipe_fairseq.eval.reading_times.predictors import EXCLUSIONS, RT_RANGE, STRUCTURE_FIELDS
from sipe_fairseq.data.writers import sha256_file
from sipe_fairseq.eval.reading_times import store
from sipe_fairseq.eval.reading_times.regression import FOLDS, REPLICATES
from sipe_fairseq.hexatag.errors import NonFiniteScoreError
from sipe_fairseq.structure.sources import parse_source, parse_sources

logger = logging.getLogger(__name__)

HELP = "reading times (Natural Stories): ΔLL per word of surprisal, and of the structure, over a baseline"
DESCRIPTION = reading_times.__doc__
CONTEXT_RULE = {
    "in context": "each sentence scored after its story's preceding sentences (the interface's score(..., context=...); "
                  "a context longer than the model's positions follows the interface's documented rule)",
    "sentence by sentence": "each sentence scored alone (the interface's score takes no context=, the source reads none "
                            "(given, beam:K, untagged for a structured model) or --context off)",
}
WORD_SURPRISAL = {True: "the interface's word_surprisal: bits, with its beginning-of-word correction (word_surprisal_sum "
                        "is the plain sum of the pieces)",
                  False: "the interface's word_surprisal: bits, the sum of the word's pieces"}


DEFAULT_SOURCES = "self"
REFUSED = {"max_sentences": SPLIT_ONLY["max_sentences"]}  # every sentence of the stories is scored


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rt", required=True, metavar="NATURALSTORIES_DIR",
                   help="the corpus folder (scripts/get_naturalstories.py): naturalstories_RTS/processed_wordinfo.tsv "
                        "and parses/ud/stories-aligned.conllx")
    p.add_argument("--path", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint to evaluate (repeatable, one row per checkpoint and source)")
    p.add_argument("--data", default=None,
                   help="the sipe-preprocess data directory (default: each checkpoint's own); its train split gives the "
                        "word counts of the frequency predictor (default: the first checkpoint's data directory)")
    add_structure_arguments(p, "self (given: the corpus's UD parse; a model without structure is scored once and "
                               "shown under each source)", refuse=REFUSED)
    add_dictionary_mismatch_argument(p)
    add_device_argument(p)
    p.add_argument("--structural", action="store_true",
                   help="also the structure's surprisal and entropy at t and t-1 (needs per-word structure_surprisal "
                        "and structure_entropy in the scores; refused, exit status 2, when a structured model lacks them)")
    p.add_argument("--context", choices=("auto", "off"), default="auto",
                   help="auto: score each sentence after its story's preceding sentences when the interface can "
                        "(score(..., context=...)), else sentence by sentence; off: sentence by sentence "
                        "(default: %(default)s)")
    p.add_argument("--folds", type=int_at_least(1), default=FOLDS,
                   help="cross-validation folds of the held-out log-likelihood (1: in-sample) (default: %(default)s)")
    p.add_argument("--bootstrap", type=int_at_least(0), default=REPLICATES, metavar="N",
                   help="bootstrap replicates of the 95%% interval (stories, then words) (default: %(default)s)")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="seed of the folds and the draws (default: %(default)s)")
    p.add_argument("--baseline", metavar="NAME",
                   help="also compare, over seeds, every group (rows named NAME-sSEED) with this one under the same "
                        "source: the paired difference of ΔLL of surprisal, seed s with seed s, its intervals over items "
                        "and over seeds and the verdict (the rule of sipe-eval seeds); with --structural, every "
                        "group's structural ΔLL over its seeds too")
    p.add_argument("--scores", metavar="DIR",
                   help="keep each checkpoint's scores of the stories under each source in DIR, keyed by the "
                        "checkpoint's bytes, its data, the source, the options that change a number, the device and "
                        "the corpus; a later run with the same DIR reads them instead of scoring again (add "
                        "checkpoints, change --baseline, --structural or the bootstrap without re-scoring; "
                        "sipe_fairseq/eval/reading_times/store.py) (default: scores are not kept)")
    p.add_argument("--json", metavar="OUT", help="write every number (and every unaligned word) as JSON here")
    p.add_argument("--markdown", metavar="OUT", help="also write the markdown table here")
    p.add_argument("--plot", metavar="OUT", help="also draw ΔLL of surprisal against perplexity per word on the stories "
                                                 "(each checkpoint and source; the suffix gives the format: .png, .pdf)")
    p.add_argument("--threads", type=int_at_least(1), default=None, help="torch threads")


def training_counts(lm) -> UnigramCounts:
    """The words of the data directory's train split (pieces joined at the word marks), counted lowercased."""
    from fairseq.data import data_utils  # lazy (heavy)

    from sipe_fairseq.data.words import WORD_MARK

    prefix = os.path.join(lm.data, "train")
    ds = data_utils.load_indexed_dataset(prefix, lm.dictionary)
    if ds is None:
        raise ReadingTimesError(f"{prefix}.bin/.idx: no train split to count the words of the frequency predictor")
    d = lm.dictionary
    split = os.path.isfile(os.path.join(lm.data, "spm.model"))
    symbols = [d[i] for i in range(len(d))]
    counts, specials = Counter(), {d.eos(), d.pad(), d.bos()}
    for k in range(len(ds)):
        word = None
        for t in ds[k].tolist():
            if t in specials:
                continue
            piece = symbols[t]
            if not split or piece.startswith(WORD_MARK) or word is None:
                if word:
                    counts[word.lower()] += 1
                word = piece.replace(WORD_MARK, "")
            else:
                word += piece
        if word:
            counts[word.lower()] += 1
    return UnigramCounts(counts, f"{prefix} ({'pieces joined at the word marks' if split else 'one word per token'})")


def _field(result, name):
    value = getattr(result, name, None)
    if value is None and isinstance(getattr(result, "structure", None), dict):
        value = result.structure.get(name)
    return None if value is None else [float(v) for v in value]


def _scored(result) -> ScoredSentence:
    return ScoredSentence(list(result.words), [float(s) for s in result.word_surprisal],
                          _field(result, STRUCTURE_FIELDS[0]), _field(result, STRUCTURE_FIELDS[1]),
                          context_dropped=int(getattr(result, "context_dropped", 0) or 0))


class _Scorer:
    """One loaded model's scoring of the corpus under a source: in context when the interface can (its ``score``
    takes ``context=``: per text, the story's preceding sentences, oldest first, as word lists) and the source
    allows it (the engine reads a context under ``self`` and ``mix:K``, and for a model without structure under
    any source), else sentence by sentence; one call per story. A context longer than the model's positions
    keeps its most recent whole sentences (the interface's rule); the sentences that lost some are counted. The
    alignment checks that the words scored are the sentence's own."""

    def __init__(self, lm, context: str):
        params = inspect.signature(lm.score).parameters
        self.lm = lm
        self.can_context = context == "auto" and "context" in params
        self.kind = ""  # the kind of number of the last result (exact, conditional, bound)
        self.corrected = False  # the interface's word_surprisal has the beginning-of-word correction (word_surprisal_sum)

    def in_context(self, source) -> bool:
        src = parse_source(source)
        return self.can_context and (not self.lm.reads_structure or (src.chooses and src.number == "exact"))

    def scoring(self, source) -> str:
        return "in context" if self.in_context(source) else "sentence by sentence"

    def _item(self, sentence, source):
        given = parse_source(source).needs_parse and self.lm.reads_structure
        return (list(sentence.words), list(sentence.heads)) if given else list(sentence.words)

    def _call(self, items, source, contexts) -> List[ScoredSentence]:
        kw = {"tags": source}
        if contexts is not None:
            kw["context"] = contexts
        results = self.lm.score(items, **kw)
        if results:
            self.kind, self.corrected = results[0].kind, hasattr(results[0], "word_surprisal_sum")
        return [_scored(r) for r in results]

    def probe(self, corpus, source) -> ScoredSentence:
        try:
            return self._call([self._item(corpus.sentences[0], source)], source, None)[0]
        except NonFiniteScoreError:
            raise
        except ValueError as e:
            return ScoredSentence([], [], error=str(e))

    def score(self, corpus, source) -> Tuple[List[ScoredSentence], str]:
        out: List[Optional[ScoredSentence]] = [None] * len(corpus.sentences)
        self.kind = ""
        for item in corpus.stories:
            idx = corpus.story_sentences(item)
            items = [self._item(corpus.sentences[i], source) for i in idx]
            contexts = None
            if self.in_context(source):
                contexts = [[list(corpus.sentences[k].words) for k in idx[:j]] or None for j in range(len(idx))]
            try:
                for i, r in zip(idx, self._call(items, source, contexts)):
                    out[i] = r
            except NonFiniteScoreError:
                raise
            except ValueError:  # one sentence refused (longer than the positions): each alone, the refused counted
                for j, (i, it) in enumerate(zip(idx, items)):
                    try:
                        out[i] = self._call([it], source, None if contexts is None else [contexts[j]])[0]
                    except NonFiniteScoreError:
                        raise
                    except ValueError as e:
                        out[i] = ScoredSentence([], [], error=str(e))
        return out, self.kind


def run(args: argparse.Namespace) -> int:
    """Prints the markdown table; 2 on bad input or an unusable --structural, 1 when the alignment fails."""
    try:
        sources = args.tags or parse_sources(DEFAULT_SOURCES)
        corpus = read_corpus(args.rt)  # bad input first: exit status 2 before any checkpoint is looked at
        specs = list(parse_checkpoint_specs(args.path).items())  # a missing file: CheckpointError, exit status 3
    except (ReadingTimesError, ValueError) as e:
        logger.error("%s", e)
        return 2
    if args.threads:
        import torch  # lazy (heavy)

        torch.set_num_threads(args.threads)
    try:
        rows, counts, designs = _evaluate(args, corpus, specs, sources)
    except ReadingTimesError as e:
        logger.error("%s", e)
        return 2
    except AlignmentError as e:
        logger.error("%s", e)
        return 1
    scoring = sorted({r["scoring"] for r in rows})
    table = markdown(rows, counts.describe(), args.structural)
    table += f"Scoring: {'; '.join(f'{s}: {CONTEXT_RULE[s]}' for s in scoring)}.\n"
    comparisons = None
    if args.baseline or args.structural:
        comparisons = compare_groups(rows, designs, args.baseline, args.bootstrap, args.bootstrap_seed, args.folds)
        if comparisons:
            table += "\n" + markdown_paired(comparisons)
        if args.baseline and not any(c["measure"] == "surprisal" for c in comparisons):
            logger.warning("--baseline %s: no row of that group (rows NAME-sSEED): nothing compared", args.baseline)
    print(table, end="")
    report = {"corpus": corpus.root, "stories": len(corpus.stories), "sentences": len(corpus.sentences),
              "zones": corpus.zone_count(), "exclusion_rules": list(EXCLUSIONS), "rt_range_ms": list(RT_RANGE),
              "frequency": counts.describe(), "scoring": {s: CONTEXT_RULE[s] for s in scoring},
              "structural": args.structural, "folds": args.folds, "replicates": args.bootstrap,
              "seed": args.bootstrap_seed, "rows": rows, "paired": comparisons}
    if args.markdown:
        write_text(args.markdown, table)
    if args.json:
        write_json(args.json, report, indent=1, ensure_ascii=False)
    if args.plot:
        from sipe_fairseq.eval.reading_times.plot import plot_delta_ll  # lazy (heavy): matplotlib

        plot_delta_ll(rows, args.plot)
    return 0


def _evaluate(args, corpus, specs, sources):
    from sipe_fairseq import hub  # lazy (heavy): torch, fairseq

    rows, counts, designs = [], None, {}
    corpus_digest = store.corpus_sha256(corpus) if args.scores else None
    numbers = dict(vars(structure_options(args)))
    for name, path in specs:
        lm = hub.load(path, data=args.data, device=args.device, allow_dictionary_mismatch=args.allow_dictionary_mismatch,
                      **numbers)
        checkpoint_sha = sha256_file(path) if args.scores else None  # once per checkpoint, for every source's key
        if counts is None:
            counts = training_counts(lm)
        scorer = _Scorer(lm, args.context)
        cache: Dict[str, tuple] = {}
        has_fields = _structure_sources(args, corpus, name, lm, scorer, sources)
        for source in sources:
            key = source if lm.reads_structure else "-"
            if key not in cache:
                scored, kind, kept_at = _scores(args, corpus, corpus_digest, numbers, name, checkpoint_sha, lm, scorer,
                                                 source, key)
                zscores, alignment = zone_scores(corpus, scored)
                check_alignment(alignment, f"{name} under {source}")
                structural = has_fields.get(source, False)
                if structural and not structure_fields_present(scored):
                    raise ReadingTimesError(f"--structural: {name} under {source}: some scored sentences carry no "
                                            f"per-word {' and '.join(STRUCTURE_FIELDS)}")
                analysis = analyse(corpus, zscores, counts, structural, args.folds, args.bootstrap, args.bootstrap_seed)
                kept = None
                if args.baseline or structural:  # the regression data of the comparisons over seeds
                    kept = {"surprisal": design_of(corpus, zscores, counts),
                            "structural": design_of(corpus, zscores, counts, True) if structural else None}
                cache[key] = (scored, kind, alignment, structural, analysis, kept, kept_at)
            scored, kind, alignment, structural, analysis, kept, kept_at = cache[key]
            designs[(name, source)] = kept
            rows.append({"checkpoint": name, "path": path, "source": source, "kind": kind, "scoring": scorer.scoring(source),
                         "word_surprisal": WORD_SURPRISAL[scorer.corrected], "reads_structure": bool(lm.reads_structure),
                         "structure_scores": structural, "stored_scores": kept_at,
                         "perplexity_per_word": perplexity(scored), "alignment": alignment,
                         "context_dropped": {"sentences": sum(1 for r in scored if r.context_dropped),
                                             "context_sentences": sum(r.context_dropped for r in scored)},
                         "analysis": analysis})
        del lm
    return rows, counts, designs


def _scores(args, corpus, corpus_digest, numbers, name, checkpoint_sha, lm, scorer, source, kept_as):
    """``(scored, kind, stored)``: the checkpoint's scores of the corpus under ``source``, read from ``--scores``
    when kept there (``stored``: the file, else None), else scored (and kept there with ``--scores``);
    ``kept_as``: the source in the key ("-" for a model without structure, scored once under any source)."""
    key = what = None
    if args.scores:
        key, what = store.score_key(checkpoint_sha, lm.data, kept_as, numbers, scorer.scoring(source), args.device, corpus_digest)
        hit = store.load(args.scores, key)
        if hit is not None:
            scored, kind, scorer.corrected = hit
            logger.info("%s: %d sentences under %s read from %s", name, len(scored), source,
                        store.path_of(args.scores, key))
            return scored, kind, store.path_of(args.scores, key)
    logger.info("%s: scoring %d sentences under %s (%s)", name, len(corpus.sentences), source, scorer.scoring(source))
    scored, kind = scorer.score(corpus, source)
    if key is not None:
        return scored, kind, store.keep(args.scores, key, what, name, scored, kind, scorer.corrected)
    return scored, kind, None


def _structure_sources(args, corpus, name, lm, scorer, sources) -> Dict[str, bool]:
    """With ``--structural``: per source of a model that reads structure, whether its scores carry per-word
    structure surprisal and entropy (one sentence scored to see); none of them: :class:`ReadingTimesError`."""
    if not (args.structural and lm.reads_structure):
        return {}
    found = {}
    for source in sources:
        if source == "untagged":
            continue
        probe = scorer.probe(corpus, source)
        found[source] = probe.error is None and structure_fields_present([probe])
    if found and not any(found.values()):
        raise ReadingTimesError(f"--structural: {name}: the scores under {', '.join(found)} carry no per-word "
                                f"{' and '.join(STRUCTURE_FIELDS)} (not given by this engine or these sources)")
    return found
