"""The Bagua communication library PyTorch interface (the original's ``bagua.torch_api``).

Example::

    import bagua.torch_api as bagua    # also adds the original's bagua_* methods to torch.Tensor and ProcessGroup
    bagua.init_process_group()
    model = model.with_bagua([optimizer], bagua.algorithms.gradient_allreduce.GradientAllReduceAlgorithm())"""

from __future__ import annotations

import torch

from bagua.torch_api.communication import (
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
    get_backend,
    init_process_group,
    is_initialized,
    new_group,
    recv,
    reduce,
    reduce_inplace,
    reduce_scatter,
    reduce_scatter_inplace,
    scatter,
    scatter_inplace,
    send,
)
from bagua.torch_api.distributed import BaguaModule
from bagua.torch_api.env import get_local_rank, get_local_size, get_rank, get_world_size
from bagua.torch_api.tensor import BaguaTensor
from bagua.torch_api import (  # noqa: E402
    algorithms,
    bucket,
    checkpoint,
    communication,
    contrib,
    data_parallel,
    distributed,
    env,
    model_parallel,
    tensor,
    utils,
)
from bagua.torch_api.model_parallel import moe  # noqa: E402

tensor.install()  # the original's methods of torch.Tensor and ProcessGroup (import bagua_core adds none)

version = torch.__version__

__all__ = [
    "BaguaModule", "BaguaTensor", "ReduceOp", "algorithms", "allgather", "allgather_inplace", "allreduce",
    "allreduce_inplace", "alltoall", "alltoall_inplace", "alltoall_v", "alltoall_v_inplace", "barrier",
    "broadcast", "bucket", "checkpoint", "distributed", "env", "model_parallel", "tensor", "utils", "communication", "contrib", "data_parallel", "gather", "gather_inplace",
    "get_backend", "get_local_rank", "get_local_size", "get_rank", "get_world_size", "init_process_group",
    "is_initialized", "moe", "new_group", "recv", "reduce", "reduce_inplace", "reduce_scatter",
    "reduce_scatter_inplace", "scatter", "scatter_inplace", "send",
]
