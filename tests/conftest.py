from __future__ import annotations

import os
import sys

import pytest

# workers import test modules by their package path
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def job(tmp_path):
    """A fault-tolerant job's lighthouse and replicas (``tests.fault_tolerant_job``), closed after the test."""
    from tests.fault_tolerant_job import Job  # torchft is imported only by the tests that use it

    job = Job(tmp_path)
    try:
        yield job
    finally:
        job.close()
