"""Averaging one fragment's outer gradient over the ranks, left in flight while training goes on.

Uncompressed: an allreduce (SUM, fp32) of the fragment's pseudo-gradient, divided by n on arrival.
With a codec: the residual (error feedback) becomes ``residual = error_decay * residual + delta`` (``error_decay``
1 adds the pseudo-gradient to what the codec dropped before), that is encoded, the residual keeps what the codec
dropped (``residual -= decode(encoded)``), the encoded bytes (the same size on every rank) are allgathered, and
every rank decodes the n buffers and averages them in fp32 in rank order (``decode_average``), so every rank gets
the same bits. The codec is a registered ``Codec`` or any object with its ``encode``/``decode``/``decode_average``
calls (:class:`FragmentCodec`: sparseloco's chunk-wise top-k).

Weighted (``start(delta, weights, own_weight)``: rounds bounded in time, ``bagua_algorithms.diloco.timed``): the
result is ``sum_k w_k * D_k / n`` over the ranks k in group order, ``D_k`` what rank k sent (its delta, or its
message decoded). Uncompressed, each rank multiplies its delta by its own weight (fp32) before the allreduce; with a
codec, every rank decodes the n messages and adds each times its weight in rank order into zeros (fp32), then
divides by n. A rank whose weight is 0 sends zeros and leaves its residual as it was. When every weight is 1 the
exchange is the unweighted one, bit for bit.
Messages go over a torch process group of the algorithm's own, issued by the training thread (or the courier's,
``bagua_algorithms.diloco.courier``) in the same order on every rank, so they never interleave with other
collectives. Each is counted (``record_payload``) once:
where :meth:`~FragmentExchange.start` runs, or, for an exchange started on another thread (the courier), by
:meth:`~FragmentExchange.record` on the training thread in the step that sends it, the start then counting nothing.

Example::

    >>> exchange = FragmentExchange(numel, get_codec("MinMaxUInt4"), error_feedback=True, group=group)
    >>> exchange.start(delta)              # returns at once
    >>> ...                                # inner steps
    >>> average = exchange.wait()          # the mean of every rank's delta, as decoded
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import torch
import torch.distributed as dist

from bagua_core.api import all_gather_single, record_payload

__all__ = ["FragmentCodec", "FragmentExchange"]


class FragmentCodec(Protocol):
    """What the exchange calls of a codec (``bagua_core.codecs.Codec`` has it): ``encode(x)`` gives a uint8 buffer
    of ``encoded_size(x.numel())`` bytes, ``decode(buf, 1, out)`` writes its values into the fp32 ``out``,
    ``decode_average(bufs, n, out)`` writes the mean of the ``n`` buffers held back to back in ``bufs``.

    A codec may also offer the sender's side of a round with error feedback in one call,
    ``encode_residual(residual, delta, error_decay) -> message``: ``residual = error_decay * residual + delta``,
    its message, and ``residual -= decode(message)``, bit for bit those steps (sparseloco's ``ChunkTopK`` does it in
    one pass natively); the exchange then calls it instead of the four steps. Two more calls give the round's fused
    forms (:meth:`FragmentExchange.start_difference`, :meth:`FragmentExchange.wait_entries`), bit for bit the
    unfused ones: ``encode_difference(residual, start, params, error_decay, scratch)``, ``encode_residual`` of
    ``delta = start - params`` (the flat start less the fragment's tensors) with the subtraction taken inside, and
    ``average_entries(bufs, n) -> (positions, values)``, ``decode_average`` as the positions where it may be nonzero
    (each once) and its values there."""

    def encode(self, x: torch.Tensor) -> torch.Tensor: ...

    def encoded_size(self, numel: int, n_chunks: int = 1) -> int:
        """The bytes of ``encode(x)`` for ``x`` of ``numel`` elements (``n_chunks`` 1)."""
        ...

    def decode(self, buf: torch.Tensor, n_chunks: int, out: torch.Tensor) -> torch.Tensor: ...

    def decode_average(self, bufs: torch.Tensor, n: int, out: torch.Tensor) -> torch.Tensor: ...


class FragmentExchange:
    """The outer-gradient exchange of one fragment; its residual lives here between rounds."""

    def __init__(self, numel: int, codec: FragmentCodec | None, error_feedback: bool, group: dist.ProcessGroup | None,
                 nranks: int, device: torch.device | str = "cpu", error_decay: float = 1.0) -> None:
        self.numel, self.codec, self.group, self.nranks = numel, codec, group, nranks
        self.error_decay = error_decay
        """beta of ``residual = beta * residual + delta`` (with a codec and error feedback; 1: plain error feedback)."""
        self.residual = torch.zeros(numel, device=device) if codec is not None and error_feedback else None
        self.average = torch.zeros(numel, device=device)
        self._work: dist.Work | None = None
        self._gathered: torch.Tensor | None = None
        self.in_flight = False
        self.sent: torch.Tensor | None = None
        """What this rank sent in the exchange in flight (fp32 delta, or the codec's bytes): fault-tolerant
        mode keeps it in the step's copy instead of waiting for the exchange, and :meth:`resend` repeats it."""
        self.weights: list[float] | None = None
        """Every rank's weight in the exchange in flight, in group order (None: all 1)."""
        self.contribution: torch.Tensor | None = None
        """With ``start(..., keep_contribution=True)``: what this rank's part of the exchange in flight decodes to
        (its fp32 delta uncompressed; its message decoded with a codec): ``n * average - contribution`` is what the
        others sent (eager updates, ``bagua_algorithms.diloco.eager``)."""

    def payload(self) -> tuple[str, int]:
        """The collective each exchange hands this rank's message to, and the message's bytes (the same every round)."""
        if self.codec is None:
            return "allreduce", self.numel * self.average.element_size()
        return "allgather", self.codec.encoded_size(self.numel, 1)

    def record(self) -> None:
        """Count the next exchange's message now (module doc): its :meth:`start` then takes ``counted=True``. Alone
        (one rank) no collective is handed anything: nothing is counted."""
        if self.nranks > 1:
            record_payload(*self.payload())

    def start(self, delta: torch.Tensor, weights: Sequence[float] | None = None, own_weight: float = 1.0,
              keep_contribution: bool = False, counted: bool = False) -> None:
        """Launch the averaging of the fp32 ``delta`` (``numel`` elements); ``delta`` may be reused after.
        ``weights``: every rank's weight in group order (module doc), ``own_weight`` this rank's among them;
        ``keep_contribution``: keep what this rank's part decodes to in :attr:`contribution` (unweighted only);
        ``counted``: its message was counted already (:meth:`record`)."""
        if keep_contribution and weights is not None:
            raise ValueError("keep_contribution is for unweighted exchanges")
        if self.in_flight:
            raise RuntimeError("the previous exchange of this fragment has not been waited for")
        weighted = weights is not None and any(w != 1.0 for w in weights)
        if weighted and own_weight == 0.0:  # nothing of this rank's counts: zeros, and the residual is kept
            delta = torch.zeros_like(delta)
        if self.codec is None:
            payload = delta.clone()
            if weighted and own_weight not in (0.0, 1.0):
                payload.mul_(own_weight)
            self.contribution = payload if keep_contribution else None
            self._launch(payload, counted)
            return
        self.weights = list(weights) if weighted else None
        if weighted and own_weight == 0.0:
            self._launch(self.codec.encode(delta), counted)
            return
        fused = getattr(self.codec, "encode_residual", None)
        if fused is not None and self.residual is not None and not keep_contribution:
            self._launch(fused(self.residual, delta, self.error_decay), counted)
            return
        payload = delta
        if self.residual is not None:
            if self.error_decay != 1.0:
                self.residual.mul_(self.error_decay)
            payload = self.residual.add_(delta)
        encoded = self.codec.encode(payload)
        sent = self.codec.decode(encoded, 1, torch.empty_like(payload)) if keep_contribution or self.residual is not None else None
        if self.residual is not None:  # keep what the codec dropped for the next round
            self.residual.sub_(sent)
        self.contribution = sent if keep_contribution else None
        self._launch(encoded, counted)

    @property
    def takes_difference(self) -> bool:
        """Whether :meth:`start_difference` can serve: a codec with error feedback that encodes ``start - params``
        itself (``encode_difference``, sparseloco's)."""
        return self.residual is not None and hasattr(self.codec, "encode_difference")

    def start_difference(self, start: torch.Tensor, params: Sequence[torch.Tensor], scratch: torch.Tensor,
                         counted: bool = False) -> None:
        """:meth:`start` (unweighted, no contribution kept) of ``delta = start - params``, the flat fp32 ``start``
        less the fragment's tensors one after the other, the codec taking the difference inside its encoding
        (:attr:`takes_difference`; ``scratch``, fp32 of ``numel``, holds the delta where it cannot). The same
        message and residual as ``start(subtract_flat(start, params, scratch))``."""
        if not self.takes_difference:
            raise RuntimeError("this exchange's codec does not encode a difference: use start(delta)")
        if self.in_flight:
            raise RuntimeError("the previous exchange of this fragment has not been waited for")
        self.weights = None
        self._launch(self.codec.encode_difference(self.residual, start, params, self.error_decay, scratch), counted)

    def resend(self, sent: torch.Tensor) -> None:
        """Launch again an exchange whose result was lost (:attr:`sent` of an exchange on a group that failed or
        was replaced), on this exchange's group; the residual is not touched (it already holds the round)."""
        self.abandon()
        self._launch(sent)

    def abandon(self) -> None:
        """Forget the exchange in flight without waiting for it (its group failed or is being replaced)."""
        if self._work is not None:  # the forgotten operation may still write into its buffer: take a new one
            self.average = torch.zeros_like(self.average)
        self._work, self._gathered, self.sent, self.in_flight, self.weights = None, None, None, False, None

    def _launch(self, sent: torch.Tensor, counted: bool = False) -> None:
        nbytes = self.payload()[1]
        if sent.numel() * sent.element_size() != nbytes:  # (what record() counted is what is handed over)
            raise RuntimeError(f"the fragment's message is {sent.numel() * sent.element_size()} bytes, not {nbytes}")
        if not counted:
            self.record()
        self.in_flight, self.sent = True, sent
        if self.codec is None:
            self.average.copy_(sent)
            if self.nranks > 1:
                self._work = dist.all_reduce(self.average, group=self.group, async_op=True)
            return
        self._gathered = torch.empty(self.nranks * sent.numel(), dtype=torch.uint8, device=sent.device)
        if self.nranks > 1:
            self._work = all_gather_single(self._gathered, sent, group=self.group, async_op=True)
        else:
            self._gathered.copy_(sent)

    def wait(self) -> torch.Tensor:
        """The average over ranks of what :meth:`start` sent (fp32, ``numel`` elements)."""
        if not self.in_flight:
            raise RuntimeError("no exchange of this fragment is in flight")
        if self._work is not None:
            self._work.wait()
            self._work = None
        if self.codec is None:
            self.average.div_(self.nranks)
        elif self.weights is None:
            self.codec.decode_average(self._gathered, self.nranks, self.average)
        else:
            self._decode_weighted(self.weights)
        self._gathered = None
        self.in_flight, self.sent, self.weights = False, None, None
        return self.average

    @property
    def averages_entries(self) -> bool:
        """Whether :meth:`wait_entries` can serve the exchange in flight: unweighted, with a codec that gives the
        average as its entries (``average_entries``, sparseloco's)."""
        return self.in_flight and self.weights is None and hasattr(self.codec, "average_entries")

    def wait_entries(self) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`wait` as the average's entries, ``(positions, values)`` (each position once; the average is 0
        elsewhere), without writing the dense :attr:`average` (:attr:`averages_entries`)."""
        if not self.averages_entries:
            raise RuntimeError("the exchange in flight does not average into entries: use wait()")
        if self._work is not None:
            self._work.wait()
            self._work = None
        entries = self.codec.average_entries(self._gathered, self.nranks)
        self._gathered = None
        self.in_flight, self.sent, self.weights = False, None, None
        return entries

    def _decode_weighted(self, weights: list[float]) -> None:
        """``average`` = the sum over ranks, in order, of ``weights[k]`` times rank k's decoded message, over n."""
        size = self._gathered.numel() // self.nranks
        decoded = torch.empty_like(self.average)
        self.average.zero_()
        for k, weight in enumerate(weights):
            self.codec.decode(self._gathered[k * size : (k + 1) * size], 1, decoded)
            self.average.add_(decoded, alpha=weight)
        self.average.div_(self.nranks)
