"""Importing the package changes nothing global; the commands set up what they need where they run.

- importing every module of ``sipe_fairseq`` (and ``sipe_fairseq.register()``) leaves ``sys.excepthook``, the
  root logger's level and handlers and ``warnings.filters`` as they were, in a fresh interpreter (what the
  third-party libraries' own imports change, e.g. fairseq's ``logging.basicConfig(level=DEBUG)`` or torch's
  warnings filters, is put back before the baseline: it is theirs; the hub undoes it, below);
- ``sipe_fairseq.hub.load`` of a trained checkpoint, fairseq's import included, leaves them as the user had
  them: a library's INFO or DEBUG line reaches no handler afterwards;
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

# snapshot() and differences(): the three pieces of global state, as text a JSON diff can show (handlers by
# identity: two stderr StreamHandlers have the same repr)
_STATE = r'''
import json, logging, sys, warnings

def snapshot():
    root = logging.getLogger()
    return {"excepthook": repr(sys.excepthook), "root_level": logging.getLevelName(root.level),
            "root_handlers": [f"{h!r} at {id(h):#x}" for h in root.handlers],
            "warnings_filters": [repr(f) for f in warnings.filters]}

def differences(before, after):
    return {key: {"before": before[key], "after": after[key]} for key in before if before[key] != after[key]}
'''

# every third-party module the package imports at module level (found with ast, not listed by hand), without
# importing the package itself
_THIRD_PARTY = r'''
import ast, importlib.util, pathlib

def module_level(body):
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try)):
            parts = [node.body, node.orelse, getattr(node, "finalbody", [])] + [h.body for h in getattr(node, "handlers", [])]
            for part in parts:
                yield from module_level(part)

package = pathlib.Path(importlib.util.find_spec("sipe_fairseq").submodule_search_locations[0])
third_party = set()
for path in package.rglob("*.py"):
    for node in module_level(ast.parse(path.read_text(encoding="utf-8")).body):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module]
        else:
            continue
        third_party |= {n.split(".")[0] for n in names if n.split(".")[0] not in sys.stdlib_module_names}
third_party -= {"sipe_fairseq"}
assert "sipe_fairseq" not in sys.modules
'''


def _python(script: str, cwd, timeout=600) -> subprocess.CompletedProcess:
    env = dict(ENV, PYTHONPATH=str(ROOT))
    env.pop("PYTHONWARNINGS", None)  # the interpreter's own warnings filters, as a user's
    env.pop("LOGLEVEL", None)
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _last_json(proc):
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_importing_every_module_changes_nothing_global(tmp_path):
    script = _STATE + _THIRD_PARTY + r'''
import importlib, pkgutil
fresh = snapshot()
root = logging.getLogger()
with warnings.catch_warnings():  # torch, numpy and scipy add filters on import: theirs
    for name in sorted(third_party):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional dependency, imported under try (the walk below imports it so too)
            pass
for handler in list(root.handlers):  # fairseq's import: logging.basicConfig(level=DEBUG), theirs
    root.removeHandler(handler)
root.setLevel(fresh["root_level"])
assert {"fairseq", "torch"} <= set(sys.modules), sorted(third_party)
before = snapshot()
assert before == fresh, differences(fresh, before)

import sipe_fairseq
sipe_fairseq.register()
def refuse(name):
    raise ImportError(f"cannot import {name}")
modules = [info.name for info in pkgutil.walk_packages(sipe_fairseq.__path__, "sipe_fairseq.", onerror=refuse)]
for name in modules:
    importlib.import_module(name)
after = snapshot()
print(json.dumps({"modules": modules, "third_party": sorted(third_party)}))
print(json.dumps(differences(before, after)))
'''
    proc = _python(script, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-2])
    # the walk reached the whole package: the tasks, the commands, the hub's implementation, nested packages
    assert {"sipe_fairseq.tasks.sipe_data", "sipe_fairseq.cli.eval_lm", "sipe_fairseq.hub.interface",
            "sipe_fairseq.eval.syntaxgym.scoring", "sipe_fairseq.data.gilt.gilt_dataset"} <= set(info["modules"]), info
    assert {"fairseq", "torch"} <= set(info["third_party"]), info
    assert _last_json(proc) == {}


def test_hub_load_leaves_logging_warnings_and_excepthook_as_the_user_had_them(train_checkpoint, tmp_path):
    """A fresh interpreter (root logger without handlers at WARNING, Python's own warnings filters): after
    ``hub.load`` (which imports fairseq) and a scoring, all three are unchanged, and a library's INFO and
    DEBUG lines go nowhere, as before the load."""
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
def state_restored():
    """sys.excepthook and the logging set-up as they were, after a test that runs a command's set-up in process."""
    root = logging.getLogger()
    hook, handlers, level = sys.excepthook, root.handlers[:], root.level
    plugin = logging.getLogger("sipe_fairseq").level
    yield
    sys.excepthook = hook
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.getLogger("sipe_fairseq").setLevel(plugin)


def test_a_commands_set_up_installs_the_hook_once(state_restored):
    from sipe_fairseq.cli import logs
    from sipe_fairseq.hexatag.errors import install_error_hook

    sys.excepthook = sys.__excepthook__  # whatever an earlier test of this process installed
    logs.configure("WARNING", logs.SHORT_FORMAT)  # what the sipe-* commands' main() run first
    hook = sys.excepthook
    assert hook is not sys.__excepthook__ and getattr(hook, "sipe_one_line_errors", False)
    assert hook.previous is sys.__excepthook__  # other exceptions go there
    assert install_error_hook() is False and sys.excepthook is hook  # idempotent: not wrapped twice
    logs.configure("INFO")
    assert sys.excepthook is hook


# a process that ends on an uncaught exception, after a command's set-up or without one
_RAISE = r'''
{setup}
from sipe_fairseq.hexatag.errors import CheckpointError, DataError, UsageError
raise {error}
'''
_CONFIGURE = "from sipe_fairseq.cli import logs\nlogs.configure('WARNING')"


@pytest.mark.parametrize("error, message, status", [
    ("DataError", "train.tags: line 3: bad tag", 1),
    ("UsageError", "--tag-sampling-p: 1.5 is not in [0, 1]", 2),
    ("CheckpointError", "ck.pt: no such file", 3),
])
def test_user_errors_end_a_command_with_one_line(tmp_path, error, message, status):
    proc = _python(_RAISE.format(setup=_CONFIGURE, error=f"{error}({message!r})"), tmp_path)
    assert proc.returncode == status and proc.stdout == ""
    assert proc.stderr.splitlines() == [f"sipe_fairseq: error: {message}"], proc.stderr


def test_other_exceptions_keep_their_traceback_under_the_hook(tmp_path):
    proc = _python(_RAISE.format(setup=_CONFIGURE, error="KeyError('not a user error')"), tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "sipe_fairseq: error" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == "KeyError: 'not a user error'"


def test_without_a_command_a_user_error_is_an_ordinary_exception(tmp_path):
    """Python (a script, a notebook) that imported the tasks: the interpreter's traceback and exit status 1
    (under the commands' hook a CheckpointError ends the process with one line and status 3)."""
    proc = _python(_RAISE.format(setup="import sipe_fairseq.tasks", error="CheckpointError('ck.pt: no such file')"),
                   tmp_path)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert proc.stderr.splitlines()[-1] == "sipe_fairseq.hexatag.errors.CheckpointError: ck.pt: no such file"


# (argv[0], the __main__ module's name or None, whether the process is a fairseq command)
PROCESSES = [("/env/bin/fairseq-train", None, True),
             ("/env/bin/fairseq-hydra-train", None, True),
             (os.path.join("site-packages", "fairseq_cli", "generate.py"), None, True),  # python .../fairseq_cli/generate.py
             ("-m", "fairseq_cli.eval_lm", True),  # python -m fairseq_cli.eval_lm
             ("/env/bin/sipe-eval-lm", None, False),  # its main() installs the hook (logs.configure), not the task
             ("-c", None, False)]  # Python: hub.load, a notebook, a script


def test_tasks_install_the_hook_only_in_a_fairseq_command(tmp_path):
    """``setup_task`` of a plugin task (what fairseq-train, fairseq-eval-lm and fairseq-generate run, and what
    ``checkpoints.load_lm`` runs from Python) installs the hook only when the process is a fairseq command."""
    script = f'''
import importlib.util, json, sys
hook = sys.excepthook
from sipe_fairseq.tasks.sipe_data import fairseq_command_running, install_command_error_hook
assert sys.excepthook is hook  # importing the tasks installs nothing
main = sys.modules["__main__"]
seen = []
for argv0, module, _ in {PROCESSES!r}:
    sys.excepthook = hook
    sys.argv[0] = argv0
    main.__spec__ = importlib.util.find_spec(module) if module else None
    running, first, second = fairseq_command_running(), install_command_error_hook(), install_command_error_hook()
    seen.append([running, first, sys.excepthook is not hook, second])
print(json.dumps(seen))
'''
    proc = _python(script, tmp_path)
    expected = [[installed, installed, installed, False] for _, _, installed in PROCESSES]  # the second call: idempotent
    assert _last_json(proc) == expected
