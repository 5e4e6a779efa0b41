"""How much memory a structure search will hold, estimated before it runs, and the batches that fit a budget.

:func:`.search.search` runs every live hypothesis ("row") of every sentence of a batch through one decoder
call per input position, over a KV cache. Its peak grows with the rows, which grow with the source's
width: per sentence

* ``given``, ``self``, ``untagged``: one row;
* SiPE ``beam:K`` / ``mix:K``: up to K hypotheses, each expanded with every allowed pair of the next word
  (at most :data:`SIPE_PAIRS`, 8, or ``--tags-top-pairs M``), so up to ``8 K`` rows, and never more than
  ``8 ** words`` (every structure of the sentence);
* GiLT ``beam:K``: up to K hypotheses: each branches on ``--gilt-count-beam`` counts, but its children are
  ranked when they are made, so K stay rows (never more than ``C ** words``).

What the search holds at input position ``t`` (:class:`BatchEstimate`; one row's share: :func:`row_bytes`) is a
sum of terms, each the tensors of one piece of code, named beside its constant:

* the KV cache (``modules/kv_cache.py``): per layer, keys and values of ``d`` floats per position, in
  :data:`CACHE_GENERATIONS` buffers (the live one and the spare a reorder gathers into), each as large as the
  largest made so far (a buffer is reused, never shrunk, before the batch ends): a reorder gathers the rows into
  :data:`TIGHT_ROOM` x the positions they need, a cache that grows without one takes :func:`cache_positions`
  (at least 64 positions, doubled); once a branching cache shares
  prefixes (from ``SHARE_FROM`` positions), buffers with up to :data:`SHARED_ROW_GROWTH` times the rows, and
  the prefixes' buffers: at first one per row alive, then one per kept hypothesis;
* one decoder call per row (:func:`step_bytes`): the logits over the vocabulary and their log-softmax, one
  layer's activations and attention scores (GiLT: the graph term's scores against every feature value);
* the search's and the policy's per-row tensors (:func:`state_bytes`), gathered anew at each reorder; GiLT's
  o_w of every word, its graph's distance matrices, and the arc scorer's node representations at a word's first
  subword;
* the allocator: the kept heap of ``cli/allocator.py`` holds freed blocks that a larger one cannot reuse: the
  transients of the last step once more (:data:`FREED_TRANSIENTS`), and a share of the whole
  (:data:`ALLOCATOR_SLACK`), measured, not derived (docs/benchmarks.md). What a batch frees is given back to
  the system between batches when keeping it could pass the budget (:class:`HeapGuard`), so the estimate is of
  one batch, not of the batches before it; it counts the smaller cache buffers a growing cache freed, which the
  kept heap holds and a larger buffer cannot reuse (:data:`FREED_CACHE`).

CPU tensors are plain ``malloc`` blocks (torch keeps no caching allocator on the CPU), so nothing else is held.

:func:`plan_batches` cuts the sentences, shortest first, into batches whose estimate fits a budget
(``--max-memory``; default: :data:`DEFAULT_FRACTION` of what the process can still take,
:func:`memory_headroom`: the smallest of ``MemAvailable``, its ``RLIMIT_AS``/``RLIMIT_DATA`` headroom and its
cgroups' ``memory.max`` headroom), and raises :class:`MemoryBudgetError` (one line: the estimate and the
budget) when one sentence alone does not fit. The estimate bounds the KV cache's storages after every step
(tests/test_memory_budget.py), and the measured peak resident growth of SiPE and GiLT beams against the budget
is in docs/benchmarks.md ("A memory budget that bounds", scripts/bench_memory.py).
"""
import ctypes
import ctypes.util
import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from .arcs import DEFAULT_COUNT_BEAM
from .sources import SIPE_PAIRS, Source, parse_source  # noqa: F401  SIPE_PAIRS: re-exported
from ..modules.graph_term import N_VALUES
from ..modules.kv_cache import SHARE_FROM

