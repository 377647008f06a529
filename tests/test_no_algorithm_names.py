"""The core and contrib name no built-in algorithm, and the core names no built-in codec: what they need
to know, the plugin declares (``bagua_core.lifecycle.capabilities``, the ``Codec`` contract), and they ask it.

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

Codecs and kernels, in ``bagua_core`` only (code, through its AST; docstrings and comments allowed, defaults
not): an identifier or a string constant naming a built-in codec (``MinMaxUInt8``, ``MinMaxUInt4``,
``ScaledSign``, in any case, with or without underscores) or a kernel that belongs to one codec or algorithm
(``minmax`` / ``MinMax`` anywhere in it, ``lpd`` as a part of it, ``adam_update``). Those live with their
owners: ``bagua_codecs.minmax_kernels``, ``bagua_algorithms.<name>.kernels``; the core only loads the
compiled libraries (``bagua_core.runtime.native``).

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
            "decentralized_dp", "powersgd", "diloco", "sparseloco")
MODULE_NAMES = ("q_adam", "async_model_average")
UNAMBIGUOUS = re.compile(r"(?<![A-Za-z0-9])(gradient_allreduce|bytegrad|low_precision_decentralized|qadam|q_adam|"
                         r"decentralized_dp|powersgd|diloco|sparseloco|bagua_algorithms)(?![A-Za-z0-9])", re.IGNORECASE)


CODEC_SCANNED = ("bagua_core",)
CODEC_NAMES = ("minmaxuint8", "minmaxuint4", "scaledsign")  # lower case, underscores removed
KERNEL_WORDS = re.compile(r"minmax|adam_update", re.IGNORECASE)
_PARTS = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def names_a_codec(text: str) -> bool:
    """True when ``text`` (an identifier or a string constant) names a built-in codec or one owner's kernel."""
    folded = text.lower().replace("_", "")
    if any(name in folded for name in CODEC_NAMES) or KERNEL_WORDS.search(text):
        return True
    return "lpd" in (part.lower() for part in _PARTS.split(text))


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of string nodes that are docstrings (module, class, function and attribute docstrings)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
                    found.update(id(n) for n in ast.walk(statement.value))
    return found


def _identifiers(node: ast.AST) -> list[str]:
    """The names ``node`` introduces or uses (variable, attribute, argument, keyword, def, class, import)."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [a.asname or a.name for a in node.names] + [a.name for a in node.names if a.asname] + (
            [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword) and node.arg:
        return [node.arg]
    return []


def codec_violations(source: str, filename: str) -> list[str]:
    """``file:line: what`` for every identifier or (non-docstring) string constant of ``source`` that names
    a built-in codec or a kernel of one codec or algorithm."""
    tree = ast.parse(source, filename)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docs and names_a_codec(node.value):
                found.append(f"{filename}:{line}: string {node.value[:60]!r}")
            continue
        found += [f"{filename}:{line}: identifier {name!r}" for name in _identifiers(node) if names_a_codec(name)]
    return found


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


def test_core_names_no_codec_and_no_owners_kernel() -> None:
    found = []
    for package in CODEC_SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            found += codec_violations(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, ("built-in codecs or their owners' kernels named in the core (they live in bagua_codecs and "
                       "the algorithm packages; the core loads the libraries only):\n" + "\n".join(found))


CODEC_SAMPLE = '''"""A docstring may say MinMaxUInt8, ScaledSign, lpd_update and compress_minmax_uint8."""
# so may a comment: MinMaxUInt4
from bagua_core.runtime.native import minmax_stats
DEFAULT_CODEC = "MinMaxUInt8"
def f(x, compression="scaled_sign"):
    """minmax in a docstring."""
    lpd_difference(x)
    y = native.adam_update(x)
    stats = library.lib.bagua_minmax_headers_f32
    class MinMaxUInt4Codec: pass
    z = kernels.LpdOp(uint8=1)
    return "use minmaxuint8 here"
'''


@pytest.mark.parametrize("line,what", [
    (3, "identifier 'minmax_stats'"), (4, "string 'MinMaxUInt8'"), (5, "string 'scaled_sign'"),
    (7, "identifier 'lpd_difference'"), (8, "identifier 'adam_update'"), (9, "identifier 'bagua_minmax_headers_f32'"),
    (10, "identifier 'MinMaxUInt4Codec'"), (11, "identifier 'LpdOp'"), (12, "string 'use minmaxuint8 here'"),
])
def test_the_codec_scan_finds(line: int, what: str) -> None:
    found = codec_violations(CODEC_SAMPLE, "sample.py")
    assert any(f.startswith(f"sample.py:{line}:") and what in f for f in found), found


def test_the_codec_scan_allows_docs_and_neutral_names() -> None:
    found = codec_violations(CODEC_SAMPLE, "sample.py")
    assert not [f for f in found if f.split(":")[1] in ("1", "2", "6")], found
    assert not [f for f in found if "'uint8'" in f or "'x'" in f], found  # a dtype is no codec
    assert not codec_violations("import torch\nbuf = torch.empty(8, dtype=torch.uint8)\nhelpful = 'samples'\n", "ok.py")


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
