"""CUDA tensors on gloo: what gloo cannot read from device memory travels through host memory.

When ranks share a GPU (more local ranks than GPUs, see ``process_group.choose_backend``) or a user
picks ``BAGUA_BACKEND=gloo`` on CUDA, collectives get CUDA tensors on a gloo group. Gloo's allreduce
and broadcast handle them; its point-to-point messages and the other collectives pass the device
pointer to the socket layer, which fails or aborts the process ("writev ... Bad address"). Those calls
stage here instead: a host copy is sent, or received and copied back. Nothing changes for CPU tensors
or for groups whose CUDA tensors go to NCCL.

Example::

    >>> work = isend(cuda_tensor, group=group, group_dst=1)      # a host copy is sent when the group is gloo
    >>> received = irecv(cuda_buffer, group=group, group_src=1)  # wait() copies the message into cuda_buffer
    >>> work.wait(); received.wait()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from bagua_core.runtime.torch_groups import backend_of

__all__ = ["backend_for", "needs_staging", "on_host", "isend", "irecv"]


def backend_for(tensor: torch.Tensor, group: Any) -> str:
    """The backend that runs collectives on ``tensor``'s device in ``group`` (``"cpu:gloo,cuda:nccl"``
    maps each device type to its own)."""
    name = backend_of(group)
    if ":" not in name:
        return name
    mapping = dict(part.split(":", 1) for part in name.split(","))
    return mapping.get(tensor.device.type, "")


def needs_staging(tensor: torch.Tensor, group: Any) -> bool:
    """Whether ``tensor`` must go through host memory on ``group`` (a CUDA tensor on gloo)."""
    return tensor.is_cuda and group is not None and backend_for(tensor, group) == "gloo"


@contextlib.contextmanager
def on_host(group: Any, inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor] = ()
            ) -> Iterator[tuple[list[torch.Tensor], list[torch.Tensor]]]:
    """Yields (inputs, outputs) to hand to the collective: host copies when a CUDA tensor on a gloo
    group is among them (outputs are copied back on a normal exit), else the tensors themselves."""
    if not any(needs_staging(t, group) for t in (*inputs, *outputs)):
        yield list(inputs), list(outputs)
        return
    host_in = [t.detach().to("cpu") for t in inputs]
    host_out = [torch.empty(t.shape, dtype=t.dtype) for t in outputs]
    yield host_in, host_out
    for tensor, host in zip(outputs, host_out):
        tensor.copy_(host)


class _StagedRecv:
    def __init__(self, work: Any, host: torch.Tensor, tensor: torch.Tensor) -> None:
        self._work, self._host, self._tensor = work, host, tensor

    def wait(self, timeout: Any = None) -> bool:
        self._work.wait() if timeout is None else self._work.wait(timeout)
        self._tensor.copy_(self._host)
        return True

    def is_completed(self) -> bool:
        return self._work.is_completed()


class _StagedSend:
    def __init__(self, work: Any, host: torch.Tensor) -> None:
        self._work, self._host = work, host  # the host copy lives until the send completed

    def wait(self, timeout: Any = None) -> bool:
        return self._work.wait() if timeout is None else self._work.wait(timeout)

    def is_completed(self) -> bool:
        return self._work.is_completed()


def isend(tensor: torch.Tensor, dst: int | None = None, group: Any = None, tag: int = 0, *,
          group_dst: int | None = None) -> Any:
    """``dist.isend`` that works for CUDA tensors on gloo: the peer is ``group_dst``, its rank in ``group``
    (``comm.group_rank(r)``: any group, fault-tolerant mode's too), or ``dst``, a global rank (a group torch
    made only: torch looks it up in its tables), as in torch."""
    peer = {"dst": dst} if group_dst is None else {"group_dst": group_dst}
    if not needs_staging(tensor, group):
        return dist.isend(tensor, group=group, tag=tag, **peer)
    host = tensor.detach().to("cpu")
    return _StagedSend(dist.isend(host, group=group, tag=tag, **peer), host)


def irecv(tensor: torch.Tensor, src: int | None = None, group: Any = None, tag: int = 0, *,
          group_src: int | None = None) -> Any:
    """``dist.irecv`` that works for CUDA tensors on gloo; the tensor holds the message after ``wait()``. The
    peer is ``group_src`` (its rank in ``group``) or ``src`` (a global rank), as in :func:`isend`."""
    peer = {"src": src} if group_src is None else {"group_src": group_src}
    if not needs_staging(tensor, group):
        return dist.irecv(tensor, group=group, tag=tag, **peer)
    host = torch.empty(tensor.shape, dtype=tensor.dtype)
    return _StagedRecv(dist.irecv(host, group=group, tag=tag, **peer), host, tensor)
