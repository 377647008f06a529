"""The quick subset (``-m "not slow"``, :mod:`tests.quick_subset`) keeps a test of every built-in algorithm,
and each of its patterns still names a test (a renamed test would otherwise move in or out silently)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.quick_subset import COLLECTED, QUICK, SLOW, matches

ROOT = Path(__file__).resolve().parent.parent


def _test_files() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in [*ROOT.glob("tests/test_*.py"),
                                                    *ROOT.glob("plugins_example/tests/test_*.py")]}


@pytest.fixture(scope="module")
def collected(request, tmp_path_factory) -> tuple[list[str], list[str]]:
    """Every test of the suite and those of the quick subset: this session's collection when it was the whole
    suite (as in the README's test command), else one collection of it in a subprocess."""
    slow = request.config.stash.get(COLLECTED, {})
    if {nodeid.split("::", 1)[0] for nodeid in slow} >= _test_files():
        return list(slow), [nodeid for nodeid, marked in slow.items() if not marked]
    listing = tmp_path_factory.mktemp("collected") / "tests.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "BAGUA_TESTS_LIST": str(listing)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    slow = json.loads(listing.read_text())
    return list(slow), [nodeid for nodeid, marked in slow.items() if not marked]


def _algorithms() -> list[str]:
    from bagua_core.plugins import algorithm_registry

    return sorted(name for name, (cls, _) in algorithm_registry.providers().items()
                  if cls.__module__.startswith("bagua_algorithms."))


def _covers(nodeid: str, names: list[str]) -> str | None:
    """The algorithm whose own test module holds this test: ``test_<name>.py`` or ``test_<name>_*.py``, the
    longest name that fits (a case named after an algorithm in another module, e.g. a capability listing or
    a fault-matrix cell, does not count: it does not check the algorithm's training against its oracle)."""
    stem = Path(nodeid.split("::", 1)[0]).stem
    return max((n for n in names if stem == f"test_{n}" or stem.startswith(f"test_{n}_")), key=len, default=None)


@pytest.mark.xdist_group("quick_subset")
def test_every_builtin_algorithm_keeps_a_quick_test(collected) -> None:
    _, quick = collected
    names = _algorithms()
    assert len(names) >= 10, names
    covered = {_covers(nodeid, names) for nodeid in quick}
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


def test_the_matching_takes_the_longest_algorithm_name_a_module_is_named_after() -> None:
    names = ["auto", "decentralized", "decentralized_dp", "diloco", "low_precision_decentralized", "sparseloco"]
    assert _covers("tests/test_decentralized_dp_wrapper.py::test_x", names) == "decentralized_dp"
    assert _covers("tests/test_decentralized.py::test_x[2-2]", names) == "decentralized"
    assert _covers("tests/test_autotune.py::test_x", names) is None
    assert _covers("tests/test_capabilities.py::test_every_algorithm_declares_its_own[diloco]", names) is None