DEFAULT_FRACTION = 0.5  # the default budget: this share of what the process can take (memory_headroom)
HEAP_PAD = 2 ** 28  # cli/allocator.py M_TOP_PAD: address space the kept heap reserves at each growth
NO_CGROUP_LIMIT = 2 ** 62  # a cgroup v1 limit this high is none (unlimited reads 2^63 rounded down to a page)
# What a row holds (row_bytes, BatchEstimate): each term names the code whose tensors it counts.
CACHE_MIN_POSITIONS = 64  # modules/kv_cache.py _room: a new buffer has room for at least this many positions
CACHE_GROWTH = 2  # kv_cache._room: a buffer that grows takes twice the positions it held
CACHE_GENERATIONS = 2  # kv_cache: the live buffers and the spares a reorder gathers into (swapped at each reorder)
FREED_CACHE = 1  # cli/allocator.py: the kept heap holds the smaller buffers a growing cache freed (their sum: one buffer)
TIGHT_ROOM = 1.5  # kv_cache._tight: a reorder gathers the rows into a new buffer of 1.5 x what they need
GATHER_ROWS = 2  # BatchEstimate._gathers: a sentence's word start reorders the cache once it has more rows than this
SHARED_ROW_GROWTH = 1.5  # kv_cache._room: a shared cache's buffer grows its rows 1.5 x (of its two, one at a time)
LOGIT_COPIES = 2  # policy.normalize: one position's logits over the vocabulary and their log-softmax (float32)
SCORE_COPIES = 6  # attention._cached_forward: AC, BD, their sum, the class term, the softmax and its mix (float32)
GRAPH_VALUES = 3 * N_VALUES  # modules/graph_term.py pair_scores: each head's scores against every feature value
STATE_COPIES = 2  # search.reorder, policy.reorder: every per-row tensor is gathered anew while the old is alive
WORD_OBJECT_BYTES = 256  # structure/arcs.py: per word of a hypothesis, its arcs' tuple and lists, its tape's share
ARC_FLOATS = 25  # arc_scorer.score_word: its tensors peak at 21.6 d floats per row and node (measured), + o gathered (3 d)
CHILD_BYTES = 1024  # structure/arcs.py expand: one child's Python payload (a tuple, its arcs' lists, a view of o_w)
FREED_TRANSIENTS = 1  # cli/allocator.py: the kept heap holds the last step's freed transients, which a larger one cannot reuse
ALLOCATOR_SLACK = 0.15  # cli/allocator.py: the kept heap's other fragmentation, measured (docs/benchmarks.md)
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
    arc_dim: int = 0  # GiLT: d of each of o_w's three parts (the arc scorer's input); 0: no arc scorer


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
    arc_dim = int(getattr(net, "arc_dim", 0) or 0) if getattr(net, "arc_scorer", None) is not None else 0
    return ModelSize(layers, dim, ffn, heads, vocab, max(4, value_bytes), arc_dim)  # logits and scores are float32


def rows_per_sentence(source: Source, words: int, family: str, top_pairs: int = 0, count_beam: int = DEFAULT_COUNT_BEAM) -> int:
    """The most rows (hypotheses and their children) one sentence holds under ``source`` once ``words``
    of its words have started: the source's own estimate (:meth:`~.sources.Source.rows_per_sentence`)."""
    return source.rows_per_sentence(words, family, top_pairs, count_beam)


def cache_positions(positions: int) -> int:
    """The positions of a KV-cache buffer that grows while ``positions`` are cached: :data:`CACHE_MIN_POSITIONS`
    at least, and :data:`CACHE_GROWTH` times what it held (``kv_cache._room``)."""
    return max(CACHE_MIN_POSITIONS, CACHE_GROWTH * positions)


def cache_bytes(size: ModelSize, positions: int) -> int:
    """One row's keys and values in one buffer: every layer, keys and values, :func:`cache_positions` of ``d``."""
    return size.layers * 2 * size.dim * cache_positions(positions) * size.value_bytes


