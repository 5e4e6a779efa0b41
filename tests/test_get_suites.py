"""scripts/get_suites.py: copies the public suites from a local checkout (a folder or a git repository),
checks the published counts and every file before anything is written (a corrupt or truncated copy is refused
in one line naming the file, exit status 1, and leaves no partial destination) and refuses a destination inside
the repository."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "get_suites.py")


PAIRS = 1000  # pairs per BLiMP paradigm, as published (get_suites checks them)


def _fake_checkouts(tmp: Path, blimp_files: int = 67):
    """Fake checkouts of BLiMP (``blimp_files`` paradigms of 1,000 pairs) and SyntaxGym (34 suites of 1-3 items)."""
    blimp = tmp / "blimp" / "data"
    blimp.mkdir(parents=True)
    for i in range(blimp_files):
        rows = (f'{{"sentence_good": "good {i} {j}", "sentence_bad": "bad {i} {j}", "UID": "p{i}"}}\n' for j in range(PAIRS))
        (blimp / f"p{i:02d}.jsonl").write_text("".join(rows), encoding="utf-8")
    gym = tmp / "gym" / "test_suites" / "json"
    gym.mkdir(parents=True)
    for i in range(34):
        (gym / f"s{i:02d}.json").write_text(json.dumps({"items": [{"item_number": k} for k in range(i % 3 + 1)]}))
    return tmp / "blimp", tmp / "gym"


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True)


def test_copies_from_folders_and_git_with_counts(tmp_path):
    blimp, gym = _fake_checkouts(tmp_path)
    subprocess.run(["git", "init", "-q", str(gym)], check=True)
    subprocess.run(["git", "-C", str(gym), "add", "."], check=True)
    subprocess.run(["git", "-C", str(gym), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True)
    for f in (gym / "test_suites" / "json").glob("*.json"):  # only the git objects hold the suites now
        f.unlink()
    out = _run(tmp_path / "dest", "--blimp-from", blimp, "--syntaxgym-from", gym)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("blimp: 67 files, 67000 items")
    assert lines[1].startswith("syntaxgym: 34 files, 67 items")  # 12 suites x1 + 11 x2 + 11 x3
    assert len(list((tmp_path / "dest" / "blimp").glob("*.jsonl"))) == 67
    assert len(list((tmp_path / "dest" / "syntaxgym").glob("*.json"))) == 34
    again = _run(tmp_path / "dest2", "--only", "blimp", "--blimp-from", blimp / "data")  # the data folder itself
    assert again.returncode == 0 and again.stdout.split("sha256 ")[1][:16] == lines[0].split("sha256 ")[1][:16]


def test_refuses_wrong_counts_and_a_destination_in_the_repository(tmp_path):
    blimp, _ = _fake_checkouts(tmp_path, blimp_files=66)
    out = _run(tmp_path / "dest", "--only", "blimp", "--blimp-from", blimp)
    assert out.returncode == 1 and "66 files, expected 67" in out.stderr and "Traceback" not in out.stderr
    inside = _run(ROOT / "suites-here", "--only", "blimp", "--blimp-from", blimp)
    assert inside.returncode == 2 and "inside this repository" in inside.stderr
    assert not (ROOT / "suites-here").exists()


def _damage(path: Path, how: str) -> None:
    text = path.read_text(encoding="utf-8")
    if how == "truncated":  # cut at a line boundary: every line whole, 11 of 1,000 pairs left
        path.write_text("".join(text.splitlines(keepends=True)[:11]), encoding="utf-8")
    else:  # cut inside a line
        path.write_text(text[:len(text) // 2], encoding="utf-8")


def _tree(folder: Path):
    return sorted((p.relative_to(folder).as_posix(), p.is_file() and p.read_bytes()) for p in folder.rglob("*"))


def test_a_corrupt_or_truncated_copy_is_refused_before_anything_is_written(tmp_path):
    blimp, gym = _fake_checkouts(tmp_path)
    dest = tmp_path / "dest"
    assert _run(dest, "--blimp-from", blimp, "--syntaxgym-from", gym).returncode == 0
    before = _tree(dest)
    _damage(blimp / "data" / "p05.jsonl", "truncated")  # 66,011 of 67,000 pairs
    out = _run(dest, "--blimp-from", blimp, "--syntaxgym-from", gym)
    assert out.returncode == 1 and out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"get_suites: blimp from {blimp}: p05.jsonl: 11 pairs, expected 1000: a truncated or " \
                                 "altered copy"
    assert _tree(dest) == before  # the old copies untouched (syntaxgym too: nothing is written on a refusal)
    _damage(blimp / "data" / "p07.jsonl", "corrupt")
    fresh = tmp_path / "fresh"
    out = _run(fresh, "--only", "blimp", "--blimp-from", blimp)
    assert out.returncode == 1 and "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert "p05.jsonl: 11 pairs" in out.stderr and not fresh.exists()
    (blimp / "data" / "p05.jsonl").unlink()
    (blimp / "data" / "p05.jsonl").write_text((blimp / "data" / "p06.jsonl").read_text(encoding="utf-8"), encoding="utf-8")
    out = _run(fresh, "--only", "blimp", "--blimp-from", blimp)
    assert out.returncode == 1 and "p07.jsonl:" in out.stderr and "not a JSON line" in out.stderr and not fresh.exists()
    suite = gym / "test_suites" / "json" / "s03.json"
    suite.write_text(suite.read_text()[:-5])
    out = _run(fresh, "--only", "syntaxgym", "--syntaxgym-from", gym)
    assert out.returncode == 1 and f"syntaxgym from {gym}: s03.json: not JSON" in out.stderr and not fresh.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blimp", "dest", "gym"]  # no temporary folder left


def test_a_new_copy_replaces_the_old_whole(tmp_path):
    blimp, gym = _fake_checkouts(tmp_path)
    dest = tmp_path / "dest"
    (dest / "blimp").mkdir(parents=True)
    (dest / "blimp" / "stale.jsonl").write_text("{}\n")
    (dest / "notes.txt").write_text("mine\n")
    assert _run(dest, "--only", "blimp", "--blimp-from", blimp).returncode == 0
    assert sorted(p.name for p in dest.iterdir()) == ["blimp", "notes.txt"]  # no temporary or old folder left
    assert len(list((dest / "blimp").iterdir())) == 67 and not (dest / "blimp" / "stale.jsonl").exists()
