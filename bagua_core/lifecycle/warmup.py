"""The core's warmup: full-precision gradient allreduce for a module while its impl says it is warming up.

An algorithm may train its first steps with plain full-precision gradient averaging and then switch to its own
scheme (until its optimizer leaves a warmup, or for a number of steps). It says only when its warmup ends, through
``AlgorithmImpl.warming_up(bagua_module)``; the core does the rest, here: while it returns True, the module's
buckets are built by :class:`WarmupImpl` (the parameters' gradients, grouped by the impl's bucket size, averaged
by the core's ``CentralizedSynchronousOp``, flat: no hierarchy) with its hooks (the defaults: mark ready, wait at
the end of backward); the first training forward at which it returns False rebuilds them with the impl's own
tensors, operations and hooks (the switch), and a later True goes back the same way.

The impl stays the module's (``module.bagua_algorithm``, ``ModuleState.impl``) in both phases: checkpoints,
fault-tolerant mode and metrics ask it (``state_dict``, ``quiesce``, ``round_syncs``, ``rounds_completed``, ...)
as at any step, and it answers for its warmup there. ``ModuleState.warming_up`` records which of the two built the
buckets.

Example::

    >>> class MyImpl(AlgorithmImpl):
    ...     def warming_up(self, bagua_module):  # plain allreduce for the first 100 steps, then this impl's ops
    ...         return WrappedModule(bagua_module).train_step_counter <= 100
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bagua_core.lifecycle.algorithm import AlgorithmImpl
from bagua_core.lifecycle.bucket import BaguaBucket
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.lifecycle.module_state import ModuleState

__all__ = ["WarmupImpl", "built_by", "builds_buckets", "switches"]


class WarmupImpl(AlgorithmImpl):
    """The hooks of the warmup of ``impl``: its parameters' gradients (the default ``init_tensors``), in groups of
    ``impl.bucket_size_bytes()`` (autotune and ``DistributedDataParallel(bucket_cap_mb=)`` set it on the impl),
    each bucket averaged in full precision by ``CentralizedSynchronousOp`` on ``impl.process_group``, not
    hierarchically; every other hook the default."""

    def __init__(self, impl: AlgorithmImpl) -> None:
        super().__init__(impl.process_group)
        self.impl = impl

    def bucket_size_bytes(self) -> int:
        return self.impl.bucket_size_bytes()

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        bucket.append_op(CentralizedSynchronousOp(self.process_group, hierarchical=False, average=True))


def builds_buckets(module: torch.nn.Module, state: ModuleState) -> AlgorithmImpl:
    """The impl whose tensors, buckets, operations and hooks a rebuild of ``module``'s buckets uses now: a
    :class:`WarmupImpl` of ``state.impl`` while ``state.impl.warming_up(module)``, else ``state.impl``; records
    which in ``state.warming_up``."""
    state.warming_up = bool(state.impl.warming_up(module))
    return built_by(state)


def built_by(state: ModuleState) -> AlgorithmImpl:
    """The impl the module's current buckets were built by (:func:`builds_buckets`' last answer): what an exchange
    over buckets of its own (``unused_params``' newly used parameters) must use too."""
    return WarmupImpl(state.impl) if state.warming_up else state.impl


def switches(module: torch.nn.Module, state: ModuleState) -> bool:
    """Whether the warmup begins or ends at this training forward: the impl's ``warming_up(module)`` differs from
    what the buckets were built for (asked before every training forward; True rebuilds them)."""
    return bool(state.impl.warming_up(module)) != state.warming_up
