#!/usr/bin/env python3
"""Put the public BLiMP paradigms and SyntaxGym test suites into a folder of yours (outside the repository).

    python scripts/get_suites.py DEST                      # download both (pinned commits, from GitHub)
    python scripts/get_suites.py DEST --blimp-from CHECKOUT --syntaxgym-from CHECKOUT   # copy from local checkouts

Writes ``DEST/blimp/*.jsonl`` (the 67 paradigms of alexwarstadt/blimp, ``data/``, 1,000 pairs each) and
``DEST/syntaxgym/*.json`` (the 34 suites of cpllab/syntactic-generalization, ``test_suites/json``) and prints
one line per collection: files, items and the sha256 of the collection (the files' hashes in name order), so
that two machines can tell they evaluate the same data. Every collection asked for is checked before anything
is written: the published file count, every BLiMP line a JSON pair (``sentence_good``, ``sentence_bad``) and
1,000 pairs in every paradigm, every suite a JSON object with items. A collection is written into a temporary
folder next to its destination and renamed into place (an old copy is replaced only by a complete new one), so
a refusal, a failed write or Ctrl-C leaves no partial destination. A CHECKOUT is a
clone of the repository (a working tree, or a bare repository / mirror, read with ``git archive``) or a
folder that already holds the files. Nothing is written inside this repository: the data keeps its
licences (BLiMP: CC BY; SyntaxGym suites: MIT) and is not committed.

Use the folders with ``sipe-eval blimp --blimp DEST/blimp`` and ``sipe-eval syntaxgym --suites
DEST/syntaxgym`` (``examples/ewt/section5.sh``: ``SUITES=DEST``). Exit status: 0 ok; 1 a download or copy
failed, or a collection is refused (a corrupt file, a truncated copy, not the published counts: one line naming
the file; nothing is written); 2 usage; 130 interrupted.
"""
import argparse
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fetchlib
from fetchlib import digest, git_dir, github_tarball, inside_repository, install  # noqa: E402

# (repository, commit, folder inside it, file suffix, expected file count)
COLLECTIONS = {
    "blimp": ("alexwarstadt/blimp", "3e56b06fcabca9b30822fc66435fca6b1aa40bb1", "data", ".jsonl", 67),
    "syntaxgym": ("cpllab/syntactic-generalization", "43f1f86b746254406dafc89bd17b9d4976607ef6", "test_suites/json", ".json", 34),
}
PAIRS_PER_PARADIGM = 1000  # every BLiMP paradigm (67 x 1,000 = 67,000 pairs)


class CollectionError(Exception):
    """A collection that is refused before it is written: one line naming the file."""


def _files_from_dir(root: Path, folder: str, suffix: str) -> dict:
    where = root / folder if (root / folder).is_dir() else root
    return {p.name: p.read_bytes() for p in sorted(where.glob(f"*{suffix}"))}


def _files_from_git(repo: Path, folder: str, suffix: str) -> dict:
    """The files of ``folder`` at HEAD of a (possibly bare) git repository."""
    out = subprocess.run(["git", "--git-dir", str(repo), "archive", "HEAD", folder], capture_output=True)
    if out.returncode != 0:
        raise RuntimeError(f"git archive in {repo}: {out.stderr.decode(errors='replace').strip()}")
    return _members(tarfile.open(fileobj=io.BytesIO(out.stdout)), folder, suffix)


def _members(tar: tarfile.TarFile, folder: str, suffix: str) -> dict:
    files = {}
    for m in tar.getmembers():
        parts = m.name.split("/")
        if m.isfile() and m.name.endswith(suffix) and "/".join(parts[-1 - len(folder.split("/")):-1]) == folder:
            files[parts[-1]] = tar.extractfile(m).read()
    return files


def collect(name: str, source):
    repo, commit, folder, suffix, _ = COLLECTIONS[name]
    if source is not None:
        path = Path(source)
        if not path.exists():
            raise RuntimeError(f"--{name}-from {source}: no such directory")
        files = _files_from_dir(path, folder, suffix)
        gdir = git_dir(path) if not files else None
        if gdir is not None:
            files = _files_from_git(gdir, folder, suffix)
        return files, str(path)
    tar, url = github_tarball(repo, commit, timeout=120)
    return _members(tar, folder, suffix), url


