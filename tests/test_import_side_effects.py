"""Importing the package changes nothing global; the commands set up what they need where they run.

- importing every module of ``sipe_fairseq`` (and ``sipe_fairseq.register()``) leaves ``sys.excepthook``, the
  root logger's level and handlers and ``warnings.filters`` as they were (in a fresh interpreter; what the
  third-party libraries' own imports change, e.g. fairseq's ``logging.basicConfig(level=DEBUG)``, is put
  back first: it is theirs, and the hub undoes it below);
- ``sipe_fairseq.hub.load`` of a trained checkpoint, fairseq's import included, leaves them as the user had
  them (a library's debug line reaches no handler afterwards);
- the one-line user errors (``sipe_fairseq: error: ...``, exit status 1, 2 or 3, no traceback) are installed
  by the ``sipe-*`` commands' set-up (``cli/logs.configure``) and by the plugin's tasks when a ``fairseq-*``
  command sets them up, not otherwise.
"""
import json
import logging
import os
import subprocess
import sys

import pytest

from conftest import ENV, ROOT, txl

# snapshot() and differences(): the three pieces of global state, as text a JSON diff can show
_STATE = r'''
import json, logging, sys, warnings

def snapshot():
    root = logging.getLogger()
    return {"excepthook": repr(sys.excepthook), "root_level": logging.getLevelName(root.level),
            "root_handlers": [repr(h) for h in root.handlers], "warnings_filters": [repr(f) for f in warnings.filters]}

def differences(before, after):
    return {key: {"before": before[key], "after": after[key]} for key in before if before[key] != after[key]}
'''

# every third-party module the package imports at module level (found with ast, not listed by hand): imported,
# and what their imports change put back, before the baseline
_THIRD_PARTY = r'''
import ast, pathlib
import sipe_fairseq

def module_level_imports(tree):
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            if isinstance(node, (ast.If, ast.Try)):
                yield from module_level_imports(ast.Module(body=[n for part in getattr(node, field, [])
                                                                  for n in getattr(part, "body", [part])]))

third_party = set()
for path in pathlib.Path(sipe_fairseq.__file__).parent.rglob("*.py"):
    for node in module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""] * (node.level == 0)
        third_party |= {n.split(".")[0] for n in names if n and n.split(".")[0] not in sys.stdlib_module_names}
third_party -= {"sipe_fairseq"}
'''


def _python(script: str, cwd, timeout=600) -> subprocess.CompletedProcess:
    env = dict(ENV, PYTHONPATH=str(ROOT))
    env.pop("PYTHONWARNINGS", None)  # the interpreter's default warnings filters, as a user's
    env.pop("LOGLEVEL", None)
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _last_json(proc) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_every_module_changes_nothing_global(tmp_path):
    script = _STATE + _THIRD_PARTY + r'''
import importlib, pkgutil
fresh = snapshot()
root = logging.getLogger()
with warnings.catch_warnings():  # torch, numpy, scipy add filters on import: theirs
    for name in sorted(third_party):
        importlib.import_module(name)
for handler in list(root.handlers):  # fairseq's import: logging.basicConfig(level=DEBUG); theirs
    root.removeHandler(handler)
root.setLevel(fresh["root_level"])
assert "fairseq" in sys.modules and "torch" in sys.modules, sorted(third_party)
before = snapshot()
assert before == fresh, differences(fresh, before)

sipe_fairseq.register()
def refuse(name):
    raise ImportError(f"cannot import {name}")
modules = [info.name for info in pkgutil.walk_packages(sipe_fairseq.__path__, "sipe_fairseq.", onerror=refuse)]
for name in modules:
    importlib.import_module(name)
after = snapshot()
print(json.dumps({"modules": len(modules), "third_party": sorted(third_party),
                  "imported": sorted(m for m in sys.modules if m.startswith("sipe_fairseq."))}))
print(json.dumps(differences(before, after), indent=None))
'''
    proc = _python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-2])
    # the walk reached the whole package: the tasks, the commands, the hub's implementation
    assert {"sipe_fairseq.tasks.sipe_data", "sipe_fairseq.cli.eval_lm", "sipe_fairseq.hub.interface",
            "sipe_fairseq.eval.syntaxgym.scoring"} <= set(info["imported"]), info
    assert info["modules"] >= 100 and {"fairseq", "torch"} <= set(info["third_party"]), info
    assert _last_json(proc) == {}


