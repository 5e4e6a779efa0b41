"""The package's one atomic writer (``sipe_fairseq.data.writers``: ``atomic_open``, ``write_text``,
``save_figure``): the file appears whole or not at all, an interrupted write leaves the old file and no
temporary file, errors name the path, and every command output file of the package is written through it."""
import os
import re
import stat
from pathlib import Path

import pytest

from sipe_fairseq.data.writers import atomic_open, save_figure, write_text

ROOT = Path(__file__).resolve().parents[1]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_write_text_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.conllu"
    write_text(path, "1\tdogs\n\n")
    write_text(str(path), "é\n" * 3)
    assert path.read_bytes() == "é\n".encode() * 3  # UTF-8, \n line breaks
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~_umask()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.conllu"]


def test_interrupted_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "report.tsv"
    path.write_text("old\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(path) as f:
            f.write("half a new")
            assert path.read_text() == "old\n"  # nothing visible before the block ends
            raise KeyboardInterrupt
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["report.tsv"]
    with atomic_open(path, binary=True) as f:
        f.write(b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"


def test_errors_name_the_path(tmp_path):
    missing = tmp_path / "no" / "such" / "out.txt"
    with pytest.raises(FileNotFoundError) as e:
        write_text(missing, "x")
    assert e.value.filename == str(missing) and e.value.strerror
    with pytest.raises(IsADirectoryError) as e:
        write_text(tmp_path, "x")
    assert e.value.filename == str(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_symlink_target_replaced_and_device_written_in_place(tmp_path):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    write_text(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    write_text(os.devnull, "discarded\n")  # not a regular file: cannot be replaced, written in place
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_save_figure_writes_what_savefig_writes(tmp_path, monkeypatch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot([1, 3, 2])
    monkeypatch.setitem(matplotlib.rcParams, "svg.hashsalt", "fixed")  # SVG ids: the same in both writes
    try:
        for name in ("fig.png", "fig.svg", "noext"):
            direct = tmp_path / "direct"
            direct.mkdir(exist_ok=True)
            fig.savefig(direct / name, dpi=50, metadata={"Date": None} if name.endswith("svg") else None)
            written = save_figure(fig, tmp_path / name, dpi=50,
                                  metadata={"Date": None} if name.endswith("svg") else None)
            expected_name = name if "." in name else name + "." + matplotlib.rcParams["savefig.format"]
            assert written == str(tmp_path / expected_name)
            assert Path(written).read_bytes() == (direct / expected_name).read_bytes()
        with pytest.raises(ValueError):
            save_figure(fig, tmp_path / "fig.nosuchformat")
        assert not (tmp_path / "fig.nosuchformat").exists()
    finally:
        plt.close(fig)


WRITES = re.compile(r"open\([^)]*[\"'][wax]b?\+?[\"']|\.write_text\(|\.write_bytes\(|json\.dump\(|savefig\(|torch\.save\(|"
                    r"np\.save|\.save\(|shutil\.copy|\.writer\(")
# writes that do not go through atomic_open, each for a reason (the parse cache appends its new lines with os.write,
# which this pattern does not see: parsing/cache.py's docstring); the data directory's dictionaries (fairseq's
# Dictionary.save), index files (fairseq's writer) and copied files are covered by its manifest (sizes, crc32,
# sha256 checked at load), written last
NOT_ATOMIC = {
    "data/writers.py": 2,  # savefig into atomic_open's file; fairseq's .idx writer
    "data/glue.py": 4,  # dictionaries saved and copied
    "data/preprocess/vocabulary.py": 4,  # dictionaries saved and copied
    "hexatag/lines.py": 2,  # LineInput spools stdin or a FIFO to a temporary file it reads twice: not an output
    "structure/workers.py": 1,  # a worker resets its resident peak (/proc/self/clear_refs): not an output
}


def test_every_output_file_goes_through_the_atomic_writer():
    found = {}
    for path in sorted((ROOT / "sipe_fairseq").rglob("*.py")):
        n = sum(1 for line in path.read_text().splitlines() if WRITES.search(line.split("#")[0]))
        if n:
            found[path.relative_to(ROOT / "sipe_fairseq").as_posix()] = n
    assert found == NOT_ATOMIC


def test_sipe_hexatag_output_file_whole_or_untouched(tmp_path, monkeypatch, capsys):
    """``sipe-hexatag -o``: a run that returns writes what it would print (a stop at a bad sentence included);
    a run interrupted by an exception leaves the old file as it was, with no temporary file beside it."""
    from sipe_fairseq.cli import hexatag as cli
    from sipe_fairseq.hexatag import encode, format_tags
    from sipe_fairseq.hexatag.conllu_io import conllu_sentence

    src = tmp_path / "in.conllu"
    src.write_text(conllu_sentence(["a", "b"], [0, 1], ["root", "dep"]) + "1\tbad\n\n"
                   + conllu_sentence(["c"], [0], ["root"]))
    assert cli.main(["encode", str(src)]) == 2
    printed = capsys.readouterr().out
    out = tmp_path / "out.hexatag"
    assert cli.main(["encode", str(src), "-o", str(out)]) == 2
    first, last = format_tags(encode([0, 1])), format_tags(encode([0]))
    assert out.read_text() == printed == f"{first}\n"
    assert cli.main(["encode", "--keep-going", str(src), "-o", str(out)]) == 1
    assert out.read_text() == f"{first}\n\n{last}\n"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "encode_tree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cli.main(["encode", "--keep-going", str(src), "-o", str(out)])
    assert out.read_text() == f"{first}\n\n{last}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.conllu", "out.hexatag"]
