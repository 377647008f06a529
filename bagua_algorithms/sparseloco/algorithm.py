"""``sparseloco``: SparseLoCo (Sarfi, Therien, Lidin, Belilovsky 2025) on diloco's round.

DiLoCo with its outer momentum replaced by a per-replica error-feedback accumulator and a sparse, quantised
exchange. Per round, on each of the R replicas (ranks, or on a sharded model the ranks holding the same
local shards):

1. H = ``inner_steps`` steps of the user's optimizer (its state kept across rounds), communicating nothing;
2. ``delta = theta_global - theta_local`` (fp32) and ``e = beta * e + delta`` (``error_decay``; e starts at 0);
3. each tensor of ``e`` (flattened) cut into chunks of ``chunk_size``; per chunk the ``min(topk, len)`` entries
   of largest ``|e|`` (:mod:`.chunks`), their values quantised to ``bits`` (:mod:`.quantiser`); ``sent`` is
   what they decode to, and ``e -= sent`` (a replica keeps exactly what it did not send);
4. the replicas allgather their messages (:mod:`.codec`: indices and packed values, the same size on every
   replica), each decodes all R and ``theta_global -= outer_lr * (sum of what was sent) / R``; every replica
   continues from ``theta_global``.

Communicated: every H steps one allgather of a uint8 message of at most ``sum over chunks of
(k' * (bits + 2 + log2(len / k')) / 8 + 6) + 2`` bytes per replica (the indices Elias-Fano coded), on the
algorithm's own process group (creating it is collective), or on the quorum's group in fault-tolerant mode
(R = the round's participants; a joiner heals ``theta_global``, the weights and the optimizers from a live
replica and starts with ``e = 0``). The round is diloco's (:class:`bagua_algorithms.diloco.DiLoCoAlgorithmImpl`:
events after every optimizer has stepped, sharded local shards, diloco's checkpoints, where ``e`` is the
``residuals``); sparseloco supplies, through the round's extension methods, its exchange (``new_exchange``:
diloco's :class:`bagua_algorithms.diloco.FragmentExchange` with the decay and the :class:`~.codec.ChunkTopK` codec,
whose sender side is one call of the codec, ``encode_residual``: native kernels where built, or on the training
thread ``encode_difference``, the outer gradient subtracted in that call) and its outer step (``new_outer``: SGD,
lr ``outer_lr``, no momentum; ``merge_in_flight``: on the CPU that step on the average's entries alone, the same
bits without the fragment's dense average, and the weights written in the same pass).

Example::

    >>> model = model.with_bagua([adamw], {"name": "sparseloco", "inner_steps": 30, "topk": 64, "bits": 2})
"""

from __future__ import annotations

import torch

from bagua_algorithms.diloco import DiLoCoAlgorithmImpl, FragmentExchange
from bagua_algorithms.sparseloco.codec import ChunkTopK
from bagua_algorithms.sparseloco.config import SparseLoCoConfig
from bagua_core.api import Algorithm, Capabilities, FaultTolerance

__all__ = ["SparseLoCoAlgorithm", "SparseLoCoAlgorithmImpl"]


class SparseLoCoAlgorithmImpl(DiLoCoAlgorithmImpl):
    """diloco's round with an error-feedback accumulator, the chunk-wise top-k message and a plain outer step."""

    config: SparseLoCoConfig  # type: ignore[assignment]

    def new_exchange(self, fragment: list[torch.Tensor], start: torch.Tensor) -> FragmentExchange:
        codec = ChunkTopK([p.numel() for p in fragment], self.config.chunk_size, self.config.topk, self.config.bits,
                          start.device)
        return FragmentExchange(start.numel(), codec, True, self.group, self.nranks, start.device,
                                error_decay=self.config.error_decay)

    def new_outer(self, starts: list[torch.Tensor]) -> torch.optim.Optimizer:
        return torch.optim.SGD(starts, lr=self.config.outer_lr)  # theta -= alpha * mean(sent)

    def merge_in_flight(self, fragment: int) -> bool:
        """The plain outer step on the average's entries alone (the average is 0 elsewhere, and ``x - lr * 0`` is
        ``x``): torch's ``add_`` with ``alpha=-lr`` on them, as SGD takes it, so the bits are the dense step's; the
        moved entries written back and the weights set to theta in one pass over each chunk. On the CPU where the
        C kernels serve (the torch path would decode the dense average first)."""
        exchange, start, params = self.exchanges[fragment], self.starts[fragment], self.fragments[fragment]
        if start.device.type != "cpu" or not exchange.averages_entries or not exchange.codec.native_serves(start):
            return False
        positions, values = exchange.wait_entries()
        moved = start.index_select(0, positions).add_(values, alpha=-self.outer.param_groups[0]["lr"])
        exchange.codec.put_entries(start, positions, moved, params)
        return True

    def bytes_per_round(self) -> int:
        """Bytes this rank hands to collectives per round (its message; 0 before the first inner step)."""
        return sum(e.codec.nbytes for e in self.exchanges)


class SparseLoCoAlgorithm(Algorithm):
    """SparseLoCo: H local steps, then the chunk-wise top-k of an error-feedback accumulator, quantised."""

    name = "sparseloco"
    Config = SparseLoCoConfig
    Impl = SparseLoCoAlgorithmImpl
    capabilities = Capabilities(communicates="weights", weights_differ_across_ranks=True, relative_bytes=None,
                                supports_sharding=True,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "algorithm_state", "step"), commit="at_round",
                                    rederives=("averaging denominator",),
                                    per_replica_state=("residuals", "round_samples")))
    """Every ``inner_steps`` steps a message of about ``(48 + topk * (bits + l + 1) + ((chunk_size - 1) >> l)) /
    (32 * chunk_size)`` of the fp32 weights' bytes for tensors of whole chunks, ``l = floor(log2(chunk_size /
    topk))``, without the 48 at ``bits=32`` (1/190.8 at the defaults)."""
