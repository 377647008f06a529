"""Models sharded with FSDP2 inside a node, bagua between the nodes (``bagua_core.module.sharded``).

Emulated nodes of 2 ranks (gloo on CPU). gradient_allreduce on the shards equals torch's HSDP (FSDP2 on the
same 2-D mesh, its replicate all-reduce on) to float rounding; a mesh whose shard dimension crosses nodes
and an algorithm that does not support sharding are refused by name; a model without DTensor parameters
takes the replicated path; ``find_unused_parameters=True`` on the shards equals torch's HSDP too."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed import run_workers


class Blocks(torch.nn.Module):
    def __init__(self, width: int = 16, depth: int = 3) -> None:
        super().__init__()
        torch.manual_seed(0)
        # a parameter of the root's own, registered first: FSDP2 orders the root unit's parameters after its
        # children's (module.parameters() puts it first), as a language model's position embedding is
        self.offset = torch.nn.Parameter(torch.randn(width) * 0.1)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 4)
        self.out = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.offset
        for block in self.blocks:
            x = torch.relu(block(x))
        return self.out(torch.relu(self.head(x)))


def _shard(model: torch.nn.Module, mesh) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def _torch_mesh(nodes: int, per_node: int):
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (nodes, per_node), mesh_dim_names=("replicate", "shard"))


def _one_mesh_over_the_job():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (dist.get_world_size(),), mesh_dim_names=("shard",))


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

    meshes = {"crossing": _one_mesh_over_the_job, "2-D": lambda: _torch_mesh(2, 2)}
    mesh = meshes[what]() if what in meshes else bagua.node_mesh("cpu")
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
        assert "the mesh crosses nodes" in message and "bagua.node_mesh()" in message, message


def test_a_two_dimensional_mesh_is_refused_with_the_line_to_write() -> None:
    """FSDP2 all-reduces over a 2-D mesh's replicate dimension itself: the error shows the 1-D mesh to use."""
    for message in run_workers(_refused, 4, "2-D", local_size=2):
        assert "2-D DeviceMesh ('replicate', 'shard')" in message, message
        assert "mesh = bagua.node_mesh()" in message and 'mesh["shard"]' in message, message


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


# --- FSDP2's public hooks: the exchange overlaps backward; accumulation; the preconditions --------------------
def _exchange_during_backward(rank: int) -> dict:
    import bagua_core as bagua
    from bagua_core.lifecycle.module_state import state_of

    model = _shard(Blocks(), bagua.node_mesh("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], "gradient_allreduce")
    state = state_of(model)
    seen: list[tuple[str, bool, bool]] = []
    for bucket in state.buckets:  # after the allreduce: was the buffer FSDP2's, and was backward still running?
        bucket.append_op(lambda b: seen.append((b.name, b.buffer is not None, state.post_backward_queued)))
    views = []
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(4, 16)).pow(2).mean().backward()
        views.append(all(p.grad.to_local().untyped_storage().data_ptr() != 0 for p in model.parameters()))
        optimizer.step()
    return {"buckets": len(state.buckets), "units": len(state.shard.units), "lent": sorted(state.lending.buckets),
            "seen": seen, "verified": state.lending.verified, "views": views,
            "group_has_no_layout": not hasattr(model.process_group, "shard")}


def test_each_units_exchange_starts_during_backward_on_fsdp2s_own_buffer() -> None:
    """One bucket per fully_shard-ed module; each is lent FSDP2's reduce-scatter output and its allreduce runs
    before the end of backward (the end-of-backward callback not yet run), and the gradients FSDP2 assigns are
    where the bucket laid them out (checked by the core on the first step)."""
    for rank, out in enumerate(run_workers(_exchange_during_backward, 4, local_size=2, timeout=240)):
        assert out["buckets"] == out["units"] == 4 and out["lent"] == [0, 1, 2, 3], (rank, out)
        assert len(out["seen"]) == 8 and all(lent and in_backward for _, lent, in_backward in out["seen"]), out
        assert out["verified"] and all(out["views"]) and out["group_has_no_layout"], out


def _accumulated(rank: int, nodes: int, per_node: int) -> float:
    import bagua_core as bagua

    reference = _shard(Blocks(), _torch_mesh(nodes, per_node))
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    ours = _shard(Blocks(), bagua.node_mesh("cpu"))
    optimizer = torch.optim.SGD(ours.parameters(), lr=0.1)
    ours = ours.with_bagua([optimizer], "gradient_allreduce")
    generator = torch.Generator().manual_seed(rank)
    worst = 0.0
    for _ in range(3):
        first, second = torch.randn(4, 16, generator=generator), torch.randn(4, 16, generator=generator)
        ref_opt.zero_grad()
        reference.set_requires_gradient_sync(False)
        reference(first).pow(2).mean().backward()
        reference.set_requires_gradient_sync(True)
        reference(second).pow(2).mean().backward()
        ref_opt.step()
        optimizer.zero_grad()
        with ours.no_sync():
            ours(first).pow(2).mean().backward()
        ours(second).pow(2).mean().backward()
        optimizer.step()
        worst = max(worst, max((a.to_local() - b.to_local()).abs().max().item()
                               for a, b in zip(reference.parameters(), ours.parameters())))
    ours.bagua_shutdown()
    return worst


def test_no_sync_accumulates_and_the_next_backward_exchanges_the_sum() -> None:
    """Inside no_sync FSDP2 still reduce-scatters and accumulates the shards; the next backward's buckets are not
    lent (FSDP2 adds to the gradients there) and exchange the accumulated shards at the end of backward: the
    result is torch's HSDP accumulating the same micro-batches."""
    results = run_workers(_accumulated, 4, 2, 2, local_size=2, timeout=240)
    assert max(results) < 1e-5, results


def _wrapped(rank: int, what: str) -> str:
    import bagua_core as bagua
    from torch.distributed.fsdp import fully_shard

    model = Blocks()
    mesh = bagua.node_mesh("cpu")
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model.head, mesh=mesh)
    if what == "ddp":  # (else the root is left out)
        fully_shard(model, mesh=mesh)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        if what == "ddp":
            wrapper = bagua.DistributedDataParallel(model, optimizers=[optimizer], algorithm="gradient_allreduce")
            wrapper(torch.randn(4, 16)).sum().backward()
            optimizer.step()
            return f"trained: {len(wrapper.module.process_group.ranks)} ranks per shard"
        model.with_bagua([optimizer], "gradient_allreduce")
    except Exception as exc:  # every rank raises the same
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def test_a_root_that_is_not_fully_sharded_is_refused_saying_what_to_do() -> None:
    for message in run_workers(_wrapped, 4, "root", local_size=2):
        assert "the model's root (Blocks) is not fully_shard-ed" in message, message
        assert "fully_shard(model, mesh=mesh) on the root too" in message, message


