"""The API of a bagua plugin: everything an algorithm or a feature imports from bagua, in one module.

The built-in algorithms and features import from here and from nowhere else in ``bagua_core`` (codecs add
``bagua_core.codecs``, packages with C or CUDA kernels ``bagua_core.kernels``), and so can a third party: what is
listed in ``__all__`` is the contract, in groups (``docs/plugins.md`` documents each name, ``tests/test_plugin_api.py``
pins them): declaring an algorithm (``Algorithm``, ``AlgorithmConfig``, ``AlgorithmImpl``, ``Capabilities``, ...) or
a feature (``Feature``, ``FeatureConfig``); buckets and their operations (``BaguaBucket``, ``group_tensors``,
``CentralizedSynchronousOp``, ``hierarchy``); collectives (``allreduce_inplace``, ``allgather``, ``alltoall``,
``isend``/``irecv``, ``record_payload``, ...); groups and membership (``BaguaProcessGroup``, ``Membership``,
``group_failure``); the wrapped module (``WrappedModule``: the one handle through which a plugin reads and changes
a module wrapped with ``with_bagua``, never its attributes; ``tensors``, the tensor proxies); agreement before the
first collective (``agreement``); settings and failures (``settings``, ``first_failure``, ``failure_guard``, the
errors).

Example::

    >>> from typing import Literal
    >>> from bagua_core.api import Algorithm, AlgorithmConfig, AlgorithmImpl, CentralizedSynchronousOp, hookimpl
    >>> class MyConfig(AlgorithmConfig):
    ...     name: Literal["mine"] = "mine"
    >>> class MyImpl(AlgorithmImpl):
    ...     def init_operations(self, bagua_module, bucket):
    ...         bucket.clear_ops()
    ...         bucket.append_op(CentralizedSynchronousOp(self.process_group, average=True))
    >>> class MyAlgorithm(Algorithm):
    ...     name, Config, Impl = "mine", MyConfig, MyImpl
    >>> @hookimpl
    ... def bagua_register_algorithms():
    ...     return [MyAlgorithm]
"""

from __future__ import annotations

from bagua_core.bootstrap import init_process_group
from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl, group_tensors
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp, start_allreduce_in_pieces
from bagua_core.lifecycle.bucket_ops.hierarchy import hierarchy
from bagua_core.lifecycle.capabilities import Capabilities, FaultTolerance, capabilities_of
from bagua_core.lifecycle.feature import Feature, FeatureConfig
from bagua_core.lifecycle.batch import samples_in
from bagua_core.lifecycle.rounds import RoundCount
from bagua_core.lifecycle.module_state import shard_group
from bagua_core.lifecycle import proxies as tensors
from bagua_core.lifecycle.tensor import load_optimizer_state
from bagua_core.module.wrapped_module import WrappedModule
from bagua_core.module.nonfinite import has_nonfinite
from bagua_core.plugins import NamedRegistry, algorithm_registry, feature_registry, hookimpl
from bagua_core.plugins.hookspecs import hookspec
from bagua_core.runtime.agreement import agreement
from bagua_core.runtime.communication import (
    BaguaCommunicator,
    ReduceOp,
    allgather,
    allreduce_inplace,
    allreduce_inplace_start,
    alltoall,
    broadcast,
    reduce_inplace,
)
from bagua_core.runtime.communication.common import record as record_payload
from bagua_core.runtime.communication.host_staging import irecv, isend
from bagua_core.runtime.communication.torch_compat import all_gather_single
from bagua_core.runtime.exceptions import (
    BaguaConfigError,
    BaguaError,
    JobFailureError,
    RankMismatchError,
    format_validation_error,
)
from bagua_core.runtime.failure import first_failure
from bagua_core.runtime.failure import guard as failure_guard
from bagua_core.runtime.failure import translate as translate_failure
from bagua_core.runtime.membership import Membership, group_failure
from bagua_core.runtime.process_group import BaguaProcessGroup
from bagua_core.runtime.settings import settings
from bagua_core.selection.single_node import defaults_to_hierarchical, on_one_node, without_hierarchy

__all__ = [
    # declaring an algorithm
    "Algorithm",
    "AlgorithmConfig",
    "AlgorithmImpl",
    "Capabilities",
    "FaultTolerance",
    "RoundCount",
    "capabilities_of",
    "hookimpl",
    "hookspec",
    "algorithm_registry",
    "NamedRegistry",
    # declaring a feature
    "Feature",
    "FeatureConfig",
    "feature_registry",
    # buckets and their operations
    "BaguaBucket",
    "group_tensors",
    "CentralizedSynchronousOp",
    "start_allreduce_in_pieces",
    "hierarchy",
    # collectives
    "ReduceOp",
    "BaguaCommunicator",
    "allreduce_inplace",
    "allreduce_inplace_start",
    "allgather",
    "all_gather_single",
    "alltoall",
    "broadcast",
    "reduce_inplace",
    "isend",
    "irecv",
    "record_payload",
    # groups and membership
    "BaguaProcessGroup",
    "Membership",
    "group_failure",
    # the wrapped module
    "WrappedModule",
    "tensors",
    "load_optimizer_state",
    "shard_group",
    "samples_in",
    "has_nonfinite",
    # agreement
    "agreement",
    # settings and failures
    "settings",
    "init_process_group",
    "on_one_node",
    "defaults_to_hierarchical",
    "without_hierarchy",
    "first_failure",
    "failure_guard",
    "translate_failure",
    "BaguaError",
    "BaguaConfigError",
    "RankMismatchError",
    "JobFailureError",
    "format_validation_error",
]
