"""The KV cache of one attention layer for incremental decoding: a dict the decoder keeps per layer
(``SiPEAttention._cached_forward`` reads it, :func:`reorder` follows the batch rows).

Plain (one decoding, or rows that never repeat): ``k``, ``v`` (R, H, S, d), every row's keys and values
for positions 0 .. S-1, as views of preallocated buffers (``{k,v}_buf``, with a ``{k,v}_spare`` of the
same size that a reorder gathers into): appending writes the new positions only.

Shared prefixes (after a reorder that repeats rows, i.e. a beam's hypotheses branching): the children
of one row share its keys and values instead of a copy each, and their attention over the shared part
is one matrix product per prefix (:func:`prefix_scores`, :func:`prefix_mix`) instead of one vector
product per child. The dict then holds

* ``pk``, ``pv`` (P, H, Lp, d): the shared prefixes; prefix ``p`` is valid for its first ``plen[p]``
  positions;
* ``k``, ``v`` (R, H, F, d): each row's own positions after its prefix, valid for its first
  ``n - plen[parent]`` columns (``flen``); ``parent`` (R,) its prefix (-1: none);
* ``group`` (P, m): the rows that share prefix ``p`` (padded with R), ``slot`` (R,) a row's column there;
* ``n``: the positions every row has (all rows advance together).

A branching reorder writes each repeated row's prefix + own positions once, as a new prefix of length
``n`` (the kept prefixes are gathered beside it), so a beam copies about K rows per word instead of
every child. The numbers are those of the plain cache (tests/test_incremental.py).
"""
from typing import Dict, Tuple

import torch

Cache = Dict[str, object]


def is_shared(cache: Cache) -> bool:
    return "parent" in cache


def rows_and_length(cache: Cache) -> Tuple[int, int]:
    """(rows, cached positions) of a layer's cache; (0, 0) when nothing is cached yet."""
    if is_shared(cache):
        return len(cache["parent"]), int(cache["n"])
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


_OWN_MIN = 4  # the least room a shared cache's own positions are given (a beam's rows hold a word's worth)
# a row with more own positions becomes a prefix (of one child) when the prefixes are rewritten: every reorder
# copies the own positions of every row, so they are kept short
OWN_LIMIT = 8


def _room(buf, like, rows: int, length: int, least: int = 64):
    """``buf`` if it holds ``rows`` x ``length`` positions (in ``like``'s dtype), else a new buffer shaped
    like ``like`` with room to grow: as many positions as ``like`` has if that is enough, else doubled
    (at least ``length``, 64); rows as asked or as ``buf`` had. The KV cache is written in place, never
    re-concatenated."""
    if buf is not None and buf.size(0) >= rows and buf.size(2) >= length and buf.dtype == like.dtype:
        return buf
    have = like.size(2)
    positions = have if have >= length else max(length, 2 * have, least)
    # zeros: a shared cache mixes values past a row's length with probability 0 (0 * garbage could be nan)
    return like.new_zeros(max(rows, buf.size(0) if buf is not None else 0), like.size(1), positions, like.size(3))


def _append_plain(cache: Cache, k_new: torch.Tensor, v_new: torch.Tensor):
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


