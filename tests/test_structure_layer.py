"""``sipe_fairseq/structure`` and ``sipe_fairseq/optim`` sit at layer 4 (docs/architecture.md), beside models
and tasks, but the shared layer checker (../shared/tools/check_layers.py) predates them and lists their files
as unplaced. This test holds the rule for them: each imports only layers 0-3 and itself, and no layer below 4
imports it."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "sipe_fairseq"
BELOW = {"hexatag", "parsing", "data", "modules"}


def imported_packages(path: Path):
    """The first package component inside sipe_fairseq of every import in ``path`` (lazy ones included)."""
    rel = path.relative_to(PKG).with_suffix("").parts
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = list(rel[:-1])[: len(rel) - node.level] + (node.module.split(".") if node.module else [])
            names = base or [a.name for a in node.names]
            yield node.lineno, names[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sipe_fairseq."):
            yield node.lineno, node.module.split(".")[1]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("sipe_fairseq."):
                    yield node.lineno, a.name.split(".")[1]


def test_structure_imports_only_lower_layers():
    files = sorted((PKG / "structure").glob("*.py"))
    assert len(files) >= 10
    bad = [f"{p.name}:{line}: {pkg}" for p in files for line, pkg in imported_packages(p) if pkg not in BELOW | {"structure"}]
    assert bad == []


def test_no_lower_layer_imports_structure():
    files = [p for layer in BELOW for p in sorted((PKG / layer).rglob("*.py"))]
    assert files
    bad = [f"{p.relative_to(PKG)}:{line}" for p in files for line, pkg in imported_packages(p) if pkg == "structure"]
    assert bad == []


def test_optim_imports_only_lower_layers():
    files = sorted((PKG / "optim").glob("*.py"))
    assert len(files) >= 2
    bad = [f"{p.name}:{line}: {pkg}" for p in files for line, pkg in imported_packages(p) if pkg not in BELOW | {"optim"}]
    assert bad == []


def test_no_lower_layer_imports_optim():
    files = [p for layer in BELOW for p in sorted((PKG / layer).rglob("*.py"))]
    assert files
    bad = [f"{p.relative_to(PKG)}:{line}" for p in files for line, pkg in imported_packages(p) if pkg == "optim"]
    assert bad == []