def step_bytes(size: ModelSize, positions: int, family: str) -> int:
    """What one row's decoder call at input position ``positions - 1`` allocates and frees again: the logits
    (:data:`LOGIT_COPIES`), one layer's activations at a time (``q, k, v``, the attention's output, the
    feed-forward's hidden units) and its attention scores over the cached positions (:data:`SCORE_COPIES`);
    GiLT's graph term besides: every head's scores against the :data:`GRAPH_VALUES` feature values, and the
    feature tape's int64 indices of every key."""
    logits = LOGIT_COPIES * size.vocab * 4
    layer = (8 * size.dim + 2 * size.ffn + SCORE_COPIES * size.heads * positions) * 4
    if family == "arcs":
        layer += size.heads * GRAPH_VALUES * 4 + 2 * 3 * positions * 8
    return logits + layer


def tape_side(words: int) -> int:
    """The side of a GiLT hypothesis's distance matrices for ``words`` words (``GraphTape``: 9 nodes, doubled as needed)."""
    side = 9
    while side < words + 1:
        side *= 2
    return side


def state_bytes(size: ModelSize, family: str, width: int, words: int, started: Optional[int] = None) -> int:
    """One row's tensors in the search (``search.py``) and in the family's policy, for a batch of ``width``
    positions and ``words`` words, ``started`` of them begun (default: all). SiPE: int64/float64 vectors of
    ``width`` (the LM log-probs, the inputs, the terminal and non-terminal ids, the tag classes) and of ``words``
    (the costs, the pairs, the given pairs) and the anchor's 10 pair log-probs. GiLT: vectors of ``width`` (the LM
    log-probs, the inputs, the word of each position, the three graph features of each key) and of ``words + 1``
    (the costs, counts, count log-probs, the tape row's three features), o_w of every word (``3 x arc_dim``), and
    its graph's two float64 distance matrices (:func:`tape_side` of the words begun) and the Python objects that
    hold it and its arcs (:data:`WORD_OBJECT_BYTES` per word)."""
    if family != "arcs":
        return (5 * width + 3 * words + 10) * 8
    started = words if started is None else min(words, started)
    side = tape_side(started)
    return ((6 * width + 6 * (words + 1)) * 8 + (words + 1) * 3 * size.arc_dim * size.value_bytes + 2 * side * side * 8
            + (started + 1) * WORD_OBJECT_BYTES)


def expand_bytes(size: ModelSize, family: str, rows: int, word: int, count_beam: int = DEFAULT_COUNT_BEAM) -> int:
    """What ``rows`` hypotheses expanding their word ``word`` (1-based) allocate and free again: GiLT's arc scorer's
    representations of every node so far (:data:`ARC_FLOATS` x ``arc_dim`` floats each) and each hypothesis's
    ``count_beam`` children (:data:`CHILD_BYTES`); SiPE's children are rows (:func:`rows_per_sentence`), nothing here."""
    if family != "arcs" or not rows:
        return 0
    return rows * ((word + 1) * ARC_FLOATS * size.arc_dim * 4 + max(1, count_beam) * CHILD_BYTES)


def row_bytes(size: ModelSize, positions: int, family: str = "hexatags", width: Optional[int] = None, words: int = 0
              ) -> int:
    """What one row holds while the search runs its input position ``positions - 1`` in a batch of ``width``
    positions (default ``positions``) and ``words`` words: its KV cache (:data:`CACHE_GENERATIONS` buffers of
    :func:`cache_bytes`), its decoder call (:func:`step_bytes`) and its state (:func:`state_bytes`, a reorder's
    copy too), before the allocator's share (:data:`ALLOCATOR_SLACK`); :class:`BatchEstimate` adds what a batch
    holds beyond its rows' shares."""
    width = positions if width is None else width
    return (CACHE_GENERATIONS * cache_bytes(size, positions) + step_bytes(size, positions, family)
            + STATE_COPIES * state_bytes(size, family, width, words))


