"""sparseloco's C kernels (``native/sparseloco_*.c`` in the CPU library ``bagua_core._native_cpu``, declared in
``native/sparseloco.h``): the per-chunk top-k with the accumulator's update, the quantiser and its packing, the
Elias-Fano index field, and the whole message encoded (with the error feedback) and decoded (one message, or the
average of n). Each gives the bits of the torch code of :mod:`bagua_algorithms.sparseloco.codec` it replaces.
Contiguous fp32 / uint8 / int64 CPU tensors only; the C calls release the GIL. Importing this module raises
ImportError where the library was not built.

Example::

    >>> native = CpuLayout(codec.layout)
    >>> message = torch.empty(codec.nbytes, dtype=torch.uint8)
    >>> encode(native, e, message, bits=2)                 # codec.encode(e)'s bytes
    >>> decode(native, torch.cat([message, other]), codec.nbytes, 2, out, bits=2, average=True)  # decode_average
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.graph import increment_version

from bagua_algorithms.sparseloco.chunks import ChunkLayout
from bagua_core.kernels import byte_ptr, check_status, cpu_library, float_ptr

__all__ = ["CpuLayout", "average_entries", "decode", "dequantise", "encode", "encode_difference", "entries",
           "index_decode", "index_encode", "put", "quantise", "select"]

_ffi, _lib = cpu_library().ffi, cpu_library().lib  # ImportError where it was not built

_ERRORS = {
    _lib.BAGUA_SPARSELOCO_ERR_LAYOUT: "the layout was refused (a chunk of no element or past the fragment, topk < 1, "
                                      "or bits not 2, 4, 8 or 32): build it with ChunkLayout",
    _lib.BAGUA_SPARSELOCO_ERR_MEMORY: "the kernel's scratch could not be allocated: free memory, or set "
                                      "BAGUA_NATIVE=python to use the torch path",
    _lib.BAGUA_NATIVE_ERR_SIZE: "a buffer's size does not match the layout (ChunkTopK.nbytes, the index field's "
                                "bytes): pass the buffers ChunkTopK sized",
}


def _check(rc: int, what: str) -> None:
    """A C return code as an exception: sparseloco's own codes here, the shared ones by ``check_status``."""
    if rc in _ERRORS:
        raise ValueError(f"sparseloco {what}: {_ERRORS[rc]}")
    check_status(rc, f"sparseloco {what}")


def _int64_ptr(t: torch.Tensor) -> Any:
    return _ffi.cast("int64_t *", t.data_ptr())


