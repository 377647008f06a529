"""sparseloco's CUDA kernels (``native/sparseloco_cuda.cu`` in the CUDA library that ``bagua_core.kernels``
loads, declared in ``native/sparseloco_cuda.h``) for contiguous CUDA tensors, queued on the current stream: a
message encoded (one block per chunk selects, quantises and feeds back; then the index field and the codes),
and messages decoded (each entry's position and value, then one block per chunk writes or averages them in
rank order). They give the C kernels' bits (fp32 operations rounded one by one, true divisions).

Example::

    >>> if available():
    ...     native = CudaLayout(codec.layout, x.device)
    ...     native.encode(x, torch.empty(codec.nbytes, dtype=torch.uint8, device=x.device), bits=2)
"""

from __future__ import annotations

import torch

from bagua_algorithms.sparseloco.chunks import ChunkLayout
from bagua_core.kernels import cuda_available, cuda_call, cuda_null, cuda_pointer, cuda_stream

__all__ = ["CudaLayout", "available", "index_plan"]


def available() -> bool:
    """True when the CUDA kernels are built and a CUDA device can run them."""
    return cuda_available()


def index_plan(layout: ChunkLayout) -> tuple[list[int], list[int], list[int], int]:
    """``(entry_at, low_at, upper_at, upper_end)``: each chunk's first entry (and the entries at the end), its
    first low bit and first upper bit in the index field, and the field's end bit (codec.py's layout)."""
    entry_at, low_at, upper_at = [], [], []
    entries = low = 0
    lows = []
    for m, k in zip(layout.chunk_lengths, layout.entries_per_chunk):
        entry_at.append(entries)
        low_at.append(low)
        entries += k
        lows.append((m // k).bit_length() - 1 if k < m else 0)
        low += k * lows[-1] if k < m else 0
    upper = low
    for (m, k), low_bits in zip(zip(layout.chunk_lengths, layout.entries_per_chunk), lows):
        upper_at.append(upper)
        upper += k + ((m - 1) >> low_bits) if k < m else 0
    return entry_at + [entries], low_at, upper_at, upper


def _float_or_null(t: torch.Tensor | None):  # noqa: ANN202 (a cffi pointer)
    return cuda_null() if t is None else cuda_pointer(t, "float *")


class CudaLayout:
    """A :class:`ChunkLayout` on one CUDA device: its plan as one int64 device array (start, length, entry_at,
    low_at, upper_at per chunk, entry_chunk per entry), as the CUDA kernels read it."""

    def __init__(self, layout: ChunkLayout, device: torch.device) -> None:
        self.layout, self.device = layout, device
        entry_at, low_at, upper_at, self.upper_end = index_plan(layout)
        host = torch.tensor(layout.chunk_starts + layout.chunk_lengths + entry_at + low_at + upper_at,
                            dtype=torch.int64)
        self.plan = torch.cat([host, layout.entry_chunk.cpu().to(torch.int64)]).to(device)
        self.field_words = self.upper_end // 32 + 2

    def _args(self) -> tuple:
        layout = self.layout
        return cuda_pointer(self.plan, "int64_t *"), layout.chunk_count, layout.entry_count, layout.topk

    def encode(self, e: torch.Tensor, out: torch.Tensor, bits: int, delta: torch.Tensor | None = None,
               beta: float = 1.0, feedback: bool = False) -> torch.Tensor:
        """``cpu.encode`` on the device: the message of the fp32 ``e`` into ``out`` (with ``delta``, ``e = e *
        beta + delta`` first; with ``feedback``, ``e -=`` what the message decodes to)."""
        entries = self.layout.entry_count
        columns = torch.empty(entries, dtype=torch.int32, device=self.device)
        codes = torch.empty(entries, dtype=torch.uint8, device=self.device)
        words = torch.empty(self.field_words, dtype=torch.int32, device=self.device)
        with torch.cuda.device(self.device):
            cuda_call("bagua_cuda_sparseloco_encode", cuda_pointer(e, "float *"), _float_or_null(delta), beta,
                      int(feedback), *self._args(), self.layout.numel, self.upper_end, bits,
                      cuda_pointer(columns, "int32_t *"), cuda_pointer(codes, "uint8_t *"),
                      cuda_pointer(words, "uint32_t *"), cuda_pointer(out, "uint8_t *"), out.numel(),
                      cuda_stream(self.device))
        return out

    def _read(self, bufs: torch.Tensor, nbytes: int, n: int, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
        entries = self.layout.entry_count
        positions = torch.empty(n * entries, dtype=torch.int64, device=self.device)
        values = torch.empty(n * entries, dtype=torch.float32, device=self.device)
        with torch.cuda.device(self.device):
            cuda_call("bagua_cuda_sparseloco_entries", cuda_pointer(bufs, "uint8_t *"), nbytes, n, *self._args(),
                      self.upper_end, bits, cuda_pointer(positions, "int64_t *"), cuda_pointer(values, "float *"),
                      cuda_stream(self.device))
        return positions, values

    def entries(self, buf: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(positions, values)`` of one message (int64, fp32)."""
        return self._read(buf, buf.numel(), 1, bits)

    def decode(self, bufs: torch.Tensor, nbytes: int, n: int, out: torch.Tensor, bits: int,
               average: bool) -> torch.Tensor:
        """``cpu.decode`` on the device: one message written (the last of equal positions winning), or the mean
        of ``n`` (zeros, added in fp32 in rank order, divided by n)."""
        positions, values = self._read(bufs, nbytes, n, bits)
        with torch.cuda.device(self.device):
            cuda_call("bagua_cuda_sparseloco_scatter", cuda_pointer(positions, "int64_t *"),
                      cuda_pointer(values, "float *"), n, *self._args(), int(average), cuda_pointer(out, "float *"),
                      cuda_stream(self.device))
        return out
