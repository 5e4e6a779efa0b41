"""How much memory a structure search will hold, estimated before it runs, and the batches that fit a budget.

:func:`.search.search` runs every live hypothesis ("row") of every sentence of a batch through one decoder
call per input position, over a KV cache. Its peak grows with the rows, which grow with the source's
width: per sentence

* ``given``, ``self``, ``untagged``: one row;
* SiPE ``beam:K`` / ``mix:K``: up to K hypotheses, each expanded with every allowed pair of the next word
  (at most :data:`SIPE_PAIRS`, or ``--tags-top-pairs M``), so up to ``K x 7`` rows, and never more than
  ``7 ** words`` (every structure of the sentence);
* GiLT ``beam:K``: up to K hypotheses, each branching on ``--gilt-count-beam`` counts: ``K x C`` rows, and
  never more than ``C ** words``.

What one row holds while input position ``t`` runs (:func:`row_bytes`) is dominated by its KV cache
(``layers x 2`` (keys and values) ``x 2`` (the live buffer and the spare a reorder gathers into) ``x d x``
the ``t + 1`` positions cached) and its logits at that position (the vocabulary, once as logits and once
as log-softmax). :class:`BatchEstimate` follows the rows of a batch position by position (a sentence's
rows grow at its words' first subwords and leave after its ``</s>``) and takes the largest
``rows(t) x row_bytes(t)``. :func:`plan_batches` cuts the sentences, shortest first, into batches whose
estimate fits a budget (``--max-memory``; default: :data:`DEFAULT_FRACTION` of the machine's available
memory, ``MemAvailable`` of ``/proc/meminfo``), and raises :class:`MemoryBudgetError` (one line: the
estimate and the budget) when one sentence alone does not fit. The estimate is an upper bound on the
rows (every word of a SiPE beam is counted with 7 allowed pairs); against the measured peak of a tiny
model it is within 2x for ``beam:4`` and ``mix:16`` (tests/test_trust.py).
"""
import re
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

from .arcs import DEFAULT_COUNT_BEAM
from .sources import SIPE_PAIRS, Source, parse_source  # noqa: F401  SIPE_PAIRS: re-exported
DEFAULT_FRACTION = 0.5  # the default budget: this share of MemAvailable
_CACHE_MIN_POSITIONS = 64  # kv_cache._room: a new buffer has room for at least this many positions
_UNITS = {"": 1, "B": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}


class MemoryBudgetError(ValueError):
    """A search that cannot fit the memory budget, even one sentence at a time (exit status 2)."""


@dataclass(frozen=True)
class ModelSize:
    """What a decoder's per-row memory depends on."""
    layers: int
    dim: int
    ffn: int
    heads: int
    vocab: int
    value_bytes: int = 4  # float32 parameters; 2 for half precision


def model_size(model) -> ModelSize:
    """The :class:`ModelSize` of a decoder LM (or a decoder): read from its modules, its config as a fallback."""
    net = getattr(model, "decoder", model)
    cfg = getattr(net, "cfg", None) or getattr(net, "args", None)
    layers = len(getattr(net, "layers", ()) or ()) or int(getattr(cfg, "decoder_layers", 1))
    embed = getattr(net, "embed_tokens", None)
    dim = int(getattr(cfg, "decoder_embed_dim", 0) or getattr(embed, "embedding_dim", 0) or 512)
    ffn = int(getattr(cfg, "decoder_ffn_embed_dim", 0) or 4 * dim)
    heads = int(getattr(cfg, "decoder_attention_heads", 0) or 8)
    dictionary = getattr(net, "dictionary", None)
    vocab = len(dictionary) if dictionary is not None else int(getattr(embed, "num_embeddings", 0) or 1)
    try:
        value_bytes = next(model.parameters()).element_size()
    except (StopIteration, AttributeError):
        value_bytes = 4
    return ModelSize(layers, dim, ffn, heads, vocab, max(4, value_bytes))  # logits and scores are float32


def rows_per_sentence(source: Source, words: int, family: str, top_pairs: int = 0, count_beam: int = DEFAULT_COUNT_BEAM) -> int:
    """The most rows (hypotheses and their children) one sentence holds under ``source`` once ``words``
    of its words have started: the source's own estimate (:meth:`~.sources.Source.rows_per_sentence`)."""
    return source.rows_per_sentence(words, family, top_pairs, count_beam)


def row_bytes(size: ModelSize, positions: int) -> int:
    """What one row holds while the search runs its input position ``positions - 1`` (module docstring)."""
    kv = size.layers * 2 * 2 * size.dim * (positions + 1) * size.value_bytes  # keys and values, live + spare
    logits = 2 * size.vocab * 4  # one position's logits and their log-softmax (float32)
    step = (8 * size.dim + 2 * size.ffn + 2 * size.heads * positions) * 4  # one layer's activations, one position
    book = 8 * 8 * positions  # the search's per-row scores, inputs and tags (int64/float64, and a reorder's copy)
    return kv + logits + step + book


