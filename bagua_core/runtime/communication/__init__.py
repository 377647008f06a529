"""Every collective of the seed API, over torch.distributed (gloo on CPU, NCCL on CUDA)."""

from __future__ import annotations

from bagua_core.runtime.communication.communicator import BaguaCommunicator
from bagua_core.runtime.communication.exchange import (
    alltoall,
    alltoall_inplace,
    alltoall_v,
    alltoall_v_inplace,
    barrier,
    recv,
    send,
)
from bagua_core.runtime.communication.movement import (
    allgather,
    allgather_inplace,
    broadcast,
    gather,
    gather_inplace,
    scatter,
    scatter_inplace,
)
from bagua_core.runtime.communication.objects import broadcast_object
from bagua_core.runtime.communication.reduce_op import ReduceOp
from bagua_core.runtime.communication.reductions import (
    allreduce,
    allreduce_inplace,
    allreduce_inplace_start,
    reduce,
    reduce_inplace,
    reduce_scatter,
    reduce_scatter_inplace,
)

__all__ = [
    "BaguaCommunicator",
    "ReduceOp",
    "allreduce",
    "allreduce_inplace",
    "allreduce_inplace_start",
    "reduce",
    "reduce_inplace",
    "reduce_scatter",
    "reduce_scatter_inplace",
    "broadcast",
    "broadcast_object",
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
]
