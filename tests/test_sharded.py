"""Models sharded with FSDP2 inside a node, bagua between the nodes (``bagua_core.module.sharded``).

Emulated nodes of 2 ranks (gloo on CPU). gradient_allreduce on the shards equals torch's HSDP (FSDP2 on the
same 2-D mesh, its replicate all-reduce on) to float rounding; a mesh whose shard dimension crosses nodes
and an algorithm that does not support sharding are refused by name; a model without DTensor parameters
takes the replicated path."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed import run_workers


class Blocks(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.head(x)


def _shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _torch_mesh(nodes: int, per_node: int):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (nodes, per_node), mesh_dim_names=("replicate", "shard"))


def _hsdp_equal(rank: int, nodes: int, per_node: int, steps: int) -> float:
    import bagua_core as bagua

    reference = _shard(Blocks(), _torch_mesh(nodes, per_node))
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01)
    ours = _shard(Blocks(), bagua.node_mesh("cpu"))
    optimizer = torch.optim.AdamW(ours.parameters(), lr=0.01)
    ours = ours.with_bagua([optimizer], "gradient_allreduce")
    assert list(ours.process_group.ranks) == [node * per_node + rank % per_node for node in range(nodes)]
    generator = torch.Generator().manual_seed(rank)
    worst = 0.0
    for _ in range(steps):
        x = torch.randn(4, 16, generator=generator)
        for model, opt in ((reference, ref_opt), (ours, optimizer)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        worst = max(worst, max((a.to_local() - b.to_local()).abs().max().item()
                               for a, b in zip(reference.parameters(), ours.parameters())))
    ours.bagua_shutdown()
    return worst


@pytest.mark.parametrize("nodes,per_node", [(2, 2), (4, 2)])
def test_gradient_allreduce_on_shards_equals_torch_hsdp(nodes: int, per_node: int) -> None:
    results = run_workers(_hsdp_equal, nodes * per_node, nodes, per_node, 6, local_size=per_node, timeout=240)
    assert max(results) < 1e-6, results


def _refused(rank: int, what: str) -> str:
    import bagua_core as bagua

    mesh = _torch_mesh(1, 4) if what == "crossing" else bagua.node_mesh("cpu")
    if what == "replicating replica":  # as a fault-tolerant replica's group is marked by its bootstrap
        from bagua_core.runtime.membership import Membership
        from bagua_core.runtime.process_group import get_default_group

        get_default_group().membership = Membership(changes=True, commit="quorum")
    model = _shard(Blocks(), mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        model.with_bagua([optimizer], "decentralized_dp" if what == "unsupported" else "gradient_allreduce")
    except Exception as exc:  # every rank raises the same
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_a_shard_dimension_across_nodes_is_refused() -> None:
    for message in run_workers(_refused, 4, "crossing", local_size=2):
        assert "shard dimension crosses nodes" in message and "bagua.node_mesh()" in message


def test_an_algorithm_without_sharding_support_is_refused_by_name() -> None:
    for message in run_workers(_refused, 4, "unsupported", local_size=2):
        assert "algorithm 'decentralized_dp' does not support models sharded with FSDP2" in message
        assert "those that do: " in message and "diloco" in message.split("those that do: ")[1], message


def test_a_fault_tolerant_replica_replicating_inside_itself_is_refused() -> None:
    """In fault-tolerant mode the replicas are the replicate dimension: a replica's mesh shards only."""
    for message in run_workers(_refused, 4, "replicating replica", local_size=2):
        assert "fault-tolerant mode" in message and "replicates inside the replica" in message, message
        assert "[[0, 2], [1, 3]]" in message, message


def _replicated_path(rank: int) -> bool:
    model = Blocks()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    from bagua_core.lifecycle.module_state import state_of

    return state_of(model).shard is None and model.process_group.ranks == list(range(dist.get_world_size()))


def test_a_model_without_dtensor_parameters_takes_the_replicated_path() -> None:
    assert all(run_workers(_replicated_path, 4, local_size=2))
