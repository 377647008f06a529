"""bagua_core: the runtime of bagua (``import bagua_core as bagua``).

Example (in a script started by ``bagua run --nproc_per_node 2 train.py``)::

    import torch
    import bagua_core as bagua

    bagua.init_process_group()
    model = torch.nn.Linear(8, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    loss = model(torch.randn(4, 8)).sum()
    loss.backward()          # gradients are averaged over ranks while backward runs
    optimizer.step()
"""

from __future__ import annotations

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.capabilities import Capabilities, FaultTolerance
from bagua_core.lifecycle.feature import Feature, FeatureConfig
from bagua_core.runtime.communication import (
    BaguaCommunicator,
    ReduceOp,
    allgather,
    allgather_inplace,
    allreduce,
    allreduce_inplace,
    alltoall,
    alltoall_inplace,
    alltoall_v,
    alltoall_v_inplace,
    barrier,
    broadcast,
    gather,
    gather_inplace,
    recv,
    reduce,
    reduce_inplace,
    reduce_scatter,
    reduce_scatter_inplace,
    scatter,
    scatter_inplace,
    send,
)
from bagua_core.runtime.env import (
    get_default_bucket_size,
    get_local_rank,
    get_local_size,
    get_node_rank,
    get_rank,
    get_world_size,
)
from bagua_core.runtime.exceptions import (
    BaguaConfigError,
    BaguaError,
    CommunicationError,
    CommunicationTimeoutError,
    NotInitializedError,
    PeerFailureError,
    PluginError,
    RankMismatchError,
    RepeatedInitializationError,
    UnknownNameError,
)
from bagua_core.runtime.membership import Membership
from bagua_core.runtime.native import native_report
from bagua_core.runtime.native.checks import NonFiniteError
from bagua_core.codecs import Codec, codec_names, get_codec
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp
from bagua_core.plugins import hookimpl
from bagua_core.module import BaguaModule, with_bagua
from bagua_core.module.sharded import node_mesh
from bagua_core.runtime.process_group import (
    BaguaProcessGroup,
    destroy_process_group,
    from_torch_group,
    is_initialized,
    new_group,
)
from bagua_core.bootstrap import init_process_group

from bagua_core import moved as _moved

_moved.install()  # the module paths that moved still import, with a DeprecationWarning


def __getattr__(name: str) -> object:
    """A name offered here by a package above the core (``save_checkpoint``, ``FaultTolerantOptions``, ...: entry
    points of ``bagua.moved``, ``bagua_core.moved``), or a moved module."""
    if f"{__name__}.{name}" in _moved.moved_modules():
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    return _moved.offered_name(__name__, name)


__version__ = "0.10.0"  # above the original's last release, 0.9.2: docs/migrating.md#requirements-written-for-the-original

def algorithm_names() -> list[str]:
    """The names of every installed algorithm (``with_bagua(..., name)``), sorted."""
    from bagua_core.plugins import algorithm_registry

    return algorithm_registry.names()


def feature_names() -> list[str]:
    """The names of every installed feature (``with_bagua(..., features=[name])``), sorted."""
    from bagua_core.plugins import feature_registry

    return feature_registry.names()


__all__ = [
    # setting up and wrapping
    "init_process_group",
    "is_initialized",
    "destroy_process_group",
    "with_bagua",
    "BaguaModule",
    "algorithm_names",
    "feature_names",
    "node_mesh",
    # writing an algorithm or a feature
    "Algorithm",
    "AlgorithmConfig",
    "AlgorithmImpl",
    "BaguaBucket",
    "CentralizedSynchronousOp",
    "Capabilities",
    "FaultTolerance",
    "Feature",
    "FeatureConfig",
    "Membership",
    "hookimpl",
    # codecs and the native kernels
    "Codec",
    "get_codec",
    "codec_names",
    "native_report",
    # process groups and collectives
    "BaguaCommunicator",
    "BaguaProcessGroup",
    "ReduceOp",
    "new_group",
    "from_torch_group",
    "get_rank",
    "get_world_size",
    "get_local_rank",
    "get_local_size",
    "get_node_rank",
    "get_default_bucket_size",
    "allreduce",
    "allreduce_inplace",
    "reduce",
    "reduce_inplace",
    "reduce_scatter",
    "reduce_scatter_inplace",
    "broadcast",
    "allgather",
    "allgather_inplace",
    "gather",
    "gather_inplace",
    "scatter",
    "scatter_inplace",
    "alltoall",
    "alltoall_inplace",
    "alltoall_v",
    "alltoall_v_inplace",
    "send",
    "recv",
    "barrier",
    # errors
    "BaguaError",
    "BaguaConfigError",
    "NotInitializedError",
    "RepeatedInitializationError",
    "PluginError",
    "UnknownNameError",
    "RankMismatchError",
    "PeerFailureError",
    "CommunicationError",
    "CommunicationTimeoutError",
    "NonFiniteError",
]
