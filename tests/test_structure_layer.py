"""The layer rule of ``sipe_fairseq`` (docs/architecture.md, "Layers"), read from the source with ``ast``.

Layers, lowest first: hexatag -> parsing -> data -> modules -> models/tasks/criterions/checkpoints/
structure/optim -> eval -> cli. A file in a layer imports only its own layer and the layers below it,
function-level (lazy) imports included, and no files import each other in a loop. ``sipe_fairseq/
__init__.py`` and any other file directly in ``sipe_fairseq/`` stand outside the layers and may import
anything; the bare package (``import sipe_fairseq``, whose ``register()`` imports layer 4) counts as
layer 4. Inside layer 4, ``structure/`` and ``optim/`` import only layers 0-3; ``modules/`` imports no fairseq.
A function-level import says in a comment why it is one (``lazy (cycle)`` or ``lazy (heavy)``). Run alone:
``pytest tests/test_structure_layer.py``.
"""
import ast
import re
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

PKG = Path(__file__).resolve().parent.parent / "sipe_fairseq"
LAYER_ORDER = [("hexatag",), ("parsing",), ("data",), ("modules",),
               ("models", "tasks", "criterions", "checkpoints", "structure", "optim"), ("eval",), ("hub",), ("cli",)]
LAYER = {name: i for i, names in enumerate(LAYER_ORDER) for name in names}
ROOT_LAYER = LAYER["tasks"]  # what importing the bare package brings in: register() imports layer 4

Module = Tuple[str, ...]  # a module's path inside the package, e.g. ("eval", "blimp"); () is the package


def module_of(path: Path, root: Path) -> Module:
    parts = path.relative_to(root).with_suffix("").parts
    return parts[:-1] if parts[-1] == "__init__" else parts


def imports(path: Path, root: Path) -> Iterator[Tuple[int, Module]]:
    """(line, imported module inside the package) of every import in ``path``, at any depth of the file.
    ``from X import name`` yields X.name when that is a module or package of its own, else X."""
    here = module_of(path, root)
    package = here if path.name == "__init__.py" else here[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top, *rest = alias.name.split(".")
                if top == root.name:
                    yield node.lineno, tuple(rest)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > len(package):
                    raise ValueError(f"{path}:{node.lineno}: relative import above the package")
                base = package[: len(package) - (node.level - 1)]
            elif node.module and node.module.split(".")[0] == root.name:
                base = ()
            else:
                continue
            extra = tuple(node.module.split(".")) if node.module else ()
            if not node.level:
                extra = extra[1:]
            base = base + extra
            subs = [base + (a.name,) for a in node.names if is_module(root, base + (a.name,))]
            for target in subs or [base]:
                yield node.lineno, target


def is_module(root: Path, module: Module) -> bool:
    target = root.joinpath(*module) if module else root
    return target.with_suffix(".py").is_file() or (target / "__init__.py").is_file()


def layer_of(module: Module) -> Optional[int]:
    """The layer of a module; None for a file directly in the package (outside the layers)."""
    return LAYER.get(module[0]) if module else ROOT_LAYER


def upward_imports(root: Path) -> List[str]:
    """Every import in a layer's file of a module in a higher layer, as ``file:line: ... imports ...``."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        mine = module_of(path, root)
        if len(path.relative_to(root).parts) == 1:  # __init__.py and any other file directly in the package: outside the layers
            continue
        for line, target in imports(path, root):
            theirs = layer_of(target)
            if theirs is not None and theirs > LAYER[mine[0]]:
                bad.append(f"{path.relative_to(root)}:{line}: layer {LAYER[mine[0]]} imports "
                           f"{'.'.join((root.name,) + target)} (layer {theirs})")
    return bad


def import_cycles(root: Path) -> List[List[str]]:
    """The sets of files (package ``__init__.py`` files aside, which only re-export) that import each other
    in a loop: strongly connected components of more than one file of the file import graph."""
    files = {module_of(p, root): p for p in sorted(root.rglob("*.py")) if p.name != "__init__.py"}
    edges: Dict[Module, Set[Module]] = {m: {t for _, t in imports(p, root) if t in files and t != m}
                                        for m, p in files.items()}
    order, low, on_stack, stack, found = {}, {}, set(), [], []
    for start in files:  # Tarjan's algorithm, iterative
        if start in order:
            continue
        work = [(start, iter(sorted(edges[start])))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == order[node]:
                    component = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        component.append("/".join(m) + ".py")
                        if m == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in order:
                order[child] = low[child] = len(order)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges[child]))))
            elif child in on_stack:
                low[node] = min(low[node], order[child])
    return found


def test_every_folder_has_a_layer():
    folders = sorted({p.relative_to(PKG).parts[0] for p in PKG.rglob("*.py") if len(p.relative_to(PKG).parts) > 1})
    assert set(folders) == set(LAYER), "a new folder of sipe_fairseq needs its place in LAYER_ORDER (and the docs)"


MAX_FLAT_MODULES = 15


def flat_modules(root: Path) -> Dict[str, int]:
    """Per package folder (the package itself included), the modules directly in it (``__init__.py`` aside)."""
    folders = [root] + [p for p in sorted(root.rglob("*")) if p.is_dir() and (p / "__init__.py").is_file()]
    return {str(f.relative_to(root.parent)): sum(1 for m in f.glob("*.py") if m.name != "__init__.py") for f in folders}


def test_no_package_holds_more_than_15_modules():
    """A package of more than 15 modules directly in it is cut into sub-packages that show the design
    (``eval/syntaxgym/``, ``eval/reports/``, ``data/gilt/``)."""
    counts = flat_modules(PKG)
    assert counts["sipe_fairseq/eval"] > 0 and counts["sipe_fairseq/eval/syntaxgym"] == 6
    assert {name: n for name, n in counts.items() if n > MAX_FLAT_MODULES} == {}


def test_no_import_runs_upward():
    assert len(list(PKG.rglob("*.py"))) > 100
    assert upward_imports(PKG) == []


def test_no_import_cycles_between_files():
    assert import_cycles(PKG) == []


def test_structure_and_optim_import_only_layers_0_to_3():
    """Inside layer 4, ``structure/`` and ``optim/`` stand beside the fairseq-registered packages: they import
    only layers 0-3 and their own folder (``tasks/`` imports ``structure/``, never the other way)."""
    for folder in ("structure", "optim"):
        files = sorted((PKG / folder).rglob("*.py"))
        assert len(files) >= 2
        bad = [f"{p.relative_to(PKG)}:{line}: {'.'.join(t)}" for p in files for line, t in imports(p, PKG)
               if not t or (t[0] != folder and LAYER.get(t[0], 0) > LAYER["modules"])]
        assert bad == []


def test_modules_import_no_fairseq():
    """``modules/`` is torch only (docs/architecture.md): fairseq's own classes, extended, live in ``models/``."""
    files = sorted((PKG / "modules").rglob("*.py"))
    bad = [f"{p.relative_to(PKG)}:{n.lineno}" for p in files for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
           if (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "fairseq" for a in n.names))
           or (isinstance(n, ast.ImportFrom) and not n.level and (n.module or "").split(".")[0] == "fairseq")]
    assert len(files) >= 10 and bad == []


