"""The import graph tells the design: the core imports nothing above it, and no first-party package
has an import circle.

No module of ``bagua_core`` imports (at module level or inside a function, by an import statement or
``importlib.import_module("...")`` with a literal name) from the packages built on it: the algorithms,
the codecs, the features (fault tolerance, checkpoints, metrics, autotuning), contrib, the CLI, the examples
(the main job, found by ``bagua train`` through the ``bagua.jobs`` entry point) or the ``bagua`` compatibility
package; nor torchft or tensorboard, which only features use.

No circle in the graph of every first-party module (``tests/import_graph.py``: function-local,
``TYPE_CHECKING``, relative and ``from package import submodule`` imports all count): a low layer that
must call a higher one is handed it (registration), it does not import it. Checked on the source's
AST, so a branch that runs rarely counts too."""

from __future__ import annotations

import ast
import pathlib

import pytest

from tests.import_graph import ImportGraph, find_modules

ROOT = pathlib.Path(__file__).resolve().parent.parent
ABOVE = ("bagua_algorithms", "bagua_codecs", "bagua_features", "bagua_contrib", "bagua_examples", "bagua", "bagua_cli",
         "torchft", "tensorboard")


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
            if module.split(".")[0] in ABOVE or "tensorboard" in module.split(".")]


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
    "from bagua_features.fault_tolerance import QuorumSampler",
    "def f():\n    import torchft",
    "from torch.utils.tensorboard import SummaryWriter",
])
def test_the_check_finds(source: str) -> None:
    assert upward(source, "x.py")


def test_the_check_lets_the_core_import_itself() -> None:
    assert not upward("import bagua_core.runtime.env\nfrom bagua_core import env\nimport torch\nfrom . import env", "x.py")


FIRST_PARTY = {package: ROOT for package in
               ("bagua_core", "bagua_algorithms", "bagua_codecs", "bagua_features", "bagua_contrib", "bagua_examples",
                "bagua", "bagua_cli", "benchmarks")}
FIRST_PARTY["bagua_local_sgd"] = ROOT / "plugins_example"

def test_no_import_circles() -> None:
    graph = ImportGraph(find_modules(FIRST_PARTY))
    circles = graph.circles()
    assert not circles, "import circles (break them by putting the code where it belongs):\n" + "\n".join(
        graph.describe(c, ROOT) for c in circles)


def _plant(tmp_path: pathlib.Path, files: dict[str, str]) -> ImportGraph:
    for name, source in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return ImportGraph(find_modules({"planted": tmp_path}))


@pytest.mark.parametrize("a_source, b_source", [
    ("import planted.b\n", "def f():\n    from planted import a\n"),  # function-local, package form
    ("from . import b\n", "from .a import x\n"),  # relative
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted.b import y\n", "import planted.a\n"),
    ("import importlib\nimportlib.import_module('planted.b')\n", "from planted.a import z\n"),
    ("from planted.sub import g\n", "from planted.a import z\n"),  # a name re-exported by a package
])
def test_the_check_finds_a_planted_circle(tmp_path: pathlib.Path, a_source: str, b_source: str) -> None:
    graph = _plant(tmp_path, {"planted/__init__.py": "", "planted/a.py": a_source, "planted/b.py": b_source,
                              "planted/sub/__init__.py": "from planted.b import g\n"})
    circles = graph.circles()
    assert [c for c in circles if {"planted.a", "planted.b"} <= set(c)], circles
    message = graph.describe(circles[0], tmp_path)
    assert "planted/a.py:" in message and "planted/b.py:" in message, message


def test_the_check_lets_layers_import_downwards(tmp_path: pathlib.Path) -> None:
    graph = _plant(tmp_path, {
        "planted/__init__.py": "from planted.high import run\n",  # a facade importing its children is no circle
        "planted/low.py": "import os\n",
        "planted/high.py": "from planted import low\nfrom planted.low import os\ndef run():\n    import planted.low\n",
    })
    assert graph.circles() == []
    assert {e.target for e in graph.edges["planted.high"]} == {"planted.low"}  # os is not first-party


# bagua_core's wings, lowest first: a module of a wing imports its own wing and the wings before it,
# never one after it (each wing's __init__ says what lives there). Modules in no wing (the package's
# own __init__) are not checked here.
WINGS = ("runtime", "plugins", "codecs", "lifecycle", "selection", "module")


def _wing(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "bagua_core" and parts[1] in WINGS else None


def test_the_core_wings_are_layers() -> None:
    graph = ImportGraph(find_modules({"bagua_core": ROOT}))
    found = []
    for module, edges in sorted(graph.edges.items()):
        own = _wing(module)
        for edge in edges:
            target = _wing(edge.target)
            if own and target and WINGS.index(target) > WINGS.index(own):
                path = graph.modules[module][0].relative_to(ROOT)
                found.append(f"{path}:{edge.line}: the {own} wing imports {edge.target}, of the {target} wing above it")
    assert not found, "bagua_core's wings import upwards:\n" + "\n".join(found)
    assert {_wing(m) for m in graph.modules} >= set(WINGS), "a wing listed in WINGS is missing from bagua_core"


def test_env_is_the_bottom() -> None:
    graph = ImportGraph(find_modules({"bagua_core": ROOT}))
    assert [e for e in graph.edges["bagua_core.runtime.env"] if e.target.startswith("bagua_core")] == []


def test_importing_bagua_leaves_out_what_only_sharded_models_need() -> None:
    """``torch.distributed.tensor`` (DTensor) and ``torch.distributed.checkpoint`` take about 0.6 s to import, in
    every worker of every job: bagua imports them only for a model sharded with FSDP2, which imported them first."""
    import subprocess
    import sys

    probe = ("import sys, bagua_core, bagua_algorithms\n"
             "from bagua_core.plugins import algorithm_registry\n"
             "[algorithm_registry.get(name) for name in algorithm_registry.names()]\n"
             "print(sorted(m for m in ('torch.distributed.tensor', 'torch.distributed.checkpoint', "
             "'torch.distributed.fsdp') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout
