"""The buffers of bytegrad's exchange, kept by a bucket from step to step (large allocations would
page-fault every step): one module below the exchange (``compressed``) and its pipelined form
(``compressed_pipeline``), which both use it."""

from __future__ import annotations

import torch

from bagua_core.codecs import Codec

__all__ = ["CompressedWorkspace"]


class CompressedWorkspace:
    """The buffers of one exchange shape (numel, n, dtype, device), reused while the shape stays.

    ``sent``/``received``/``gathered``: uint8, ``codec.encoded_size(n * chunk, n)`` bytes; ``own``: the
    averaged chunk (``chunk`` elements, the tensor's dtype); ``own_compressed``: its one slot;
    ``tail``: the chunks that are not full, padded with the tensor's last value (only when
    ``n * chunk > numel``).

    Example::

        >>> workspace = CompressedWorkspace()
        >>> compressed_allreduce_on(  # bagua_algorithms.bytegrad.compressed
        ...     grads, comm, workspace=workspace)   # every step, same workspace
    """

    def __init__(self) -> None:
        self._key: tuple | None = None

    def buffers(self, numel: int, n: int, dtype: torch.dtype, device: torch.device, codec: Codec) -> CompressedWorkspace:
        key = (numel, n, dtype, device, codec.name, codec.encoded_size(n, n))
        if key != self._key:
            self._key = None  # free the old buffers before allocating the new ones
            chunk = -(-numel // n)
            size = codec.encoded_size(chunk * n, n)
            self.chunk = chunk
            self.sent = torch.empty(size, dtype=torch.uint8, device=device)
            self.received = torch.empty_like(self.sent)
            self.gathered = torch.empty_like(self.sent)
            self.own = torch.empty(chunk, dtype=dtype, device=device)
            self.own_compressed = torch.empty(size // n, dtype=torch.uint8, device=device)
            tail = chunk * n - (numel // chunk) * chunk  # the chunks that are not full, padded
            self.tail = torch.empty(tail, dtype=dtype, device=device) if chunk * n > numel else None
            self._key = key
        return self