def check_collection(name: str, files: dict, origin: str) -> int:
    """The collection's item count (BLiMP pairs, SyntaxGym suite items) once every file is checked (module
    docstring); :class:`CollectionError` naming the first file (and line) that is not as published."""
    expected = COLLECTIONS[name][4]
    if len(files) != expected:
        raise CollectionError(f"{name} from {origin}: {len(files)} files, expected {expected}")
    check = _paradigm_pairs if name == "blimp" else _suite_items
    return sum(check(files[fname], f"{name} from {origin}: {fname}") for fname in sorted(files))


def _text(content: bytes, where: str) -> str:
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CollectionError(f"{where}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _paradigm_pairs(content: bytes, where: str) -> int:
    pairs = 0
    for lineno, line in enumerate(_text(content, where).splitlines(), 1):
        if not line.strip():
            continue
        try:
            pair = json.loads(line)
        except json.JSONDecodeError as e:
            raise CollectionError(f"{where}:{lineno}: not a JSON line ({e.msg}): a corrupt copy") from None
        if not (isinstance(pair, dict) and all(isinstance(pair.get(k), str) for k in ("sentence_good", "sentence_bad"))):
            raise CollectionError(f"{where}:{lineno}: not a BLiMP pair (sentence_good and sentence_bad strings)")
        pairs += 1
    if pairs != PAIRS_PER_PARADIGM:
        raise CollectionError(f"{where}: {pairs} pairs, expected {PAIRS_PER_PARADIGM}: a truncated or altered copy")
    return pairs


def _suite_items(content: bytes, where: str) -> int:
    try:
        suite = json.loads(_text(content, where))
    except json.JSONDecodeError as e:
        raise CollectionError(f"{where}: not JSON ({e.msg} at line {e.lineno}): a corrupt or truncated copy") from None
    items = suite.get("items") if isinstance(suite, dict) else None
    if not (isinstance(items, list) and items and all(isinstance(item, dict) for item in items)):
        raise CollectionError(f"{where}: not a SyntaxGym suite (an object whose items are a non-empty list)")
    return len(items)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", help="folder to write blimp/ and syntaxgym/ into (created; outside this repository)")
    p.add_argument("--blimp-from", metavar="CHECKOUT", help="a local clone of alexwarstadt/blimp (or its data/ folder)")
    p.add_argument("--syntaxgym-from", metavar="CHECKOUT",
                   help="a local clone of cpllab/syntactic-generalization (or its test_suites/json folder)")
    p.add_argument("--only", choices=sorted(COLLECTIONS), help="fetch one collection only")
    args = p.parse_args(argv)
    dest = Path(args.dest).resolve()
    if inside_repository(dest, "get_suites"):
        return 2
    try:
        checked, status = check_all([args.only] if args.only else sorted(COLLECTIONS), args)
        if status:
            return status  # nothing written
        for name, (files, items) in checked.items():
            out = install(dest / name, files)
            print(f"{name}: {len(files)} files, {items} items, sha256 {digest(files)[:16]} -> {out}")
    except OSError as e:
        print(f"get_suites: {e.filename or dest}: {e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("get_suites: interrupted", file=sys.stderr)
        return 130
    return 0


def check_all(names, args):
    """``({name: (files, items)}, status)``: every collection fetched and checked before any is written; a failed
    download or copy and a refused collection are one line each on stderr and status 1."""
    checked, status = {}, 0
    for name in names:
        try:
            files, origin = collect(name, getattr(args, f"{name}_from"))
            checked[name] = files, check_collection(name, files, origin)
        except CollectionError as e:
            print(f"get_suites: {e}", file=sys.stderr)
            status = 1
        except Exception as e:  # noqa: BLE001  one line for a failed download or copy
            print(f"get_suites: {name}: {e}", file=sys.stderr)
            status = 1
    return checked, status


if __name__ == "__main__":
    sys.exit(main())
