"""The core and contrib name no built-in algorithm: what they need to know, the plugin declares
(``bagua_core.lifecycle.capabilities``), and they ask it.

Scanned: every ``.py`` file under ``bagua_core/`` and ``bagua_contrib/`` (code, through its AST).
A violation is

- an identifier (variable, attribute, argument, keyword, function or class name, imported name) equal
  to a built-in algorithm's name;
- a string constant equal to one, or mentioning one of the unambiguous names (``qadam``,
  ``bytegrad``, ``decentralized_dp``, ...; not the English words "async" / "decentralized") or the
  ``bagua_algorithms`` package (a late import by name);
- an import of ``bagua_algorithms`` (also checked, for the core, by ``test_core_import_graph.py``).

Allowed: docs (module, class, function and attribute docstrings, comments, ``help=`` texts) and
defaults: a function parameter's default, a ``default=`` keyword, the value of a ``DEFAULT*`` constant. The
original's bucket-op method names (``append_low_precision_decentralized_synchronous_op``, which find
their ops through the bucket-op registry) are the documented API, not algorithms: identifiers count
only when they *equal* an algorithm's name.

Not scanned: the ``bagua/`` compatibility package, which mirrors the original's module paths
(``bagua.torch_api.algorithms.q_adam`` ...) and so must name the algorithms; ``bagua_algorithms/``
and plugin packages, where the algorithms live.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCANNED = ("bagua_core", "bagua_contrib")
BUILT_IN = ("gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam", "async",
            "decentralized_dp", "powersgd", "diloco")
MODULE_NAMES = ("q_adam", "async_model_average")
UNAMBIGUOUS = re.compile(r"(?<![A-Za-z0-9])(gradient_allreduce|bytegrad|low_precision_decentralized|qadam|q_adam|"
                         r"decentralized_dp|powersgd|diloco|bagua_algorithms)(?![A-Za-z0-9])", re.IGNORECASE)


def _allowed_constants(tree: ast.AST) -> set[int]:
    """ids of string nodes that are docstrings or defaults."""
    allowed: set[int] = set()

    def allow(expr: ast.AST | None) -> None:
        if expr is not None:
            allowed.update(id(n) for n in ast.walk(expr))

    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):  # docstrings, and the attribute docstrings after an assignment
            for statement in body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    allow(statement.value)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for default in node.args.defaults + node.args.kw_defaults:
                allow(default)
        elif isinstance(node, ast.keyword) and node.arg in ("default", "help"):
            allow(node.value)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id.upper().startswith("DEFAULT") for t in targets):
                allow(node.value)
    return allowed


def violations(source: str, filename: str) -> list[str]:
    """``file:line: what`` for every mention of a built-in algorithm in ``source``'s code."""
    tree = ast.parse(source, filename)
    allowed = _allowed_constants(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in allowed:
            if node.value in BUILT_IN or UNAMBIGUOUS.search(node.value):
                found.append(f"{filename}:{line}: string {node.value[:60]!r}")
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module
                                                      else [])
            if any(m.split(".")[0] == "bagua_algorithms" for m in modules):
                found.append(f"{filename}:{line}: import from bagua_algorithms")
            names = [a.asname or a.name for a in node.names]
        elif isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.arg):
            names = [node.arg]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        else:
            continue
        for name in names:
            if name in BUILT_IN or name in MODULE_NAMES:
                found.append(f"{filename}:{line}: identifier {name!r}")
    return found


def test_core_and_contrib_name_no_algorithm() -> None:
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += violations(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "built-in algorithms named in the core/contrib (ask the capabilities instead):\n" + "\n".join(found)


SAMPLE = '''"""Docstring naming qadam and bytegrad is fine."""
from bagua_algorithms.q_adam import QAdamOptimizer
DEFAULT_ALGORITHM = "gradient_allreduce"
TUNABLE = {"gradient_allreduce", "bytegrad"}
def f(algorithm="decentralized_dp", *, other="async"):
    """mentions powersgd."""
    if algorithm == "qadam":
        return importlib.import_module("bagua_algorithms.diloco")
    parser.add_argument("--algorithm", default="bytegrad", help="the async way")
    q_adam = 1
    return f"{algorithm} is not diloco"
'''


@pytest.mark.parametrize("line,what", [
    (2, "import from bagua_algorithms"), (2, "identifier 'QAdamOptimizer'"), (4, "'gradient_allreduce'"),
    (4, "'bytegrad'"), (7, "'qadam'"), (8, "'bagua_algorithms.diloco'"), (10, "identifier 'q_adam'"),
    (11, "' is not diloco'"),
])
def test_the_scan_finds(line: int, what: str) -> None:
    found = violations(SAMPLE, "sample.py")
    if what == "identifier 'QAdamOptimizer'":  # a class of an algorithm package is caught by its import
        assert not any("QAdamOptimizer" in f for f in found)
        return
    assert any(f.startswith(f"sample.py:{line}:") and what in f for f in found), found


def test_the_scan_allows_docs_and_defaults() -> None:
    found = violations(SAMPLE, "sample.py")
    assert not [f for f in found if f.split(":")[1] in ("1", "3", "5", "6", "9")], found