@dataclass
class SentenceLoad:
    """One sentence's share of a batch, per input position ``t``: the rows it holds there (:func:`rows_per_sentence`),
    its shared prefixes (at most one per kept hypothesis of a branching source) and the rows that expand a word
    there (``word[t]``, 1-based; 0 where no word starts); ``words`` in all."""
    rows: List[int]
    prefixes: List[int]
    expanding: List[int]
    word: List[int]
    words: int


class BatchEstimate:
    """The peak of one batch, sentence by sentence (:class:`SentenceLoad`: ``rows[t]``, the rows alive at input
    position ``t``: a sentence's rows grow at each word's first subword and leave after its ``</s>``). At input
    ``t`` the search holds

    * the KV cache (:meth:`_cache`): :data:`CACHE_GENERATIONS` buffers, each as large as the largest made so far
      (the cache reuses a buffer that is large enough and never shrinks one before the batch ends); once a
      branching source's cache shares prefixes (a reorder at
      :data:`~sipe_fairseq.modules.kv_cache.SHARE_FROM` cached positions), the buffers it makes may have
      :data:`SHARED_ROW_GROWTH` times the most rows alive since (``kv_cache._room`` grows rows 1.5 x at a time),
      and besides them the prefixes' buffers: those made when it starts sharing (one per row alive then, at
      most) and those of the kept hypotheses (:data:`SHARED_ROW_GROWTH` x ``prefixes[t]``);
    * per row alive, its state (:func:`state_bytes`); and what is made and freed at ``t``: every row's decoder
      call (:func:`step_bytes`) and the larger of a reorder's copy of every row's state (:data:`STATE_COPIES`)
      and the words expanded at ``t`` (:func:`expand_bytes`, the largest group of hypotheses expanding the same
      word: the policy expands one word at a time), counted :data:`FREED_TRANSIENTS` more times (the kept heap
      holds the last ones freed, of other sizes);

    the peak is the largest sum, plus :data:`ALLOCATOR_SLACK` of it."""

    def __init__(self, size: ModelSize, source: Source, family: str, top_pairs: int = 0, count_beam: int = DEFAULT_COUNT_BEAM,
                 shared: bool = False):
        self.size, self.source, self.family = size, source, family
        # the search shares the rows of sentences that begin alike (search.shared_forks): its first copy of a
        # leader's rows is a reorder that repeats rows, after which the cache shares prefixes, as a beam's does
        self.sharing = (source.branches or shared) and family != "none"
        # ... and before that, a plain cache appends the copies to its buffers, whose rows grow 1.5 x at a time
        self.appends = shared and family != "none"
        self.top_pairs, self.count_beam = top_pairs, count_beam
        self.rows: List[int] = []
        self.prefixes: List[int] = []
        self.expanding: List[dict] = []  # per input: word -> rows expanding it
        self.tight: List[bool] = []  # per input: the search reorders the cache there (a gather, kv_cache._tight)
        self.words = 0

    def _rows(self, words: int) -> int:
        return rows_per_sentence(self.source, words, self.family, self.top_pairs, self.count_beam)

    def sentence(self, n: int, starts: Sequence[int]) -> SentenceLoad:
        """The load of a sentence of ``n`` tokens whose words start at ``starts`` (target indices)."""
        rows, expanding, word, w, starts = [], [], [], 0, set(int(x) for x in starts)
        for t in range(n):  # input t is target t - 1; word w starts at the input after its first subword's target
            begins = t - 1 in starts or (t == 0 and not starts)
            w += begins
            word.append(w if begins else 0)
            expanding.append(self._rows(w - 1) if begins else 0)
            rows.append(self._rows(max(w, 1)))
        prefixes = [min(int(getattr(self.source, "k", 1)), r) if self.sharing else 0 for r in rows]
        return SentenceLoad(rows, prefixes, expanding, word, len(starts))

    def sentence_rows(self, n: int, starts: Sequence[int]) -> List[int]:
        """Rows of a sentence of ``n`` tokens whose words start at ``starts`` (target indices), per input."""
        return self.sentence(n, starts).rows

    def peak(self, extra: Optional[SentenceLoad] = None) -> int:
        """The batch's peak, with one more sentence ``extra`` if given."""
        more = extra or SentenceLoad([], [], [], [], 0)
        width = max(len(self.rows), len(more.rows))
        if not width:
            return 0
        rows, prefixes = _summed(self.rows, more.rows, width), _summed(self.prefixes, more.prefixes, width)
        tight = [(t < len(self.tight) and self.tight[t]) or (t < len(more.word) and self._gathers(more, t))
                 for t in range(width)]
        words = max(self.words, more.words)
        state = state_bytes(self.size, self.family, width, words)
        best = 0
        for t, (r, kv) in enumerate(zip(rows, self._cache(rows, prefixes, tight))):
            if self.family == "arcs":  # a GiLT row's graph grows with its words: at most t begun by input t
                state = state_bytes(self.size, self.family, width, words, t)
            transient = r * step_bytes(self.size, t + 1, self.family) + max((STATE_COPIES - 1) * r * state,
                                                                            self._expanded(t, more))
            best = max(best, kv + r * state + (1 + FREED_TRANSIENTS) * transient)
        return int(best * (1 + ALLOCATOR_SLACK))

    def _gathers(self, load: SentenceLoad, t: int) -> bool:
        """Whether the search reorders the cache at input ``t`` for ``load``'s sentence: a word starts there and its
        rows branch (more than :data:`GATHER_ROWS` of them: with fewer, its children may keep their parents'
        order, which the search does not reorder)."""
        return bool(load.word[t]) and load.rows[t] > GATHER_ROWS

    def _cache(self, rows: Sequence[int], prefixes: Sequence[int], tight: Sequence[bool]) -> List[float]:
        """The KV cache's bytes at each input ``t``: :data:`CACHE_GENERATIONS` buffers, each at most the largest
        one made so far (a buffer that is large enough is reused, none shrinks before the batch ends). At a
        reorder (``tight[t]``) the rows are gathered into a buffer of :data:`TIGHT_ROOM` x (``t + 1``) positions
        (``kv_cache._tight``); at an input without one, the cache grows to :func:`cache_positions` of ``t``
        (``kv_cache._room``), while one layer's keys or values hold their old buffers beside the new. Once a
        branching cache shares prefixes (a reorder at ``SHARE_FROM`` cached positions), its buffers may have
        :data:`SHARED_ROW_GROWTH` x the most rows alive since, and the prefixes' buffers come besides: those made
        when it starts sharing (one per row alive then, at most) and the kept hypotheses'."""
        per = self.size.layers * 2 * self.size.dim * self.size.value_bytes  # one row-position, every layer
        shares = self.sharing
        out, held, sharing = [], 0, 0
        for t, r in enumerate(rows):
            made = r * per * (TIGHT_ROOM * (t + 1) if tight[t] else cache_positions(t))
            if self.appends:
                made *= SHARED_ROW_GROWTH
            held = max(held, made)
            kv = (CACHE_GENERATIONS + FREED_CACHE) * held + (0 if tight[t] else made / (2 * self.size.layers))
            if shares and t >= SHARE_FROM:
                unit, sharing = cache_bytes(self.size, t + 1), max(sharing, r)
                own = max(held, SHARED_ROW_GROWTH * sharing * unit)
                kv = (CACHE_GENERATIONS + FREED_CACHE) * own + (sharing + SHARED_ROW_GROWTH * prefixes[t]) * unit
            out.append(kv)
        return out

    def _expanded(self, t: int, more: SentenceLoad) -> int:
        """:func:`expand_bytes` of the largest group of rows expanding one word at input ``t``."""
        if self.family != "arcs":
            return 0
        groups = dict(self.expanding[t]) if t < len(self.expanding) else {}
        if t < len(more.word) and more.word[t]:
            groups[more.word[t]] = groups.get(more.word[t], 0) + more.expanding[t]
        return max((expand_bytes(self.size, self.family, e, w, self.count_beam) for w, e in groups.items()), default=0)

    def add(self, load: SentenceLoad) -> None:
        """One more sentence (:meth:`sentence`)."""
        width = max(len(self.rows), len(load.rows))
        self.rows, self.prefixes = _summed(self.rows, load.rows, width), _summed(self.prefixes, load.prefixes, width)
        self.expanding += [{} for _ in range(width - len(self.expanding))]
        self.tight += [False] * (width - len(self.tight))
        for t, w in enumerate(load.word):
            if w:
                self.expanding[t][w] = self.expanding[t].get(w, 0) + load.expanding[t]
                self.tight[t] = self.tight[t] or self._gathers(load, t)
        self.words = max(self.words, load.words)


