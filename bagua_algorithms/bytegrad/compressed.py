"""The bytegrad exchange: an allreduce of compressed chunks (any codec; MinMaxUInt8 by default), every
rank bit-identical.

Non-hierarchical, over the group's n ranks: pad the tensor to a multiple of n (repeating its last
value), split it into n chunks and compress each (one uint8 slot per chunk, with its fp32 min/max);
alltoall (chunk j to rank j); decompress the n received slots and average (or sum) them in fp32 into
chunk ``rank``; compress that chunk again; allgather the compressed chunks; decompress all of them.
Every rank decompresses the same bytes, so every rank ends with the same values, bit for bit. Per
rank about ``2 * numel`` bytes of uint8 payload travel instead of ``8 * numel`` bytes of fp32.
Non-finite values travel as an allreduce carries them: a chunk holding NaN/Inf is sent as a NaN chunk
and every rank ends with NaN there (``BAGUA_NONFINITE=raise``: ``NonFiniteError`` instead).

The buffers (uint8 send/receive/gather slots, the own chunk in the tensor's dtype) live in a
:class:`CompressedWorkspace` that a bucket keeps from step to step, so large allocations do not
page-fault every step; the result is decompressed straight into the tensor.

Hierarchical (the core's pattern, :mod:`bagua_core.lifecycle.bucket_ops.hierarchy`): reduce (AVG when
averaging, else SUM) to the node leader, run the compressed exchange among the node leaders (the
inter-node communicator), then broadcast inside the node (full precision on both intra-node legs).

Example::

    >>> grads = bucket.flattened_tensor()
    >>> compressed_allreduce(grads, group, average=True, hierarchical=False)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from bagua_algorithms.bytegrad.compressed_pipeline import PipelinedExchange
from bagua_algorithms.bytegrad.workspace import CompressedWorkspace
from bagua_core.api import BaguaCommunicator, ReduceOp, allgather, alltoall, hierarchy, settings
from bagua_core.codecs import Codec, check_codec_name, get_codec

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.api import BaguaBucket, BaguaProcessGroup

__all__ = ["CompressedAllReduceOp", "CompressedWorkspace", "compressed_allreduce", "compressed_allreduce_on",
           "start_compressed_allreduce", "start_compressed_allreduce_on"]

DEFAULT_CODEC = "MinMaxUInt8"
"""The codec of the exchange when none is named (the algorithm's documented default)."""


def _pieces(flat: torch.Tensor, n: int, ws: CompressedWorkspace) -> list[tuple[torch.Tensor, int, torch.Tensor]]:
    """``(values, chunks, slots)`` that together make ``ws.sent = C(flat padded to n * chunk with its
    last value, n chunks)`` without copying ``flat``: chunks are compressed independently, so only the
    chunks past the last full one go through a padded copy (``ws.tail``)."""
    chunk, numel = ws.chunk, flat.numel()
    if ws.tail is None:
        return [(flat, n, ws.sent)]
    full = numel // chunk  # >= 1 and < n
    slot = ws.sent.numel() // n
    rest = numel - full * chunk
    ws.tail[:rest].copy_(flat[full * chunk :])
    ws.tail[rest:].copy_(flat[-1:].expand(ws.tail.numel() - rest))
    return [(flat[: full * chunk], full, ws.sent[: slot * full]), (ws.tail, n - full, ws.sent[slot * full :])]


def compressed_allreduce_on(
    tensor: torch.Tensor, comm: BaguaCommunicator, average: bool = True, workspace: CompressedWorkspace | None = None,
    codec: Codec | None = None,
) -> None:
    """The bytegrad exchange of the contiguous float tensor ``tensor`` over ``comm``, in place.

    Sends the slots of ``codec`` (a :class:`~bagua_core.codecs.Codec`; None: the registered
    ``DEFAULT_CODEC``, MinMaxUInt8: fp32 min/max + one byte per value): an alltoall, then an
    allgather, pipelined for fp32 CPU tensors. ``workspace`` keeps the buffers for the next call of
    the same shape (a fresh one when omitted). The own chunk goes through compression too, so with
    one rank the result is ``D(C(x))``. Non-finite values follow ``BAGUA_NONFINITE``."""
    start_compressed_allreduce_on(tensor, comm, average, workspace, codec, defer=False)()


def start_compressed_allreduce_on(
    tensor: torch.Tensor, comm: BaguaCommunicator, average: bool = True, workspace: CompressedWorkspace | None = None,
    codec: Codec | None = None, defer: bool = True,
) -> Callable[[], None]:
    """:func:`compressed_allreduce_on` in two halves: with ``defer``, starts the exchange (for fp32 CPU
    tensors, round 1 on the wire) and returns what finishes it; ``tensor`` and ``workspace`` are not to be
    touched before. Otherwise (and for other tensors) it is done when this returns (the returned function
    does nothing)."""
    if not tensor.is_contiguous():
        raise ValueError("compressed_allreduce needs a contiguous tensor")
    flat = tensor.view(-1)
    n = comm.nranks()
    numel = flat.numel()
    if numel == 0:
        return _nothing
    codec = codec or get_codec(DEFAULT_CODEC)
    ws = (workspace or CompressedWorkspace()).buffers(numel, n, flat.dtype, flat.device, codec)
    if n > 1 and PipelinedExchange.applies(flat):
        exchange = PipelinedExchange(flat, comm, average, ws, _pieces(flat, n, ws), codec)
        if defer:
            exchange.start()
            return exchange.finish
        exchange.run()
        return _nothing
    nonfinite = settings.nonfinite_policy()
    for values, chunks, slots in _pieces(flat, n, ws):
        codec.encode(values, chunks, out=slots, nonfinite=nonfinite)
    if n > 1:
        alltoall(ws.sent, ws.received, comm=comm)
    else:
        ws.received.copy_(ws.sent)
    codec.decode_average(ws.received, n, ws.own, average=average)
    codec.encode(ws.own, 1, out=ws.own_compressed, nonfinite=nonfinite)
    if n > 1:
        allgather(ws.own_compressed, ws.gathered, comm=comm)
    else:
        ws.gathered.copy_(ws.own_compressed)
    # the slots of n * chunk and of numel elements in n chunks coincide: no padded result buffer
    codec.decode(ws.gathered, n, flat)
    return _nothing


def compressed_allreduce(
    tensor: torch.Tensor,
    group: BaguaProcessGroup,
    average: bool = True,
    hierarchical: bool = False,
    workspace: CompressedWorkspace | None = None,
    codec: Codec | None = None,
) -> None:
    """Bytegrad allreduce of ``tensor`` over ``group`` in place (AVG when ``average``, else SUM)."""
    start_compressed_allreduce(tensor, group, average, hierarchical, workspace, codec, defer=False)()


def start_compressed_allreduce(tensor: torch.Tensor, group: BaguaProcessGroup, average: bool = True,
                               hierarchical: bool = False, workspace: CompressedWorkspace | None = None,
                               codec: Codec | None = None, defer: bool = True) -> Callable[[], None]:
    """:func:`compressed_allreduce` in two halves: returns what finishes it (hierarchical: the rest of the
    leaders' exchange, then the broadcast inside the node; without ``defer`` only the broadcast)."""
    if not hierarchical:
        return start_compressed_allreduce_on(tensor, group.get_global_communicator(), average, workspace, codec, defer)
    inter = hierarchy.reduce_to_leader(tensor, group, ReduceOp.AVG if average else ReduceOp.SUM)
    finish = _nothing if inter is None else \
        start_compressed_allreduce_on(tensor, inter, average, workspace, codec, defer)

    def finish_and_broadcast() -> None:
        finish()
        hierarchy.broadcast_from_leader(tensor, group)

    return finish_and_broadcast


def _nothing() -> None:
    return None


class CompressedAllReduceOp:
    """The bucket op of bytegrad (and of qadam's momentum, which imports it): the exchange above over
    the bucket (AVG when ``average``), with a workspace kept from step to step. With more than one
    peer, and where the bucket lets it (``bucket.may_defer``: its last op, run by the module's
    scheduler), it returns with round 1 on the wire and the rest deferred to the end of backward, so the
    next buckets' round 1 can use the link while this rank waits for its peers' chunks.

    Example::

        >>> bucket.append_op(CompressedAllReduceOp(group, hierarchical=False, average=True, compression="MinMaxUInt8"))
    """

    def __init__(self, group: BaguaProcessGroup | None = None, hierarchical: bool = False, average: bool = True,
                 compression: str = DEFAULT_CODEC) -> None:
        self.codec = get_codec(check_codec_name(compression))  # an installed codec (ValueError lists them)
        self.group = group
        self.hierarchical = bool(hierarchical)
        self.average = bool(average)
        self.compression = compression
        self.workspace = CompressedWorkspace()

    def __call__(self, bucket: BaguaBucket) -> None:
        group = hierarchy.resolve_group(self.group, bucket)
        tensor = bucket.flattened_view()
        flattened = tensor is bucket.buffer
        # in flight while later buckets start, whose round 1 then fills the link while this rank waits
        # for its peers' chunks; not with one peer: the pair's one socket carries everything in order,
        # so a later round 1 could only go ahead of this round 2, and the peer's announcement of its
        # receive would wait behind this round's data (measured 2-9% slower on 2 hosts)
        exchanging = group.num_nodes if self.hierarchical else group.get_global_communicator().nranks()
        defer = exchanging > 2 and bucket.may_defer(self)
        finish = start_compressed_allreduce(tensor, group, self.average, self.hierarchical, self.workspace, self.codec,
                                            defer)
        if defer:
            bucket.defer(finish if flattened else lambda: (finish(), bucket.write_back(tensor)))
            return
        finish()
        if not flattened:
            bucket.write_back(tensor)
