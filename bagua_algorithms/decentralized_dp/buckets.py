"""``ParamBucket``: a block of parameters stepped by its own optimizer and mixed as one flat tensor.

With ``as_view`` the parameters become views of one contiguous buffer (in their own memory layout,
so ``channels_last`` parameters stay ``channels_last``); otherwise they are flattened into a copy
when sent and written back after mixing. The bucket's parameters are sent in their own dtype, as an
asynchronous ``all_reduce(SUM)`` on the edge's group, from a separate communication buffer, so the
next iteration's forward and backward run on the local parameters while the sum is in flight.

Example::

    >>> bucket = ParamBucket([("fc.weight", w), ("fc.bias", b)], as_view=True)
    >>> bucket.launch(edge)          # after the bucket's optimizer stepped
    >>> bucket.finish()              # next iteration, before the next step: mix
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from bagua_core.api import irecv, isend, record_payload

from bagua_algorithms.decentralized_dp.topology import Edge, mix_inplace

__all__ = ["ParamBucket", "PeerSum"]


class PeerSum:
    """The SUM of ``buffer`` over ``edge`` by point-to-point messages on ``comm`` (whose ranks the edge's
    are): each member sends its buffer to every other member and receives theirs; :meth:`wait` adds them
    in rank order, so every member gets the same sum (as an allreduce does)."""

    def __init__(self, buffer: torch.Tensor, edge: Edge, comm: Any) -> None:
        self.buffer, self.me = buffer, comm.rank()
        self.received = {r: torch.empty_like(buffer) for r in edge.ranks if r != self.me}
        group = comm.torch_group
        # receives first: gloo sends once the partner announced its receive (see full_precision_op)
        self.works = [irecv(buf, group=group, group_src=comm.group_rank(r)) for r, buf in self.received.items()]
        for r in self.received:
            record_payload("send", buffer.numel() * buffer.element_size())
            self.works.append(isend(buffer, group=group, group_dst=comm.group_rank(r)))
        self.ranks = edge.ranks

    def wait(self) -> bool:
        for work in self.works:
            work.wait()
        self.works = []
        total = None
        for r in self.ranks:  # rank order: the same sum on every member
            part = self.buffer if r == self.me else self.received[r]
            total = part.clone() if total is None else total.add_(part)
        self.buffer.copy_(total)
        return True

def _is_dense(param: torch.Tensor) -> bool:
    """True for the layouts kept in the bucket buffer as they are: contiguous and channels-last."""
    if param.is_contiguous():
        return True
    if param.dim() == 4:
        return param.is_contiguous(memory_format=torch.channels_last)
    return param.dim() == 5 and param.is_contiguous(memory_format=torch.channels_last_3d)


class ParamBucket:
    """Parameters of one dtype and device, their optimizer, LR scheduler and in-flight mixing round."""

    def __init__(self, named_params: list[tuple[str, torch.nn.Parameter]], as_view: bool) -> None:
        self.names = [name for name, _ in named_params]
        self.params = [param for _, param in named_params]
        self.as_view = as_view
        self.numels = [p.numel() for p in self.params]
        self.offsets = [sum(self.numels[:i]) for i in range(len(self.params))]
        first = self.params[0]
        self.flat = torch.empty(sum(self.numels), dtype=first.dtype, device=first.device)
        with torch.no_grad():
            for param, offset, numel in zip(self.params, self.offsets, self.numels):
                if as_view:
                    stride = param.stride() if _is_dense(param) else torch.empty(param.shape).stride()
                    view = self.flat[offset : offset + numel].as_strided(param.shape, stride)
                    view.copy_(param.data)
                    param.data = view
        # without views: each parameter's place in the flat tensor, for one _foreach copy each way
        self.places = [] if as_view else [self.flat[offset : offset + numel].view(param.shape)
                                          for param, offset, numel in zip(self.params, self.offsets, self.numels)]
        self.comm_buffer = torch.empty_like(self.flat)
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.work: Any = None
        self.pending = False  # a launched round whose result is not mixed yet
        self.edge: Edge | None = None

    def gather(self) -> torch.Tensor:
        """The parameters as one flat tensor (the buffer itself when the parameters are its views)."""
        if self.as_view:
            return self.flat
        with torch.no_grad():
            torch._foreach_copy_(self.places, [param.detach() for param in self.params])
        return self.flat

    def scatter(self) -> None:
        """Write the flat tensor back into the parameters (nothing to do for views)."""
        if self.as_view:
            return
        with torch.no_grad():
            torch._foreach_copy_(self.params, self.places)

    def launch(self, edge: Edge, comm: Any = None) -> None:
        """Start the asynchronous SUM of the parameters over ``edge`` (nothing for a one-rank edge).
        ``comm``: a communicator over every rank (fault-tolerant mode's quorum, where an edge has no group
        of its own): the SUM runs on it, an allreduce when the edge is every rank, else point to point."""
        self.edge = edge
        if edge.size < 2:
            return
        self.comm_buffer.copy_(self.gather())
        if comm is not None and edge.size < comm.nranks():
            self.work = PeerSum(self.comm_buffer, edge, comm)
        else:
            record_payload("allreduce", self.comm_buffer.numel() * self.comm_buffer.element_size())
            group = comm.torch_group if comm is not None else edge.group
            self.work = dist.all_reduce(self.comm_buffer, op=dist.ReduceOp.SUM, group=group, async_op=True)
        self.pending = True

    def settle(self) -> None:
        """Wait for the round in flight; its result stays to be mixed by the next :meth:`finish`."""
        if self.work is not None:
            self.work.wait()
            self.work = None

    def finish(self, adaptive_factor: float = 1.0) -> None:
        """Wait for the round in flight and mix its result into the parameters:
        ``x <- (1 - a) x + a mix(x)`` with ``a = adaptive_factor`` (decent-dp's)."""
        if not getattr(self, "pending", False):
            return
        self.settle()
        self.pending = False
        with torch.no_grad():
            x = self.gather()
            if adaptive_factor == 1.0:
                mix_inplace(x, self.comm_buffer, self.edge)
            else:
                local = x.clone()
                mix_inplace(x, self.comm_buffer, self.edge).mul_(adaptive_factor).add_(local, alpha=1 - adaptive_factor)
            self.scatter()

    def discard(self) -> None:
        """Wait for the round in flight and drop its result."""
        self.settle()
        self.pending = False

