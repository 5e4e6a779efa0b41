"""scripts/get_gum.py: rebuilds GUM train from the sources of a (git) checkout where its release file is empty,
copies a folder, checks the published counts at the pinned commit and refuses a destination inside the
repository."""
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "get_gum.py"


def _doc(name: str, n_sents: int) -> str:
    sents = "".join(f"# sent_id = {name}-{i}\n1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_\n2\t.\t.\tPUNCT\t_\t_\t1\tpunct\t_\t_\n\n"
                    for i in range(n_sents))
    return f"# newdoc id = {name}\n{sents}"


def _fake_gum(tmp: Path) -> Path:
    repo = tmp / "UD_English-GUM"
    src = repo / "not-to-release" / "sources"
    src.mkdir(parents=True)
    for name, n in [("GUM_b_two", 2), ("GUM_a_one", 1), ("GUM_c_dev", 3), ("GUM_d_test", 1), ("GUM_e_three", 3)]:
        (src / f"{name}.conllu").write_text(_doc(name, n))
    (repo / "en_gum-ud-dev.conllu").write_text(_doc("GUM_c_dev", 3))
    (repo / "en_gum-ud-test.conllu").write_text(_doc("GUM_d_test", 1))
    (repo / "en_gum-ud-train.conllu").write_text("")  # as in a copy that leaves out the large file
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True)
    return repo


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_rebuilds_train_from_the_sources_in_name_order(tmp_path):
    repo = _fake_gum(tmp_path)
    out = _run(tmp_path / "dest", "--from", repo)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[0].startswith("train: 3 documents, 6 sentences, 12 words")
    assert "not the pinned" in out.stderr  # another commit: printed, not checked
    train = (tmp_path / "dest" / "en_gum-ud-train.conllu").read_text()
    ids = [line.split("= ")[1] for line in train.splitlines() if line.startswith("# newdoc id")]
    assert ids == ["GUM_a_one", "GUM_b_two", "GUM_e_three"]  # dev and test documents held out
    assert train == _doc("GUM_a_one", 1) + _doc("GUM_b_two", 2) + _doc("GUM_e_three", 3)
    assert (tmp_path / "dest" / "en_gum-ud-dev.conllu").read_text() == _doc("GUM_c_dev", 3)
    # a plain folder (no git) with the same files gives the same train file
    plain = tmp_path / "plain"
    shutil.copytree(repo, plain, ignore=shutil.ignore_patterns(".git"))
    folder = _run(tmp_path / "dest2", "--from", plain)
    assert folder.returncode == 0 and folder.stdout.split("sha256 ")[1][:16] == out.stdout.split("sha256 ")[1][:16]


def test_checks_the_published_counts_at_the_pinned_commit(tmp_path, capsys):
    repo = _fake_gum(tmp_path)
    spec = importlib.util.spec_from_file_location("get_gum", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.COMMIT = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    mod.PUBLISHED = {"train": (3, 6, 12), "dev": (1, 3, 6), "test": (1, 1, 2)}
    assert mod.main([str(tmp_path / "ok"), "--from", str(repo)]) == 0
    mod.PUBLISHED = {"train": (4, 6, 12), "dev": (1, 3, 6), "test": (1, 1, 2)}
    assert mod.main([str(tmp_path / "bad"), "--from", str(repo)]) == 1
    err = capsys.readouterr().err
    assert "train from" in err and "3 documents" in err and "published" in err
    assert not (tmp_path / "bad" / "en_gum-ud-train.conllu").exists()


def test_refuses_missing_sources_and_a_destination_in_the_repository(tmp_path):
    repo = _fake_gum(tmp_path)
    folder = tmp_path / "no-sources"
    folder.mkdir()
    for s in ("dev", "test"):
        (folder / f"en_gum-ud-{s}.conllu").write_bytes((repo / f"en_gum-ud-{s}.conllu").read_bytes())
    out = _run(tmp_path / "dest", "--from", folder)
    assert out.returncode == 1 and "no training document" in out.stderr and "Traceback" not in out.stderr
    inside = _run(ROOT / "gum-here", "--from", repo)
    assert inside.returncode == 2 and "inside this repository" in inside.stderr
    assert not (ROOT / "gum-here").exists()
