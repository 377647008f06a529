from __future__ import annotations

import json
import os
import sys

import pytest

# workers import test modules by their package path
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _environment_of_its_own():
    """Each test's changes to ``os.environ`` end with it. A test that runs code a worker runs (an activated
    standby records its replica there) would otherwise hand that replica to every later ``bagua run`` the same
    xdist worker starts: a plain job's lines then came out as ``[replica 2] ...``."""
    before = dict(os.environ)
    yield
    if os.environ != before:
        os.environ.clear()
        os.environ.update(before)


@pytest.fixture
def job(tmp_path):
    """A fault-tolerant job's lighthouse and replicas (``tests.fault_tolerant_job``), closed after the test."""
    from tests.fault_tolerant_job import Job  # torchft is imported only by the tests that use it

    job = Job(tmp_path)
    try:
        yield job
    finally:
        job.close()


SLOW_FIRST = (
    "tests/test_bench_message_count.py", "tests/test_fault_tolerant_decentralized.py",
    "tests/test_plugin_guide_package.py", "tests/test_fault_tolerant_quiet.py", "tests/test_fault_tolerant_matrix.py",
    "tests/test_bench_lm_field.py", "tests/test_convergence.py", "tests/test_launch_failure_message.py",
    "tests/test_bench_lm_measure.py", "tests/test_compat_launch.py", "tests/test_cli_help.py",
    "tests/test_fault_tolerant_train_restart.py", "tests/test_cli.py", "tests/test_sharded_checkpoints.py",
    "tests/test_elastic.py", "tests/test_benchmarks_smoke.py", "tests/test_fault_tolerant_timed.py",
    "tests/test_failure_propagation.py", "tests/test_docs_examples.py", "tests/test_bench_scale.py",
)
"""Modules whose tests took 10 s or more each (measured on 6 workers), slowest first. pytest-xdist hands out
tests in collection order, so these go first: a worker is never left running one of them alone at the end."""


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items) -> None:
    from tests.quick_subset import COLLECTED, is_slow

    for item in items:
        if is_slow(item.nodeid):
            item.add_marker(pytest.mark.slow)
    config.stash[COLLECTED] = slow = {item.nodeid: item.get_closest_marker("slow") is not None for item in items}
    if os.environ.get("BAGUA_TESTS_LIST"):  # tests/test_quick_subset.py: every test, and whether it is slow
        with open(os.environ["BAGUA_TESTS_LIST"], "w") as out:
            json.dump(slow, out)
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}
    order = {id(item): n for n, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.nodeid.split("::", 1)[0], len(SLOW_FIRST)), order[id(item)]))
