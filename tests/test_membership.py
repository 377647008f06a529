"""Fault tolerance is handed to the algorithms, never discovered by them: an impl learns who trains with it
from ``process_group.membership`` (``bagua_core.runtime.membership``), and fault-tolerant mode is wired in
one bootstrap call of ``init_process_group`` (``bagua_core.bootstrap``), not when a module is imported."""

from __future__ import annotations

import ast
import pathlib

import pytest

from bagua_core.runtime.membership import FIXED, Membership
from tests.distributed import run_workers

ROOT = pathlib.Path(__file__).resolve().parent.parent
FORBIDDEN_NAMES = {"QuorumGroup", "current_runtime", "FaultTolerantRuntime", "ManagedGroup"}


def discoveries(source: str, filename: str) -> list[str]:
    """``file:line: what`` for each import of the fault-tolerance package and each use of its types."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        if any(m == "bagua_features.fault_tolerance" or m.startswith("bagua_features.fault_tolerance.") for m in modules):
            found.append(f"{filename}:{node.lineno}: imports the fault-tolerance package")
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        if name in FORBIDDEN_NAMES:
            found.append(f"{filename}:{node.lineno}: uses {name}")
    return found


def test_no_algorithm_discovers_fault_tolerance() -> None:
    found = []
    for path in sorted((ROOT / "bagua_algorithms").rglob("*.py")):
        found += discoveries(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "algorithms must read process_group.membership instead:\n" + "\n".join(found)


@pytest.mark.parametrize("source", [
    "from bagua_features.fault_tolerance.quorum_group import QuorumGroup",
    "def f(g):\n    return isinstance(g, QuorumGroup)",
    "import bagua_features.fault_tolerance",
    "from bagua_features import fault_tolerance",
    "def f():\n    from bagua_features.fault_tolerance.current import current_runtime\n    return current_runtime()",
])
def test_the_scan_finds(source: str) -> None:
    assert discoveries(source, "x.py")


def test_importing_the_package_wires_nothing() -> None:
    import bagua_features.fault_tolerance  # noqa: F401
    import bagua_core.runtime.process_group as process_group

    assert not hasattr(process_group, "set_fault_tolerance")
    assert process_group.BaguaProcessGroup.membership is FIXED and not FIXED.changes and not FIXED.on_quorum
    assert Membership(changes=True, quorum_id=3).on_quorum


def _memberships(rank: int) -> tuple:
    from bagua_core.runtime.process_group import get_default_group, new_group

    group = get_default_group()
    return group.membership, new_group([0, 1]).membership


def test_a_fail_fast_job_has_fixed_membership() -> None:
    for default, sub in run_workers(_memberships, 2):
        assert default == FIXED and sub == FIXED