class CpuLayout:
    """A :class:`ChunkLayout` as the C kernels read it (``bagua_sparseloco_layout``), kept with its arrays."""

    def __init__(self, layout: ChunkLayout) -> None:
        self.layout = layout
        self.start = torch.tensor(layout.chunk_starts, dtype=torch.int64)
        self.length = torch.tensor(layout.chunk_lengths, dtype=torch.int64)
        self.struct = _ffi.new("bagua_sparseloco_layout *")
        self.struct.start = _int64_ptr(self.start)
        self.struct.length = _int64_ptr(self.length)
        self.struct.chunks = layout.chunk_count
        self.struct.topk = layout.topk
        self.struct.numel = layout.numel
        tensor_of, inside = [], []  # each chunk's tensor (its index in numels) and its first element in it
        for t, numel in enumerate(layout.numels):
            for begin in range(0, numel, layout.chunk_size):
                tensor_of.append(t)
                inside.append(begin)
        self._chunk_tensor = torch.tensor(tensor_of, dtype=torch.int64)
        self._chunk_bytes = torch.tensor(inside, dtype=torch.int64) * 4

    def chunk_addresses(self, params: list[torch.Tensor]) -> torch.Tensor:
        """Each chunk's first element in ``params`` (the layout's tensors, contiguous fp32), as addresses."""
        bases = torch.tensor([p.data_ptr() for p in params], dtype=torch.int64)
        return bases[self._chunk_tensor] + self._chunk_bytes

    def message_bytes(self, bits: int) -> int:
        """The size of a message of this layout, as the C kernels compute it (``ChunkTopK.nbytes``)."""
        nbytes = _lib.bagua_sparseloco_message_bytes(self.struct, bits)
        if nbytes < 0:
            _check(int(nbytes), "message_bytes")
        return int(nbytes)

    # what ChunkTopK calls of a native layout (kernels.cuda.CudaLayout has the same)
    def encode(self, e: torch.Tensor, out: torch.Tensor, bits: int, delta: torch.Tensor | None = None,
               beta: float = 1.0, feedback: bool = False) -> torch.Tensor:
        """:func:`encode` of this layout."""
        return encode(self, e, out, bits, delta, beta, feedback)

    def encode_difference(self, e: torch.Tensor, start: torch.Tensor, params: list[torch.Tensor],
                          out: torch.Tensor, bits: int, beta: float = 1.0) -> torch.Tensor:
        """:func:`encode_difference` of this layout."""
        return encode_difference(self, e, start, params, out, bits, beta)

    def entries(self, buf: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`entries` of this layout."""
        return entries(self, buf, bits)

    def decode(self, bufs: torch.Tensor, nbytes: int, n: int, out: torch.Tensor, bits: int,
               average: bool) -> torch.Tensor:
        """:func:`decode` of this layout."""
        return decode(self, bufs, nbytes, n, out, bits, average)

    def average_entries(self, bufs: torch.Tensor, nbytes: int, n: int, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`average_entries` of this layout."""
        return average_entries(self, bufs, nbytes, n, bits)

    def put(self, positions: torch.Tensor, values: torch.Tensor, theta: torch.Tensor,
            params: list[torch.Tensor] | None = None) -> None:
        """:func:`put` of this layout."""
        put(self, positions, values, theta, params)


def _float_or_null(t: torch.Tensor | None) -> Any:
    return _ffi.NULL if t is None else float_ptr(t)


def select(native: CpuLayout, e: torch.Tensor, delta: torch.Tensor | None = None,
           beta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(columns, largest, smallest)`` of the fp32 ``e`` (``ChunkLayout.select``'s columns, int64, and its
    ``top[:, 0]`` and ``smallest_sent(top)``, fp32). With ``delta``, ``e = e * beta + delta`` first (fp32, two
    roundings; no multiply where ``beta`` rounds to 1), written into ``e``."""
    layout = native.layout
    columns = torch.empty(layout.entry_count, dtype=torch.int64)
    largest = torch.empty(layout.chunk_count, dtype=torch.float32)
    smallest = torch.empty(layout.chunk_count, dtype=torch.float32)
    rc = _lib.bagua_sparseloco_select(float_ptr(e), _float_or_null(delta), beta, native.struct, _int64_ptr(columns),
                                      float_ptr(largest), float_ptr(smallest))
    _check(rc, "select")
    if delta is not None:
        increment_version(e)
    return columns, largest, smallest


def quantise(native: CpuLayout, values: torch.Tensor, largest: torch.Tensor, smallest: torch.Tensor,
             bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(header, codes)``: the message's ``6 * chunks`` header bytes (hi fp32, then q 16 bits, per chunk) and its
    packed codes of the entries' fp32 ``values`` (``quantiser.quantise`` + ``pack``; bits 2, 4 or 8)."""
    layout = native.layout
    header = torch.empty(6 * layout.chunk_count, dtype=torch.uint8)
    codes = torch.empty(-(-layout.entry_count * bits // 8), dtype=torch.uint8)
    rc = _lib.bagua_sparseloco_quantise(float_ptr(values), float_ptr(largest), float_ptr(smallest), native.struct,
                                        bits, byte_ptr(header), byte_ptr(codes))
    _check(rc, "quantise")
    return header, codes


def dequantise(native: CpuLayout, header: torch.Tensor, codes: torch.Tensor, bits: int) -> torch.Tensor:
    """The entries' fp32 values of a header and packed codes (``quantiser.unpack`` + ``dequantise``)."""
    values = torch.empty(native.layout.entry_count, dtype=torch.float32)
    _check(_lib.bagua_sparseloco_dequantise(byte_ptr(header), byte_ptr(codes), native.struct, bits,
                                            float_ptr(values)), "dequantise")
    return values


def index_encode(native: CpuLayout, columns: torch.Tensor, field_bytes: int) -> torch.Tensor:
    """The index field (``field_bytes`` uint8) of the entries' int64 ``columns`` (ascending within a chunk)."""
    field = torch.empty(field_bytes, dtype=torch.uint8)
    rc = _lib.bagua_sparseloco_index_encode(_int64_ptr(columns), native.struct, byte_ptr(field), field_bytes)
    if rc == _lib.BAGUA_NATIVE_ERR_ARGUMENT:
        raise ValueError("sparseloco index_encode: a chunk's columns must ascend inside it (ChunkLayout.select's)")
    _check(rc, "index_encode")
    return field


def index_decode(native: CpuLayout, field: torch.Tensor) -> torch.Tensor:
    """Each entry's column in its chunk (int64) from the field's bytes, inside the chunk whatever the bytes."""
    columns = torch.empty(native.layout.entry_count, dtype=torch.int64)
    _check(_lib.bagua_sparseloco_index_decode(byte_ptr(field), field.numel(), native.struct, _int64_ptr(columns)),
           "index_decode")
    return columns


def encode(native: CpuLayout, e: torch.Tensor, out: torch.Tensor, bits: int, delta: torch.Tensor | None = None,
           beta: float = 1.0, feedback: bool = False) -> torch.Tensor:
    """Writes the message of the fp32 ``e`` into ``out`` (``nbytes`` uint8). With ``delta``, ``e = e * beta +
    delta`` first, as :func:`select`; with ``feedback``, ``e -= `` what the message decodes to (the sent entries
    only change). Both written into ``e``."""
    rc = _lib.bagua_sparseloco_encode(float_ptr(e), _float_or_null(delta), beta, int(feedback), native.struct, bits,
                                      byte_ptr(out), out.numel())
    _check(rc, "encode")
    increment_version(out)
    if delta is not None or feedback:
        increment_version(e)
    return out


def encode_difference(native: CpuLayout, e: torch.Tensor, start: torch.Tensor, params: list[torch.Tensor],
                      out: torch.Tensor, bits: int, beta: float = 1.0) -> torch.Tensor:
    """:func:`encode` with ``feedback`` of ``delta = start - params`` (the flat fp32 ``start`` less the layout's
    tensors, contiguous fp32, one after the other), the difference taken in the same pass: no delta is written.
    The bits of ``torch.sub`` into a flat delta, then :func:`encode`."""
    if len(params) != len(native.layout.numels) or any(p.numel() != n for p, n in zip(params, native.layout.numels)):
        raise ValueError(f"sparseloco encode_difference: expected tensors of {native.layout.numels} elements, got "
                         f"{[p.numel() for p in params]}")
    addresses = native.chunk_addresses(params)
    rc = _lib.bagua_sparseloco_encode_difference(float_ptr(e), float_ptr(start),
                                                 _ffi.cast("const float *const *", addresses.data_ptr()), beta,
                                                 native.struct, bits, byte_ptr(out), out.numel())
    _check(rc, "encode_difference")
    increment_version(out)
    increment_version(e)
    return out


def entries(native: CpuLayout, buf: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions, values)`` of a message: each entry's index in the fragment (int64) and its value (fp32)."""
    layout = native.layout
    positions = torch.empty(layout.entry_count, dtype=torch.int64)
    values = torch.empty(layout.entry_count, dtype=torch.float32)
    rc = _lib.bagua_sparseloco_entries(byte_ptr(buf), buf.numel(), native.struct, bits, _int64_ptr(positions),
                                       float_ptr(values))
    _check(rc, "entries")
    return positions, values


def decode(native: CpuLayout, bufs: torch.Tensor, nbytes: int, n: int, out: torch.Tensor, bits: int,
           average: bool) -> torch.Tensor:
    """Writes into the fp32 ``out`` (the fragment's elements) the message ``bufs`` (``average=False``, n = 1:
    zeros and its values) or the mean of the ``n`` messages of ``nbytes`` held back to back (zeros, each message
    added in fp32 in rank order, then divided by n)."""
    rc = _lib.bagua_sparseloco_decode(byte_ptr(bufs), nbytes, n, native.struct, bits, int(average), float_ptr(out))
    _check(rc, "decode_average" if average else "decode")
    increment_version(out)
    return out


def average_entries(native: CpuLayout, bufs: torch.Tensor, nbytes: int, n: int,
                    bits: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(positions, values)``: where any of the ``n`` messages of ``nbytes`` held back to back sends an entry, each
    position once (int64, chunk by chunk, in the order first sent) and the mean there (fp32): :func:`decode` with
    ``average`` gives these values at these positions and zeros elsewhere, bit for bit."""
    capacity = max(n * native.layout.entry_count, 1)
    positions = torch.empty(capacity, dtype=torch.int64)
    values = torch.empty(capacity, dtype=torch.float32)
    count = _ffi.new("int64_t *")
    rc = _lib.bagua_sparseloco_average_entries(byte_ptr(bufs), nbytes, n, native.struct, bits, _int64_ptr(positions),
                                               float_ptr(values), count)
    _check(rc, "average_entries")
    return positions[: count[0]], values[: count[0]]


def put(native: CpuLayout, positions: torch.Tensor, values: torch.Tensor, theta: torch.Tensor,
        params: list[torch.Tensor] | None = None) -> None:
    """``theta[positions] = values`` (int64 positions grouped chunk by chunk in chunk order, as
    :func:`average_entries` gives them; fp32 values) and, with ``params`` (the layout's tensors, contiguous fp32),
    ``theta`` copied into them one after the other in the same pass over each chunk."""
    if positions.numel() != values.numel():
        raise ValueError(f"sparseloco put: {positions.numel()} positions and {values.numel()} values")
    addresses = native.chunk_addresses(params) if params is not None else None
    rc = _lib.bagua_sparseloco_put(_int64_ptr(positions), float_ptr(values), positions.numel(), float_ptr(theta),
                                   _ffi.NULL if addresses is None else _ffi.cast("float *const *",
                                                                                 addresses.data_ptr()),
                                   native.struct)
    if rc == _lib.BAGUA_NATIVE_ERR_ARGUMENT:
        raise ValueError("sparseloco put: the positions must lie in the fragment, grouped chunk by chunk in chunk "
                         "order (as average_entries gives them)")
    _check(rc, "put")
    increment_version(theta)
    for param in params or ():
        increment_version(param)

