"""Run the tests' command lines in a fork of the test process instead of a fresh interpreter.

A ``fairseq-train`` / ``sipe-eval-lm`` / ``python -m sipe_fairseq...`` process spends about 7 CPU
seconds importing torch and fairseq before it reads its first argument; the suite starts over a
hundred of them. ``popen``/``run`` fork this process (torch, fairseq and the plugin already
imported) and run the same entry point in the child, as a fresh interpreter would: its own pid, the
command's ``sys.argv``, ``cwd`` and environment, fd 0/1/2 on pipes, the logging set-up of the entry
module re-run (the CLI modules are imported again in the child), exit status from ``SystemExit`` or 1
through ``sys.excepthook``. The child ends with ``os._exit``: nothing of it returns into pytest.

Anything else (bash scripts, ``python -c``) and every command when ``SIPE_TEST_SUBPROCESS=1`` runs as
a real subprocess; ``tests/test_packaging.py`` always uses real ones (installed console scripts, another
working directory).
"""
import functools
import io
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

BIN = Path(sys.executable).parent
FORK = os.environ.get("SIPE_TEST_SUBPROCESS", "0") != "1" and hasattr(os, "fork")
# modules imported again in each child so that their import-time set-up (fairseq's logging.basicConfig on
# the child's stdout, argument registries of the CLIs) happens as in a fresh interpreter
_REIMPORT = ("fairseq_cli", "sipe_fairseq.cli")
# parent-side pipe ends of the children still running: a later child closes its copies (another child's
# stdin must see end-of-file when the parent closes it)
_PARENT_FDS, _LOCK = set(), threading.Lock()


def _close_parent_fd(f):
    with _LOCK:
        _PARENT_FDS.discard(f.fileno())
        f.close()


def _entry(cmd):
    """How to run ``cmd`` in-process: ('path', script) for a Python console script of this environment,
    ('module', name) for ``python -m name``; None when it must be a real subprocess."""
    exe = str(cmd[0])
    if exe == sys.executable and len(cmd) > 2 and cmd[1] == "-m":
        return "module", str(cmd[2])
    path = Path(exe)
    if path.parent == BIN and path.is_file():
        with open(path, "rb") as f:
            first = f.readline()
        if first.startswith(b"#!") and b"python" in first:
            return "path", str(path)
    return None


def _statements(body):
    """The statements of a module body that run at import time, in order (not those inside functions)."""
    import ast

    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.Try, ast.With, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                yield from _statements(getattr(stmt, field, []))
            for handler in getattr(stmt, "handlers", []):
                yield from _statements(handler.body)


def _first_effect(module: str, seen: set):
    """What importing ``module`` (already imported in the parent, so its code cannot just run again) does first
    to the root logger: "fairseq" when it reaches an import of fairseq (whose import configures logging),
    "config" when it calls logging.basicConfig first, None when neither happens at import time."""
    import ast
    import importlib.util

    parts = module.split(".")
    for i in range(1, len(parts) + 1):  # importing a.b.c runs a, a.b, a.b.c
        mod = ".".join(parts[:i])
        if mod == "fairseq" or mod.startswith("fairseq."):
            return "fairseq"
        if mod in seen or not (mod.startswith("sipe_fairseq") or mod.startswith("fairseq_cli")):
            continue
        seen.add(mod)
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):  # a name imported from a module, not a module
            spec = None
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        package = mod if spec.submodule_search_locations else mod.rpartition(".")[0]
        for stmt in _statements(ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body):
            names = []
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                    ast.unparse(stmt.value.func) == "logging.basicConfig":
                return "config"
            if isinstance(stmt, ast.Import):
                names = [a.name for a in stmt.names]
            elif isinstance(stmt, ast.ImportFrom):
                base = stmt.module or ""
                if stmt.level:
                    up = package.split(".")
                    base = ".".join(up[: len(up) - stmt.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in stmt.names]
            for name in names:
                effect = _first_effect(name, seen)
                if effect is not None:
                    return effect
    return None


@functools.lru_cache(maxsize=None)
def _imports_fairseq_first(kind, target) -> bool:
    """Whether the entry, in a fresh interpreter, imports fairseq before it configures logging (fairseq's
    import then configures it), following the import-time statements of the entry and the plugin's and
    fairseq_cli's modules in order. Computed in the parent, once per entry."""
    if kind == "path":  # a console script: `from package.module import main`
        found = re.search(r"^from ([\w.]+) import", Path(target).read_text(encoding="utf-8"), re.M)
        if found is None:
            return True
        target = found.group(1)
    return _first_effect(target, set()) == "fairseq"


def _child(kind, target, argv, cwd, env, fairseq_first):  # runs in the forked child; never returns
    code = 1
    try:
        if cwd is not None:
            os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        root = logging.getLogger()
        for h in list(root.handlers):
            root.removeHandler(h)
        root.setLevel(logging.WARNING)
        logging.disable(logging.NOTSET)
        for name, lg in list(logging.root.manager.loggerDict.items()):  # a command run in process (logs.configure's
            if isinstance(lg, logging.Logger) and name.split(".")[0] == "sipe_fairseq":  # plugin_level) set these
                lg.setLevel(logging.NOTSET)
        if fairseq_first:
            # what `import fairseq` leaves in a fresh interpreter (fairseq/models/wav2vec/wav2vec2_classification.py
            # calls logging.basicConfig(level=DEBUG): stderr, Python's default format); the entry's own basicConfig
            # then does nothing, as there. Otherwise the entry's basicConfig comes first. test_launcher.py checks both.
            logging.basicConfig(level=logging.DEBUG)
        if "--user-dir" in argv and "sipe_fairseq" in sys.modules:
            sys.modules["sipe_fairseq"].register()  # fairseq skips a --user-dir already imported (maybe unregistered)
        for name in list(sys.modules):
            if any(name == p or name.startswith(p + ".") for p in _REIMPORT):
                del sys.modules[name]
        if "hydra" in sys.modules:
            from hydra.core.global_hydra import GlobalHydra
            GlobalHydra.instance().clear()
        import runpy
        import warnings
        warnings.resetwarnings()
        for spec in filter(None, env.get("PYTHONWARNINGS", "").split(",")):
            warnings.simplefilter(spec.split(":")[0])
        if kind == "module":
            sys.argv = [target, *argv[3:]]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *argv[1:]]
            runpy.run_path(target, run_name="__main__")
        code = 0
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())  # as the interpreter does (the plugin installs one for users' mistakes)
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