def _summed(a: Sequence[int], b: Sequence[int], width: int) -> List[int]:
    return [(a[t] if t < len(a) else 0) + (b[t] if t < len(b) else 0) for t in range(width)]


def estimate_bytes(size: ModelSize, source: Source, sentences: Sequence, family: str, top_pairs: int = 0,
                   count_beam: int = DEFAULT_COUNT_BEAM, shared: bool = False) -> int:
    """Peak bytes of one batch of sentences (``n`` tokens with ``</s>``, word ``starts``: :class:`.sentences.Sentence`);
    ``shared``: the search shares the rows of sentences that begin alike (:class:`BatchEstimate`)."""
    batch = BatchEstimate(size, source, family, top_pairs, count_beam, shared)
    for s in sentences:
        batch.add(batch.sentence(s.n, s.starts))
    return batch.peak()


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text()
    except OSError:
        return None


def _field(text: Optional[str], key: str, scale: int = 1) -> Optional[int]:
    """The number after ``key`` in ``/proc/meminfo``-like text (``"MemAvailable:  123 kB"``, or ``memory.stat``'s
    ``"inactive_file 123"``), times ``scale``; None when it is not there."""
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1]) * scale
    return None


def available_bytes(root: str = "/") -> Optional[int]:
    """``MemAvailable`` of ``/proc/meminfo`` under ``root`` (None where there is none)."""
    return _field(_read(Path(root, "proc/meminfo")), "MemAvailable", 1024)


