"""The module import graph of first-party packages, read from the source's AST, and its circles.

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING``, relative
(``from . import x``), ``from package import submodule`` and ``importlib.import_module("literal")``.
An import of ``a.b.c`` is an edge to the module ``a.b.c`` (the packages above it run first, but
importing a package's child is not a dependency on the package's own code). ``from a.b import name``
is an edge to ``a.b.name`` when that is a module; when ``name`` is re-exported by ``a/b/__init__.py``
(``from a.b.x import name``) it is an edge to the module defining it, else to ``a.b`` itself.
A circle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib

__all__ = ["Edge", "ImportGraph", "find_modules"]

_EXTENSIONS = (".so", ".pyd")


@dataclasses.dataclass(frozen=True)
class Edge:
    source: str
    line: int
    target: str


def _module_name(path: pathlib.Path, base: pathlib.Path) -> tuple[str, bool]:
    parts = list(path.relative_to(base).parts)
    parts[-1] = parts[-1].split(".")[0]  # x.py, x.cpython-311-x86_64-linux-gnu.so, x.abi3.so
    is_package = parts[-1] == "__init__"
    return ".".join(parts[:-1] if is_package else parts), is_package


def find_modules(packages: dict[str, pathlib.Path]) -> dict[str, tuple[pathlib.Path, bool]]:
    """``{module name: (file, is a package)}`` for each package ``name`` found under its base folder.
    Compiled extension modules are nodes too (with no imports), so ``from pkg import _ext`` is an edge
    to ``pkg._ext``, not to ``pkg``."""
    modules: dict[str, tuple[pathlib.Path, bool]] = {}
    for package, base in packages.items():
        if not (base / package / "__init__.py").is_file():
            raise FileNotFoundError(f"{base / package}/__init__.py: no such package; fix the package list")
        for path in sorted((base / package).rglob("*")):
            if path.suffix == ".py" or path.suffix in _EXTENSIONS:
                name, is_package = _module_name(path, base)
                modules.setdefault(name, (path, is_package))
    return modules


class ImportGraph:
    """The import edges between ``modules`` (as :func:`find_modules` returns them)."""

    def __init__(self, modules: dict[str, tuple[pathlib.Path, bool]]) -> None:
        self.modules = modules
        self._trees: dict[str, ast.Module] = {}
        self.edges: dict[str, list[Edge]] = {name: self._edges_of(name) for name in modules}

    def _tree(self, name: str) -> ast.Module | None:
        path, _ = self.modules[name]
        if path.suffix != ".py":
            return None
        if name not in self._trees:
            self._trees[name] = ast.parse(path.read_text(), str(path))
        return self._trees[name]

    def _package_of(self, name: str) -> str:
        return name if self.modules[name][1] else name.rpartition(".")[0]

    def _absolute(self, name: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        base = self._package_of(name).split(".")
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def _known(self, module: str) -> str | None:
        """``module`` or the nearest package above it that is first-party (None: third-party)."""
        while module and module not in self.modules:
            module = module.rpartition(".")[0]
        return module or None

    def _defining_module(self, module: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """Where ``from module import name`` finds ``name``: a submodule, the module a package's
        ``__init__`` re-exports it from, or ``module`` itself."""
        if f"{module}.{name}" in self.modules:
            return f"{module}.{name}"
        if module in self.modules and self.modules[module][1] and module not in seen:
            tree = self._tree(module)
            for node in tree.body if tree else ():
                if isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        if (alias.asname or alias.name) == name:
                            origin = self._absolute(module, node)
                            if self._known(origin):
                                return self._defining_module(origin, alias.name, seen | {module})
        return module

    def _edges_of(self, name: str) -> list[Edge]:
        tree = self._tree(name)
        found: list[Edge] = []
        for node in ast.walk(tree) if tree else ():
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                module = self._absolute(name, node)
                targets = [self._defining_module(module, alias.name) for alias in node.names]
            elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None))
                  in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)):
                targets = [node.args[0].value]
            for target in targets:
                known = self._known(target)
                edge = Edge(name, node.lineno, known) if known and known != name else None
                if edge and edge not in found:
                    found.append(edge)
        return found

    def circles(self) -> list[list[str]]:
        """The strongly connected components of more than one module, each sorted (Tarjan)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        components: list[list[str]] = []

        def visit(v: str) -> None:
            index[v] = low[v] = len(index)
            stack.append(v)
            on_stack.add(v)
            for edge in self.edges[v]:
                w = edge.target
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

        for v in sorted(self.edges):
            if v not in index:
                visit(v)
        return sorted(components)

    def describe(self, circle: list[str], root: pathlib.Path) -> str:
        """The circle's files and the imports that close it (``file:line: imports module``)."""
        members = set(circle)
        lines = [f"circle of {len(circle)} modules:"]
        for module in circle:
            path = self.modules[module][0]
            shown = path.relative_to(root) if path.is_relative_to(root) else path
            lines += [f"  {shown}:{e.line}: imports {e.target}" for e in self.edges[module] if e.target in members]
        return "\n".join(lines)
