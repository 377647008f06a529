"""``NCCLCommunicator``: collectives on CUDA tensors through libnccl.so.2, loaded at run time.

The ``ncclUniqueId`` is exchanged through a ``torch.distributed.Store`` (rank 0 sets
``<prefix>bagua_nccl_unique_id``, the others wait for it). Every call is queued on the current torch
CUDA stream of the communicator's device and returns at once; tensors must be contiguous CUDA
tensors on that device. NCCL result codes become ``NCCLError`` with ncclGetErrorString's text.
``op`` takes ``bagua_core.ReduceOp`` (or its int) or ``torch.distributed.ReduceOp``: SUM, PRODUCT,
MIN, MAX and AVG; the bitwise ops are not supported by NCCL.

Example (every rank)::

    >>> store = torch.distributed.TCPStore("127.0.0.1", 29500, world_size, rank == 0)
    >>> comm = NCCLCommunicator(store, rank, world_size, device=torch.device("cuda", rank))
    >>> t = torch.ones(4, device=comm.device)
    >>> comm.allreduce_inplace(t, ReduceOp.SUM)   # t == world_size everywhere
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.runtime.native.nccl_lib import NCCLError, NCCLUnavailableError, load, nccl_dtype, nccl_op

__all__ = ["NCCLCommunicator", "NCCLError", "NCCLUnavailableError", "nccl_dtype", "nccl_op"]


class NCCLCommunicator:
    """An NCCL communicator of ``nranks`` ranks; this process is ``rank``."""

    def __init__(self, store: Any, rank: int, nranks: int, prefix: str = "", device: Any = None) -> None:
        if not isinstance(nranks, int) or nranks < 1:
            raise ValueError(f"nranks must be a positive integer, got {nranks!r}")
        if not isinstance(rank, int) or not 0 <= rank < nranks:
            raise ValueError(f"rank must be an integer in 0..{nranks - 1}, got {rank!r}")
        self._ffi, self._lib = load()
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        )
        if self.device.type != "cuda":
            raise ValueError(f"device must be a CUDA device, got {self.device}")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._rank, self._nranks = rank, nranks
        unique_id = self._ffi.new("ncclUniqueId *")
        key = f"{prefix}bagua_nccl_unique_id"
        if rank == 0:
            self._check(self._lib.ncclGetUniqueId(unique_id), "ncclGetUniqueId")
            store.set(key, bytes(self._ffi.buffer(unique_id)))
        else:
            self._ffi.memmove(unique_id, store.get(key), self._ffi.sizeof("ncclUniqueId"))
        comm = self._ffi.new("ncclComm_t *")
        with torch.cuda.device(self.device):
            self._check(self._lib.ncclCommInitRank(comm, nranks, unique_id[0], rank), "ncclCommInitRank")
        self._comm = comm[0]

    def rank(self) -> int:
        return self._rank

    def nranks(self) -> int:
        return self._nranks

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            text = self._ffi.string(self._lib.ncclGetErrorString(result)).decode()
            raise NCCLError(f"{what} failed with NCCL error {result}: {text}")

    def _ptr(self, tensor: torch.Tensor, name: str) -> Any:
        if not isinstance(tensor, torch.Tensor) or tensor.device != self.device:
            where = tensor.device if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(f"{name} must be a tensor on {self.device}, got {where}")
        if not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous; call .contiguous() first")
        return self._ffi.cast("void *", tensor.data_ptr())

    def _run(self, what: str, *args: Any) -> None:
        if self._comm is None:
            raise NCCLError(f"{what}: the communicator was destroyed")
        stream = self._ffi.cast("void *", torch.cuda.current_stream(self.device).cuda_stream)
        with torch.cuda.device(self.device):
            self._check(getattr(self._lib, what)(*args, self._comm, stream), what)

    @staticmethod
    def _same(a: torch.Tensor, b: torch.Tensor, a_count: int, b_count: int, what: str) -> None:
        if a.dtype != b.dtype or a_count != b_count:
            raise ValueError(
                f"{what}: tensors must have the same dtype and matching sizes "
                f"(got {a.dtype}[{a.numel()}] and {b.dtype}[{b.numel()}])"
            )

    def allreduce(self, send: torch.Tensor, recv: torch.Tensor, op: object = 0) -> None:
        """``recv = op over ranks of send``."""
        self._same(send, recv, send.numel(), recv.numel(), "allreduce")
        self._run(
            "ncclAllReduce",
            self._ptr(send, "send"),
            self._ptr(recv, "recv"),
            send.numel(),
            nccl_dtype(send.dtype),
            nccl_op(op),
        )

    def allreduce_inplace(self, tensor: torch.Tensor, op: object = 0) -> None:
        """``tensor = op over ranks of tensor``."""
        self.allreduce(tensor, tensor, op)

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> None:
        """``tensor = rank src's tensor``."""
        ptr = self._ptr(tensor, "tensor")
        self._run("ncclBroadcast", ptr, ptr, tensor.numel(), nccl_dtype(tensor.dtype), self._peer(src))

    def reduce(self, send: torch.Tensor, recv: torch.Tensor, dst: int = 0, op: object = 0) -> None:
        """On rank ``dst``: ``recv = op over ranks of send``."""
        self._same(send, recv, send.numel(), recv.numel(), "reduce")
        self._run(
            "ncclReduce",
            self._ptr(send, "send"),
            self._ptr(recv, "recv"),
            send.numel(),
            nccl_dtype(send.dtype),
            nccl_op(op),
            self._peer(dst),
        )

    def reduce_inplace(self, tensor: torch.Tensor, dst: int = 0, op: object = 0) -> None:
        """On rank ``dst``: ``tensor = op over ranks of tensor``."""
        self.reduce(tensor, tensor, dst, op)

    def allgather(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        """``recv[r * n:(r + 1) * n] = rank r's send`` (n = send.numel())."""
        self._same(send, recv, send.numel() * self._nranks, recv.numel(), "allgather")
        self._run(
            "ncclAllGather",
            self._ptr(send, "send"),
            self._ptr(recv, "recv"),
            send.numel(),
            nccl_dtype(send.dtype),
        )

    def reduce_scatter(self, send: torch.Tensor, recv: torch.Tensor, op: object = 0) -> None:
        """``recv = op over ranks of send[rank * n:(rank + 1) * n]`` (n = recv.numel())."""
        self._same(send, recv, send.numel(), recv.numel() * self._nranks, "reduce_scatter")
        self._run(
            "ncclReduceScatter",
            self._ptr(send, "send"),
            self._ptr(recv, "recv"),
            recv.numel(),
            nccl_dtype(send.dtype),
            nccl_op(op),
        )

    def alltoall(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        """Equal splits: block j of send goes to rank j, block i of recv comes from rank i."""
        self._same(send, recv, send.numel(), recv.numel(), "alltoall")
        if send.numel() % self._nranks:
            raise ValueError(
                f"alltoall: {send.numel()} elements do not split into {self._nranks} equal blocks"
            )
        count, dtype = send.numel() // self._nranks, nccl_dtype(send.dtype)
        step = count * send.element_size()
        send_ptr, recv_ptr = self._ptr(send, "send"), self._ptr(recv, "recv")
        char = self._ffi.cast("char *", send_ptr), self._ffi.cast("char *", recv_ptr)
        self._check(self._lib.ncclGroupStart(), "ncclGroupStart")
        try:
            for peer in range(self._nranks):
                self._run("ncclSend", char[0] + peer * step, count, dtype, peer)
                self._run("ncclRecv", char[1] + peer * step, count, dtype, peer)
        finally:
            self._check(self._lib.ncclGroupEnd(), "ncclGroupEnd")

    def send(self, tensor: torch.Tensor, dst: int) -> None:
        """Sends ``tensor`` to rank ``dst`` (which calls ``recv``)."""
        self._run(
            "ncclSend", self._ptr(tensor, "tensor"), tensor.numel(), nccl_dtype(tensor.dtype), self._peer(dst)
        )

    def recv(self, tensor: torch.Tensor, src: int) -> None:
        """Receives ``tensor`` from rank ``src`` (which calls ``send``)."""
        self._run(
            "ncclRecv", self._ptr(tensor, "tensor"), tensor.numel(), nccl_dtype(tensor.dtype), self._peer(src)
        )

    def barrier(self) -> None:
        """Returns once every rank reached it (an allreduce of one element, then a stream sync)."""
        flag = torch.zeros(1, device=self.device)
        self.allreduce_inplace(flag)
        torch.cuda.current_stream(self.device).synchronize()

    def destroy(self) -> None:
        """Frees the NCCL communicator (after the queued work finished)."""
        if self._comm is not None:
            torch.cuda.current_stream(self.device).synchronize()
            self._check(self._lib.ncclCommDestroy(self._comm), "ncclCommDestroy")
            self._comm = None

    def _peer(self, peer: int) -> int:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self._nranks:
            raise ValueError(f"rank {peer!r} is not in 0..{self._nranks - 1}")
        return peer
