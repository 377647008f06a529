"""The low-precision decentralized operation: a ring exchange of compressed weight differences.

Every bucket has three replicas, owned by the algorithm and updated in place by the op: ``w`` (its
own weights as the neighbours know them), ``l`` (the left neighbour's) and ``r`` (the right
neighbour's), all starting at the bucket's initial weights. Run after the optimizer step, with ``x`` the stepped weights::

    z = x + l/3 + r/3 - (5/3) w
    send C(z) to (rank - 1) % n and (rank + 1) % n; receive C(z_left), C(z_right)
    l += D(C(z_left)); r += D(C(z_right)); x = w + D(C(z)); w = x

Communicated: ``C(z)``, the compression of the whole bucket by the codec named ``compression``
(MinMaxUInt8 by default: one min/max, about ``numel`` bytes) to each of the two neighbours (one message
stream when they are the same rank). The difference and the update are this package's
(:mod:`bagua_algorithms.low_precision_decentralized.kernels`): fused with MinMaxUInt8's kernels, composed
of the codec's plain steps for any other codec.
Pipelined (over bytegrad's pipelined-exchange engine, which that package exports): z and its min/max in one pass, then each segment of C(z) is quantised and sent while the next
one is, and each received segment updates l, r, w and x in one pass while later ones travel. Hierarchical: the weights are
averaged inside the node (reduce to the leader) first, the ring runs among the node leaders, and
the result is broadcast in the node.

Overlapped (``overlap=True``, what the algorithm sets): the new weights ``x = w + D(C(z))`` depend on
this rank's own ``C(z)`` only, and the neighbours' messages update only ``l`` and ``r``, which nothing
reads before the next round's difference. So the round updates w and x from its own encoded segments
as soon as they are sent and returns with the neighbours' segments still travelling;
:meth:`LowPrecisionDecentralizedOp.complete` (the algorithm calls it before the next round's
difference, and before the replicas are saved or the module is unwrapped) waits for them and adds
them into l and r. Same operations on the same values as the fused update (``left += D(from_left)``,
``right += D(from_right)``, ``w += D(own)``, ``x = w``), so the same bits; the next step's forward and
backward run while the bytes are on the wire. A failed receive is then raised by the next round.

Example::

    >>> w, l, r = (bucket.flattened_tensor().float() for _ in range(3))
    >>> bucket.append_op(LowPrecisionDecentralizedOp(group, False, w, l, r, compression="MinMaxUInt8"))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch.autograd.graph import increment_version

from bagua_algorithms.bytegrad import post_receives, schedule, segments, send_segment, wait_all
from bagua_algorithms.low_precision_decentralized import kernels
from bagua_core.api import (
    BaguaCommunicator,
    ReduceOp,
    allreduce_inplace,
    group_failure,
    hierarchy,
    irecv,
    isend,
    record_payload,
    settings,
    tensors,
)
from bagua_core.codecs import Codec, check_codec_name, get_codec

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.api import BaguaBucket, BaguaProcessGroup

__all__ = ["LowPrecisionDecentralizedOp"]

_TAG = 0x6c70_0000  # point-to-point tags of the ring exchange: _TAG + segment index


class LowPrecisionDecentralizedOp:
    """One round of low-precision decentralized averaging of a bucket of weights, z compressed by the
    installed codec named ``compression`` (this package's fused steps for the codecs it knows)."""

    def __init__(
        self,
        group: BaguaProcessGroup | None,
        hierarchical: bool,
        weight: torch.Tensor,
        left_peer_weight: torch.Tensor,
        right_peer_weight: torch.Tensor,
        compression: str = "MinMaxUInt8",
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
        self.codec: Codec = get_codec(check_codec_name(compression))  # an installed codec (ValueError lists them)
        # the algorithm's tensors, updated in place (1-D views)
        self.weight = weight.detach().view(-1)
        self.left_peer_weight = left_peer_weight.detach().view(-1)
        self.right_peer_weight = right_peer_weight.detach().view(-1)
        self._buffers: tuple[torch.Tensor, ...] | None = None
        self._prepared: tuple[torch.Tensor, torch.Tensor] | None = None  # (flat, x) of a prepared round
        self.overlap = False
        """Leave the neighbours' messages in flight when the round returns (see the module docstring);
        :meth:`complete` finishes them."""
        self._in_flight: Callable[[], None] | None = None

    def _workspace(self, numel: int) -> tuple[torch.Tensor, ...]:
        """``(z, sent, from_left, from_right)``, kept from round to round."""
        size = self.codec.encoded_size(numel, 1)
        if self._buffers is None or self._buffers[0].numel() != numel or self._buffers[1].numel() != size:
            self._buffers = None
            self._buffers = (torch.empty(numel, dtype=torch.float32, device=self.weight.device),
                             *(torch.empty(size, dtype=torch.uint8, device=self.weight.device) for _ in range(3)))
        return self._buffers

    def _difference(self, x: torch.Tensor) -> None:
        """z = x + l/3 + r/3 - (5/3) w and its header (one pass for z and its min/max)."""
        z, sent = self._workspace(x.numel())[:2]
        stats = self.codec.new_stats() if kernels.fuses(self.codec) else None
        kernels.difference(self.codec, x, self.weight, self.left_peer_weight, self.right_peer_weight, z, stats)
        self.codec.encode_headers_with_stats(z, 1, sent, stats, nonfinite=settings.nonfinite_policy())

    def complete(self) -> None:
        """Finish a round left in flight (``overlap``): wait for the neighbours' segments, add them into
        ``left_peer_weight`` and ``right_peer_weight``, wait for this rank's sends. Nothing to do otherwise."""
        finish, self._in_flight = self._in_flight, None
        if finish is not None:
            finish()

    def _ring_step(self, x: torch.Tensor, comm: BaguaCommunicator, prepared: bool = False,
                   defer: bool = False) -> Callable[[], None] | None:
        """One round on ``x`` over ``comm``. ``defer`` (the pipelined CPU path only): x and w are final on
        return and the returned function finishes l and r (None: nothing left in flight)."""
        w, left, right, codec = self.weight, self.left_peer_weight, self.right_peer_weight, self.codec
        numel, n, rank = x.numel(), comm.nranks(), comm.rank()
        z, sent, from_left, from_right = self._workspace(numel)
        if n == 1 or x.device.type != "cpu":  # no ring, or CUDA: the whole buffer at once
            if x.device.type == "cpu":
                if not prepared:
                    self._difference(x)
                codec.encode_range(z, 1, sent, 0, numel)
            else:
                kernels.difference(codec, x, w, left, right, z)
                codec.encode(z, 1, out=sent, nonfinite=settings.nonfinite_policy())
            from_left, from_right = _exchange_whole(sent, from_left, from_right, comm) if n > 1 else (sent, sent)
            kernels.update(codec, from_left, from_right, sent, w, left, right, x, 0, numel)
            return None
        if n == 2:  # both neighbours are the same rank: one message stream serves both
            from_right = from_left
            peers = [((rank - 1) % n, from_left)]
        else:
            peers = [((rank - 1) % n, from_left), ((rank + 1) % n, from_right)]
        segs = segments(numel, sent.numel(), codec.header_bytes, codec.bytes_per_element)
        # receives first: the neighbours' segments can go as soon as they are encoded
        received = post_receives(comm, segs, peers, _TAG)
        if not prepared:
            self._difference(x)
        for _ in peers:
            record_payload("send", sent)
        if defer:
            return _send_and_defer(comm, segs, peers, received, codec, z, sent, w, left, right, x, from_left, from_right)
        targets = [(peer, sent) for peer, _ in peers]
        sends = []
        for encode, decode in schedule(segs):
            if encode is not None:
                codec.encode_range(z, 1, sent, encode.begin, encode.end)
                sends += send_segment(comm, encode, targets, _TAG)
            if decode is not None:
                wait_all(received[decode.index])
                kernels.update(codec, from_left, from_right, sent, w, left, right, x, decode.begin, decode.end)
        wait_all(sends)
        return None

    def _group(self, bucket: BaguaBucket) -> BaguaProcessGroup:
        return hierarchy.resolve_group(self.group, bucket)

    @staticmethod
    def _weights(bucket: BaguaBucket) -> tuple[torch.Tensor, torch.Tensor]:
        """``(flat, x)``: the bucket's weights, and the fp32 tensor the round works on (the bucket's own
        fp32 buffer, updated in place, or a copy)."""
        flat = bucket.flattened_view()
        return flat, flat if flat.dtype == torch.float32 and flat is bucket.buffer else flat.detach().float()

    def prepare(self, bucket: BaguaBucket) -> None:
        """Compute this round's difference z (one pass over the weights and replicas) now, on the
        caller's thread: the algorithm calls it for bucket k+1 while bucket k is on the wire, so only
        the first bucket's difference delays the exchange. Skipped where the ring's input is not this
        rank's own weights (several ranks in a node, hierarchical) or not on the CPU; the operation then
        computes it itself."""
        group = self._group(bucket)
        if self.hierarchical and group.get_intra_node_communicator().nranks() > 1:
            return
        with torch.no_grad():
            flat, x = self._weights(bucket)
            if x.device.type != "cpu":
                return
            self._difference(x)
            self._prepared = (flat, x)

    def resynchronize(self, bucket: BaguaBucket) -> None:
        """Average the bucket's weights over every rank of the group (an fp32 allreduce, exact up to
        rounding) and restart the replicas ``w``, ``l`` and ``r`` from the result, as the algorithm starts
        from equal weights. Fault-tolerant mode runs it on the first step of every new quorum: the ring
        neighbours are other replicas then, and the replicas held of the old ones mean nothing to them."""
        group = self._group(bucket)
        self._prepared = None
        comm = group.get_global_communicator()
        with torch.no_grad():
            flat, x = self._weights(bucket)
            average = x.clone()
            allreduce_inplace(average, op=ReduceOp.AVG, comm=comm)
            if group_failure(comm.torch_group) is not None:
                return  # a participant failed (fault-tolerant mode): the buffer holds garbage, this step fails
            x.copy_(average)
            if x is flat and flat is bucket.buffer:
                increment_version([tensors.effective(tensor) for tensor in bucket.tensors])
            else:
                bucket.write_back(x.to(bucket.dtype))
            settled = bucket.flattened_view().detach().float().reshape(-1)  # the weights as the model holds them
            for replica in (self.weight, self.left_peer_weight, self.right_peer_weight):
                replica.copy_(settled)

    def __call__(self, bucket: BaguaBucket) -> None:
        self.complete()  # the previous round, if its caller did not (its l and r are this round's input)
        group = self._group(bucket)
        prepared, self._prepared = self._prepared, None
        with torch.no_grad():
            flat, x = prepared if prepared is not None else self._weights(bucket)
            if not self.hierarchical:
                self._in_flight = self._ring_step(x, group.get_global_communicator(), prepared is not None,
                                                  defer=self.overlap)
            else:
                inter = hierarchy.reduce_to_leader(x, group, ReduceOp.AVG)
                if inter is not None:
                    self._in_flight = self._ring_step(x, inter, prepared is not None, defer=self.overlap)
                hierarchy.broadcast_from_leader(x, group)
            if x is flat and flat is bucket.buffer:  # the weights were written in place, behind autograd
                increment_version([tensors.effective(tensor) for tensor in bucket.tensors])
            else:
                bucket.write_back(x.to(bucket.dtype))


def _exchange_whole(sent: torch.Tensor, from_left: torch.Tensor, from_right: torch.Tensor,
                    comm: BaguaCommunicator) -> tuple[torch.Tensor, torch.Tensor]:
    """Send ``sent`` to both ring neighbours, receive theirs; returns (from_left, from_right), the
    same buffer when both neighbours are one rank."""
    n, rank, group = comm.nranks(), comm.rank(), comm.torch_group
    left, right = comm.group_rank((rank - 1) % n), comm.group_rank((rank + 1) % n)  # ranks in group
    # Both receives are posted before either send: gloo sends only once the partner announced its
    # receive, and that announcement queues on the socket behind whatever is already being sent, so a
    # send posted first made the two directions of each link take turns.
    works = [irecv(from_left, group=group, group_src=left)] + (
        [irecv(from_right, group=group, group_src=right)] if n > 2 else [])
    record_payload("send", sent)
    works.append(isend(sent, group=group, group_dst=right))
    if n > 2:
        record_payload("send", sent)
        works.append(isend(sent, group=group, group_dst=left))
    wait_all(works)
    return from_left, (from_right if n > 2 else from_left)


def _send_and_defer(comm: BaguaCommunicator, segs: list, peers: list[tuple[int, torch.Tensor]], received: list,
                    codec: Codec, z: torch.Tensor, sent: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
                    right: torch.Tensor, x: torch.Tensor, from_left: torch.Tensor,
                    from_right: torch.Tensor) -> Callable[[], None]:
    """Encode and send every segment of C(z) to ``peers``, then ``w += D(C(z))``, ``x = w`` (the sends
    only read ``sent``); return what waits for the neighbours' segments and adds them into ``left`` and
    ``right`` (the decode of the fused update, target by target: the same bits)."""
    sends = []
    for segment in segs:
        codec.encode_range(z, 1, sent, segment.begin, segment.end)
        sends += send_segment(comm, segment, [(peer, sent) for peer, _ in peers], _TAG)
    for segment in segs:
        codec.decode(sent, 1, w, accumulate=True, begin=segment.begin, end=segment.end)
        x[segment.begin : segment.end].copy_(w[segment.begin : segment.end])

    def finish() -> None:
        for segment, works in zip(segs, received):
            wait_all(works)
            codec.decode(from_left, 1, left, accumulate=True, begin=segment.begin, end=segment.end)
            codec.decode(from_right, 1, right, accumulate=True, begin=segment.begin, end=segment.end)
        wait_all(sends)

    return finish
