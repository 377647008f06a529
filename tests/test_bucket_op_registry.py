"""``BaguaBucket.append_*_op`` finds its operation through the bucket-op registry (hook
``bagua_register_bucket_ops``): the built-in algorithms provide the original's operations, an inline
plugin may provide one instead, and a missing provider is an error naming the kind and the installed
plugins. Inline plugins are always unregistered (and the built-in one put back) in ``finally``."""

from __future__ import annotations

import types
from contextlib import contextmanager

import pytest
import torch

from bagua_core import BaguaBucket
from bagua_core.runtime.exceptions import DuplicateNameError, UnknownNameError
from bagua_core.plugins import bucket_op_registry, get_plugin_manager, hookimpl


def _bucket() -> BaguaBucket:
    return BaguaBucket([torch.ones(4).ensure_bagua_tensor("w")], "bucket_0", flatten=True)


@contextmanager
def _without(plugin_name: str):
    """The built-in plugin ``plugin_name`` unregistered for the block, registered again afterwards."""
    pm = get_plugin_manager()
    plugin = pm.get_plugin(plugin_name)
    pm.unregister(name=plugin_name)
    try:
        yield
    finally:
        pm.register(plugin, name=plugin_name)


class RecordingOp:
    """A third party's op for ``append_decentralized_synchronous_op``: records its arguments and runs."""

    name = "append_decentralized_synchronous_op"

    def __init__(self, arguments: dict) -> None:
        self.arguments = arguments
        self.runs = 0

    @classmethod
    def append_to(cls, bucket, peer_weight, hierarchical=True, peer_selection_mode="all", group=None):
        op = cls({"peer_weight": peer_weight, "hierarchical": hierarchical, "mode": peer_selection_mode, "group": group})
        bucket.append_op(op)
        return op

    def __call__(self, bucket: BaguaBucket) -> None:
        self.runs += 1


def test_the_built_in_algorithms_provide_the_originals_operations() -> None:
    providers = {kind: plugin for kind, (_, plugin) in bucket_op_registry.providers().items()}
    assert providers == {
        "append_centralized_synchronous_op": "bytegrad",
        "append_decentralized_synchronous_op": "decentralized",
        "append_low_precision_decentralized_synchronous_op": "decentralized",
        "append_asynchronous_model_average_op": "async_model_average",
    }
    for kind in providers:  # each kind is a documented BaguaBucket method
        assert callable(getattr(BaguaBucket, kind))


def test_append_op_resolves_through_the_registry() -> None:
    @hookimpl
    def bagua_register_bucket_ops():
        return [RecordingOp]

    pm = get_plugin_manager()
    with _without("decentralized"):
        pm.register(types.SimpleNamespace(bagua_register_bucket_ops=bagua_register_bucket_ops), name="test-recording-op")
        try:
            bucket = _bucket()
            peer_weight = torch.zeros(4)
            op = bucket.append_decentralized_synchronous_op(peer_weight, hierarchical=False,
                                                            peer_selection_mode="shift_one")
            assert isinstance(op, RecordingOp)
            assert op.arguments == {"peer_weight": peer_weight, "hierarchical": False, "mode": "shift_one",
                                    "group": None}
            bucket.execute_ops()
            assert op.runs == 1
        finally:
            pm.unregister(name="test-recording-op")
    assert bucket_op_registry.providers()["append_decentralized_synchronous_op"][1] == "decentralized"


def test_a_missing_provider_names_the_kind_and_the_installed_plugins() -> None:
    bucket = _bucket()
    with _without("decentralized"):
        with pytest.raises(UnknownNameError, match=r"BaguaBucket\.append_low_precision_decentralized_synchronous_op: "
                                                   r"no installed plugin provides.*installed plugins: .*bytegrad"):
            bucket.append_low_precision_decentralized_synchronous_op(torch.zeros(4), torch.zeros(4), torch.zeros(4))
    with _without("bytegrad"):
        with pytest.raises(UnknownNameError, match=r"append_centralized_synchronous_op"):
            bucket.append_centralized_synchronous_op(compression="MinMaxUInt8")
        bucket.append_centralized_synchronous_op()  # full precision: the core's own op, no plugin needed
        assert bucket.has_ops()


def test_two_providers_of_one_kind_are_refused_naming_both() -> None:
    @hookimpl
    def bagua_register_bucket_ops():
        return [RecordingOp]

    pm = get_plugin_manager()
    pm.register(types.SimpleNamespace(bagua_register_bucket_ops=bagua_register_bucket_ops), name="test-duplicate-op")
    try:
        with pytest.raises(DuplicateNameError, match="RecordingOp.*test-duplicate-op|DecentralizedSynchronousOp.*RecordingOp"):
            _bucket().append_decentralized_synchronous_op(torch.zeros(4))
    finally:
        pm.unregister(name="test-duplicate-op")
