"""Averaging one fragment's outer gradient over the ranks, left in flight while training goes on.

Uncompressed: an allreduce (SUM, fp32) of the fragment's pseudo-gradient, divided by n on arrival.
With a codec: the pseudo-gradient plus the fragment's residual (error feedback) is encoded, the residual
keeps what the codec dropped, the encoded bytes are allgathered, and every rank decodes the n buffers and
averages them in fp32 in rank order (``Codec.decode_average``), so every rank gets the same bits.
Messages go over a torch process group of the algorithm's own, issued by the training thread in the same
order on every rank, so they never interleave with other collectives.

Example::

    >>> exchange = FragmentExchange(numel, get_codec("MinMaxUInt4"), error_feedback=True, group=group)
    >>> exchange.start(delta)              # returns at once
    >>> ...                                # inner steps
    >>> average = exchange.wait()          # the mean of every rank's delta, as decoded
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from bagua_core.codecs import Codec
from bagua_core.runtime.communication.common import record
from bagua_core.runtime.communication.torch_compat import all_gather_single

__all__ = ["FragmentExchange"]


class FragmentExchange:
    """The outer-gradient exchange of one fragment; its residual lives here between rounds."""

    def __init__(self, numel: int, codec: Codec | None, error_feedback: bool, group: dist.ProcessGroup | None,
                 nranks: int, device: torch.device | str = "cpu") -> None:
        self.numel, self.codec, self.group, self.nranks = numel, codec, group, nranks
        self.residual = torch.zeros(numel, device=device) if codec is not None and error_feedback else None
        self.average = torch.zeros(numel, device=device)
        self._work: dist.Work | None = None
        self._gathered: torch.Tensor | None = None
        self.in_flight = False

    def start(self, delta: torch.Tensor) -> None:
        """Launch the averaging of the fp32 ``delta`` (``numel`` elements); ``delta`` may be reused after."""
        if self.in_flight:
            raise RuntimeError("the previous exchange of this fragment has not been waited for")
        self.in_flight = True
        if self.codec is None:
            self.average.copy_(delta)
            record("allreduce", self.average)
            if self.nranks > 1:
                self._work = dist.all_reduce(self.average, group=self.group, async_op=True)
            return
        payload = delta
        if self.residual is not None:
            payload = self.residual.add_(delta)
        encoded = self.codec.encode(payload)
        if self.residual is not None:  # keep what the codec dropped for the next round
            self.residual.sub_(self.codec.decode(encoded, 1, torch.empty_like(payload)))
        self._gathered = torch.empty(self.nranks * encoded.numel(), dtype=torch.uint8, device=encoded.device)
        record("allgather", encoded)
        if self.nranks > 1:
            self._work = all_gather_single(self._gathered, encoded, group=self.group, async_op=True)
        else:
            self._gathered.copy_(encoded)

    def wait(self) -> torch.Tensor:
        """The average over ranks of what :meth:`start` sent (fp32, ``numel`` elements)."""
        if not self.in_flight:
            raise RuntimeError("no exchange of this fragment is in flight")
        if self._work is not None:
            self._work.wait()
            self._work = None
        if self.codec is None:
            self.average.div_(self.nranks)
        else:
            self.codec.decode_average(self._gathered, self.nranks, self.average)
            self._gathered = None
        self.in_flight = False
        return self.average
