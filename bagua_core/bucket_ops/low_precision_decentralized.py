"""The low-precision decentralized operation: a ring exchange of compressed weight differences.

Every bucket has three replicas, owned by the algorithm and updated in place by the op: ``w`` (its
own weights as the neighbours know them), ``l`` (the left neighbour's) and ``r`` (the right
neighbour's), all starting at the bucket's initial weights. Run after the optimizer step, with ``x`` the stepped weights::

    z = x + l/3 + r/3 - (5/3) w
    send C(z) to (rank - 1) % n and (rank + 1) % n; receive C(z_left), C(z_right)
    l += D(C(z_left)); r += D(C(z_right)); x = w + D(C(z)); w = x

Communicated: ``C(z)``, the MinMaxUInt8 compression of the whole bucket (one min/max), about
``numel`` bytes to each of the two neighbours. Hierarchical: the weights are averaged inside the
node (reduce to the leader) first, the ring runs among the node leaders, and the result is
broadcast in the node.

Example::

    >>> w, l, r = (bucket.flattened_tensor() for _ in range(3))
    >>> bucket.append_op(LowPrecisionDecentralizedOp(group, False, w, l, r))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bagua_core import env, native
from bagua_core.communication import ReduceOp, broadcast, reduce_inplace
from bagua_core.communication.communicator import BaguaCommunicator
from bagua_core.communication.host_staging import irecv, isend

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.bucket import BaguaBucket
    from bagua_core.process_group import BaguaProcessGroup

__all__ = ["LowPrecisionDecentralizedOp", "ring_exchange"]


def ring_exchange(payload: torch.Tensor, comm: BaguaCommunicator) -> tuple[torch.Tensor, torch.Tensor]:
    """Send ``payload`` to both ring neighbours of ``comm``; return (from_left, from_right)."""
    n, rank = comm.nranks(), comm.rank()
    if n == 1:
        return payload, payload
    left, right = comm.global_rank((rank - 1) % n), comm.global_rank((rank + 1) % n)
    from_left, from_right = torch.empty_like(payload), torch.empty_like(payload)
    if n == 2:  # both neighbours are the same rank: one exchange serves both
        works = [isend(payload, right, comm.torch_group), irecv(from_left, left, comm.torch_group)]
        for work in works:
            work.wait()
        return from_left, from_left
    works = [
        isend(payload, left, comm.torch_group),
        isend(payload, right, comm.torch_group),
        irecv(from_left, left, comm.torch_group),
        irecv(from_right, right, comm.torch_group),
    ]
    for work in works:
        work.wait()
    return from_left, from_right


class LowPrecisionDecentralizedOp:
    """One round of low-precision decentralized averaging of a bucket of weights."""

    def __init__(
        self,
        group: BaguaProcessGroup | None,
        hierarchical: bool,
        weight: torch.Tensor,
        left_peer_weight: torch.Tensor,
        right_peer_weight: torch.Tensor,
    ) -> None:
        for name, replica in (("weight", weight), ("left_peer_weight", left_peer_weight),
                              ("right_peer_weight", right_peer_weight)):
            if not replica.is_contiguous() or replica.numel() != weight.numel():
                raise ValueError(f"{name} must be a contiguous tensor of the bucket's {weight.numel()} elements")
            if replica.dtype != torch.float32:
                raise ValueError(f"{name} must be float32 (the compressed exchange accumulates in fp32), got "
                                 f"{replica.dtype}; create it with bucket.flattened_tensor().float()")
        self.group = group
        self.hierarchical = bool(hierarchical)
        # the algorithm's tensors, updated in place (1-D views)
        self.weight = weight.detach().view(-1)
        self.left_peer_weight = left_peer_weight.detach().view(-1)
        self.right_peer_weight = right_peer_weight.detach().view(-1)

    def _ring_step(self, x: torch.Tensor, comm: BaguaCommunicator) -> None:
        w, left, right = self.weight, self.left_peer_weight, self.right_peer_weight
        z = x + left / 3 + right / 3 - w * (5 / 3)
        compressed = native.compress_minmax_uint8(z, 1, nonfinite=env.get_nonfinite_policy())  # NaN spreads as averaging does
        from_left, from_right = ring_exchange(compressed, comm)
        native.decompress_minmax_uint8(from_left, 1, left, accumulate=True)
        native.decompress_minmax_uint8(from_right, 1, right, accumulate=True)
        native.decompress_minmax_uint8(compressed, 1, w, accumulate=True)
        x.copy_(w)

    def __call__(self, bucket: BaguaBucket) -> None:
        group = self.group or bucket.process_group
        if group is None:
            from bagua_core.process_group import get_default_group

            group = get_default_group()
        with torch.no_grad():
            x = bucket.flattened_tensor().detach().float().clone()
            if not self.hierarchical:
                self._ring_step(x, group.get_global_communicator())
            else:
                intra, inter = group.get_intra_node_communicator(), group.get_inter_node_communicator()
                if intra.nranks() > 1:
                    reduce_inplace(x, dst=0, op=ReduceOp.AVG, comm=intra)
                if inter.is_member:
                    self._ring_step(x, inter)
                if intra.nranks() > 1:
                    broadcast(x, src=0, comm=intra)
            bucket.write_back(x.to(bucket.dtype))
