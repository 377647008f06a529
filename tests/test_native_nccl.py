"""NCCL communicator: unavailability reporting everywhere, real collectives where CUDA exists."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from bagua_core.runtime.communication.reduce_op import ReduceOp
from bagua_core.runtime.native import nccl_lib
from bagua_core.runtime.native.nccl import NCCLCommunicator, NCCLUnavailableError, nccl_dtype, nccl_op

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_reduce_op_mapping() -> None:
    assert [
        nccl_op(op) for op in (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.AVG)
    ] == [0, 1, 3, 2, 4]
    assert nccl_op(dist.ReduceOp.MAX) == 2 and nccl_op(0) == 0
    for op in (ReduceOp.BOR, ReduceOp.BAND, ReduceOp.BXOR):
        with pytest.raises(ValueError, match="not supported by NCCL"):
            nccl_op(op)
    assert nccl_dtype(torch.bfloat16) == 9 and nccl_dtype(torch.float32) == 7
    with pytest.raises(TypeError, match="complex64"):
        nccl_dtype(torch.complex64)


def test_library_search_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(nccl_lib.LIBRARY_ENV, "/opt/nccl/libnccl.so.2")
    found = nccl_lib.candidates()
    assert found[0] == "/opt/nccl/libnccl.so.2" and found[-1] == "libnccl.so.2"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the report of a machine without CUDA")
def test_unavailable_without_cuda() -> None:
    assert not nccl_lib.available()
    assert "no CUDA device" in nccl_lib.unavailable_reason()
    with pytest.raises(NCCLUnavailableError, match="no CUDA device"):
        NCCLCommunicator(dist.HashStore(), 0, 1)


@pytest.mark.gpu
@needs_cuda
def test_single_rank_collectives() -> None:
    if not nccl_lib.available():
        pytest.fail(f"CUDA exists but NCCL does not load: {nccl_lib.unavailable_reason()}")
    comm = NCCLCommunicator(dist.HashStore(), 0, 1, prefix="t1/")
    assert comm.rank() == 0 and comm.nranks() == 1
    x = torch.arange(8, dtype=torch.float32, device=comm.device)
    y = torch.empty_like(x)
    comm.allreduce(x, y, ReduceOp.SUM)
    comm.allreduce_inplace(y, ReduceOp.AVG)
    comm.broadcast(y, 0)
    z = torch.empty_like(x)
    comm.reduce(y, z, 0, dist.ReduceOp.MAX)
    g = torch.empty(8, device=comm.device)
    comm.allgather(z, g)
    r = torch.empty_like(g)
    comm.reduce_scatter(g, r, ReduceOp.SUM)
    a = torch.empty_like(r)
    comm.alltoall(r, a)
    comm.barrier()
    assert torch.equal(a, x)
    with pytest.raises(ValueError, match="not supported by NCCL"):
        comm.allreduce_inplace(x.int(), ReduceOp.BOR)
    with pytest.raises(ValueError, match="contiguous"):
        comm.allreduce_inplace(torch.zeros(4, 4, device=comm.device).t())
    comm.destroy()


def _two_rank_worker(rank: int, port: int) -> None:
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0)
    comm = NCCLCommunicator(store, rank, 2, device=torch.device("cuda", rank))
    x = torch.full((6,), float(rank + 1), device=comm.device)
    comm.allreduce_inplace(x, ReduceOp.SUM)
    assert x.eq(3).all()
    send = torch.arange(4, dtype=torch.float32, device=comm.device) + 10 * rank
    recv = torch.empty_like(send)
    comm.alltoall(send, recv)  # block j of rank i -> block i of rank j
    expected = torch.tensor([0.0, 1.0, 10.0, 11.0]) if rank == 0 else torch.tensor([2.0, 3.0, 12.0, 13.0])
    assert torch.equal(recv.cpu(), expected)
    if rank == 0:
        comm.send(send, 1)
    else:
        comm.recv(recv, 0)
        assert torch.equal(recv.cpu(), torch.arange(4, dtype=torch.float32))
    torch.cuda.synchronize()
    comm.destroy()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_two_rank_collectives() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_two_rank_worker, args=(port,), nprocs=2, join=True)
