"""The KV cache of one attention layer for incremental decoding: a dict the decoder keeps per layer
(``SiPEAttention._cached_forward`` asks it through the functions below, never by key; :func:`reorder` follows
the batch rows).

``k``, ``v`` (R, H, n, d): every row's keys and values by absolute position, as views of preallocated
buffers (``{k,v}_buf``, with a ``{k,v}_spare`` of the same size that a reorder gathers into):
appending writes the new positions only. A reorder that gathers every position writes the rows tight, with
room for one more (:func:`_tight`), so that the next step's keys and values are one contiguous tensor.

Shared prefixes (after a reorder that repeats rows, i.e. a beam's hypotheses branching): the children
of one row share its keys and values instead of a copy each, and their attention over the shared part
is one matrix product per prefix (:func:`prefix_scores`, :func:`prefix_mix`) instead of one vector
product per child. The dict then also holds

* ``pk``, ``pv`` (P, H, Lp, d): the shared prefixes; prefix ``p`` holds positions ``0 .. plen[p]-1``;
* ``parent`` (R,): each row's prefix (-1: none); a row's own positions are ``plen[parent] .. n-1``
  of ``k``/``v`` (earlier columns there are stale), and no row's start is below ``lo``;
* ``group`` (P, m): the rows that share prefix ``p`` (padded with R), ``slot`` (R,) a row's column there.

A branching reorder writes each repeated row's prefix + own positions once, as a new prefix of length
``n`` (the kept prefixes are gathered beside it), and gathers only the own columns ``lo .. n-1`` of
the rows, so a beam copies about K rows per word instead of every child. The numbers are those of
the plain cache (tests/test_incremental.py).
"""
from typing import Callable, Dict, NamedTuple, Tuple

import torch

Cache = Dict[str, object]


def is_shared(cache: Cache) -> bool:
    return "parent" in cache


def rows_and_length(cache: Cache) -> Tuple[int, int]:
    """(rows, cached positions) of a layer's cache; (0, 0) when nothing is cached yet."""
    k = cache.get("k")
    return (0, 0) if k is None else (k.size(0), k.size(2))


# ---------------------------------------------------------------------- plain buffers

def _buffers(cache: Cache, name: str):
    """(live, spare) buffers of cache entry ``name``; live is None when ``cache[name]`` is not a view of
    it (a new cache, or one a caller replaced)."""
    live, spare = cache.get(f"{name}_buf"), cache.get(f"{name}_spare")
    cur = cache.get(name)
    if live is None or cur is None or cur.data_ptr() != live.data_ptr() or cur.stride() != live[: cur.size(0)].stride():
        live = None
    return live, spare


# a row with more own positions becomes a prefix (of one child) when the prefixes are rewritten: every reorder
# copies the own positions of every row (from the lowest start), so they are kept short
OWN_LIMIT = 8
# a plain cache starts sharing at a branching reorder once it holds this many positions: below it the copies
# cost less than the bookkeeping (docs/benchmarks.md, "Shared prefixes in the KV cache")
SHARE_FROM = 48


