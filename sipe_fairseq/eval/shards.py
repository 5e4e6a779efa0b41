"""Shards across machines: which items a shard scores, what its file records, and the checks of a merge.

``--num-shards N --shard-id I`` (the names ``fairseq-generate`` uses for the same job) make a scoring command
score the items whose 0-based index ``i`` in the command's item list satisfies ``i % N == I``: a round-robin
share, so that every shard gets items of every length and of every paradigm or suite (a contiguous share would
give one shard all the long sentences of a sorted file). The items: the non-empty sentences of the split for
``sipe-eval-lm --tags`` (after ``--tags-max-sentences``), the pairs for ``sipe-eval blimp`` (after ``--every``),
the items of the suites (in suite order, then item order) for ``sipe-eval syntaxgym``, the input's sentences for
``sipe-surprisal`` (its documents with ``--documents``: a sentence keeps its context).

A shard writes, with ``--json`` (``sipe-surprisal``: ``--output``), a shard file (``format`` :data:`FORMAT`):
the per-item records a merge needs and a ``shard`` block ``{id, of, items, total, fingerprint}``. The fingerprint
says what the numbers depend on: the command, each checkpoint's name and file sha256, the data directory's
fingerprint (:func:`~sipe_fairseq.data.fingerprint.data_fingerprint`, without its path), the input files' sha256
(the split's files, the BLiMP files, the suites, a ``--trees`` file, ``sipe-surprisal``'s input) and every other
option of the command line. Paths are recorded but not compared: another machine may hold the same files
elsewhere. ``sipe-eval merge`` joins the shards (:func:`check_shards`) into the report one run would have written.
"""
import os
from typing import Dict, List, Optional, Sequence

from ..data.fingerprint import data_fingerprint
from ..data.writers import sha256_file

FORMAT = "sipe-shard/1"

# options that change no number of a report (outputs, threads, logging, the sharding itself) or whose files are
# compared by content below (checkpoints, data, inputs)
NOT_COMPARED = frozenset({"json", "markdown", "num_shards", "shard_id", "threads", "no_progress", "verbose", "run",
                          "command", "show_skipped", "path", "data", "blimp", "suites", "trees", "cache", "tag_sources",
                          "sample", "workers"})


class ShardError(ValueError):
    """Shards that cannot be scored or merged (one line: a usage error, exit status 2)."""


def check_shard(num_shards: int, shard_id: int) -> None:
    """:class:`ShardError` unless ``num_shards >= 1`` and ``0 <= shard_id < num_shards``."""
    if num_shards < 1:
        raise ShardError(f"--num-shards {num_shards}: expected an integer >= 1")
    if not 0 <= shard_id < num_shards:
        raise ShardError(f"--shard-id {shard_id}: expected 0 <= --shard-id < --num-shards ({num_shards})")


def shard_indices(count: int, num_shards: int, shard_id: int) -> List[int]:
    """The 0-based indices of ``count`` items that shard ``shard_id`` of ``num_shards`` scores: ``i % num_shards ==
    shard_id`` (round-robin; the shards of one ``num_shards`` cover every index exactly once)."""
    check_shard(num_shards, shard_id)
    return list(range(shard_id, count, num_shards))


def file_hashes(paths: Sequence[str]) -> List[List[str]]:
    """``[[basename, sha256], ...]`` of files (their contents, not where they are)."""
    return [[os.path.basename(str(p)), sha256_file(str(p))] for p in paths]


def split_hashes(data: str, split: str) -> List[List[str]]:
    """The sha256 of every file of ``split`` in a data directory (``{split}.bin``, ``.idx``, tag and arc streams)."""
    names = sorted(n for n in os.listdir(data) if n.startswith(f"{split}.") and os.path.isfile(os.path.join(data, n)))
    return file_hashes([os.path.join(data, n) for n in names])


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def fingerprint(command: str, args, checkpoints: Dict[str, str], data: str, inputs: Sequence[str] = (),
                split: Optional[str] = None) -> dict:
    """What a shard's numbers depend on (module docstring). ``args``: the command's parsed options;
    ``checkpoints``: name -> path; ``inputs``: the input files compared by content (with ``split``: the split's
    files of ``data`` too)."""
    data_fp = dict(data_fingerprint(data) or {})
    data_fp.pop("data", None)
    trees = getattr(args, "trees", None)
    return {"command": command,
            "checkpoints": {name: {"path": str(path), "sha256": sha256_file(str(path))} for name, path in checkpoints.items()},
            "data": data_fp,
            "inputs": file_hashes(list(inputs) + ([trees] if trees else [])) + (split_hashes(data, split) if split else []),
            "options": {k: _plain(v) for k, v in sorted(vars(args).items()) if k not in NOT_COMPARED and not callable(v)}}


