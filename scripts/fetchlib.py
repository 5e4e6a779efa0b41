"""What scripts/get_suites.py, scripts/get_gum.py and scripts/get_naturalstories.py share: downloading a
repository at a pinned commit, finding a git repository in a checkout, keeping the data they write out of this
repository, writing a folder whole and the hash that names a collection (independent of sipe_fairseq)."""
import hashlib
import io
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def github_tarball(repo: str, commit: str, timeout: float):
    """(the gzipped tar of ``repo`` at ``commit``, opened in memory; its address)."""
    url = f"https://codeload.github.com/{repo}/tar.gz/{commit}"
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 (a fixed https address)
        data = r.read()
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:gz"), url


def git_dir(path: Path):
    """The git directory of a working tree (``path/.git``) or of a bare repository / mirror (``path``), else None."""
    for cand in (path / ".git", path):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return cand
    return None


def inside_repository(dest: Path, prog: str) -> bool:
    """True (after one line on stderr) if ``dest`` is this repository or lies inside it."""
    if dest == REPO_ROOT or REPO_ROOT in dest.parents:
        print(f"{prog}: {dest} is inside this repository; choose a folder outside it", file=sys.stderr)
        return True
    return False


def install(out: Path, files: dict) -> Path:
    """``files`` (relative path -> bytes) into the folder ``out``: written into a temporary folder next to it (with
    the permissions ``mkdir`` gives), then renamed into place; an old ``out`` is moved aside first and removed once
    the new one is in place (put back if the rename fails). An error or Ctrl-C removes the temporary folder:
    ``out`` is the old copy or the new one, whole."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    aside = None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # a folder as mkdir makes it, not mkdtemp's private one
        for path, content in files.items():
            (tmp / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp / path).write_bytes(content)
        if out.exists() or out.is_symlink():
            aside = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old")) / out.name
            os.replace(out, aside)
        os.replace(tmp, out)
    except BaseException:
        if aside is not None and aside.exists() and not out.exists():
            os.replace(aside, out)
        shutil.rmtree(tmp, ignore_errors=True)
        if aside is not None:
            shutil.rmtree(aside.parent, ignore_errors=True)
        raise
    if aside is not None:
        shutil.rmtree(aside.parent, ignore_errors=True)
    return out


def digest(files: dict) -> str:
    """The sha256 of a collection: each file's path and sha256, in path order."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + hashlib.sha256(files[path]).digest())
    return h.hexdigest()
