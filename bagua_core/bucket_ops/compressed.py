"""The bytegrad exchange: an allreduce of MinMaxUInt8-compressed chunks, every rank bit-identical.

Non-hierarchical, over the group's n ranks: pad the tensor to a multiple of n (repeating its last
value), split it
into n chunks and compress each (one uint8 slot per chunk, with its fp32 min/max); alltoall (chunk j
to rank j); decompress the n received slots and average (or sum) them in fp32 into chunk ``rank``;
compress that chunk again; allgather the compressed chunks; decompress all of them. Every rank
decompresses the same bytes, so every rank ends with the same values, bit for bit. Per rank about
``2 * numel`` bytes of uint8 payload travel instead of ``8 * numel`` bytes of fp32.

Hierarchical: reduce (SUM) to the node leader, divide by the node size when averaging, run the
compressed exchange among the node leaders (the inter-node communicator), then broadcast inside
the node (full precision on both intra-node legs).

Example::

    >>> grads = bucket.flattened_tensor()
    >>> compressed_allreduce(grads, group, average=True, hierarchical=False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from bagua_core import native
from bagua_core.communication import ReduceOp, allgather, alltoall, broadcast, reduce_inplace
from bagua_core.communication.communicator import BaguaCommunicator

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.process_group import BaguaProcessGroup

__all__ = ["compressed_allreduce", "compressed_allreduce_on"]


def compressed_allreduce_on(tensor: torch.Tensor, comm: BaguaCommunicator, average: bool = True) -> None:
    """The bytegrad exchange of the contiguous float tensor ``tensor`` over ``comm``, in place.

    The own chunk goes through compression too, so with one rank the result is ``D(C(x))``."""
    if not tensor.is_contiguous():
        raise ValueError("compressed_allreduce needs a contiguous tensor")
    flat = tensor.view(-1)
    n = comm.nranks()
    numel = flat.numel()
    if numel == 0:
        return
    chunk = -(-numel // n)
    # pad with copies of the last value: zeros could widen the last chunk's range and cost precision
    padded = flat if chunk * n == numel else torch.cat([flat, flat[-1:].expand(chunk * n - numel)])
    sent = native.compress_minmax_uint8(padded, n)
    received = torch.empty_like(sent)
    if n > 1:
        alltoall(sent, received, comm=comm)
    else:
        received.copy_(sent)
    own = torch.empty(chunk, dtype=flat.dtype, device=flat.device)
    native.decompress_average_minmax_uint8(received, n, own, average=average)
    own_compressed = native.compress_minmax_uint8(own, 1)
    gathered = torch.empty_like(sent)
    if n > 1:
        allgather(own_compressed, gathered, comm=comm)
    else:
        gathered.copy_(own_compressed)
    result = torch.empty(chunk * n, dtype=flat.dtype, device=flat.device)
    native.decompress_minmax_uint8(gathered, n, result)
    flat.copy_(result[:numel])


def compressed_allreduce(
    tensor: torch.Tensor, group: BaguaProcessGroup, average: bool = True, hierarchical: bool = False
) -> None:
    """Bytegrad allreduce of ``tensor`` over ``group`` in place (AVG when ``average``, else SUM)."""
    if not hierarchical:
        compressed_allreduce_on(tensor, group.get_global_communicator(), average)
        return
    intra, inter = group.get_intra_node_communicator(), group.get_inter_node_communicator()
    if intra.nranks() > 1:
        reduce_inplace(tensor, dst=0, op=ReduceOp.AVG if average else ReduceOp.SUM, comm=intra)
    if inter.is_member:
        compressed_allreduce_on(tensor, inter, average)
    if intra.nranks() > 1:
        broadcast(tensor, src=0, comm=intra)