class ForkedProcess:
    """The part of ``subprocess.Popen`` the tests use (text mode): ``pid``, ``returncode``, ``poll``,
    ``wait``, ``communicate``, ``kill``, ``send_signal``, ``terminate``."""

    def __init__(self, kind, target, cmd, cwd=None, env=None, stdin_text=None, merge_stderr=True):
        env = dict(os.environ if env is None else env)
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = (out_r, out_w) if merge_stderr else os.pipe()
        fairseq_first = _imports_fairseq_first(kind, target)
        sys.stdout.flush()
        sys.stderr.flush()
        with _LOCK:
            pid = os.fork()
            if pid == 0:
                try:
                    os.dup2(in_r, 0)
                    os.dup2(out_w, 1)
                    os.dup2(err_w, 2)
                    for fd in {in_r, in_w, out_r, out_w, err_r, err_w} | _PARENT_FDS:
                        os.close(fd)
                finally:
                    _child(kind, target, [str(c) for c in cmd], cwd, env, fairseq_first)
            for fd in {in_r, out_w, err_w}:
                os.close(fd)
            _PARENT_FDS.update({in_w, out_r, err_r})
        self.pid, self.returncode, self.args = pid, None, [str(c) for c in cmd]
        self._chunks = {out_r: [], err_r: []}
        self._readers = [threading.Thread(target=self._read, args=(fd,), daemon=True) for fd in self._chunks]
        for t in self._readers:
            t.start()
        self._merge = merge_stderr
        self._out, self._err = out_r, err_r
        self._writer = threading.Thread(target=self._write, args=(in_w, stdin_text or ""), daemon=True)
        self._writer.start()

    def _read(self, fd):
        f = os.fdopen(fd, "rb")
        try:
            for chunk in iter(lambda: f.read1(65536), b""):
                self._chunks[fd].append(chunk)
        finally:
            _close_parent_fd(f)

    @staticmethod
    def _write(fd, text):
        f = os.fdopen(fd, "wb")
        try:
            f.write(text.encode())
            f.flush()
        except BrokenPipeError:
            pass
        finally:
            try:
                _close_parent_fd(f)
            except BrokenPipeError:
                pass

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def communicate(self, timeout=None):
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        for t in self._readers:
            t.join()
        out = b"".join(self._chunks[self._out]).decode(errors="replace")
        err = None if self._merge else b"".join(self._chunks[self._err]).decode(errors="replace")
        return out, err

    def send_signal(self, sig):
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)


def popen(cmd, cwd=None, env=None, stdin_text=None, merge_stderr=True):
    """Start ``cmd`` (forked when it is a Python entry point of this environment, see the module doc);
    text output through ``communicate()``, stderr merged into stdout unless ``merge_stderr=False``."""
    cmd = [str(c) for c in cmd]
    entry = _entry(cmd) if FORK else None
    if entry is not None:
        return ForkedProcess(*entry, cmd, cwd=cwd, env=env, stdin_text=stdin_text, merge_stderr=merge_stderr)
    return _RealProcess(cmd, cwd, env, stdin_text, merge_stderr)


class _RealProcess(subprocess.Popen):
    def __init__(self, cmd, cwd, env, stdin_text, merge_stderr):
        self._stdin_text = stdin_text
        super().__init__(cmd, cwd=cwd, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)

    def communicate(self, input=None, timeout=None):  # noqa: A002 (Popen's name)
        try:
            return super().communicate(input if input is not None else (self._stdin_text or ""), timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            super().communicate()
            raise


def run(cmd, cwd=None, env=None, input=None, timeout=600):  # noqa: A002 (subprocess.run's name)
    """``subprocess.run(cmd, capture_output=True, text=True, ...)`` through ``popen``: a CompletedProcess
    with separate stdout and stderr."""
    proc = popen(cmd, cwd=cwd, env=env, stdin_text=input, merge_stderr=False)
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
