"""scripts/get_suites.py: copies the public suites from a local checkout (a folder or a git repository),
checks the published counts and refuses a destination inside the repository."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "get_suites.py")


def _fake_checkouts(tmp: Path, blimp_files: int = 67):
    blimp = tmp / "blimp" / "data"
    blimp.mkdir(parents=True)
    for i in range(blimp_files):
        rows = [{"sentence_good": f"good {i} {j}", "sentence_bad": f"bad {i} {j}", "UID": f"p{i}"} for j in range(3)]
        (blimp / f"p{i:02d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
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
    assert lines[0].startswith("blimp: 67 files, 201 items")
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
