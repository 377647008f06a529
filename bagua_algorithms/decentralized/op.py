"""The decentralized synchronous operation: average a bucket of weights with the step's peers.

Communicated: a copy of the bucket's weights, in their own dtype, taken when the weights were
sent (the forward pre-hook of a communication step). ``"all"``: an allreduce (AVG) over every
peer, in pieces of the default bucket size that are all in flight at once, so round trips do not
add up on a high-latency link. ``"shift_one"``: each peer exchanges its weights with one partner
that shifts every communication round ``s`` (see :func:`shift_one_peer`) and the pair is averaged; with an
odd number of peers one of them has no partner in a round and keeps its weights.
The result is left in ``op.peer_weight``; :meth:`DecentralizedSynchronousOp.copy_back_peer_weight`
writes it into the bucket. Run by the module's scheduler, the exchange stays in flight after the op
returns and is completed when the module waits for its communication (at the end of backward), as
gradient_allreduce's allreduces are. Hierarchical: the weights are averaged inside each node first (reduce
to the leader), the peers are the nodes (their leaders), and the result is broadcast in the node; with
several ranks per node piece by piece, each piece's exchange started as soon as it is reduced.

Example::

    >>> op = DecentralizedSynchronousOp(group, hierarchical=False, peer_selection_mode="shift_one",
    ...                                 peer_weight=bucket.flattened_tensor())
    >>> bucket.append_op(op)
    >>> op.take_snapshot(bucket, round_index=0)    # forward pre-hook; then mark the bucket ready
    >>> ...                                        # after the bucket ran:
    >>> op.copy_back_peer_weight(bucket)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from bagua_core.api import (
    BaguaCommunicator,
    BaguaConfigError,
    ReduceOp,
    broadcast,
    hierarchy,
    irecv,
    isend,
    record_payload,
    reduce_inplace,
    settings,
    start_allreduce_in_pieces,
)

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.api import BaguaBucket, BaguaProcessGroup

__all__ = ["PEER_SELECTION_MODES", "DecentralizedSynchronousOp", "check_peers", "peer_count", "shift_one_peer"]

PEER_SELECTION_MODES = ("all", "shift_one")

NODE_PIECE_BYTES = 4 * 1024 * 1024
"""Hierarchical with several ranks per node: the weights are reduced inside the node and sent to the peers
in pieces of this many bytes (or of the default bucket size, if smaller), each piece's exchange started as
soon as it is reduced. Smaller pieces start the link sooner; each costs a reduce, a message and a broadcast
more (4 MiB: 1/5 of the benchmarks' 21 MB model, 0.3 s of a 100 Mbit/s link)."""


def shift_one_peer(rank: int, nranks: int, round_index: int) -> int:
    """The partner of ``rank`` in round ``round_index`` of ``shift_one``; ``rank`` itself when it has none.

    Even ``nranks``: the lower half ``r`` pairs with ``(s + r) % (n/2) + n/2`` of the upper half, a perfect
    matching that shifts every round. Odd ``nranks``: the same pairing among ``nranks + 1`` peers, the last of
    which does not exist; the lower-half rank paired with it has no partner that round and keeps its own
    weights (each lower-half rank in turn, once every ``(nranks + 1) / 2`` rounds). The mixing stays doubly
    stochastic (the peers' average is preserved) and even ``nranks`` pair exactly as before."""
    n = nranks + nranks % 2
    half = n // 2
    if rank < half:
        peer = ((round_index + rank) % half) + half
    else:
        peer = (rank - half - round_index) % half
    return rank if peer >= nranks else peer


def peer_count(group: BaguaProcessGroup, hierarchical: bool) -> int:
    """How many peers exchange weights: the nodes when hierarchical, else the ranks."""
    return group.num_nodes if hierarchical else group.world_size


def check_peers(group: BaguaProcessGroup, hierarchical: bool, peer_selection_mode: str) -> None:
    """Raise (identically on every rank) for an unknown ``peer_selection_mode``. Any number of peers
    pairs: with an odd number one peer per round has no partner (:func:`shift_one_peer`), which is also
    what lets fault-tolerant mode derive the pairs from any quorum."""
    if peer_selection_mode not in PEER_SELECTION_MODES:
        raise BaguaConfigError(f"peer_selection_mode must be one of {PEER_SELECTION_MODES}, got {peer_selection_mode!r}")


def _done() -> None:
    return None


def _start_average_with_peers(tensor: torch.Tensor, comm: BaguaCommunicator, mode: str, round_index: int,
                              received: torch.Tensor | None, tag: int = 0) -> Callable[[], None]:
    """Start averaging ``tensor`` with the round's peers; return what finishes it. ``"all"``: one
    allreduce per piece of ``settings.default_bucket_size()`` bytes, all in flight at once (gloo runs
    two at a time, so one's round trips overlap another's transfer, as gradient_allreduce's buckets do);
    ``"shift_one"``: the exchange with the partner (into ``received``), averaged when finished."""
    n = comm.nranks()
    if n == 1:
        return _done
    if mode == "all":
        return start_allreduce_in_pieces(tensor, ReduceOp.AVG, comm)
    partner = shift_one_peer(comm.rank(), n, round_index)
    if partner == comm.rank():  # an odd number of peers: no partner this round, the weights stay
        return _done
    peer = comm.group_rank(partner)  # its rank in comm.torch_group
    # The receive is posted first: gloo sends only once the partner announced its receive, and the
    # announcement is written to the same socket after whatever this rank is already sending. Posted
    # second, it waited behind our whole message, so the two directions of the full-duplex link took
    # turns (twice the time the bytes need).
    record_payload("send", tensor)  # point-to-point: counted as every collective's payload is
    works = [
        irecv(received, group=comm.torch_group, tag=tag, group_src=peer),
        isend(tensor, group=comm.torch_group, tag=tag, group_dst=peer),
    ]

    def finish() -> None:
        for work in works:
            work.wait()
        tensor.add_(received).div_(2)

    return finish


def _average_in_node_then_with_peers(tensor: torch.Tensor, group: BaguaProcessGroup, mode: str, round_index: int,
                                      received: torch.Tensor | None) -> None:
    """The hierarchical form with several ranks per node, piece by piece (:data:`NODE_PIECE_BYTES`): reduce
    (AVG) a piece to the node's leader and start its exchange among the leaders at once, so one piece
    travels while the next is reduced; then finish each piece's exchange and broadcast it inside the node.
    Every rank of the node runs the same reduces and broadcasts in the same order. Reduced whole, the
    exchange waited for the reduce of every weight, which on cores shared with the ranks' compute ended after
    forward and backward (the emulated hosts: 8 hosts of 2 ranks, 2190 ms a step against 1948 with one rank
    per host)."""
    intra, inter = group.get_intra_node_communicator(), group.get_inter_node_communicator()
    flat = tensor.view(-1)
    into = received.view(-1) if received is not None else None
    step = max(1, min(NODE_PIECE_BYTES, settings.default_bucket_size()) // flat.element_size())
    pieces = [slice(b, min(b + step, flat.numel())) for b in range(0, flat.numel(), step)]
    finishes = []
    for tag, piece in enumerate(pieces):
        reduce_inplace(flat[piece], dst=0, op=ReduceOp.AVG, comm=intra)
        if inter.is_member:
            finishes.append(_start_average_with_peers(flat[piece], inter, mode, round_index,
                                                      into[piece] if into is not None else None, tag))
    for k, piece in enumerate(pieces):
        if finishes:
            finishes[k]()
        broadcast(flat[piece], src=0, comm=intra)


class DecentralizedSynchronousOp:
    """Averages a snapshot of the bucket's weights with the peers of round ``round_index``."""

    def __init__(
        self,
        group: BaguaProcessGroup | None,
        hierarchical: bool = True,
        peer_selection_mode: str = "all",
        peer_weight: torch.Tensor | None = None,
    ) -> None:
        if peer_selection_mode not in PEER_SELECTION_MODES:
            raise ValueError(f"peer_selection_mode must be one of {PEER_SELECTION_MODES}, got {peer_selection_mode!r}")
        self.group = group
        self.hierarchical = bool(hierarchical)
        self.peer_selection_mode = peer_selection_mode
        self.peer_weight = peer_weight
        """Where the weights are copied and averaged: the algorithm's tensor (the bucket's total size)."""
        self.round_index = 0
        self.executions = 0
        """Runs so far; the round of a run not prepared by :meth:`take_snapshot` (the original's ops
        shift the peer every run)."""
        self._snapshot_pending = False
        self._receive_buffer: torch.Tensor | None = None

    def take_snapshot(self, bucket: BaguaBucket, round_index: int) -> None:
        """Copy the weights to send into :attr:`peer_weight` (on the caller's thread, before forward may
        read them) and set the round that selects the peers. The copy goes into the tensor of the
        previous round (the weights it held were copied back already), so no step allocates one."""
        with torch.no_grad():
            weights = bucket.flattened_view()
            if self.peer_weight is None:
                self.peer_weight = weights.clone()
            else:
                self.peer_weight.copy_(weights.view_as(self.peer_weight))
        self.round_index = int(round_index)
        self._snapshot_pending = True

    def _received(self) -> torch.Tensor:
        """The buffer the partner's weights arrive in (``shift_one``), kept from round to round."""
        if self._receive_buffer is None or self._receive_buffer.shape != self.peer_weight.shape:
            self._receive_buffer = torch.empty_like(self.peer_weight)
        return self._receive_buffer

    def __call__(self, bucket: BaguaBucket) -> None:
        group = hierarchy.resolve_group(self.group, bucket)
        if not self._snapshot_pending:
            self.take_snapshot(bucket, self.executions)
        self._snapshot_pending = False
        self.executions += 1
        tensor = self.peer_weight
        received = self._received() if self.peer_selection_mode == "shift_one" else None
        intra = group.get_intra_node_communicator() if self.hierarchical else None
        if intra is None or intra.nranks() == 1:  # the peers alone: may stay in flight (see BaguaBucket.defer)
            comm = group.get_inter_node_communicator() if self.hierarchical else group.get_global_communicator()
            finish = _start_average_with_peers(tensor, comm, self.peer_selection_mode, self.round_index, received)
            if bucket.may_defer(self):
                bucket.defer(finish)
            else:
                finish()
            return
        _average_in_node_then_with_peers(tensor, group, self.peer_selection_mode, self.round_index, received)

    def copy_back_peer_weight(self, bucket: BaguaBucket) -> None:
        """Overwrite the bucket's weights with the averaged ones (call after the op ran); ``bucket`` may
        be the original's ``bucket.backend_bucket``."""
        if self.peer_weight is not None:
            bucket.write_back(self.peer_weight.detach().reshape(-1))
