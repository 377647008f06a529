"""Process groups and collectives (the original's ``bagua.torch_api.communication``)."""

from __future__ import annotations

from bagua_core.runtime.communication import (
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
    broadcast_object,
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
from bagua_core.module.backend import get_backend
from bagua_core.bootstrap import init_process_group
from bagua_core.runtime.process_group import (
    BaguaProcessGroup,
    from_torch_group,
    get_default_group as _get_default_group,
    is_initialized,
    new_group,
    rank_not_in_group as _rank_not_in_group,
    torch_to_bagua_pg_map as _torch_to_bagua_pg_map,
)

__all__ = [
    "ReduceOp", "new_group", "from_torch_group", "init_process_group", "is_initialized", "send", "recv",
    "broadcast", "broadcast_object", "reduce", "reduce_inplace", "allreduce", "allreduce_inplace", "allgather",
    "allgather_inplace", "gather", "gather_inplace", "scatter", "scatter_inplace", "reduce_scatter",
    "reduce_scatter_inplace", "alltoall", "alltoall_inplace", "alltoall_v", "alltoall_v_inplace", "barrier",
    "BaguaProcessGroup", "get_backend", "_get_default_group", "_rank_not_in_group", "_torch_to_bagua_pg_map",
]
