"""Code written against the original's algorithm-author API and what it reaches for beyond the API pages,
run on two ranks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.distributed import run_workers
from tests.models import SmallNet, batch


def _train(model, optimizer, rank: int, steps: int = 4) -> list[torch.Tensor]:
    for step in range(steps):
        x, y = batch(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _original_style_algorithms(rank: int) -> dict:
    import bagua.torch_api as bagua
    from bagua.torch_api.algorithms.decentralized import DecentralizedAlgorithm
    from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm
    from tests.compat.original_style_algorithms import MyDecentralizedAlgorithm, PythonOpAllReduce

    results = {}
    for name, mine, builtin in (
        ("decentralized", MyDecentralizedAlgorithm("shift_one"),
         DecentralizedAlgorithm(hierarchical=False, peer_selection_mode="shift_one")),
        ("python_op", PythonOpAllReduce(), GradientAllReduceAlgorithm()),
    ):
        weights = []
        for algorithm in (mine, builtin):
            model = SmallNet()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model = model.with_bagua([optimizer], algorithm)
            weights.append(_train(model, optimizer, rank))
            model.bagua_shutdown()
        results[name] = all(torch.equal(a, b) for a, b in zip(*weights))
        results[name + "_moved"] = not all(torch.equal(a, b) for a, b in zip(weights[0], SmallNet().parameters()))
    # the decentralized bucket holds the parameters in reverse registration order; _peer_weight is owned
    model = SmallNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.with_bagua([optimizer], MyDecentralizedAlgorithm())
    bucket = model.bagua_buckets[0]
    results["order"] = [t.bagua_tensor_name for t in bucket.tensors]
    results["peer_weight"] = bucket._peer_weight.numel() == sum(p.numel() for p in model.parameters())
    model.bagua_shutdown()
    builtin = SmallNet().with_bagua([torch.optim.SGD(SmallNet().parameters(), lr=0.1)],
                                    DecentralizedAlgorithm(hierarchical=False))
    results["builtin_order"] = [t.bagua_tensor_name for t in builtin.bagua_buckets[0].tensors]
    results["builtin_peer_weight"] = builtin.bagua_buckets[0]._peer_weight.shape
    builtin.bagua_shutdown()
    results["init"] = repr(bagua.algorithms.Algorithm.init("gradient_allreduce", hierarchical=True))
    from bagua.torch_api.algorithms.decentralized import LowPrecisionDecentralizedAlgorithm

    net = SmallNet()
    low = net.with_bagua([torch.optim.SGD(net.parameters(), lr=0.1)], LowPrecisionDecentralizedAlgorithm(False))
    bucket = low.bagua_buckets[0]
    total = sum(p.numel() for p in net.parameters())
    results["replicas"] = [(getattr(bucket, a).dtype, getattr(bucket, a).numel() == total)
                           for a in ("_weight", "_left_peer_weight", "_right_peer_weight")]
    low.bagua_shutdown()
    return results


def test_an_algorithm_written_for_the_original_runs_here() -> None:
    for result in run_workers(_original_style_algorithms, 2):
        assert result["decentralized"] and result["decentralized_moved"], "equals the built-in, shift_one"
        assert result["python_op"] and result["python_op_moved"], "equals gradient_allreduce"
        expected = ["head.bias", "head.weight", "fc2.bias", "fc2.weight", "fc1.bias", "fc1.weight"]
        assert result["order"] == expected and result["builtin_order"] == expected
        assert result["peer_weight"] and result["builtin_peer_weight"] == (8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4,)
        assert result["init"] == "GradientAllReduceAlgorithm(hierarchical=True, average=True)"
        assert result["replicas"] == [(torch.float32, True)] * 3


class _Branchy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = torch.nn.Linear(4, 4)
        self.left = torch.nn.Linear(4, 2)
        self.right = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, use_right: bool) -> torch.Tensor:
        return (self.right if use_right else self.left)(torch.relu(self.trunk(x)))


def _ddp_wrapper(rank: int) -> dict:
    import bagua.torch_api as bagua
    from bagua.torch_api.data_parallel import DistributedDataParallel

    out = {}
    model = _Branchy()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ddp = DistributedDataParallel(model, optimizers=[optimizer], find_unused_parameters=True)
    out["wrapper"] = (ddp.module is model, ddp.inner is model, ddp.bagua_optimizers == [optimizer],
                      type(ddp.bagua_algorithm).__name__, len(ddp.bagua_buckets) >= 1)
    names = lambda: sorted(n for n, _ in ddp.inner.bagua_build_params())  # noqa: E731
    bucketed = lambda: sorted(t.bagua_tensor_name for b in ddp.bagua_buckets for t in b.tensors)  # noqa: E731
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))
    ddp(x, False).sum().backward()   # "right" unused on every rank
    optimizer.step()
    out["after_left"] = (names(), bucketed())
    optimizer.zero_grad()
    ddp(x, rank == 1).sum().backward()   # right used on rank 1 only: used (on some rank) again
    out["right_grad"] = model.right.weight.grad.clone()
    out["left_grad"] = model.left.weight.grad.clone()
    out["after_both"] = (names(), bucketed())
    optimizer.zero_grad()
    with ddp.no_sync():
        out["sync_inside"] = ddp.require_backward_grad_sync
        ddp(x, False).sum().backward()
    out["local_grad"] = model.trunk.weight.grad.clone()
    out["sync_after"] = ddp.require_backward_grad_sync
    # communication helpers the original's users reach for
    out["object"] = bagua.communication.broadcast_object({"rank": rank}, src=1)
    out["not_in_group"] = bagua.communication._rank_not_in_group(bagua.communication.new_group([0]))
    out["default_group"] = bagua.communication._get_default_group().ranks
    torch_group = torch.distributed.new_group([0, 1])
    torch_group.bagua_patch()
    out["patched"] = torch_group in bagua.communication._torch_to_bagua_pg_map and torch_group.bagua_pg.ranks
    group = bagua.communication.BaguaProcessGroup([0, 1], None, "made_by_hand")  # the documented constructor
    t = torch.ones(2)
    bagua.allreduce_inplace(t, comm=group.get_global_communicator())
    out["hand_made_group"] = (t.tolist(), group.group_name, group.stream)
    backend = bagua.get_backend(model.bagua_module_name)
    backend.wait_pending_comm_ops()
    with pytest.raises(Exception, match="no module named"):
        bagua.get_backend("nope")
    return out


def test_ddp_compatible_wrapper_and_find_unused_parameters() -> None:
    results = run_workers(_ddp_wrapper, 2)
    for rank, r in enumerate(results):
        assert r["wrapper"] == (True, True, True, "GradientAllReduceAlgorithmImpl", True)
        used = ["left.bias", "left.weight", "trunk.bias", "trunk.weight"]
        assert r["after_left"] == (used, used), "the unused branch leaves bagua_build_params and the buckets"
        every = sorted(used + ["right.bias", "right.weight"])
        assert r["after_both"] == (every, every)
        assert r["sync_inside"] is False and r["sync_after"] is True
        assert r["object"] == {"rank": 1}
        assert r["hand_made_group"] == ([2.0, 2.0], "made_by_hand", None)
        assert r["not_in_group"] == (rank != 0) and r["default_group"] == [0, 1] and r["patched"] == [0, 1]
    # the branch used on rank 1 only was averaged (rank 0 contributed zeros) in the step it came back
    assert torch.equal(results[0]["right_grad"], results[1]["right_grad"])
    assert results[0]["right_grad"].abs().sum() > 0
    assert torch.equal(results[0]["left_grad"], results[1]["left_grad"])
    assert not torch.equal(results[0]["local_grad"], results[1]["local_grad"]), "no_sync kept gradients local"


class _ReturnsUnusedLayer(torch.nn.Module):
    """fc3 is handed back to the caller, never called inside forward: it gets no gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(2, 10, bias=False)
        self.fc2 = torch.nn.Linear(10, 4, bias=False)
        self.fc3 = torch.nn.Linear(4, 4, bias=False)

    def forward(self, x: torch.Tensor):
        return torch.softmax(torch.relu(self.fc2(torch.relu(self.fc1(x)))), dim=1), self.fc3


