"""Pickle-free serialisation of dataset samples for the cache stores.

A cache store may be writable by others, so reading a value must never run code (``pickle`` would).
Values are encoded in a small tagged binary format: ``None``, bool, int, float, str, bytes, tuple,
list, dict (keys of those types), numpy arrays of numeric/bool dtypes and torch tensors (any dtype
whose raw bytes round-trip: float*, bfloat16, int*, uint8, bool, complex*). Decoding checks every
length, tag and dtype and raises :class:`ValueError` on malformed data.

Example::

    >>> blob = dumps({"x": torch.arange(3), "label": 1})
    >>> loads(blob)["label"]
    1
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import torch

__all__ = ["dumps", "loads"]

_MAGIC = b"BGC1"
_TORCH_DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                  torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64, torch.complex128)
}
_NUMPY_KINDS = "biufc"  # bool, int, uint, float, complex: never object or void
_MAX_DEPTH = 64


def _pack_bytes(out: bytearray, data: bytes) -> None:
    out += struct.pack("<Q", len(data))
    out += data


def _encode(value: Any, out: bytearray, depth: int) -> None:
    if depth > _MAX_DEPTH:
        raise ValueError(f"value nested deeper than {_MAX_DEPTH} levels")
    if value is None:
        out += b"N"
    elif isinstance(value, bool):
        out += b"T" if value else b"F"
    elif isinstance(value, int):
        out += b"i"
        _pack_bytes(out, str(value).encode())
    elif isinstance(value, float):
        out += b"f" + struct.pack("<d", value)
    elif isinstance(value, str):
        out += b"s"
        _pack_bytes(out, value.encode("utf-8"))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        out += b"b"
        _pack_bytes(out, bytes(value))
    elif isinstance(value, torch.Tensor):
        name = str(value.dtype).removeprefix("torch.")
        if name not in _TORCH_DTYPES or value.layout != torch.strided:
            raise TypeError(f"cannot cache a tensor of dtype {value.dtype} / layout {value.layout}")
        tensor = value.detach().cpu().contiguous()
        out += b"t"
        _encode(name, out, depth + 1)
        _encode(list(tensor.shape), out, depth + 1)
        _pack_bytes(out, tensor.reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    elif isinstance(value, np.ndarray):
        if value.dtype.kind not in _NUMPY_KINDS:
            raise TypeError(f"cannot cache a numpy array of dtype {value.dtype}")
        out += b"a"
        _encode(value.dtype.str, out, depth + 1)
        _encode(list(value.shape), out, depth + 1)
        _pack_bytes(out, np.ascontiguousarray(value).tobytes())
    elif isinstance(value, np.generic) and value.dtype.kind in _NUMPY_KINDS:
        _encode(value.item(), out, depth)
    elif isinstance(value, (tuple, list)):
        out += (b"(" if isinstance(value, tuple) else b"[") + struct.pack("<Q", len(value))
        for item in value:
            _encode(item, out, depth + 1)
    elif isinstance(value, dict):
        out += b"{" + struct.pack("<Q", len(value))
        for key, item in value.items():
            _encode(key, out, depth + 1)
            _encode(item, out, depth + 1)
    else:
        raise TypeError(f"cannot cache a value of type {type(value).__name__}; use tensors, arrays, numbers, "
                        f"str, bytes, and tuples/lists/dicts of them")


def dumps(value: Any) -> bytes:
    """Encode ``value`` (see the module docstring for the supported types)."""
    out = bytearray(_MAGIC)
    _encode(value, out, 0)
    return bytes(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated or corrupt cached value")
        chunk = self.data[self.pos:self.pos + n].tobytes()
        self.pos += n
        return chunk

    def length(self) -> int:
        return struct.unpack("<Q", self.take(8))[0]


def _shape(reader: _Reader, depth: int) -> tuple[int, ...]:
    shape = _decode(reader, depth + 1)
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise ValueError("corrupt cached value: bad shape")
    return tuple(shape)


def _decode(reader: _Reader, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError("corrupt cached value: nested too deep")
    tag = reader.take(1)
    if tag == b"N":
        return None
    if tag in (b"T", b"F"):
        return tag == b"T"
    if tag == b"i":
        return int(reader.take(reader.length()).decode("ascii"))
    if tag == b"f":
        return struct.unpack("<d", reader.take(8))[0]
    if tag == b"s":
        return reader.take(reader.length()).decode("utf-8")
    if tag == b"b":
        return reader.take(reader.length())
    if tag == b"t":
        name = _decode(reader, depth + 1)
        if name not in _TORCH_DTYPES:
            raise ValueError(f"corrupt cached value: unknown tensor dtype {name!r}")
        shape, raw = _shape(reader, depth), reader.take(reader.length())
        dtype = _TORCH_DTYPES[name]
        if not raw:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    if tag == b"a":
        dtype = np.dtype(_decode(reader, depth + 1))
        if dtype.kind not in _NUMPY_KINDS:
            raise ValueError(f"corrupt cached value: refused numpy dtype {dtype}")
        shape, raw = _shape(reader, depth), reader.take(reader.length())
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if tag in (b"(", b"["):
        items = [_decode(reader, depth + 1) for _ in range(reader.length())]
        return tuple(items) if tag == b"(" else items
    if tag == b"{":
        result = {}
        for _ in range(reader.length()):
            key = _decode(reader, depth + 1)
            if isinstance(key, (list, dict, torch.Tensor, np.ndarray)):
                raise ValueError("corrupt cached value: unhashable dict key")  # noqa: TRY004
            result[key] = _decode(reader, depth + 1)
        return result
    raise ValueError(f"corrupt cached value: unknown tag {tag!r}")


def loads(data: bytes) -> Any:
    """Decode what :func:`dumps` produced; raise ``ValueError`` on anything else (never runs code)."""
    if not isinstance(data, (bytes, bytearray)) or bytes(data[:4]) != _MAGIC:
        raise ValueError("not a bagua cached value (bad header)")
    reader = _Reader(bytes(data[4:]))
    value = _decode(reader, 0)
    if reader.pos != len(reader.data):
        raise ValueError("corrupt cached value: trailing bytes")
    return value
