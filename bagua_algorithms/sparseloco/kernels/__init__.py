"""sparseloco's message codec in native kernels, and which of them serves a call.

:class:`~bagua_algorithms.sparseloco.codec.ChunkTopK` encodes and decodes through :class:`NativeMessages`: the
C kernels (:mod:`.cpu`, ``native/sparseloco_*.c``) on contiguous fp32 / uint8 CPU tensors where the CPU library
serves calls under the ``BAGUA_NATIVE`` policy (``bagua_core.kernels.cpu_kernels_take``), the CUDA kernels
(:mod:`.cuda`, ``native/sparseloco_cuda.cu``) on contiguous CUDA tensors where they are loaded (and the policy
is not ``python``), and the torch path of :mod:`bagua_algorithms.sparseloco.codec` elsewhere. The C kernels
give that torch path's bits on the CPU, every option and any bytes included; the CUDA kernels give the C
kernels' bits (the torch path on CUDA multiplies by a reciprocal where it divides by a scalar, so its last bit
may differ).

Example::

    >>> native = NativeMessages(codec.layout).serving(x)   # a CpuLayout, a CudaLayout, or None
    >>> if native is not None:
    ...     native.encode(x, torch.empty(codec.nbytes, dtype=torch.uint8), bits=2)
"""

from __future__ import annotations

from typing import Protocol

import torch

from bagua_algorithms.sparseloco.chunks import ChunkLayout
from bagua_algorithms.sparseloco.kernels import cuda as _cuda
from bagua_core.kernels import cpu_kernels_take, native_backend

try:
    from bagua_algorithms.sparseloco.kernels import cpu as _cpu
except ImportError:  # not built: the torch path serves
    _cpu = None

__all__ = ["NativeLayout", "NativeMessages"]


class NativeLayout(Protocol):
    """What :class:`NativeMessages` hands out (``cpu.CpuLayout``, ``cuda.CudaLayout``): a layout's messages
    encoded (with the accumulator's update and the error feedback), read entry by entry, and decoded."""

    def encode(self, e: torch.Tensor, out: torch.Tensor, bits: int, delta: torch.Tensor | None = None,
               beta: float = 1.0, feedback: bool = False) -> torch.Tensor: ...

    def entries(self, buf: torch.Tensor, bits: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def decode(self, bufs: torch.Tensor, nbytes: int, n: int, out: torch.Tensor, bits: int,
               average: bool) -> torch.Tensor: ...


class NativeMessages:
    """The native kernels of one fragment's layout, their device arrays built at first use per device."""

    def __init__(self, layout: ChunkLayout, enabled: bool = True) -> None:
        self.layout, self.enabled = layout, enabled
        self._built: dict[torch.device, NativeLayout] = {}

    def serving(self, *tensors: torch.Tensor) -> NativeLayout | None:
        """The kernels that take these tensors (every one contiguous, fp32 or uint8, on one device), or None:
        the torch path then (a layout sending nothing, and ``enabled=False``, too)."""
        if not self.enabled or self.layout.entry_count == 0 or not all(t.is_contiguous() for t in tensors):
            return None
        device = tensors[0].device
        if any(t.device != device or t.dtype not in (torch.float32, torch.uint8) for t in tensors):
            return None
        if device.type == "cpu":
            if _cpu is None or not cpu_kernels_take(*tensors):
                return None
        elif device.type != "cuda" or native_backend() != "native" or not _cuda.available():
            return None  # (BAGUA_NATIVE=python: the torch path on CUDA tensors too)
        if device not in self._built:
            self._built[device] = _cpu.CpuLayout(self.layout) if device.type == "cpu" else \
                _cuda.CudaLayout(self.layout, device)
        return self._built[device]