def test_bagua_ddp_takes_a_sharded_model() -> None:
    """bagua.DistributedDataParallel with no process group passes none on: a sharded model is not refused."""
    for message in run_workers(_wrapped, 4, "ddp", local_size=2):
        assert message == "trained: 2 ranks per shard", message


# --- find_unused_parameters on shards ---------------------------------------------------------------------------
class WithSpares(Blocks):
    """Blocks with two layers forward never calls: ``spare`` fully_shard-ed on its own (FSDP2 reduce-scatters
    nothing for it), ``idle`` in the root's unit (FSDP2 reduce-scatters the root's other gradients without it)."""

    def __init__(self) -> None:
        super().__init__()
        self.spare = torch.nn.Linear(16, 16)
        self.idle = torch.nn.Linear(4, 4)


def _shard_with_spares(model: torch.nn.Module, mesh) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    if isinstance(model, WithSpares):
        fully_shard(model.spare, mesh=mesh)
    return _shard(model, mesh)


def _hsdp_equal_finding_unused(rank: int, case: str, steps: int) -> dict:
    """``bagua.DistributedDataParallel(..., find_unused_parameters=True)`` on the shards (2 nodes x 2 ranks) against
    torch's HSDP on the same batches, after every step: the largest difference of the weights and its size relative
    to theirs (norms); and whether the layers no rank uses have no gradient, as HSDP leaves them."""
    import bagua_core as bagua

    net = WithSpares if case in ("unused layers", "gradients kept") else Blocks
    reference = _shard_with_spares(net(), _torch_mesh(2, 2))
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.01)  # (weight decay: a zero gradient is a step)
    model = _shard_with_spares(net(), bagua.node_mesh("cpu"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    ours = bagua.DistributedDataParallel(model, optimizers=[optimizer], algorithm="gradient_allreduce",
                                         find_unused_parameters=True)
    generator = torch.Generator().manual_seed(rank)
    out: dict = {"worst": [], "relative": [], "no_gradient": []}
    for _ in range(steps):
        first, second = torch.randn(4, 16, generator=generator), torch.randn(4, 16, generator=generator)
        ref_opt.zero_grad(set_to_none=case != "gradients kept")  # kept: zeros, marked by their values
        optimizer.zero_grad(set_to_none=case != "gradients kept")
        if case == "no_sync":  # a micro-batch accumulated first
            reference.set_requires_gradient_sync(False)
            reference(first).pow(2).mean().backward()
            reference.set_requires_gradient_sync(True)
            with ours.no_sync():
                ours(first).pow(2).mean().backward()
        reference(second).pow(2).mean().backward()
        ours(second).pow(2).mean().backward()
        ref_opt.step()
        optimizer.step()
        a = torch.cat([p.to_local().reshape(-1) for p in reference.parameters()])
        b = torch.cat([p.to_local().reshape(-1) for p in model.parameters()])
        out["worst"].append((a - b).abs().max().item())
        out["relative"].append(((a - b).norm() / a.norm()).item())
        if net is WithSpares:
            out["no_gradient"].append(all(p.grad is None for layer in (model.spare, model.idle)
                                          for p in layer.parameters()))
    model.bagua_shutdown()
    return out


@pytest.mark.parametrize("case", ["every parameter used", "unused layers", "no_sync", "gradients kept"])
def test_find_unused_parameters_on_shards_equals_torch_hsdp(case: str) -> None:
    """FSDP2 hands bagua the gradients through its reduce-scatter hook, so no per-parameter hook records which
    parameters were used: the end of backward finds it from the gradients themselves. It once found none (every
    parameter left the buckets after step 1, and the nodes trained apart: 7% after 6 steps)."""
    results = run_workers(_hsdp_equal_finding_unused, 4, case, 6, local_size=2, timeout=240)
    for rank, out in enumerate(results):
        assert max(out["worst"]) < 1e-6, (rank, out)
        assert all(out["no_gradient"]), (rank, out)
