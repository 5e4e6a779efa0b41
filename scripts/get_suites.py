#!/usr/bin/env python3
"""Put the public BLiMP paradigms and SyntaxGym test suites into a folder of yours (outside the repository).

    python scripts/get_suites.py DEST                      # download both (pinned commits, from GitHub)
    python scripts/get_suites.py DEST --blimp-from CHECKOUT --syntaxgym-from CHECKOUT   # copy from local checkouts

Writes ``DEST/blimp/*.jsonl`` (the 67 paradigms of alexwarstadt/blimp, ``data/``, 1,000 pairs each) and
``DEST/syntaxgym/*.json`` (the 34 suites of cpllab/syntactic-generalization, ``test_suites/json``), then
checks the counts and prints one line per collection: files, items and the sha256 of the collection (the
files' hashes in name order), so that two machines can tell they evaluate the same data. A CHECKOUT is a
clone of the repository (a working tree, or a bare repository / mirror, read with ``git archive``) or a
folder that already holds the files. Nothing is written inside this repository: the data keeps its
licences (BLiMP: CC BY; SyntaxGym suites: MIT) and is not committed.

Use the folders with ``sipe-eval blimp --blimp DEST/blimp`` and ``sipe-eval syntaxgym --suites
DEST/syntaxgym`` (``examples/ewt/section5.sh``: ``SUITES=DEST``). Exit status: 0 ok, 1 a download or
copy failed or the counts are not the published ones, 2 usage.
"""
import argparse
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fetchlib
from fetchlib import git_dir, github_tarball, inside_repository  # noqa: E402

# (repository, commit, folder inside it, file suffix, expected file count)
COLLECTIONS = {
    "blimp": ("alexwarstadt/blimp", "3e56b06fcabca9b30822fc66435fca6b1aa40bb1", "data", ".jsonl", 67),
    "syntaxgym": ("cpllab/syntactic-generalization", "43f1f86b746254406dafc89bd17b9d4976607ef6", "test_suites/json", ".json", 34),
}


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


def count_items(name: str, files: dict) -> int:
    if name == "blimp":
        return sum(1 for content in files.values() for line in content.decode("utf-8").splitlines() if line.strip())
    return sum(len(json.loads(content.decode("utf-8"))["items"]) for content in files.values())


def digest(files: dict) -> str:
    h = hashlib.sha256()
    for fname in sorted(files):
        h.update(fname.encode() + b"\0" + hashlib.sha256(files[fname]).digest())
    return h.hexdigest()


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
    status = 0
    for name in ([args.only] if args.only else sorted(COLLECTIONS)):
        expected = COLLECTIONS[name][4]
        try:
            files, origin = collect(name, getattr(args, f"{name}_from"))
        except Exception as e:  # one line for a failed download or copy
            print(f"get_suites: {name}: {e}", file=sys.stderr)
            status = 1
            continue
        if len(files) != expected:
            print(f"get_suites: {name} from {origin}: {len(files)} files, expected {expected}", file=sys.stderr)
            status = 1
            continue
        out = dest / name
        with tempfile.TemporaryDirectory(dir=dest.parent if dest.parent.exists() else None) as tmp:
            for fname, content in files.items():
                (Path(tmp) / fname).write_bytes(content)
            if out.exists():
                shutil.rmtree(out)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(tmp, out)
        print(f"{name}: {len(files)} files, {count_items(name, files)} items, sha256 {digest(files)[:16]} -> {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
