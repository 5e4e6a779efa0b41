#!/usr/bin/env python3
"""Put the Natural Stories reading-time corpus that ``sipe-eval reading-times`` reads into a folder of yours.

    python scripts/get_naturalstories.py DEST                    # download (the pinned commit, from GitHub)
    python scripts/get_naturalstories.py DEST --from CHECKOUT    # copy from a local clone, a bare mirror or a folder

Writes, in the repository's layout, ``DEST/naturalstories_RTS/processed_wordinfo.tsv`` (the per-word mean
reading times), ``DEST/parses/ud/stories-aligned.conllx`` (the stories' UD parses, every token tagged with
its word's ``TokenId``) and ``DEST/LICENSE.txt`` (CC BY-NC-SA 4.0), copied file by file (a mirror may lack the
per-reader ``processed_RTs.tsv`` and the batch files, which are not needed: ``git archive`` of such a mirror
stops, one file at a time does not). It prints one line per file with its counts and sha256, and the sha256
of the whole corpus (the files' hashes in path order), so that two machines can tell they evaluate the same
data. Everything is checked before anything is written: at the pinned commit the published counts (10
stories, 10,256 words with reading times, 485 sentences, 11,729 parsed tokens), at any commit that every
parsed token names a word with a reading time and that every such word lies in exactly one sentence, in
order. DEST is written as a temporary folder next to it and renamed into place (an old copy is replaced only
by a complete new one), so a refusal, a failed write or Ctrl-C leaves no partial destination. A CHECKOUT is a
clone of languageMIT/naturalstories (a working tree, or a bare repository or mirror, read with git at the
pinned commit when it holds it, else at HEAD) or a folder holding the files. Nothing is written inside this
repository: the corpus keeps its licence and is not committed.

Exit status: 0 ok; 1 a download or copy failed, or the corpus is refused (one line naming the file and
line; nothing is written); 2 usage (a destination inside this repository); 130 interrupted.
"""
import argparse
import hashlib
import subprocess
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # fetchlib
from fetchlib import digest, git_dir, inside_repository, install  # noqa: E402

REPO = "languageMIT/naturalstories"
COMMIT = "4700daad696e942f5aba23c957a7423d0de66612"  # 2025-05: the SPR times realigned by one position
WORDINFO = "naturalstories_RTS/processed_wordinfo.tsv"
PARSES = "parses/ud/stories-aligned.conllx"
LICENSE = "LICENSE.txt"
FILES = (WORDINFO, PARSES, LICENSE)
PUBLISHED = {"stories": 10, "words": 10256, "sentences": 485, "tokens": 11729}
COLUMNS = ("word", "zone", "item", "meanItemRT")


class CorpusError(Exception):
    """The corpus is refused before anything is written: one line naming the file (and line)."""


def _from_git(repo: Path):
    """(files by path, commit): at the pinned commit when the repository holds it, else at HEAD; a file the
    copy lacks is left out (the check names it)."""
    git = ["git", "--git-dir", str(repo)]
    has_pin = subprocess.run([*git, "cat-file", "-e", f"{COMMIT}^{{commit}}"], capture_output=True).returncode == 0
    rev = COMMIT if has_pin else "HEAD"
    head = subprocess.run([*git, "rev-parse", rev], capture_output=True, text=True)
    if head.returncode != 0:
        raise RuntimeError(f"git in {repo}: {head.stderr.strip()}")
    files = {}
    for path in FILES:
        out = subprocess.run([*git, "cat-file", "blob", f"{rev}:{path}"], capture_output=True)
        if out.returncode == 0:
            files[path] = out.stdout
    return files, head.stdout.strip()


def _download():
    files = {}
    for path in FILES:
        url = f"https://raw.githubusercontent.com/{REPO}/{COMMIT}/{path}"
        with urllib.request.urlopen(url, timeout=300) as r:  # noqa: S310 (a fixed https address)
            files[path] = r.read()
    return files


def collect(source):
    """(files by path, commit or None, origin)."""
    if source is None:
        return _download(), COMMIT, f"https://github.com/{REPO} at {COMMIT[:7]}"
    path = Path(source)
    if not path.is_dir():
        raise RuntimeError(f"--from {source}: no such directory")
    repo = git_dir(path)
    if repo is not None and not (path / WORDINFO).is_file():
        files, commit = _from_git(repo)
        return files, commit, str(path)
    return {p: (path / p).read_bytes() for p in FILES if (path / p).is_file()}, None, str(path)