def shard_block(shard_id: int, num_shards: int, items: int, total: int, fp: dict) -> dict:
    return {"id": shard_id, "of": num_shards, "items": items, "total": total, "fingerprint": fp}


def _compared(fp: dict) -> dict:
    """The parts of a fingerprint a merge compares (paths left out)."""
    return {**fp, "checkpoints": {n: c.get("sha256") for n, c in (fp.get("checkpoints") or {}).items()}}


def check_shards(shards: Sequence[dict], names: Sequence[str]) -> None:
    """:class:`ShardError` (one line) unless ``shards`` (parsed shard files, named by ``names``) are every shard of
    one run exactly once: one format and command, one ``of``, ids ``0..of-1`` each once, item counts that add up to
    the total and match the share rule, and equal fingerprints (checkpoints, data, sources, options, inputs)."""
    if not shards:
        raise ShardError("no shard file given")
    for shard, name in zip(shards, names):
        if not isinstance(shard, dict) or shard.get("format") != FORMAT or not isinstance(shard.get("shard"), dict):
            raise ShardError(f"{name}: not a shard file (no format {FORMAT!r}: written by a command run with "
                             "--num-shards and --json)")
    first, first_name = shards[0]["shard"], names[0]
    for shard, name in zip(shards[1:], names[1:]):
        block = shard["shard"]
        if block.get("of") != first.get("of"):
            raise ShardError(f"{name}: shard of {block.get('of')}, {first_name}: of {first.get('of')} (one --num-shards)")
        a, b = _compared(first["fingerprint"]), _compared(block["fingerprint"])
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                what = _first_difference(a.get(key), b.get(key))
                raise ShardError(f"{name} and {first_name} come from different runs: their {key} differ{what}")
        if block.get("total") != first.get("total"):
            raise ShardError(f"{name}: {block.get('total')} items in all, {first_name}: {first.get('total')}")
    of, total = first["of"], first["total"]
    seen: Dict[int, str] = {}
    for shard, name in zip(shards, names):
        block = shard["shard"]
        sid = block.get("id")
        if sid in seen:
            raise ShardError(f"{name}: shard {sid} of {of} overlaps {seen[sid]} (the same shard given twice)")
        seen[sid] = name
        expected = len(range(sid, total, of)) if isinstance(sid, int) and 0 <= sid < of else None
        if expected is None or block.get("items") != expected:
            raise ShardError(f"{name}: shard {sid} of {of} holds {block.get('items')} items, the share of {total} items "
                             f"is {expected}")
    missing = [i for i in range(of) if i not in seen]
    if missing:
        raise ShardError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {of} missing: "
                         f"{len(missing)} share{'s' if len(missing) > 1 else ''} of the {total} items left out")
    if sum(s["shard"]["items"] for s in shards) != total:  # cannot happen after the checks above; said if it does
        raise ShardError(f"the shards hold {sum(s['shard']['items'] for s in shards)} items, the run {total}")


def _first_difference(a, b, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
    return f" ({where}: {a!r} vs {b!r})" if where else f" ({a!r} vs {b!r})"


def in_order(shards: Sequence[dict]) -> List[dict]:
    """The shards sorted by id."""
    return sorted(shards, key=lambda s: s["shard"]["id"])


def interleave(per_shard: Sequence[Sequence], num_shards: int) -> list:
    """The items of every shard back in the run's order: item ``k`` of shard ``I`` is index ``k * N + I``.
    ``per_shard``: the shards' item lists by shard id."""
    total = sum(len(items) for items in per_shard)
    out = [None] * total
    for sid, items in enumerate(per_shard):
        for k, item in enumerate(items):
            out[k * num_shards + sid] = item
    return out


def sum_counts(parts: Sequence[dict]) -> dict:
    """A parser's counts (``tree_source``) of a run from its shards': integers summed (cache hits and misses, root
    fixes: each shard's own work), anything else the first shard's (the parser's spec, the cache's path)."""
    out = dict(parts[0])
    for key, value in out.items():
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = sum(p.get(key, 0) for p in parts)
    return out