def _gather_rows(cache: Cache, name: str, order: torch.Tensor, width: int, least: int = 64
                 ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows ``order`` of ``cache[name]`` (first ``width`` positions) written into the spare buffer:
    (view, the new live buffer, the new spare)."""
    live, spare = _buffers(cache, name)
    if live is None:
        live = cache[name]
    spare = _room(spare, live, len(order), width, least)
    view = spare[: len(order), :, :width]
    torch.index_select(cache[name][:, :, :width], 0, order, out=view)
    return view, spare, live


# ---------------------------------------------------------------------- appending

def append(cache: Cache, k_new: torch.Tensor, v_new: torch.Tensor):
    """Write the new positions' keys and values (R, H, k, d). Plain: returns (keys, values) of all the
    positions (R, H, S+k, d). Shared: returns (own keys, own values) (R, H, F, d), valid for the first
    ``flen`` columns of each row (:func:`own_lengths`)."""
    if not is_shared(cache):
        return _append_plain(cache, k_new, v_new)
    k = k_new.size(2)
    flen = own_lengths(cache)  # before this step
    width = int(flen.max()) + k if len(flen) else k
    rows = torch.arange(len(flen), device=k_new.device)[:, None].expand(-1, k)
    cols = flen.to(k_new.device)[:, None] + torch.arange(k, device=k_new.device)
    out = []
    for name, new in (("k", k_new), ("v", v_new)):
        cur = cache[name]
        live, _ = _buffers(cache, name)
        if live is None or live.size(2) < width or live.size(0) < cur.size(0):
            live = _room(None, cur, cur.size(0), width, _OWN_MIN)
            live[: cur.size(0), :, : cur.size(2)] = cur
            cache[f"{name}_spare"] = None
        live[rows, :, cols] = new.permute(0, 2, 1, 3)  # (R, k, H, d) at row r, columns flen[r] ..
        cache[name], cache[f"{name}_buf"] = live[: cur.size(0), :, :width], live
        out.append(cache[name])
    cache["n"] = int(cache["n"]) + k
    return out


def own_lengths(cache: Cache) -> torch.Tensor:
    """(R,) the positions each row holds after its shared prefix."""
    parent = cache["parent"]
    plen = cache["plen"]
    pre = torch.where(parent >= 0, plen[parent.clamp(min=0)], torch.zeros_like(parent)) if len(plen) else torch.zeros_like(parent)
    return int(cache["n"]) - pre


def prefix_lengths(cache: Cache) -> torch.Tensor:
    """(R,) the shared prefix length of each row (0: none)."""
    return int(cache["n"]) - own_lengths(cache)


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
    pg = probs.new_zeros(P, m, H, k, L)
    pg[parent[has], slot[has]] = probs[has]
    mixed = torch.matmul(pg.permute(0, 2, 1, 3, 4).reshape(P, H, m * k, L), pv).view(P, H, m, k, pv.size(3))
    out = mixed[parent.clamp(min=0), :, slot]
    return out * has[:, None, None, None].to(out.dtype)


# ---------------------------------------------------------------------- reordering

def _groups(parent: torch.Tensor, n_prefixes: int):
    """(group (P, m) rows per prefix padded with R, slot (R,)) for ``parent`` (R,) (-1: no prefix)."""
    R = len(parent)
    has = parent >= 0
    key = torch.where(has, parent, torch.full_like(parent, n_prefixes))
    order = torch.sort(key, stable=True).indices
    counts = torch.bincount(key, minlength=n_prefixes + 1)
    starts = torch.cumsum(counts, 0) - counts
    slot = torch.empty_like(parent)
    slot[order] = torch.arange(R, device=parent.device) - starts[key[order]]
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
    counts = torch.bincount(new_order, minlength=R_old)
    branching = counts[new_order] > 1
    if not is_shared(cache):
        if rows <= R_old and bool((new_order == torch.arange(rows, device=new_order.device)).all()):
            return {**cache, "k": cache["k"][:rows], "v": cache["v"][:rows]}  # the first rows, kept: views, no copy
        if not bool(branching.any()) or n == 0:
            out = {name: t for name, t in cache.items() if name == "r"}
            for name in ("k", "v"):
                out[name], out[f"{name}_buf"], out[f"{name}_spare"] = _gather_rows(cache, name, new_order, n)
            return out
        # plain -> shared: every row's positions are its own (no prefix yet)
        cache = {**cache, "parent": torch.full((R_old,), -1, dtype=torch.long, device=new_order.device),
                 "plen": torch.zeros(0, dtype=torch.long, device=new_order.device), "n": n,
                 "pk": cache["k"][:0, :, :0], "pv": cache["v"][:0, :, :0]}
    return _reorder_shared(cache, new_order, branching)


def _reorder_shared(cache: Cache, new_order: torch.Tensor, branching: torch.Tensor) -> Cache:
    n = int(cache["n"])
    parent, plen = cache["parent"], cache["plen"]
    flen = own_lengths(cache)
    dev = new_order.device
    if bool(branching.any()):  # the prefixes are rewritten anyway: a row with many own positions gets one too
        branching = branching | (flen[new_order] > OWN_LIMIT)
    single = ~branching
    new_parent = torch.full((len(new_order),), -1, dtype=torch.long, device=dev)
    out = {name: t for name, t in cache.items() if name == "r"}
    made = torch.unique(new_order[branching])  # rows whose positions become a shared prefix of length n
    old = parent[new_order[single]]
    kept = torch.unique(old[old >= 0])  # prefixes still referenced by rows that do not branch
    if len(made) or len(kept) < len(plen):
        width = n if len(made) else (int(plen[kept].max()) if len(kept) else 0)
        for name, pname in (("k", "pk"), ("v", "pv")):
            pbuf = cache[pname]
            spare = cache.get(f"{pname}_spare")  # double-buffered as the own positions (stale values: finite)
            like = pbuf if pbuf.size(0) and pbuf.size(2) else cache[name]
            spare = _room(spare, like, len(kept) + len(made), width, _OWN_MIN)
            store = spare[: len(kept) + len(made), :, :width]
            if len(kept):
                w0 = min(width, pbuf.size(2))
                torch.index_select(pbuf[:, :, :w0], 0, kept, out=store[: len(kept), :, :w0])
            if len(made):
                src_parent = parent[made]
                has = src_parent >= 0
                if bool(has.any()) and pbuf.size(2):
                    store[len(kept):][has, :, : pbuf.size(2)] = pbuf[src_parent[has]]
                own = cache[name]
                fl = flen[made]
                if own.size(2):
                    valid = torch.arange(own.size(2), device=dev)[None, :] < fl[:, None]
                    r, f = valid.nonzero(as_tuple=True)
                    start = (n - fl)[r]
                    store[len(kept) + r, :, start + f] = own[made[r], :, f]
            out[pname], out[f"{pname}_spare"] = store, cache.get(f"{pname}_buf")
            out[f"{pname}_buf"] = spare
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
    # own positions: the rows that do not branch keep theirs; a branching row's child starts empty
    own_width = int(flen[new_order[single]].max()) if bool(single.any()) else 0
    for name in ("k", "v"):
        out[name], out[f"{name}_buf"], out[f"{name}_spare"] = _gather_rows(cache, name, new_order, own_width, _OWN_MIN)
    out.update(parent=new_parent, plen=new_plen, n=n)
    out["group"], out["slot"] = _groups(new_parent, len(new_plen))
    return out