def _ddp_v1_9_0(rank: int) -> dict:
    import torch.distributed as c10d

    from bagua.torch_api.data_parallel import DistributedDataParallel
    from bagua.torch_api.data_parallel.distributed import DistributedDataParallel_V1_9_0

    out = {"returned": type(DistributedDataParallel(_ReturnsUnusedLayer())).__name__}
    x, target = torch.rand(4, 2), torch.tensor([0, 1, 2, 3])
    for find_unused in (True, False):
        group = c10d.distributed_c10d._get_default_group()
        ddp = DistributedDataParallel_V1_9_0(_ReturnsUnusedLayer(), process_group=group,
                                             find_unused_parameters=find_unused)
        output, _ = ddp(x)
        torch.nn.functional.cross_entropy(output, target).backward()
        out[find_unused] = sorted(name for name, _ in ddp.inner.bagua_build_params())
        out[f"algorithm_{find_unused}"] = type(ddp.bagua_algorithm).__name__
    return out


def test_ddp_v1_9_0_class_of_the_original() -> None:
    for r in run_workers(_ddp_v1_9_0, 2):
        assert r["returned"] == "DistributedDataParallel_V1_9_0"
        assert r[True] == ["fc1.weight", "fc2.weight"]
        assert r[False] == ["fc1.weight", "fc2.weight", "fc3.weight"]
        assert r["algorithm_True"] == r["algorithm_False"] == "GradientAllReduceAlgorithmImpl"
