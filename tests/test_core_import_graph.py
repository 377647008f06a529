"""The core imports nothing above it: no module of ``bagua_core`` imports (at module level or inside
a function, by an import statement or ``importlib.import_module("...")`` with a literal name) from
the packages built on it: the algorithms, the codecs, contrib, the examples (the main job, found by
``bagua train`` through the ``bagua.jobs`` entry point) or the ``bagua`` compatibility package.
Checked on the source's AST, so a branch that runs rarely counts too."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
ABOVE = ("bagua_algorithms", "bagua_codecs", "bagua_contrib", "bagua_examples", "bagua")


def imported_modules(source: str, filename: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``source`` (relative imports resolve to the core)."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
              and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def upward(source: str, filename: str) -> list[str]:
    return [f"{filename}:{line}: imports {module}" for line, module in imported_modules(source, filename)
            if module.split(".")[0] in ABOVE]


def test_core_imports_nothing_above_it() -> None:
    found = []
    for path in sorted((ROOT / "bagua_core").rglob("*.py")):
        found += upward(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "bagua_core imports from packages above it:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "import bagua_algorithms.q_adam",
    "def f():\n    from bagua_examples.train_digits import main",
    "import importlib\nimportlib.import_module('bagua_contrib.lightning')",
    "from bagua.torch_api import algorithms",
])
def test_the_check_finds(source: str) -> None:
    assert upward(source, "x.py")


def test_the_check_lets_the_core_import_itself() -> None:
    assert not upward("import bagua_core.env\nfrom bagua_core import env\nimport torch\nfrom . import env", "x.py")
