"""No function (or method) in ``sipe_fairseq/structure`` or ``sipe_fairseq/modules`` is over 80 lines,
counted from its ``def`` line to its last line (docstring and comments included)."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "sipe_fairseq"
LIMIT = 80


def long_functions(folder: Path):
    """(file relative to the package, function name, lines) of every function over LIMIT lines."""
    out = []
    for path in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    out.append((path.relative_to(folder.parent).as_posix(), node.name, lines))
    return out


def test_the_walk_finds_a_method_one_line_over(tmp_path):
    """A function of LIMIT lines passes; a method of LIMIT + 1 lines (its docstring counted) is reported."""
    body = "\n".join(f"    x{i} = {i}" for i in range(LIMIT - 2))
    code = f"def ok():\n    \"\"\"doc\"\"\"\n{body}\n\n\nclass A:\n    def long(self):\n        \"\"\"doc\"\"\"\n"
    code += "\n".join(f"        x{i} = {i}" for i in range(LIMIT - 1)) + "\n"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(code)
    assert long_functions(tmp_path / "pkg") == [("pkg/m.py", "long", LIMIT + 1)]


def test_no_long_functions_in_structure_and_modules():
    files = [p for folder in ("structure", "modules") for p in (PKG / folder).rglob("*.py")]
    assert len(files) >= 20
    over = [f"{f}: {name} has {n} lines" for folder in ("structure", "modules") for f, name, n in long_functions(PKG / folder)]
    assert over == []