def rlimit_headroom(root: str = "/", limits: Optional[dict] = None) -> Optional[int]:
    """What the process's own limits leave it to grow: ``RLIMIT_AS`` minus its ``VmSize`` and ``RLIMIT_DATA``
    minus its ``VmData`` (``/proc/self/status`` under ``root``), less :data:`HEAP_PAD` (the allocator asks the
    system for that much more address space whenever its heap grows); the smaller, None without a limit.
    ``limits``: ``{"AS": bytes, "DATA": bytes}`` instead of ``resource.getrlimit`` (tests)."""
    status = _read(Path(root, "proc/self/status"))
    out = []
    for name, used in (("AS", "VmSize"), ("DATA", "VmData")):
        if limits is not None:
            limit = limits.get(name)
        else:
            limit = resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))[0]
            limit = None if limit == resource.RLIM_INFINITY else limit
        if limit is not None:
            out.append(max(0, limit - (_field(status, used, 1024) or 0) - HEAP_PAD))
    return min(out) if out else None


def _cgroup_dirs(root: Path) -> List[Tuple[Path, str]]:
    """The memory cgroup directories of this process under ``root`` and the version of each (``"v2"``, ``"v1"``),
    innermost first, up to the mount: from ``/proc/self/cgroup`` (``0::/path``: v2, ``N:...memory...:/path``: v1);
    inside a cgroup namespace the process's own group is the mount itself."""
    out = []
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            version, mount = "v2", root / "sys/fs/cgroup"
        elif "memory" in parts[1].split(","):
            version, mount = "v1", root / "sys/fs/cgroup/memory"
        else:
            continue
        path = mount / parts[2].strip("/")
        while True:
            out.append((path, version))
            if path == mount or mount not in path.parents:
                break
            path = path.parent
        if (mount, version) not in out:
            out.append((mount, version))
    return out


