"""``BaguaBucket``: tensors communicated together, with the original's ``append_*_op`` methods.

The core's bucket (``bagua_core.lifecycle.bucket.BaguaBucket``) runs op objects that an algorithm builds
from classes it imports (``bucket.append_op(op)``); it names no algorithm. The original's documented
methods live here, each building the op of the algorithm that owns it (this compatibility package may
import the algorithms). The buckets of an impl derived from ``bagua.torch_api.algorithms.AlgorithmImpl``
(or from any impl this package exports) are of this class.

Example::

    >>> bucket = BaguaBucket(tensors, name="0", flatten=True)
    >>> bucket.append_centralized_synchronous_op(hierarchical=False, average=True, compression="MinMaxUInt8")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from bagua_algorithms.async_model_average.averager import AsyncModelAverager, new_async_communicator
from bagua_algorithms.bytegrad.compressed import CompressedAllReduceOp
from bagua_algorithms.decentralized.op import DecentralizedSynchronousOp
from bagua_algorithms.low_precision_decentralized.op import LowPrecisionDecentralizedOp
from bagua_core.lifecycle.bucket import BaguaBucket as _CoreBucket
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp
from bagua_core.runtime.process_group import get_default_group

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["BaguaBucket", "legacy_bucket"]


class BaguaBucket(_CoreBucket):
    """The core's bucket with the original's ``append_*_op`` methods."""

    def append_python_op(self, python_function: Callable[[str], None],
                         group: BaguaProcessGroup | None = None) -> BaguaBucket:
        """Append ``python_function(bucket_name)`` to the bucket's operations."""
        return self.append_op(lambda bucket: python_function(bucket.name))

    def append_centralized_synchronous_op(self, hierarchical: bool = False, average: bool = True,
                                          scattergather: bool = False, compression: str | None = None,
                                          group: BaguaProcessGroup | None = None) -> BaguaBucket:
        """Append an allreduce of the bucket over ``group`` (the module's group by default).

        ``hierarchical``: reduce inside each node, allreduce among node leaders, broadcast inside the
        node. ``scattergather``: reduce-scatter then allgather. ``compression="MinMaxUInt8"`` (or any
        installed codec's name): bytegrad's compressed exchange (alltoall + allgather; ``scattergather``
        does not apply, the exchange is already one)."""
        if compression is not None:
            return self.append_op(CompressedAllReduceOp(group, hierarchical, average, compression))
        return self.append_op(CentralizedSynchronousOp(group, hierarchical, average, scattergather))

    def append_decentralized_synchronous_op(self, peer_weight: torch.Tensor, hierarchical: bool = True,
                                            peer_selection_mode: str = "all",
                                            group: BaguaProcessGroup | None = None) -> DecentralizedSynchronousOp:
        """Append decentralized's weight-averaging op and return it. Not in place: the bucket's weights
        are copied into ``peer_weight`` (a tensor of the bucket's total size, owned by the algorithm) and
        averaged there with the peers; ``op.copy_back_peer_weight(bucket)`` writes the result back.
        ``peer_selection_mode``: ``"all"`` or ``"shift_one"``."""
        op = DecentralizedSynchronousOp(group, hierarchical, peer_selection_mode, peer_weight=peer_weight)
        self.append_op(op)
        return op

    def append_low_precision_decentralized_synchronous_op(
            self, weight: torch.Tensor, left_peer_weight: torch.Tensor, right_peer_weight: torch.Tensor,
            hierarchical: bool = True, compression: str = "MinMaxUInt8",
            group: BaguaProcessGroup | None = None) -> LowPrecisionDecentralizedOp:
        """Append low_precision_decentralized's ring op over the replicas the algorithm owns (``weight``,
        ``left_peer_weight``, ``right_peer_weight``: fp32 tensors of the bucket's total size starting at
        the initial weights, updated in place) and return it."""
        op = LowPrecisionDecentralizedOp(group, hierarchical, weight, left_peer_weight, right_peer_weight,
                                         compression=compression)
        self.append_op(op)
        return op

    def append_asynchronous_model_average_op(self, peer_selection_mode: str,
                                             group: BaguaProcessGroup | None = None, *,
                                             averager: AsyncModelAverager | None = None,
                                             sync_interval_ms: int = 500) -> AsyncModelAverager:
        """Add the bucket to async's background averager and return it: a thread averages the bucket's
        weights with every rank of ``group`` every ``sync_interval_ms`` (nothing runs when the bucket is
        marked ready). ``averager``: one returned before (one thread and one communicator for several
        buckets); creating a new one is collective over the whole job."""
        if peer_selection_mode != "all":
            raise ValueError(f"peer_selection_mode must be 'all', got {peer_selection_mode!r}")
        if averager is None:
            ranks = (group or get_default_group()).ranks
            averager = AsyncModelAverager([], new_async_communicator(ranks), sync_interval_ms)
        averager.add_bucket(self)
        return averager


def legacy_bucket(bucket: _CoreBucket) -> BaguaBucket:
    """``bucket`` with the original's methods: the same object, of this module's class (which adds
    methods only, no state)."""
    if not isinstance(bucket, BaguaBucket):
        bucket.__class__ = BaguaBucket
    return bucket
