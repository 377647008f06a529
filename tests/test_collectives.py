"""Every collective against expected values, on 2 and 3 ranks (odd counts catch assumptions)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import bagua_core as bagua
from bagua_core import ReduceOp
from tests.distributed import run_workers


def _check_reductions(rank: int) -> None:
    n = bagua.get_world_size()
    # seed docstring examples: int64 and complex allreduce
    send = torch.arange(2, dtype=torch.int64) + 1 + 2 * rank
    recv = torch.zeros(2, dtype=torch.int64)
    bagua.allreduce(send, recv)
    assert recv.tolist() == [sum(1 + 2 * r for r in range(n)), sum(2 + 2 * r for r in range(n))]
    send = torch.tensor([1 + 1j, 2 + 2j], dtype=torch.cfloat) + 2 * rank * (1 + 1j)
    recv = torch.zeros(2, dtype=torch.cfloat)
    bagua.allreduce(send, recv)
    expected = sum(torch.tensor([1 + 1j, 2 + 2j], dtype=torch.cfloat) + 2 * r * (1 + 1j) for r in range(n))
    assert torch.equal(recv, expected)
    values = [torch.tensor([r + 1.0, 2.0 * r - 1]) for r in range(n)]
    mine = values[rank]
    cases = {
        ReduceOp.SUM: sum(values),
        ReduceOp.PRODUCT: torch.stack(values).prod(0),
        ReduceOp.MIN: torch.stack(values).min(0).values,
        ReduceOp.MAX: torch.stack(values).max(0).values,
        ReduceOp.AVG: sum(values) / n,
        dist.ReduceOp.SUM: sum(values),  # torch's ReduceOp is accepted too
    }
    for op, want in cases.items():
        t = mine.clone()
        bagua.allreduce(t, op=op)  # older in-place form
        assert torch.allclose(t, want), (op, t, want)
        out = torch.empty(2)
        bagua.allreduce(mine, out, op)
        assert torch.allclose(out, want)
        t = mine.clone()
        bagua.allreduce_inplace(t, op)
        assert torch.allclose(t, want)
    bits = torch.tensor([1 << rank, 3], dtype=torch.int64)
    for op, want in ((ReduceOp.BOR, [(1 << n) - 1, 3]), (ReduceOp.BAND, [0 if n > 1 else 1, 3]), (ReduceOp.BXOR, [(1 << n) - 1, 3 if n % 2 else 0])):
        t = bits.clone()
        bagua.allreduce_inplace(t, op)
        assert t.tolist() == want, (op, t)
    # reduce: both call forms; non-dst ranks keep their tensors
    for dst in range(n):
        out = torch.full((2,), -1.0)
        bagua.reduce(mine, out, dst, ReduceOp.SUM)
        assert torch.equal(out, sum(values) if rank == dst else torch.full((2,), -1.0))
        t = mine.clone()
        bagua.reduce(t, dst, ReduceOp.MAX)
        assert torch.equal(t, torch.stack(values).max(0).values if rank == dst else mine)
        t = mine.clone()
        bagua.reduce_inplace(t, dst=dst, op=ReduceOp.AVG)
        assert torch.allclose(t, sum(values) / n if rank == dst else mine)
    # reduce_scatter
    send = torch.arange(2 * n, dtype=torch.float32) * (rank + 1)
    out = torch.empty(2)
    bagua.reduce_scatter(send, out)
    total = sum(torch.arange(2 * n, dtype=torch.float32) * (r + 1) for r in range(n))
    assert torch.equal(out, total[2 * rank : 2 * rank + 2])
    t = send.clone()
    bagua.reduce_scatter_inplace(t, op=ReduceOp.AVG)
    assert torch.allclose(t[2 * rank : 2 * rank + 2], total[2 * rank : 2 * rank + 2] / n)


def _check_movement(rank: int) -> None:
    n = bagua.get_world_size()
    for src in range(n):
        t = torch.full((3,), float(rank))
        bagua.broadcast(t, src=src)
        assert torch.equal(t, torch.full((3,), float(src)))
        t = torch.full((3,), float(rank))
        bagua.broadcast(t, root=src)  # older keyword
        assert torch.equal(t, torch.full((3,), float(src)))
    mine = torch.tensor([rank, 10 * rank], dtype=torch.int32)
    everyone = torch.tensor([[r, 10 * r] for r in range(n)], dtype=torch.int32).view(-1)
    out = torch.empty(2 * n, dtype=torch.int32)
    bagua.allgather(mine, out)
    assert torch.equal(out, everyone)
    t = torch.zeros(2 * n, dtype=torch.int32)
    t[2 * rank : 2 * rank + 2] = mine
    bagua.allgather_inplace(t)
    assert torch.equal(t, everyone)
    for root in range(n):
        out = torch.full((2 * n,), -1, dtype=torch.int32)
        bagua.gather(mine, out, root)
        assert torch.equal(out, everyone if rank == root else torch.full((2 * n,), -1, dtype=torch.int32))
        t = torch.zeros(2 * n, dtype=torch.int32) if rank == root else mine.clone()
        if rank == root:
            t[2 * rank : 2 * rank + 2] = mine
        bagua.gather_inplace(t, 2, root)
        if rank == root:
            assert torch.equal(t, everyone)
        src_data = torch.arange(3 * n, dtype=torch.float64) + 100 * root
        out = torch.empty(3, dtype=torch.float64)
        bagua.scatter(src_data if rank == root else None, out, root)
        assert torch.equal(out, src_data[3 * rank : 3 * rank + 3])
        t = src_data.clone() if rank == root else torch.empty(3, dtype=torch.float64)
        bagua.scatter_inplace(t, 3, root)
        assert torch.equal(t[3 * rank : 3 * rank + 3] if rank == root else t, src_data[3 * rank : 3 * rank + 3])


def _check_exchange(rank: int) -> None:
    n = bagua.get_world_size()
    send = torch.tensor([100 * rank + j for j in range(n) for _ in range(2)], dtype=torch.float32)
    out = torch.empty_like(send)
    bagua.alltoall(send, out)
    assert out.tolist() == [float(100 * r + rank) for r in range(n) for _ in range(2)]
    t = send.clone()
    bagua.alltoall_inplace(t)
    assert torch.equal(t, out)
    # alltoall_v: rank r sends (j + 1) elements of value 100r + j to rank j, from the end of its buffer
    send_counts = [j + 1 for j in range(n)]
    total = sum(send_counts)
    send = torch.zeros(total + 5, dtype=torch.int64)
    send_displs = []
    pos = 5
    for j in reversed(range(n)):  # non-monotone displacements on purpose
        send[pos : pos + j + 1] = 100 * rank + j
        send_displs.insert(0, pos)
        pos += j + 1
    recv_counts = [rank + 1] * n
    recv = torch.full((n * (rank + 1) + 1,), -1, dtype=torch.int64)
    recv_displs = [1 + i * (rank + 1) for i in range(n)]
    bagua.alltoall_v(send, send_counts, send_displs, recv, recv_counts, recv_displs)
    assert recv[0].item() == -1
    for i in range(n):
        assert recv[recv_displs[i] : recv_displs[i] + rank + 1].tolist() == [100 * i + rank] * (rank + 1)
    counts = [2] * n
    displs = [2 * i for i in range(n)]
    t = torch.tensor([100 * rank + j for j in range(n) for _ in range(2)], dtype=torch.int64)
    bagua.alltoall_v_inplace(t, counts, displs)
    assert t.tolist() == [100 * r + rank for r in range(n) for _ in range(2)]
    # send/recv around a ring, even and odd ranks ordered so it cannot deadlock
    right, left = (rank + 1) % n, (rank - 1) % n
    got = torch.empty(4)
    if rank % 2 == 0:
        bagua.send(torch.full((4,), float(rank)), right)
        bagua.recv(got, left)
    else:
        bagua.recv(got, left)
        bagua.send(torch.full((4,), float(rank)), right)
    assert torch.equal(got, torch.full((4,), float(left)))
    bagua.barrier()


def _check_errors(rank: int) -> list[str]:
    messages = []
    for call in (
        lambda: bagua.allreduce(torch.ones(2), torch.ones(3)),
        lambda: bagua.allreduce(torch.ones(4, 4).t(), torch.ones(16)),
        lambda: bagua.allreduce_inplace(torch.ones(2), op=42),
        lambda: bagua.broadcast(torch.ones(2), src=bagua.get_world_size()),
        lambda: bagua.alltoall(torch.ones(bagua.get_world_size() * 2 + 1), torch.ones(bagua.get_world_size() * 2 + 1)),
        lambda: bagua.allreduce_inplace(torch.ones(2, dtype=torch.cfloat), op=ReduceOp.MAX),
    ):
        with pytest.raises((ValueError, TypeError)) as info:
            call()
        messages.append(str(info.value))
    bagua.barrier()  # still in step after every error
    return messages


def _all_checks(rank: int) -> list[str]:
    _check_reductions(rank)
    _check_movement(rank)
    _check_exchange(rank)
    return _check_errors(rank)


@pytest.mark.parametrize("world_size", [2, 3])
def test_every_collective(world_size: int) -> None:
    messages = run_workers(_all_checks, world_size)[0]
    assert "must have 3 elements" in messages[0] or "must have 2 elements" in messages[0]
    assert "contiguous" in messages[1]
    assert "unknown reduce op 42" in messages[2]
    assert "is not in communicator" in messages[3]
    assert "equal chunks" in messages[4]
    assert "complex" in messages[5]