def cgroup_headroom(root: str = "/") -> Optional[int]:
    """What the memory cgroups of the process leave it: per group (and every group above it) its limit minus its
    usage, the reclaimable page cache not counted as used (v2 ``memory.max`` - ``memory.current`` +
    ``inactive_file`` of ``memory.stat``; v1 ``memory.limit_in_bytes`` - ``memory.usage_in_bytes`` +
    ``total_inactive_file``); the smallest, None without a limit (``max``, or v1's 2^63 rounded to a page)."""
    out = []
    for path, version in _cgroup_dirs(Path(root)):
        files = ("memory.max", "memory.current", "inactive_file") if version == "v2" else \
            ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        limit, usage = (_read(path / f) for f in files[:2])
        if limit is None or usage is None or not limit.strip().isdigit() or not usage.strip().isdigit():
            continue
        if int(limit) >= NO_CGROUP_LIMIT:
            continue
        cache = _field(_read(path / "memory.stat"), files[2]) or 0
        out.append(max(0, int(limit) - int(usage) + cache))
    return min(out) if out else None


def memory_headroom(root: str = "/", limits: Optional[dict] = None) -> Optional[int]:
    """The memory this process can still take: the smallest of ``MemAvailable`` (:func:`available_bytes`), its
    own limits (:func:`rlimit_headroom`) and its cgroups' (:func:`cgroup_headroom`); None when none is known."""
    known = [x for x in (available_bytes(root), rlimit_headroom(root, limits), cgroup_headroom(root)) if x is not None]
    return min(known) if known else None


def default_budget(root: str = "/", limits: Optional[dict] = None) -> Optional[int]:
    """:data:`DEFAULT_FRACTION` of what the process can still take (:func:`memory_headroom`; None: unknown, no
    bound): the budget of a search whose options set none (``StructureOptions.max_memory`` 0, the commands'
    ``--max-memory``)."""
    free = memory_headroom(root, limits)
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


class BatchPlan(list):
    """:func:`plan_batches`' batches (index lists, in the order they run) and, when planned within a budget, each
    one's estimated peak (``peaks``, bytes; :meth:`BatchEstimate.peak`): what the workers' split and the
    :class:`HeapGuard` read without estimating the batches again."""

    def __init__(self, batches: Sequence[List[int]] = (), peaks: Sequence[int] = ()):
        super().__init__(batches)
        self.peaks: List[int] = list(peaks)
        self._by_first: Optional[dict] = None  # peak_of's index, made at its first call (after planning)

    @property
    def largest(self) -> Optional[int]:
        """The largest batch's estimated peak (None: planned without a budget, no estimate made)."""
        return max(self.peaks) if self.peaks else None

    def peak_of(self, batch: Sequence[int]) -> int:
        """The estimated peak of one of its batches (found by its first sentence; 0 without estimates)."""
        if not self.peaks:
            return 0
        if self._by_first is None:
            self._by_first = {b[0]: p for b, p in zip(self, self.peaks)}
        return self._by_first.get(batch[0], 0)


def plan_batches(order: Sequence[int], sentences: Sequence, source: str, size: ModelSize, family: str,
                 budget: Optional[int], max_sentences: int, top_pairs: int = 0, count_beam: int = DEFAULT_COUNT_BEAM,
                 shared: bool = False) -> BatchPlan:
    """Consecutive index lists of ``order`` (shortest first), at most ``max_sentences`` each, whose
    estimated peak fits ``budget`` (None: no bound, and no estimate). Every batch is planned before the first is
    scored: :class:`MemoryBudgetError` when a sentence alone does not fit, before anything is scored."""
    src = parse_source(source)
    plan, current, peak = BatchPlan(), [], 0
    batch = BatchEstimate(size, src, family, top_pairs, count_beam, shared)
    for i in order:
        load = batch.sentence(sentences[i].n, sentences[i].starts)
        with_it = None if budget is None else batch.peak(load)
        if current and (len(current) >= max_sentences or (with_it is not None and with_it > budget)):
            plan.append(current)
            if budget is not None:
                plan.peaks.append(peak)
            current, batch = [], BatchEstimate(size, src, family, top_pairs, count_beam, shared)
            with_it = None if budget is None else batch.peak(load)
        if not current and with_it is not None and with_it > budget:
            s = sentences[i]
            raise MemoryBudgetError(
                f"tag source {source}: one sentence of {s.n} tokens and {load.words} words needs about "
                f"{human(with_it)} ({max(load.rows)} hypotheses), over the memory budget of {human(budget)}; "
                "lower K or raise --max-memory")
        batch.add(load)
        current.append(i)
        peak = with_it
    if current:
        plan.append(current)
        if budget is not None:
            plan.peaks.append(peak)
    return plan


