"""An algorithm appends op objects built from classes it imports; nothing is looked up by name between
an algorithm and its own code.

- the core's bucket has no method named after an algorithm, and no registry of ops exists;
- each built-in impl appends the op class its package (or the one it depends on, imported) defines;
- qadam imports bytegrad's op, so it still trains with bytegrad's plugin disabled;
- the original's ``append_*_op`` methods live in ``bagua.torch_api.bucket`` and build those same ops.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from bagua_core.api import tensors

import bagua_core.plugins as plugins
from bagua.torch_api.bucket import BaguaBucket as LegacyBucket
from bagua_algorithms.async_model_average.averager import AsyncModelAverager
from bagua_algorithms.bytegrad import CompressedAllReduceOp
from bagua_algorithms.decentralized import DecentralizedSynchronousOp
from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedOp
from bagua_core import BaguaBucket
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp
from bagua_core.plugins import get_plugin_manager
from tests.distributed import run_workers
from tests.models import SmallNet


def _bucket(cls=BaguaBucket) -> BaguaBucket:
    return cls([tensors.mark(torch.ones(4), "w")], "bucket_0", flatten=True)


def test_the_core_bucket_names_no_algorithm_and_no_registry_exists() -> None:
    legacy = {"append_centralized_synchronous_op", "append_decentralized_synchronous_op",
              "append_low_precision_decentralized_synchronous_op", "append_asynchronous_model_average_op",
              "append_python_op"}
    assert not legacy & set(dir(BaguaBucket))
    assert legacy <= set(dir(LegacyBucket))
    assert not [name for name in dir(plugins) if "op_registry" in name]
    assert not hasattr(get_plugin_manager().hook, "bagua_register_bucket_ops")


def test_the_original_methods_build_the_algorithms_ops() -> None:
    bucket = _bucket(LegacyBucket)
    bucket.append_centralized_synchronous_op(average=True)
    bucket.append_centralized_synchronous_op(hierarchical=False, compression="MinMaxUInt4")
    w = torch.ones(4)
    decentralized = bucket.append_decentralized_synchronous_op(w.clone(), peer_selection_mode="shift_one")
    low = bucket.append_low_precision_decentralized_synchronous_op(w.clone(), w.clone(), w.clone(), compression="fp16")
    kinds = [type(op) for op in bucket._ops]
    assert kinds == [CentralizedSynchronousOp, CompressedAllReduceOp, DecentralizedSynchronousOp,
                     LowPrecisionDecentralizedOp]
    assert bucket._ops[1].codec.name == "MinMaxUInt4" and low.codec.name == "fp16"
    assert decentralized.peer_selection_mode == "shift_one"
    with pytest.raises(ValueError, match="unknown codec 'zip'"):
        bucket.append_centralized_synchronous_op(compression="zip")
    averager = AsyncModelAverager([], comm=_FakeComm(), sync_interval_ms=10)
    assert bucket.append_asynchronous_model_average_op("all", averager=averager) is averager
    assert averager.buckets == [bucket]
    bucket.append_asynchronous_model_average_op("all", averager=averager)  # the same bucket once
    assert averager.buckets == [bucket]


class _FakeComm:
    def nranks(self) -> int:
        return 1


def _ops_of(rank: int, spec: dict) -> list[str]:
    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if spec["name"] == "qadam":
        from bagua_algorithms.q_adam import QAdamOptimizer

        optimizer = QAdamOptimizer(model.parameters(), lr=0.01, warmup_steps=1)
    model = model.with_bagua([optimizer], spec)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    found = sorted({type(op).__name__ for bucket in model.bagua_buckets for op in bucket._ops})
    model.bagua_shutdown()
    return found


@pytest.mark.parametrize("spec, expected", [
    ({"name": "gradient_allreduce"}, ["CentralizedSynchronousOp"]),
    ({"name": "bytegrad", "hierarchical": False}, ["CompressedAllReduceOp"]),
    ({"name": "qadam", "hierarchical": False}, ["CompressedAllReduceOp", "function"]),  # after warmup
    ({"name": "decentralized", "hierarchical": False}, ["DecentralizedSynchronousOp"]),
    ({"name": "low_precision_decentralized", "hierarchical": False}, ["LowPrecisionDecentralizedOp"]),
])
def test_each_impl_appends_its_imported_op(spec: dict, expected: list[str]) -> None:
    for found in run_workers(_ops_of, 2, spec):
        assert found == expected


@contextmanager
def _without(plugin_name: str):
    pm = get_plugin_manager()
    plugin = pm.get_plugin(plugin_name)
    pm.unregister(name=plugin_name)
    try:
        yield
    finally:
        pm.register(plugin, name=plugin_name)


def _qadam_without_bytegrad(rank: int) -> list[str]:
    with _without("bytegrad"):
        assert "bytegrad" not in plugins.algorithm_registry.names()
        return _ops_of(rank, {"name": "qadam", "hierarchical": False})


def test_qadam_needs_no_bytegrad_plugin_only_its_import() -> None:
    for found in run_workers(_qadam_without_bytegrad, 2):
        assert found == ["CompressedAllReduceOp", "function"]