def test_hub_load_leaves_logging_warnings_and_excepthook_as_the_user_had_them(train_checkpoint, tmp_path):
    """A fresh interpreter (root logger without handlers, at WARNING; Python's own warnings filters): after
    ``hub.load`` (fairseq imported by it) and a scoring, all three are unchanged and a library's INFO line
    goes nowhere, as before the load."""
    checkpoint = train_checkpoint(txl("position"))  # the session's tiny SiPE decoder (test_hub's "pos")
    script = _STATE + f'''
before = snapshot()
from sipe_fairseq import hub
assert "fairseq" not in sys.modules and "torch" not in sys.modules
lm = hub.load({str(checkpoint)!r})
assert "fairseq" in sys.modules
[scored] = lm.score(["the dog sleeps ."], tags="self")
assert scored.logprob < 0
after = snapshot()
logging.getLogger("matplotlib.font_manager").info("LEAKED-INFO-LINE")
logging.getLogger("some.library").debug("LEAKED-DEBUG-LINE")
print(json.dumps(differences(before, after)))
'''
    proc = _python(script, tmp_path)
    assert _last_json(proc) == {}
    assert "LEAKED" not in proc.stderr, proc.stderr[-2000:]


@pytest.fixture
def hook_restored():
    """sys.excepthook and the root logger as they were, after a test that runs a command's set-up in process."""
    root = logging.getLogger()
    hook, handlers, level = sys.excepthook, root.handlers[:], root.level
    plugin = logging.getLogger("sipe_fairseq").level
    yield hook
    sys.excepthook = hook
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("sipe_fairseq").setLevel(plugin)


def test_a_commands_set_up_installs_the_hook_once(hook_restored):
    from sipe_fairseq.cli import logs
    from sipe_fairseq.hexatag.errors import install_error_hook

    sys.excepthook = sys.__excepthook__  # whatever an earlier test of this process installed
    logs.configure("WARNING", logs.SHORT_FORMAT)  # what every sipe-* command's main() runs first
    hook = sys.excepthook
    assert hook is not sys.__excepthook__ and getattr(hook, "sipe_one_line_errors", False)
    assert hook.previous is sys.__excepthook__
    assert install_error_hook() is False and sys.excepthook is hook  # idempotent: not wrapped twice
    logs.configure("INFO")
    assert sys.excepthook is hook


# a process that ends on an uncaught exception, after (or without) a command's set-up
_RAISE = r'''
import sys
{setup}
from sipe_fairseq.hexatag.errors import CheckpointError, DataError, UsageError
raise {error}
'''
_CONFIGURE = "from sipe_fairseq.cli import logs\nlogs.configure('WARNING')"


@pytest.mark.parametrize("error, status", [("DataError('train.tags: line 3: bad tag')", 1),
                                           ("UsageError('--tag-sampling-p: 1.5 is not in [0, 1]')", 2),
                                           ("CheckpointError('ck.pt: no such file')", 3)])
def test_user_errors_end_a_command_with_one_line(tmp_path, error, status):
    proc = _python(_RAISE.format(setup=_CONFIGURE, error=error), tmp_path)
    message = error.split("'")[1]
    assert proc.returncode == status and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"sipe_fairseq: error: {message}"], proc.stderr
    # the same error without a command's set-up (Python, a notebook): an ordinary exception with its traceback
    plain = _python(_RAISE.format(setup="import sipe_fairseq.tasks", error=error), tmp_path)
    assert plain.returncode == 1 and "Traceback" in plain.stderr and message in plain.stderr.splitlines()[-1]


def test_other_exceptions_keep_their_traceback_under_the_hook(tmp_path):
    proc = _python(_RAISE.format(setup=_CONFIGURE, error="KeyError('not a user error')"), tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "sipe_fairseq: error" not in proc.stderr


@pytest.mark.parametrize("argv0, main_module, installed", [
    ("/env/bin/fairseq-train", None, True),
    ("/env/bin/fairseq-hydra-train", None, True),
    (os.path.join("site-packages", "fairseq_cli", "eval_lm.py"), "fairseq_cli.eval_lm", True),
    ("/env/bin/sipe-eval-lm", None, False),  # its main() installs it (logs.configure), not the task
    ("-c", None, False),  # Python: hub.load, a notebook
])
def test_tasks_install_the_hook_only_in_a_fairseq_command(tmp_path, argv0, main_module, installed):
    """``setup_task`` of a plugin task (what fairseq-train, fairseq-eval-lm, fairseq-generate run, and what
    ``checkpoints.load_lm`` runs from Python) installs the hook when the process is a fairseq command."""
    script = f'''
import importlib.util, sys
sys.argv[0] = {argv0!r}
if {main_module!r}:
    sys.modules["__main__"].__spec__ = importlib.util.find_spec({main_module!r})
hook = sys.excepthook
from sipe_fairseq.tasks.sipe_data import fairseq_command_running, install_command_error_hook
assert sys.excepthook is hook  # importing the tasks installs nothing
assert fairseq_command_running() is {installed}
assert install_command_error_hook() is {installed}
assert (sys.excepthook is not hook) is {installed}
assert install_command_error_hook() is False  # idempotent
print("ok")
'''
    proc = _python(script, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
