#!/usr/bin/env python3
"""Put the UD English GUM CoNLL-U files that examples/scale needs into a folder of yours (outside the repository).

    python scripts/get_gum.py DEST                    # download (the pinned commit, from GitHub)
    python scripts/get_gum.py DEST --from CHECKOUT    # copy from a local clone, a bare mirror or a folder

Writes ``DEST/en_gum-ud-{train,dev,test}.conllu`` and prints one line per file: documents, sentences, words
(UD tokens) and a sha256. Where the release's train file is empty or missing (a mirror that leaves out large
files), it is rebuilt from ``not-to-release/sources/GUM_*.conllu``: every document whose name is not a
``# newdoc id`` of the dev or test file, in name order (GUM's Reddit documents are not in the UD release and
are not added). At the pinned commit the counts must be the published ones (train 178 documents, 10,330
sentences, 178,797 words; dev and test 30 documents each, 1,575 / 28,119 and 1,464 / 28,397); from another
commit they are printed, not checked. A CHECKOUT is a clone (a working tree, or a bare repository or mirror,
read with git) or a folder holding the files (and ``not-to-release/sources``). Nothing is written inside this
repository; the data keeps its licence.

Use the folder as ``GUM_DIR=DEST bash examples/scale/prepare.sh``. Exit status: 0 ok, 1 a download or copy
failed or the counts are not the published ones, 2 usage.
"""
import argparse
import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fetchlib
from fetchlib import git_dir, github_tarball, inside_repository  # noqa: E402

REPO = "UniversalDependencies/UD_English-GUM"
COMMIT = "afb41ee9bca57991125814fa04d96a0e61470c8b"
SPLITS = ("train", "dev", "test")
SOURCES = "not-to-release/sources"
# (documents, sentences, words) of each split at COMMIT
PUBLISHED = {"train": (178, 10330, 178797), "dev": (30, 1575, 28119), "test": (30, 1464, 28397)}


def _name(split: str) -> str:
    return f"en_gum-ud-{split}.conllu"


RELEASE = frozenset(_name(s) for s in SPLITS)


def _wanted(path: str) -> bool:
    """A release file or a source document (a path inside the repository)."""
    return path in RELEASE or (path.startswith(SOURCES + "/GUM_") and path.endswith(".conllu"))


def _tar_files(tar: tarfile.TarFile) -> dict:
    """Release files and sources of a tar of the repository (top folder stripped), by repository path."""
    files = {}
    for m in tar.getmembers():
        path = m.name.split("/", 1)[1] if m.name.split("/", 1)[0].startswith("UD_English-GUM") else m.name
        if m.isfile() and _wanted(path):
            files[path] = tar.extractfile(m).read()
    return files


def _from_git(git_dir: Path):
    """The files at HEAD of a (possibly bare) repository; a blob the copy lacks (a mirror that leaves out large
    files) is left out, as if the file were missing."""
    git = ["git", "--git-dir", str(git_dir)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    ls = subprocess.run([*git, "ls-tree", "-r", "--name-only", "HEAD", "--", *(_name(s) for s in SPLITS), SOURCES],
                        capture_output=True, text=True)
    if head.returncode != 0 or ls.returncode != 0:
        raise RuntimeError(f"git in {git_dir}: {(head.stderr or ls.stderr).strip()}")
    paths = [p for p in ls.stdout.splitlines() if _wanted(p)]
    batch = subprocess.run([*git, "cat-file", "--batch"], input="".join(f"HEAD:{p}\n" for p in paths).encode(),
                           capture_output=True, check=True).stdout
    files, pos = {}, 0
    for path in paths:
        eol = batch.index(b"\n", pos)
        header = batch[pos:eol].split()
        if header[-1] == b"missing":
            pos = eol + 1
            continue
        size = int(header[2])
        files[path] = batch[eol + 1:eol + 1 + size]
        pos = eol + 1 + size + 1
    return files, head.stdout.strip()


def collect(source):
    """(files by repository path, commit or None, origin)."""
    if source is None:
        tar, url = github_tarball(REPO, COMMIT, timeout=300)
        return _tar_files(tar), COMMIT, url
    path = Path(source)
    if not path.is_dir():
        raise RuntimeError(f"--from {source}: no such directory")
    repo = git_dir(path)
    if repo is not None:
        files, commit = _from_git(repo)
        return files, commit, str(path)
    files = {_name(s): (path / _name(s)).read_bytes() for s in SPLITS if (path / _name(s)).is_file()}
    files.update({f"{SOURCES}/{p.name}": p.read_bytes() for p in sorted((path / SOURCES).glob("GUM_*.conllu"))})
    return files, None, str(path)


def doc_ids(content: bytes) -> list:
    return [line.split("=", 1)[1].strip() for line in content.decode("utf-8").splitlines()
            if line.startswith("# newdoc id")]


def rebuild_train(files: dict):
    """The train file from the sources: every document not held out in dev or test, in name order."""
    held = set(doc_ids(files.get(_name("dev"), b""))) | set(doc_ids(files.get(_name("test"), b"")))
    if not held:
        raise RuntimeError("the train file is missing or empty and there is no dev/test file to tell held-out documents")
    docs = sorted(p for p in files if p.startswith(SOURCES + "/") and Path(p).stem not in held)
    if not docs:
        raise RuntimeError(f"the train file is missing or empty and {SOURCES}/GUM_*.conllu holds no training document")
    parts = [files[p] if files[p].endswith(b"\n") else files[p] + b"\n" for p in docs]
    return b"".join(parts), len(docs)


def counts(content: bytes):
    lines = content.decode("utf-8").splitlines()
    sentences = sum(1 for line in lines if not line.strip())
    words = sum(1 for line in lines if line.split("\t", 1)[0].isdigit())
    return sentences, words


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", help="folder to write the three CoNLL-U files into (created; outside this repository)")
    p.add_argument("--from", dest="source", metavar="CHECKOUT",
                   help=f"a local clone or bare mirror of {REPO}, or a folder holding the files (default: download)")
    args = p.parse_args(argv)
    dest = Path(args.dest).resolve()
    if inside_repository(dest, "get_gum"):
        return 2
    try:
        files, commit, origin = collect(args.source)
        for split in ("dev", "test"):
            if not files.get(_name(split)):
                raise RuntimeError(f"{_name(split)} is missing or empty")
        out = {s: files.get(_name(s), b"") for s in SPLITS}
        n_docs = {s: len(doc_ids(out[s])) for s in SPLITS}
        if not out["train"].strip():
            out["train"], n_docs["train"] = rebuild_train(files)
    except Exception as e:  # one line for a failed download or copy
        print(f"get_gum: {args.source or REPO}: {e}", file=sys.stderr)
        return 1
    status = 0
    dest.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        got = (n_docs[split], *counts(out[split]))
        want = PUBLISHED[split]
        if commit == COMMIT and any(w is not None and w != g for w, g in zip(want, got)):
            print(f"get_gum: {split} from {origin}: {got[0]} documents, {got[1]} sentences, {got[2]} words; "
                  f"published at {COMMIT[:7]}: {want[0]}, {want[1]}, {want[2]}", file=sys.stderr)
            status = 1
            continue
        (dest / _name(split)).write_bytes(out[split])
        print(f"{split}: {got[0]} documents, {got[1]} sentences, {got[2]} words, "
              f"sha256 {hashlib.sha256(out[split]).hexdigest()[:16]} -> {dest / _name(split)}")
    if commit != COMMIT:
        print(f"get_gum: {origin} is at {commit or 'an unknown commit'}, not the pinned {COMMIT[:7]}: counts not checked",
              file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