def status_kb(field: str) -> Optional[int]:
    """A ``/proc/self/status`` size in kB (``VmRSS``, ``VmHWM``: the resident set and its peak); None where there is
    no such file (not Linux)."""
    return _field(_read(Path("/proc/self/status")), field)


def resident_bytes() -> Optional[int]:
    """This process's resident set (``VmRSS``; None where there is no ``/proc``)."""
    kb = status_kb("VmRSS")
    return None if kb is None else kb * 1024


def c_function(name: str):
    """The C library's function ``name`` (ctypes), looked up once per process; None where the C library has none
    (not glibc: ``malloc_trim``, ``mallopt``). The one lookup of the C library: :func:`release_freed` and the
    commands' allocator settings (``cli/allocator.py``) call through it."""
    if name not in _C_FUNCTIONS:
        try:
            _C_FUNCTIONS[name] = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
        except (OSError, AttributeError):
            _C_FUNCTIONS[name] = None
    return _C_FUNCTIONS[name]


_C_FUNCTIONS: dict = {}  # name -> the C library's function, or None


def release_freed() -> bool:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere nothing). True when the call
    was made. :class:`HeapGuard` calls it between batches when the budget needs it."""
    trim = c_function("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True


class HeapGuard:
    """Before each batch, gives the freed heap back (:func:`release_freed`) when keeping it could pass the budget.

    The kept heap (``cli/allocator.py``) holds what a batch freed, for the next batch to reuse; across batches of
    changing shapes its free blocks do not fit the next batch's tensors, and the resident size grew past the budget
    (1.16-1.40x on SyntaxGym's sentences: docs/benchmarks.md, "Suites of short sentences"). So before each batch, in
    the process that runs it (the previous batch's tensors freed, :meth:`~.policy.StructurePolicy.end`): when what
    the process holds above its resident set before its first batch, plus this batch's estimate (``need``), is over
    its ``budget`` (its share: ``--max-memory / workers``), the heap is given back and the batch starts from what is
    live. The batch's peak is within its estimate (the planner's bound), so the process stays within its share
    either way. Batches are dealt the largest first: the later, smaller ones fit beside the kept heap and keep its
    reuse; a trim costs the batch after it its page faults (about 14% more CPU on SyntaxGym at 512M-1G, where every
    batch needs one). ``budget`` None: no bound, nothing is released."""

    def __init__(self, budget: Optional[int]):
        self.budget = budget
        self.base: dict = {}  # pid -> resident bytes before its first batch (forked workers each have their own)
        self.released = 0

    def before(self, need: int) -> bool:
        """Call before a batch whose estimated peak is ``need`` bytes: the first call in a process records its resident
        set; a later one releases the freed heap if what is held plus ``need`` is over the budget. True if released."""
        if self.budget is None:
            return False
        now = resident_bytes() or 0
        held = now - self.base.setdefault(os.getpid(), now)
        if held + need <= self.budget:
            return False
        self.released += 1
        return release_freed()


def budget_from(max_memory: Optional[int]) -> Optional[int]:
    """The budget of ``--max-memory`` (bytes; 0 or None: the default)."""
    return int(max_memory) if max_memory else default_budget()

