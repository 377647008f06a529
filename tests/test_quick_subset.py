"""The quick subset (``-m "not slow"``, :mod:`tests.quick_subset`) keeps a test of every built-in algorithm,
and each of its patterns still names a test (a renamed test would otherwise move in or out silently)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.quick_subset import QUICK, SLOW, matches

ROOT = Path(__file__).resolve().parent.parent


def _collect(*args: str) -> list[str]:
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                           *args], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line.strip() for line in done.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def collected() -> tuple[list[str], list[str]]:
    everything = _collect()
    return everything, _collect("-m", "not slow")


def _algorithms() -> list[str]:
    from bagua_core.plugins import algorithm_registry

    return sorted(name for name, (cls, _) in algorithm_registry.providers().items()
                  if cls.__module__.startswith("bagua_algorithms."))


def _covers(nodeid: str, names: list[str]) -> set[str]:
    """The algorithms a test is about: its module is ``test_<name>...`` (the longest name that fits), or a
    case of it is named after one (``[diloco]``, ``[sparseloco, 2 replicas]``)."""
    stem = Path(nodeid.split("::", 1)[0]).stem
    about = {max((n for n in names if stem == f"test_{n}" or stem.startswith(f"test_{n}_")), key=len, default="")}
    case = nodeid.partition("[")[2]
    about |= {n for n in names if re.search(rf"(^|[\[\s,-]){re.escape(n)}($|[\]\s,+-])", case)}
    return about - {""}


@pytest.mark.xdist_group("quick_subset")
def test_every_builtin_algorithm_keeps_a_quick_test(collected) -> None:
    _, quick = collected
    names = _algorithms()
    assert len(names) >= 10, names
    covered = set().union(*(_covers(nodeid, names) for nodeid in quick))
    assert not set(names) - covered, f"no quick test left for {sorted(set(names) - covered)}: keep one in QUICK"


@pytest.mark.xdist_group("quick_subset")
def test_every_pattern_names_a_test(collected) -> None:
    everything, quick = collected
    stale = [p for p in SLOW + QUICK if not any(matches(nodeid, p) for nodeid in everything)]
    assert not stale, f"patterns in tests/quick_subset.py that name no test any more: {stale}"
    missing = [p for p in QUICK if not any(matches(nodeid, p) for nodeid in quick)]
    assert not missing, f"QUICK patterns whose tests are marked slow where they are written: {missing}"
    assert len(quick) < len(everything)


def test_a_pattern_takes_brackets_literally() -> None:
    assert matches("tests/t.py::test_a[2-2]", "tests/t.py::test_a[2-2]")
    assert not matches("tests/t.py::test_a[2]", "tests/t.py::test_a[2-2]")
    assert matches("tests/t.py::test_a[x, y]", "tests/t.py::test_a[*")
    assert not matches("tests/t.py::test_ab", "tests/t.py::test_a")


def test_the_matching_sees_module_and_case_names() -> None:
    names = ["auto", "decentralized", "decentralized_dp", "diloco", "low_precision_decentralized", "sparseloco"]
    assert _covers("tests/test_decentralized_dp_wrapper.py::test_x", names) == {"decentralized_dp"}
    assert _covers("tests/test_autotune.py::test_x", names) == set()
    assert _covers("tests/test_diloco_timed.py::test_equals_the_reference[sparseloco, 2 replicas]", names) == {
        "diloco", "sparseloco"}
    assert _covers("tests/test_x.py::test_y[low_precision_decentralized]", names) == {"low_precision_decentralized"}