def _room(buf, like, rows: int, length: int, zeros: bool = False):
    """``buf`` if it holds ``rows`` x ``length`` positions (in ``like``'s dtype), else a new buffer shaped
    like ``like`` with room to grow: as many positions as ``like`` has if that is enough, else doubled
    (at least ``length``, 64); rows as asked, and at least 1.5 x ``buf``'s when they grow (a beam's rows
    grow a little at a time). The KV cache is written in place, never re-concatenated."""
    if buf is not None and buf.size(0) >= rows and buf.size(2) >= length and buf.dtype == like.dtype:
        return buf
    have = like.size(2)
    positions = have if have >= length else max(length, 2 * have, 64)
    old_rows = 0 if buf is None else buf.size(0)
    rows = max(rows, old_rows) if rows <= old_rows else max(rows, old_rows * 3 // 2)
    shape = (rows, like.size(1), positions, like.size(3))
    # zeros for the shared prefixes: their rows are mixed past their length with probability 0 (0 * nan = nan);
    # a row's stale own columns are masked in the attention instead (large buffers, mostly never touched)
    return like.new_zeros(shape) if zeros else like.new_empty(shape)


def append(cache: Cache, k_new: torch.Tensor, v_new: torch.Tensor):
    """Write the new positions' keys and values (R, H, k, d); returns (keys, values) (R, H, n+k, d) by
    absolute position (shared: a row's columns before its own start are stale)."""
    out = []
    for name, new in (("k", k_new), ("v", v_new)):
        past = cache.get(name)
        if past is None:
            buf = _room(None, new, new.size(0), new.size(2))
            s = 0
        else:
            live, _ = _buffers(cache, name)
            s = past.size(2)
            buf = live if live is not None and live.size(2) >= s + new.size(2) and live.size(0) >= past.size(0) else None
            if buf is None:  # grow (or adopt a tensor a caller put there)
                buf = _room(None, past, past.size(0), s + new.size(2))
                buf[: past.size(0), :, :s] = past
                cache[f"{name}_spare"] = None
        rows = new.size(0)
        buf[:rows, :, s:s + new.size(2)] = new
        view = buf[:rows, :, : s + new.size(2)]
        cache[name], cache[f"{name}_buf"] = view, buf
        out.append(view)
    return out


def _tight(spare, like, rows: int, length: int):
    """A (rows, H, length, d) contiguous tensor in ``spare``'s storage when it is large enough (else a new
    one, with room for 1.5 x as many entries): a gather of every position writes the rows with room for
    exactly the next position, so that after the next append the keys and values are one contiguous
    tensor (a batched matrix-vector product over a strided view of a larger buffer runs about 2.5x slower)."""
    shape = (rows, like.size(1), length, like.size(3))
    need = rows * like.size(1) * length * like.size(3)
    flat = None
    if spare is not None and spare.dtype == like.dtype and spare.device == like.device:
        storage = spare.untyped_storage()  # the whole buffer, also when spare is a smaller tight view of it
        flat = spare.new_empty(0).set_(storage, 0, (storage.nbytes() // spare.element_size(),))
    if flat is None or flat.numel() < need:
        flat = like.new_empty(need * 3 // 2)
    return flat[:need].view(shape)


def _gather_rows(cache: Cache, name: str, order: torch.Tensor, lo: int, n: int
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows ``order`` of ``cache[name]``, positions ``lo .. n-1``, written into the spare buffer at the
    same positions: (view of positions 0 .. n-1, the new live buffer, the new spare). Every position
    (``lo`` 0): laid out with room for one more (:func:`_tight`)."""
    live, spare = _buffers(cache, name)
    if live is None:
        live = cache[name]
    spare = _tight(spare, live, len(order), n + 1) if lo == 0 else _room(spare, live, len(order), n)
    view = spare[: len(order), :, :n]
    if lo < n:
        torch.index_select(cache[name][:, :, lo:n], 0, order, out=view[:, :, lo:n])
    return view, spare, live


# ---------------------------------------------------------------------- appending

def _starts(parent: torch.Tensor, plen: torch.Tensor) -> torch.Tensor:
    """(R,) each row's first own position: its prefix's length (0: no prefix)."""
    if not len(plen):
        return torch.zeros_like(parent)
    return torch.where(parent >= 0, plen[parent.clamp(min=0)], torch.zeros_like(parent))


def prefix_lengths(cache: Cache) -> torch.Tensor:
    """(R,) the shared prefix length of each row (0: none), as the last reorder left it."""
    start = cache.get("start")
    return start if start is not None else _starts(cache["parent"], cache["plen"])


# ---------------------------------------------------------------------- what a layer's step reads

def relative_keys(cache: Cache, n: int, build: Callable[[int], torch.Tensor]) -> torch.Tensor:
    """W_R r (H, N, d) for distances N-1 .. 0 with N >= ``n``, kept in the cache (one for every row, so a
    reorder keeps it as it is); ``build(N)`` makes it when it is missing or too short, N grown
    geometrically (at least 64)."""
    r = cache.get("r")
    if r is None or r.size(1) < n:
        r = build(max(n, 2 * (0 if r is None else r.size(1)), 64))
        cache["r"] = r
    return r


class Columns(NamedTuple):
    """The key columns of one step over a shared cache: the rows' prefixes (positions 0 .. width-1),
    then the own positions lo .. n-1 (module docstring)."""
    width: int  # Lp, the prefixes' width (0: no prefix yet)
    lo: int  # the lowest own start of any row
    positions: torch.Tensor  # (width + n - lo,) the absolute key position of each column
    valid: torch.Tensor  # (R, width + n - lo) the columns a row sees: its prefix, then its own positions

    def select(self, t: torch.Tensor) -> torch.Tensor:
        """(..., n) by absolute key position -> (..., width + n - lo), the columns."""
        return torch.cat([t[..., :self.width], t[..., self.lo:]], -1) if self.width else t[..., self.lo:]


def shared_columns(cache: Cache, n: int, device) -> Columns:
    """The :class:`Columns` of a step that has ``n`` positions in all, over a shared cache (:func:`is_shared`)."""
    plen = prefix_lengths(cache).to(device)
    width, lo = (cache["pk"].size(2) if len(cache["plen"]) else 0), int(cache["lo"])
    cols = torch.cat([torch.arange(width, device=device), torch.arange(lo, n, device=device)])
    valid = torch.cat([cols[None, :width] < plen[:, None], cols[None, width:] >= plen[:, None]], 1)
    return Columns(width, lo, cols, valid)


# ---------------------------------------------------------------------- attention over shared prefixes

def prefix_scores(cache: Cache, q: torch.Tensor) -> torch.Tensor:
    """q (R, H, k, d) -> (R, H, k, Lp): every row's query against its prefix's keys, one (m k, d) x
    (d, Lp) product per prefix (columns past the prefix's length are not masked here)."""
    pk, group, parent, slot = cache["pk"], cache["group"], cache["parent"], cache["slot"]
    R, H, k, d = q.shape
    P, m = group.shape
    q_ext = torch.cat([q, q.new_zeros(1, H, k, d)])
    qg = q_ext[group].permute(0, 2, 1, 3, 4).reshape(P, H, m * k, d)
    sg = torch.matmul(qg, pk.transpose(-1, -2)).view(P, H, m, k, pk.size(2))
    return sg[parent.clamp(min=0), :, slot]  # (R, H, k, Lp)


def prefix_mix(cache: Cache, probs: torch.Tensor) -> torch.Tensor:
    """probs (R, H, k, Lp) over each row's prefix positions -> (R, H, k, d), the prefix values mixed,
    one (m k, Lp) x (Lp, d) product per prefix."""
    pv, group, parent, slot = cache["pv"], cache["group"], cache["parent"], cache["slot"]
    R, H, k, L = probs.shape
    P, m = group.shape
    has = parent >= 0
    pg = torch.cat([probs, probs.new_zeros(1, H, k, L)])[group]  # (P, m, H, k, L)
    mixed = torch.matmul(pg.permute(0, 2, 1, 3, 4).reshape(P, H, m * k, L), pv).view(P, H, m, k, pv.size(3))
    out = mixed[parent.clamp(min=0), :, slot]
    return out * has[:, None, None, None].to(out.dtype)


# ---------------------------------------------------------------------- reordering

def _groups(parent: torch.Tensor, n_prefixes: int):
    """(group (P, m) rows per prefix padded with R, slot (R,)) for ``parent`` (R,) (-1: no prefix; slot 0)."""
    R = len(parent)
    has = parent >= 0
    key = torch.where(has, parent, torch.full_like(parent, n_prefixes))
    order = torch.sort(key, stable=True).indices
    counts = torch.bincount(key, minlength=n_prefixes + 1)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty_like(parent)
    slot[order] = torch.arange(R, device=parent.device) - starts[key[order]]
    slot = slot.masked_fill(~has, 0)  # a row without a prefix reads column 0 of prefix 0 (masked): never past m
    m = int(counts[:n_prefixes].max()) if n_prefixes else 0
    group = torch.full((n_prefixes, max(m, 1)), R, dtype=torch.long, device=parent.device)
    group[parent[has], slot[has]] = torch.arange(R, device=parent.device)[has]
    return group, slot


def reorder(cache: Cache, new_order: torch.Tensor) -> Cache:
    """The cache for batch rows ``new_order`` (may repeat or drop rows; a repeat shares the row's
    positions, module docstring)."""
    if "k" not in cache:
        return dict(cache)
    R_old, n = rows_and_length(cache)
    rows = len(new_order)
    if not is_shared(cache):
        if rows <= R_old and bool((new_order == torch.arange(rows, device=new_order.device)).all()):
            return {**cache, "k": cache["k"][:rows], "v": cache["v"][:rows]}  # the first rows, kept: views, no copy
        if rows > R_old and bool((new_order[:R_old] == torch.arange(R_old, device=new_order.device)).all()):
            return _append_rows(cache, new_order[R_old:], R_old, n)  # every row kept, copies of some appended
        branching = torch.bincount(new_order, minlength=R_old)[new_order] > 1
        if n < SHARE_FROM or not bool(branching.any()):
            out = {name: t for name, t in cache.items() if name == "r"}
            for name in ("k", "v"):
                out[name], out[f"{name}_buf"], out[f"{name}_spare"] = _gather_rows(cache, name, new_order, 0, n)
            return out
        cache = {**cache, "parent": torch.full((R_old,), -1, dtype=torch.long, device=new_order.device),
                 "plen": torch.zeros(0, dtype=torch.long, device=new_order.device),
                 "pk": cache["k"][:0, :, :0], "pv": cache["v"][:0, :, :0]}  # plain -> shared: no prefix yet
    else:
        branching = torch.bincount(new_order, minlength=R_old)[new_order] > 1
    return _reorder_shared(cache, new_order, branching, n)


def _append_rows(cache: Cache, extra: torch.Tensor, R: int, n: int) -> Cache:
    """A plain cache whose rows all stay in place, with copies of rows ``extra`` after them (the structure search's
    shared prefixes: a sentence takes the rows of one that began alike, ``structure.search.shared_forks``): only
    the copies are written, into the live buffer when it has room for them, else into a new one with room for
    :data:`~sipe_fairseq.structure.memory.SHARED_ROW_GROWTH` x its rows (``_room``)."""
    out = dict(cache)
    rows = R + len(extra)
    for name in ("k", "v"):
        live, _ = _buffers(cache, name)
        cur = cache[name]
        buf = _room(live, cur, rows, n + 1)  # room for the next position too
        if buf is not live:  # grown: the kept rows are copied once
            buf[:R, :, :n] = cur
            out[f"{name}_spare"] = None
        torch.index_select(cur, 0, extra, out=buf[R:rows, :, :n])
        out[name], out[f"{name}_buf"] = buf[:rows, :, :n], buf
    return out


def _reorder_shared(cache: Cache, new_order: torch.Tensor, branching: torch.Tensor, n: int) -> Cache:
    parent, plen = cache["parent"], cache["plen"]
    start = prefix_lengths(cache)  # each row's first own position
    dev = new_order.device
    if bool(branching.any()):  # the prefixes are rewritten anyway: a row with many own positions gets one too
        branching = branching | (n - start[new_order] > OWN_LIMIT)
    single = ~branching
    new_parent = torch.full((len(new_order),), -1, dtype=torch.long, device=dev)
    out = {name: t for name, t in cache.items() if name == "r"}
    made = torch.unique(new_order[branching])  # rows whose positions become a shared prefix of length n
    old = parent[new_order[single]]
    kept = torch.unique(old[old >= 0])  # prefixes still referenced by rows that do not branch
    if len(made) or len(kept) < len(plen):
        width = n if len(made) else (int(plen[kept].max()) if len(kept) else 0)
        for name, pname in (("k", "pk"), ("v", "pv")):
            pbuf, own = cache[pname], cache[name]
            spare = cache.get(f"{pname}_spare")  # double-buffered as the own positions (stale values: finite)
            spare = _room(spare, cache.get(f"{name}_buf", own), len(kept) + len(made), width, zeros=True)
            store = spare[: len(kept) + len(made), :, :width]
            w0 = min(width, pbuf.size(2))
            if len(kept) and w0:
                torch.index_select(pbuf[:, :, :w0], 0, kept, out=store[: len(kept), :, :w0])
            if len(made):
                fresh = store[len(kept):]
                src_parent = parent[made]
                if bool((src_parent >= 0).any()) and w0:
                    torch.index_select(pbuf[:, :, :w0], 0, src_parent.clamp(min=0), out=fresh[:, :, :w0])
                first = start[made]
                lo = int(first.min())
                cols = torch.arange(lo, n, device=dev)
                mine = (cols[None, :] >= first[:, None])[:, None, :, None]  # (M, 1, n - lo, 1)
                fresh[:, :, lo:n] = torch.where(mine, own[made, :, lo:n], fresh[:, :, lo:n])
            out[pname], out[f"{pname}_spare"], out[f"{pname}_buf"] = store, cache.get(f"{pname}_buf"), spare
        new_plen = torch.cat([plen[kept], torch.full((len(made),), n, dtype=torch.long, device=dev)])
        remap = torch.full((max(len(plen), 1),), -1, dtype=torch.long, device=dev)
        remap[kept] = torch.arange(len(kept), device=dev)
        new_parent[single] = torch.where(old >= 0, remap[old.clamp(min=0)], old)
        new_parent[branching] = len(kept) + torch.searchsorted(made, new_order[branching])
    else:
        for name in ("pk", "pv", "pk_buf", "pv_buf", "pk_spare", "pv_spare"):
            if name in cache:
                out[name] = cache[name]
        new_plen = plen
        new_parent[single] = old
    # own positions: only columns lo .. n-1 are gathered (a branching row's child has none)
    new_start = _starts(new_parent, new_plen)
    lo = int(new_start.min()) if len(new_start) else n
    for name in ("k", "v"):
        out[name], out[f"{name}_buf"], out[f"{name}_spare"] = _gather_rows(cache, name, new_order, lo, n)
    out.update(parent=new_parent, plen=new_plen, start=new_start, lo=lo)  # start, lo: read by every layer's step
    out["group"], out["slot"] = _groups(new_parent, len(new_plen))
    return out
