"""A bucket's path from backward to the wire stays one a reader can follow: measured by ``tools/bucket_path.py``
(every chain of the project's frames that reaches ``torch.distributed`` in one traced backward), it runs through at
most 10 files and 4 crossings between packages, for the full-precision op of the core and bytegrad's pipelined,
compressed exchange."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

from tests.distributed import run_workers

TOOL = pathlib.Path(__file__).resolve().parents[1] / "tools" / "bucket_path.py"


def _tool():
    spec = importlib.util.spec_from_file_location("bucket_path", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trace(rank: int, algorithm: str) -> dict:
    return _tool().trace_one_backward(algorithm)


@pytest.mark.parametrize("algorithm", ["gradient_allreduce", "bytegrad"])
def test_every_chain_to_the_wire_is_short(algorithm: str) -> None:
    record = run_workers(_trace, 2, algorithm, local_size=1, timeout=120)[0]  # two nodes: the exchange crosses
    chains = record["chains"]
    assert chains, f"{algorithm}: no call reached torch.distributed in the traced backward"
    tool = _tool()
    for chain in chains:
        files, crossings = tool.chain_summary(chain)
        # from the backward hook, or (a bucket handed to the communication thread) from that thread's loop
        assert files[0] in ("bagua_core/module/hooks.py", "bagua_core/runtime/communication/worker.py"), chain
        assert len(files) <= 10 and len(crossings) <= 4, (algorithm, files, crossings)


def test_the_summary_counts_files_once_and_crossings_between_packages() -> None:
    tool = _tool()
    chain = " > ".join(["bagua_core/module/hooks.py:hook", "bagua_core/lifecycle/bucket.py:mark_ready",
                        "bagua_core/lifecycle/scheduler.py:_on_ready", "bagua_core/lifecycle/bucket.py:execute_ops",
                        "bagua_algorithms/bytegrad/compressed.py:__call__"])
    files, crossings = tool.chain_summary(chain)
    assert files == ["bagua_core/module/hooks.py", "bagua_core/lifecycle/bucket.py",
                     "bagua_core/lifecycle/scheduler.py", "bagua_algorithms/bytegrad/compressed.py"]
    assert crossings == ["bagua_core.module -> bagua_core.lifecycle",
                         "bagua_core.lifecycle -> bagua_algorithms.bytegrad",
                         "bagua_algorithms.bytegrad -> torch.distributed"]
