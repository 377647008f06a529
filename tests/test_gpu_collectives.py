"""Every collective on CUDA tensors gives what it gives on CPU tensors: two ranks sharing one GPU over
gloo (point-to-point and the collectives gloo cannot run on device memory go through the host), and
one rank over NCCL next to CPU-side control collectives on gloo ("cpu:gloo,cuda:nccl")."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import bagua_core as bagua
from bagua_core import ReduceOp
from tests.distributed import run_workers

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


def _every_collective(rank: int, device: torch.device) -> dict[str, torch.Tensor]:
    n = bagua.get_world_size()
    out: dict[str, torch.Tensor] = {}

    def t(values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=device)

    mine = t([rank + 1.0, 2.0 * rank - 1, 0.5])
    for op in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MAX):
        x = mine.clone()
        bagua.allreduce_inplace(x, op)
        out[f"allreduce_{op.name}"] = x
    for dst in range(n):
        x = mine.clone()
        bagua.reduce_inplace(x, dst=dst, op=ReduceOp.SUM)
        out[f"reduce_{dst}"] = x
    send = torch.arange(2 * n, dtype=torch.float32, device=device) * (rank + 1)
    x = torch.empty(2, device=device)
    bagua.reduce_scatter(send, x)
    out["reduce_scatter"] = x
    x = mine.clone()
    bagua.broadcast(x, src=n - 1)
    out["broadcast"] = x
    x = torch.empty(3 * n, device=device)
    bagua.allgather(mine, x)
    out["allgather"] = x
    x = torch.zeros(3 * n, device=device) if rank == 0 else None
    bagua.gather(mine, x, 0)
    out["gather"] = x if x is not None else torch.zeros(0)
    x = torch.empty(2, device=device)
    bagua.scatter(send if rank == 0 else None, x, 0)
    out["scatter"] = x
    x = torch.empty(2 * n, device=device)
    bagua.alltoall(send, x)
    out["alltoall"] = x
    if n > 1:
        x = mine.clone()
        if rank == 0:
            bagua.send(x, 1)
        elif rank == 1:
            bagua.recv(x, 0)
        out["send_recv"] = x
    flag = torch.tensor([float(rank)])  # a control collective on a CPU tensor in a CUDA job
    bagua.allreduce_inplace(flag)
    out["cpu_flag"] = flag
    gathered: list = [None] * n
    dist.all_gather_object(gathered, {"rank": rank})
    assert [g["rank"] for g in gathered] == list(range(n))
    if device.type == "cuda":
        for key, value in out.items():
            assert key == "cpu_flag" or key == "gather" and rank != 0 or value.is_cuda, key
    return {key: value.cpu() for key, value in out.items()}


def _run(rank: int, device_kind: str) -> dict[str, torch.Tensor]:
    device = torch.device("cuda", torch.cuda.current_device()) if device_kind == "cuda" else torch.device("cpu")
    return _every_collective(rank, device)


def _assert_same(on_cpu: list[dict], on_cuda: list[dict]) -> None:
    for rank, (cpu, cuda) in enumerate(zip(on_cpu, on_cuda)):
        assert cpu.keys() == cuda.keys()
        for key in cpu:
            assert torch.equal(cpu[key], cuda[key]), (rank, key, cpu[key], cuda[key])


def test_two_ranks_sharing_the_gpu_over_gloo() -> None:
    on_cpu = run_workers(_run, 2, "cpu")
    on_cuda = run_workers(_run, 2, "cuda", env={"BAGUA_BACKEND": "gloo"})
    _assert_same(on_cpu, on_cuda)


def test_one_rank_over_nccl_with_cpu_control_collectives() -> None:
    _assert_same(run_workers(_run, 1, "cpu"), run_workers(_run, 1, "cuda"))


def test_one_rank_over_the_native_nccl_communicator() -> None:
    _assert_same(run_workers(_run, 1, "cpu"), run_workers(_run, 1, "cuda", env={"BAGUA_COMMUNICATOR": "nccl"}))


def test_more_local_ranks_than_gpus_share_them_over_gloo() -> None:
    if torch.cuda.device_count() > 1:
        pytest.skip("this machine has a GPU per rank")
    assert run_workers(_backend_of_job, 2) == ["gloo", "gloo"]
    assert run_workers(_backend_of_job, 1) == ["cpu:gloo,cuda:nccl"]


def _backend_of_job(rank: int) -> str:
    return str(dist.get_backend())
