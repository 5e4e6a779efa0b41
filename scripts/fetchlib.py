"""What scripts/get_suites.py and scripts/get_gum.py share: downloading a repository at a pinned commit, finding a
git repository in a checkout and keeping the data they write out of this repository (independent of
sipe_fairseq)."""
import io
import sys
import tarfile
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
