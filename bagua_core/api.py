"""The API of a bagua plugin: everything an algorithm imports from bagua, in one module.

The built-in algorithms import from here and from nowhere else in ``bagua_core`` (codecs add
``bagua_core.codecs``, packages with C or CUDA kernels ``bagua_core.kernels``), and so can a third party: what
is listed in ``__all__`` is the contract (``docs/plugins.md`` documents it, ``tests/test_plugin_api.py`` pins it).

- **Declaring an algorithm**: ``Algorithm``, ``AlgorithmConfig``, ``AlgorithmImpl`` (the lifecycle hooks,
  ``init_step_end_hook`` among them: once per training step, after every optimizer of the module has
  stepped), ``Capabilities``, ``FaultTolerance``, ``capabilities_of``; the plugin's
  ``hookimpl`` and ``hookspec`` markers, ``algorithm_registry`` and ``NamedRegistry`` (a registry of a
  contract of the plugin's own).
- **Declaring a feature**: ``Feature`` (a name, a ``FeatureConfig`` and hooks the core calls at documented points:
  ``bagua_core.lifecycle.feature``), ``FeatureConfig``, ``feature_registry``; the feature's side of the wrapped
  module is ``WrappedModule`` (``features``, ``add_feature``, ``count_hook_seconds``, ``take_hook_seconds``,
  ``features_state_dict``, ``load_features_state_dict``).
- **Buckets and their operations**: ``BaguaBucket`` (``append_op``, ``ops``, ``flattened_view``, ...),
  ``group_tensors`` (the core's bucketing suggestion, for ``tensors_to_buckets``), the
  full-precision allreduce op ``CentralizedSynchronousOp`` with ``start_allreduce_in_pieces``, and ``hierarchy``:
  the group an op runs on (``hierarchy.resolve_group``) and the hierarchical pattern around its exchange
  (``hierarchy.reduce_to_leader``, ``hierarchy.broadcast_from_leader``).
- **Collectives**: ``ReduceOp``, ``BaguaCommunicator``, ``allreduce_inplace``, ``allreduce_inplace_start``,
  ``allgather``, ``all_gather_single``, ``alltoall``, ``broadcast``, ``reduce_inplace``, point-to-point
  ``isend``/``irecv``, and ``record_payload`` for what an algorithm hands to ``torch.distributed`` itself.
- **Groups and membership**: ``BaguaProcessGroup`` (``new_channel`` for a group of the algorithm's own,
  ``BaguaProcessGroup.default_or_none()``, ``BaguaProcessGroup.new_torch_group(ranks)`` for a torch group over
  other ranks), ``Membership`` (a fail-fast job's: ``Membership()``),
  ``group_failure`` (whether a quorum's group failed in this step, in fault-tolerant mode).
- **The wrapped module**: ``WrappedModule(module)``, the handle through which an algorithm reads and changes a
  module wrapped with ``with_bagua`` (never through attributes of the module): ``train_step_counter``,
  ``named_parameters()``, ``build_params()``, ``optimizers``, ``buckets``, ``module_name``, ``process_group``,
  ``reset()``, ``wait_for_communication()``, ``switch_algorithm`` (the one way to change the impl, declaration or
  capabilities), ``set_gradient_sync``, ``is_sharded`` (and ``WrappedModule.is_wrapped(module)``); a sharded
  model's ``load_optimizer_state`` and its ranks: ``shard_group``; ``has_nonfinite``; ``samples_in`` (the samples
  a forward's inputs hold).
- **Tensor proxies**: ``tensors`` (``bagua_core.lifecycle.proxies``): ``tensors.mark(tensor, name, module_name,
  getter=..., setter=...)`` makes a tensor one a bucket can hold, ``tensors.effective``, ``tensors.mark_ready``,
  ``tensors.ensure_grad``, ``tensors.name_of``, ``tensors.local_shard`` (a ``DTensor``'s local tensor).
- **Agreement before the first collective**: ``agreement`` (``agreement.Prepared``,
  ``agreement.agree_or_raise``, ``agreement.model_signature``).
- **Settings and failures**: ``settings`` (``settings.default_bucket_size()``, ``settings.comm_timeout_s()``,
  ``settings.nonfinite_policy()``, ``settings.local_size()``), ``init_process_group`` (a wrapper that sets bagua
  up when only ``torch.distributed`` is); ``format_validation_error`` (a pydantic error as a config error's message);
  one node or many (``on_one_node``, ``defaults_to_hierarchical``,
  ``without_hierarchy``); ``first_failure``, ``failure_guard`` and ``translate_failure`` (a failure on a thread
  of the algorithm's own reaches every rank); the errors ``BaguaError``, ``BaguaConfigError``, ``RankMismatchError``, ``JobFailureError``.

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
