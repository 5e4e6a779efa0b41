"""The output boundary, piece by piece (the commands' rows are in tests/test_faults.py, "the output boundary"):
the one writer's destinations (device nodes, ``/dev/stdout``, permission bits) and its write errors, the error
hook's closed stdout, and the refusals of non-finite scores outside the engine (pseudo-log-likelihood,
generation)."""
import errno
import os
import resource
import signal
import stat
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from sipe_fairseq.cli.options import unwritable
from sipe_fairseq.data.writers import atomic_open, write_text
from sipe_fairseq.hexatag.errors import USER_ERRORS, NonFiniteScoreError, OutputError


def _node(path, kind: int, device):
    """A device node at ``path`` (we may run as root), or skip when this system does not let us make one."""
    try:
        os.mknod(path, kind | 0o666, device)
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here: {e}")
    return path


def _no_temporary(folder) -> list:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_a_character_device_is_written_through_never_replaced(tmp_path):
    null = _node(tmp_path / "null", stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    write_text(null, "discarded\n" * 1000)
    assert stat.S_ISCHR(os.lstat(null).st_mode) and _no_temporary(tmp_path) == []
    full = _node(tmp_path / "full", stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's: ENOSPC, named by its path
    with pytest.raises(OutputError) as err:
        write_text(full, "x" * 100_000)
    assert err.value.errno == errno.ENOSPC and str(err.value) == f"{full}: cannot write: No space left on device"
    assert stat.S_ISCHR(os.lstat(full).st_mode) and _no_temporary(tmp_path) == []


def test_a_block_device_is_refused_before_anything_is_opened(tmp_path):
    disk = _node(tmp_path / "disk", stat.S_IFBLK, os.makedev(7, 250))  # a loop device's numbers: never opened
    with pytest.raises(OutputError) as err:
        write_text(disk, "report\n")
    assert "a block device" in str(err.value) and str(disk) in str(err.value)
    assert stat.S_ISBLK(os.lstat(disk).st_mode) and _no_temporary(tmp_path) == []
    assert "block device" in unwritable(str(disk))  # the commands' check before any work says so too


def test_a_link_to_a_device_writes_the_device(tmp_path):
    link = tmp_path / "out"
    link.symlink_to("/dev/null")
    write_text(link, "discarded\n")
    assert link.is_symlink() and os.readlink(link) == "/dev/null" and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    dangling = tmp_path / "later"
    dangling.symlink_to("sub/target.txt")  # the target is created where the link points (its folder must exist)
    (tmp_path / "sub").mkdir()
    write_text(dangling, "new\n")
    assert dangling.is_symlink() and (tmp_path / "sub" / "target.txt").read_text() == "new\n"


def test_dev_stdout_is_written_at_stdout_offset(tmp_path):
    """``--json /dev/stdout`` with stdout a regular file (``> out``): written after what the command printed, not
    over it (the file is neither replaced nor reopened and truncated)."""
    code = ("import sys; from sipe_fairseq.data.writers import write_text\n"
            "print('table')\nwrite_text('/dev/stdout', 'json\\n')\nwrite_text('/dev/fd/1', 'more\\n')\nprint('end')")
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        subprocess.run([sys.executable, "-c", code], stdout=f, check=True, timeout=120)
    assert out.read_text() == "table\njson\nmore\nend\n"
    assert _no_temporary(tmp_path) == []


def test_a_replaced_file_keeps_its_permission_bits(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("old\n")
    path.chmod(0o640)
    write_text(path, "new\n")
    assert path.read_text() == "new\n" and stat.S_IMODE(path.stat().st_mode) == 0o640


def test_a_file_too_large_leaves_the_old_file_and_names_the_path(tmp_path):
    """EFBIG (RLIMIT_FSIZE, SIGXFSZ ignored), in a fork: the write in the block fails as OutputError naming the
    output, not the temporary file; the old file stays whole and no temporary file is left."""
    path = tmp_path / "out.tsv"
    path.write_text("old\n")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it saw through the pipe, never return into pytest
        message = "no error"
        try:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
            with atomic_open(path) as f:
                for _ in range(100):
                    f.write("x" * 100)
        except OutputError as e:
            message = f"{e.errno} {e}"
        except BaseException as e:  # anything else: the parent shows it
            message = f"{type(e).__name__}: {e}"
        finally:
            os.write(write, message.encode())
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as r:
        message = r.read()
    os.waitpid(pid, 0)
    assert message == f"{errno.EFBIG} {path}: cannot write: File too large"
    assert path.read_text() == "old\n" and _no_temporary(tmp_path) == []


def test_a_fifo_whose_reader_left_names_the_fifo(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-c", f"open({str(fifo)!r}, 'rb').read(1)"])
    with pytest.raises(OutputError) as err:
        with atomic_open(fifo, binary=True) as f:
            for _ in range(64):  # 4 MiB: more than a pipe holds, so the writer is still writing when it is closed
                f.write(b"y" * 65536)
    reader.wait(timeout=60)
    assert err.value.errno == errno.EPIPE and str(err.value) == f"{fifo}: cannot write: Broken pipe"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_open_errors_keep_their_kind_and_output_errors_are_user_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        write_text(tmp_path / "no" / "out.txt", "x")
    assert not isinstance(err.value, OutputError)  # the commands check output paths first: exit status 2
    assert issubclass(OutputError, OSError) and issubclass(OutputError, USER_ERRORS)  # one line, exit status 1
    assert issubclass(NonFiniteScoreError, USER_ERRORS) and issubclass(NonFiniteScoreError, ValueError)


def test_a_closed_stdout_ends_in_one_line():
    """``sipe-... | head``: the error hook turns the BrokenPipeError of stdout into one line and exit status 1, and
    the interpreter's last flush adds nothing (stdout is pointed at /dev/null first)."""
    code = ("from sipe_fairseq.hexatag.errors import install_error_hook; install_error_hook()\n"
            "for i in range(200000): print('row', i)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()  # the reader leaves early
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert err.splitlines() == ["sipe_fairseq: error: <stdout>: cannot write: the reader closed the pipe (Broken pipe)"]


def test_pll_refuses_a_non_finite_term():
    from sipe_fairseq.eval.pll import check_finite

    check_finite(torch.tensor([-1.5, -0.25]), 0)  # finite: nothing to say
    for bad in (float("nan"), float("-inf"), float("inf")):
        with pytest.raises(NonFiniteScoreError) as err:
            check_finite(torch.tensor([-1.5, bad, -2.0]), 4)
        assert err.value.index == 4 and str(err.value).startswith(
            f"sentence 5 under given (pseudo-log-likelihood): token 2 is {bad}")
        named = err.value.naming("sentence 'a cup'")
        assert str(named).startswith("sentence 'a cup' under given (pseudo-log-likelihood): token 2")
        assert isinstance(named, ValueError) and named.index == 4


def test_generation_refuses_a_non_finite_step():
    """fairseq turns a NaN into -inf and then never finishes a hypothesis (``AssertionError: step < max_len``); the
    generator refuses the step instead, naming it. A step with -inf (an excluded token) is taken as it is."""
    from sipe_fairseq.structure.generation import refuse_non_finite

    steps = iter([torch.tensor([[-0.5, -float("inf"), -1.0]]), torch.tensor([[-0.5, float("nan"), -1.0]])])
    ensemble = SimpleNamespace(forward_decoder=lambda tokens, *rest: (next(steps), None))
    generator = refuse_non_finite(SimpleNamespace(model=ensemble))
    assert refuse_non_finite(generator) is generator  # once
    lprobs, _ = generator.model.forward_decoder(torch.zeros(1, 1, dtype=torch.long))
    assert lprobs[0, 1] == -float("inf")
    with pytest.raises(NonFiniteScoreError) as err:
        generator.model.forward_decoder(torch.zeros(1, 4, dtype=torch.long))
    assert str(err.value).startswith("generation step 3: a next-token log-probability is nan")
    assert str(err.value.naming("prompt 2 ('the cup')")).startswith("prompt 2 ('the cup') at generation step 3: ")