def _text(files, path, origin) -> str:
    if path not in files:
        raise CorpusError(f"{origin}: {path} is missing")
    try:
        return files[path].decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(f"{origin}: {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _wordinfo(text: str, where: str) -> set:
    lines = text.splitlines()
    header = lines[0].split("\t") if lines else []
    if any(c not in header for c in COLUMNS):
        raise CorpusError(f"{where}:1: not a processed_wordinfo.tsv header (needs {', '.join(COLUMNS)})")
    col = {c: header.index(c) for c in COLUMNS}
    zones = set()
    for lineno, line in enumerate(lines[1:], 2):
        row = line.split("\t")
        if len(row) != len(header):
            raise CorpusError(f"{where}:{lineno}: {len(row)} fields, expected {len(header)}: a corrupt copy")
        try:
            key, _ = (int(row[col["item"]]), int(row[col["zone"]])), float(row[col["meanItemRT"]])
        except ValueError:
            raise CorpusError(f"{where}:{lineno}: item, zone or meanItemRT is not a number") from None
        if key in zones:
            raise CorpusError(f"{where}:{lineno}: story {key[0]} zone {key[1]} a second time")
        zones.add(key)
    return zones


def _parses(text: str, where: str):
    """(sentences, tokens, the zones in order of their first token, each with the sentence that holds it)."""
    sentences, tokens, order, owner, cur = 0, 0, [], {}, 0
    for lineno, line in enumerate(text.splitlines() + [""], 1):
        if not line.strip():
            sentences += cur > 0
            cur = 0
            continue
        cols = line.split("\t")
        ident = cols[9].split("=", 1)[1].split(".") if len(cols) == 10 and cols[9].startswith("TokenId=") else []
        if len(ident) < 2 or not (ident[0].isdigit() and ident[1].isdigit()):
            raise CorpusError(f"{where}:{lineno}: not a CoNLL-X token with TokenId=ITEM.ZONE: a corrupt copy")
        key = int(ident[0]), int(ident[1])
        if owner.setdefault(key, sentences) != sentences:
            raise CorpusError(f"{where}:{lineno}: story {key[0]} zone {key[1]} in two sentences")
        if not order or order[-1] != key:
            order.append(key)
        cur += 1
        tokens += 1
    return sentences, tokens, order


def check(files: dict, origin: str, pinned: bool) -> dict:
    """The corpus's counts, once every check passes (module docstring)."""
    zones = _wordinfo(_text(files, WORDINFO, origin), f"{origin}: {WORDINFO}")
    sentences, tokens, order = _parses(_text(files, PARSES, origin), f"{origin}: {PARSES}")
    _text(files, LICENSE, origin)
    where = f"{origin}: {PARSES}"
    if order != sorted(order):
        raise CorpusError(f"{where}: the sentences do not follow the stories' order")
    if set(order) != zones:
        extra, missing = sorted(set(order) - zones), sorted(zones - set(order))
        raise CorpusError(f"{where}: {len(extra)} parsed words without a reading time, {len(missing)} words with one in "
                          f"no sentence (first: {(extra or missing)[0]})")
    counts = {"stories": len({k[0] for k in zones}), "words": len(zones), "sentences": sentences, "tokens": tokens}
    if pinned and counts != PUBLISHED:
        raise CorpusError(f"{origin}: {counts}; published at {COMMIT[:7]}: {PUBLISHED}: a truncated or altered copy")
    return counts


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", help="the corpus folder to write (created or replaced whole; outside this repository)")
    p.add_argument("--from", dest="source", metavar="CHECKOUT",
                   help=f"a local clone or bare mirror of {REPO}, or a folder holding the files (default: download)")
    args = p.parse_args(argv)
    dest = Path(args.dest).resolve()
    if inside_repository(dest, "get_naturalstories"):
        return 2
    try:
        files, commit, origin = collect(args.source)
        counts = check(files, origin, pinned=commit == COMMIT)
        install(dest, files)
    except CorpusError as e:
        print(f"get_naturalstories: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("get_naturalstories: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001  one line for a failed download, copy or write
        print(f"get_naturalstories: {args.source or REPO}: {e}", file=sys.stderr)
        return 1
    for path in FILES:
        print(f"{path}: {len(files[path])} bytes, sha256 {hashlib.sha256(files[path]).hexdigest()[:16]}")
    print(f"naturalstories: {counts['stories']} stories, {counts['words']} words with reading times, "
          f"{counts['sentences']} sentences, {counts['tokens']} parsed tokens, sha256 {digest(files)[:16]} -> {dest}")
    if commit != COMMIT:
        print(f"get_naturalstories: {origin} is at {commit or 'an unknown commit'}, not the pinned {COMMIT[:7]}: the "
              "published counts not checked", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