class BatchEstimate:
    """The peak of one batch, sentence by sentence: ``rows[t]``, the rows alive at input position ``t``
    (a sentence's rows grow at each word's first subword, :func:`rows_per_sentence`, and leave after its
    ``</s>``); the peak is the largest ``rows[t] x row_bytes(t + 1)``."""

    def __init__(self, size: ModelSize, source: Source, family: str, top_pairs: int = 0, count_beam: int = DEFAULT_COUNT_BEAM):
        self.size, self.source, self.family = size, source, family
        self.top_pairs, self.count_beam = top_pairs, count_beam
        self.rows: List[int] = []

    def sentence_rows(self, n: int, starts: Sequence[int]) -> List[int]:
        """Rows of a sentence of ``n`` tokens whose words start at ``starts`` (target indices), per input."""
        out, w, starts = [], 0, set(int(x) for x in starts)
        for t in range(n):  # input t is target t - 1; word w starts at the input after its first subword's target
            if t - 1 in starts or (t == 0 and not starts):
                w += 1
            out.append(rows_per_sentence(self.source, max(w, 1), self.family, self.top_pairs, self.count_beam))
        return out

    def peak(self, extra: Sequence[int] = ()) -> int:
        rows = list(self.rows)
        rows += [0] * (len(extra) - len(rows))
        return max((r + (extra[t] if t < len(extra) else 0)) * row_bytes(self.size, t + 1) for t, r in enumerate(rows)) \
            if rows else 0

    def add(self, sentence_rows: Sequence[int]) -> None:
        self.rows += [0] * (len(sentence_rows) - len(self.rows))
        for t, r in enumerate(sentence_rows):
            self.rows[t] += r


def estimate_bytes(size: ModelSize, source: Source, sentences: Sequence, family: str, top_pairs: int = 0,
                   count_beam: int = DEFAULT_COUNT_BEAM) -> int:
    """Peak bytes of one batch of sentences (``n`` tokens with ``</s>``, word ``starts``: :class:`.sentences.Sentence`)."""
    batch = BatchEstimate(size, source, family, top_pairs, count_beam)
    for s in sentences:
        batch.add(batch.sentence_rows(s.n, s.starts))
    return batch.peak()


def available_bytes() -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def default_budget() -> Optional[int]:
    """:data:`DEFAULT_FRACTION` of the available memory (None: unknown, no bound): the budget of a search
    whose options set none (``StructureOptions.max_memory`` 0, the commands' ``--max-memory``)."""
    free = available_bytes()
    return None if free is None else int(free * DEFAULT_FRACTION)


def parse_size(text: str) -> int:
    """``"2G"``, ``"512M"``, ``"1.5GiB"``, ``"1000000"`` -> bytes (binary units); ``ValueError`` otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*", str(text), re.I)
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r}: expected a size > 0 such as 512M, 2G or a number of bytes")
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def human(n: float) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1 (``"1.5 GiB"``)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _UNITS[unit[0]]
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def plan_batches(order: Sequence[int], sentences: Sequence, source: str, size: ModelSize, family: str,
                 budget: Optional[int], max_sentences: int, top_pairs: int = 0, count_beam: int = DEFAULT_COUNT_BEAM
                 ) -> Iterator[List[int]]:
    """Consecutive index lists of ``order`` (shortest first), at most ``max_sentences`` each, whose
    estimated peak fits ``budget`` (None: no bound). Every batch is planned before the first is yielded:
    :class:`MemoryBudgetError` when a sentence alone does not fit, before anything is scored."""
    src = parse_source(source)
    batches, current = [], []
    batch = BatchEstimate(size, src, family, top_pairs, count_beam)
    for i in order:
        rows = batch.sentence_rows(sentences[i].n, sentences[i].starts)
        if current and (len(current) >= max_sentences or (budget is not None and batch.peak(rows) > budget)):
            batches.append(current)
            current, batch = [], BatchEstimate(size, src, family, top_pairs, count_beam)
        if not current and budget is not None and batch.peak(rows) > budget:
            s = sentences[i]
            raise MemoryBudgetError(
                f"tag source {source}: one sentence of {s.n} tokens and {len(s.starts)} words needs about "
                f"{human(batch.peak(rows))} ({max(rows)} hypotheses), over the memory budget of {human(budget)}; "
                "lower K or raise --max-memory")
        batch.add(rows)
        current.append(i)
    if current:
        batches.append(current)
    return iter(batches)


def budget_from(max_memory: Optional[int]) -> Optional[int]:
    """The budget of ``--max-memory`` (bytes; 0 or None: the default)."""
    return int(max_memory) if max_memory else default_budget()

