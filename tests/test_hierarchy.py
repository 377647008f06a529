"""The hierarchical pattern written once (bagua_core.lifecycle.bucket_ops.hierarchy): reduce inside the node to the
leader, which alone gets the inter-node communicator for the caller's exchange, broadcast inside the node; and the group an
operation runs on (its own, else the bucket's, else the default)."""

from __future__ import annotations

import types

import torch

from bagua_core.lifecycle.bucket_ops.hierarchy import hierarchy
from bagua_core.runtime.communication import ReduceOp, allreduce_inplace
from tests.distributed import run_workers


def _case(rank: int) -> dict:
    from bagua_core.runtime.process_group import get_default_group

    group = get_default_group()
    out: dict = {}
    for reduce_op in (ReduceOp.AVG, ReduceOp.SUM):
        tensor = torch.full((5,), float(rank + 1))
        called = []
        inter = hierarchy.reduce_to_leader(tensor, group, reduce_op)
        if inter is not None:
            called.append(inter.nranks())
            allreduce_inplace(tensor, op=ReduceOp.SUM, comm=inter)
        hierarchy.broadcast_from_leader(tensor, group)
        out[str(reduce_op)] = (tensor.tolist(), called)
    bucket = types.SimpleNamespace(process_group=None)
    out["default"] = hierarchy.resolve_group(None, bucket) is group
    bucket.process_group = "bucket's"
    out["bucket"] = hierarchy.resolve_group(None, bucket)
    out["own"] = hierarchy.resolve_group("op's", bucket)
    return out


def test_reduce_exchange_among_leaders_broadcast() -> None:
    results = run_workers(_case, 4, local_size=2)  # nodes {0, 1} and {2, 3}
    for rank, out in enumerate(results):
        leader = rank % 2 == 0
        # AVG inside the nodes (1.5 and 3.5), summed among the two leaders, broadcast: 5.0 everywhere
        values, called = out[str(ReduceOp.AVG)]
        assert values == [5.0] * 5 and called == ([2] if leader else [])
        values, called = out[str(ReduceOp.SUM)]  # SUM inside the nodes: 3 and 7
        assert values == [10.0] * 5 and called == ([2] if leader else [])
        assert out["default"] and out["bucket"] == "bucket's" and out["own"] == "op's"