def test_lazy_imports_are_seen():
    """The walk reads imports inside functions too: a real package's function-level imports are found."""
    lazy = [(p, line, t) for p in sorted(PKG.rglob("*.py")) for line, t in imports(p, PKG)
            if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno < line <= n.end_lineno
                   for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))))]
    assert len(lazy) >= 10


_JOINS = re.compile(r"\s*(#.*|try:|except\b.*:|else:)?\s*$")  # lines that do not split a group of imports
_WHY = re.compile(r"lazy \((cycle|heavy)\b")


def lazy_import_groups(path: Path) -> List[Tuple[int, str]]:
    """(first line, text) of each group of function-level imports in ``path``: imports of one function on
    consecutive lines (blank, comment and try/except lines between them allowed), with the comment lines
    right above the group."""
    lines = path.read_text(encoding="utf-8").split("\n")
    tree = ast.parse("\n".join(lines))
    groups = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        inner = [n for n in ast.walk(fn) if n is not fn and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        found = sorted((n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))
                        and not any(m.lineno <= n.lineno <= m.end_lineno for m in inner)), key=lambda n: n.lineno)
        spans: List[List[int]] = []
        for n in found:
            if spans and all(_JOINS.match(x) for x in lines[spans[-1][1]: n.lineno - 1]):
                spans[-1][1] = n.end_lineno
            else:
                spans.append([n.lineno, n.end_lineno])
        for first, last in spans:
            top = first - 1
            while top > 0 and lines[top - 1].strip().startswith("#"):
                top -= 1
            groups.append((first, "\n".join(lines[top:last])))
    return groups


def test_lazy_imports_say_why():
    """An import stays inside a function only for a cycle through a package ``__init__.py`` or a heavy
    dependency, and a comment says which: ``lazy (cycle): ...`` or ``lazy (heavy): ...``."""
    groups = [(p, line, text) for p in sorted(PKG.rglob("*.py")) for line, text in lazy_import_groups(p)]
    assert len(groups) >= 10
    assert [f"{p.relative_to(PKG)}:{line}" for p, line, text in groups if not _WHY.search(text)] == []


def test_the_checks_catch_an_upward_import_and_a_cycle(tmp_path):
    """A toy package with the same layers: a lazy upward import (data -> eval), whose comment does not say
    why it is lazy, and a two-file loop inside one layer are reported; a file directly in the package may
    import anything."""
    root = tmp_path / "sipe_fairseq"
    for folder in ("data", "eval", "models", "cli"):
        (root / folder).mkdir(parents=True)
        (root / folder / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "extra.py").write_text("from .cli import run\nfrom .eval import report\n")
    (root / "cli" / "run.py").write_text("from ..eval.report import x\n")
    (root / "eval" / "report.py").write_text("from ..models import a\nx = 1\n")
    (root / "data" / "words.py").write_text("def f():\n    from ..eval import report  # lazy\n    return report\n")
    (root / "models" / "a.py").write_text("from . import b\n")
    (root / "models" / "b.py").write_text("import sipe_fairseq.models.a\nimport sipe_fairseq\n")
    assert upward_imports(root) == ["data/words.py:2: layer 2 imports sipe_fairseq.eval.report (layer 5)"]
    assert import_cycles(root) == [["models/a.py", "models/b.py"]]
    assert [line for line, text in lazy_import_groups(root / "data" / "words.py") if not _WHY.search(text)] == [2]
    (root / "data" / "words.py").write_text("import sipe_fairseq\n")  # the bare package counts as layer 4
    assert upward_imports(root) == ["data/words.py:1: layer 2 imports sipe_fairseq (layer 4)"]
