"""The compressed buffer layout of MinMaxUInt8 and the checks of its buffers.

For ``numel`` elements in ``n_chunks`` chunks: ``chunk_numel = ceil(numel / n_chunks)`` (the last
chunk shorter, trailing chunks possibly empty); each chunk owns a slot of
``slot_bytes = 8 + chunk_numel rounded up to a multiple of 8`` bytes holding
``[float32 min][float32 max][one uint8 per element][zero padding]``; the buffer is the ``n_chunks``
slots back to back. Every slot of one call has the same size, so a buffer splits evenly for an
alltoall, and slot ``j`` of a buffer of ``n * m`` elements is itself the one-chunk buffer of ``m``
elements.

Example::

    >>> compressed_size(10, 3)   # chunks of 4, 4, 2 elements; slots of 8 + 8 bytes
    48
"""

from __future__ import annotations

import torch

from bagua_core.kernels import NonFiniteError

__all__ = [
    "EPS",
    "HEADER_BYTES",
    "NonFiniteError",
    "check_buffer",
    "chunk_numel",
    "compressed_size",
    "nonfinite_message",
    "slot_bytes",
]

EPS = 1e-7
HEADER_BYTES = 8


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def chunk_numel(numel: int, n_chunks: int) -> int:
    """Elements per chunk: ``ceil(numel / n_chunks)`` (0 for an empty tensor)."""
    _check_count("numel", numel, 0)
    _check_count("n_chunks", n_chunks, 1)
    return -(-numel // n_chunks)


def slot_bytes(numel: int, n_chunks: int) -> int:
    """Bytes of one chunk's slot: the 8-byte header plus the payload rounded up to 8 bytes."""
    return HEADER_BYTES + -(-chunk_numel(numel, n_chunks) // 8) * 8


def compressed_size(numel: int, n_chunks: int = 1) -> int:
    """Bytes of the compressed buffer of ``numel`` elements split into ``n_chunks`` chunks."""
    return n_chunks * slot_bytes(numel, n_chunks)


def check_buffer(buf: object, numel: int, n_chunks: int, name: str = "buf") -> torch.Tensor:
    """A contiguous uint8 tensor of exactly ``compressed_size(numel, n_chunks)`` bytes."""
    if not isinstance(buf, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(buf).__name__}")
    if buf.dtype != torch.uint8:
        raise TypeError(f"{name} must be a uint8 tensor (a compressed buffer), got {buf.dtype}")
    if not buf.is_contiguous():
        raise ValueError(f"{name} must be contiguous; call {name}.contiguous() first")
    expected = compressed_size(numel, n_chunks)
    if buf.numel() != expected:
        raise ValueError(
            f"{name} has {buf.numel()} bytes but {numel} elements in {n_chunks} chunks take "
            f"compressed_size({numel}, {n_chunks}) = {expected} bytes"
        )
    return buf


def nonfinite_message(chunk: int | None, overflow: bool) -> str:
    """The message of a NonFiniteError."""
    where = f"chunk {chunk}" if chunk is not None else "a chunk"
    what = (
        "holds values so large relative to its range that x * scale overflows float32"
        if overflow
        else "contains NaN/Inf"
    )
    return (
        f"input {where} {what}, cannot compress with MinMaxUInt8; check the gradients (loss scaling?) "
        "or pass nonfinite='propagate' to store the chunk as NaN"
    )
