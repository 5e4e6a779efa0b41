"""Reading times: does a model's surprisal, and its structure's surprisal and entropy, predict how long people
read each word of the Natural Stories corpus (``sipe-eval reading-times``; docs/evaluation.md, "Reading times")?

    sipe-eval reading-times --rt NATURALSTORIES_DIR --path none=ck_none/checkpoint_best.pt \\
        --path sipe=ck_sipe/checkpoint_best.pt --tags self,mix:16 [--structural] [--baseline none] --json rt.json

The stories' 485 parsed sentences are scored by each checkpoint under each source (in the story's preceding
context when the Python interface can, else sentence by sentence: the report says which); the model's words
are aligned to the words the readers saw (:mod:`.align`; every unaligned word counted per story, more than 1%
an error); per kept word the predictors are its length, log unigram frequency in the training data and
position in the sentence (the baseline), its surprisal at t, t-1 and t-2, and with ``--structural`` the
structure's surprisal and entropy at t and t-1 (:mod:`.predictors`, with the exclusions: the first and last
word of each story, words with punctuation, mean reading times outside 100-3000 ms); the mean reading times
are fitted by ordinary least squares, and the gain in held-out log-likelihood per word (ΔLL) of surprisal
over the baseline, and of the structural predictors over baseline + surprisal, is reported with a bootstrap
95% interval over stories, then words within them (:mod:`.regression`). With ``--baseline NAME``, groups of
seeds (rows ``NAME-sSEED``) are compared by the paired rule of ``sipe-eval seeds`` (:mod:`.compare`);
``--plot`` draws ΔLL against perplexity per word (:mod:`.plot`).

Exit status: 0 ok; 1 more than 1% of a model's words unaligned (the first failures named) or a score that is
not finite; 2 bad input (a missing or malformed reading-time or parse file: one line naming the file and line;
``--structural`` when the scores carry no per-word structure surprisal and entropy); 3 a checkpoint that cannot
be loaded.
"""
from .align import MAX_UNALIGNED, align, normalize
from .analysis import AlignmentError, ScoredSentence, analyse, check_alignment, markdown, perplexity, zone_scores
from .corpus import Corpus, ReadingTimesError, read_corpus
from .predictors import EXCLUSIONS, UnigramCounts, build_table, has_punctuation, word_length
from .compare import Design, group_of, paired
from .regression import bootstrap, delta_ll, story_word_weights, weighted_delta_ll
