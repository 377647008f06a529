"""The CUDA kernels (``bagua_core/_native_cuda.so``, loaded with cffi in ABI mode) for CUDA tensors.

Same formula, layout and NaN rules as the CPU kernels; all work is queued on the current torch CUDA
stream. With ``nonfinite="raise"`` compression reads the per-chunk status back (one device sync);
``"propagate"`` never syncs. fp16/bf16 are converted by torch through fp32, like on the CPU.

Example::

    >>> if available():
    ...     buf = compress(torch.randn(1000, device="cuda"), 4, "propagate")
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from bagua_core.runtime.native.layout import NonFiniteError, compressed_size, nonfinite_message

__all__ = [
    "LIBRARY_PATH", "available", "compress", "decompress", "decompress_sum", "lpd_diff", "lpd_update",
    "unavailable_reason",
]

# bagua_core/_native_cuda.so: setup.py builds it at the top of the package, two levels above this file
LIBRARY_PATH = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                                             "_native_cuda.so"))
_loaded: tuple[Any, Any, str] | None = None  # (ffi, lib, reason)


def _load() -> tuple[Any, Any, str]:
    global _loaded
    if _loaded is None:
        _loaded = _try_load()
    return _loaded


def _try_load() -> tuple[Any, Any, str]:
    if not os.path.isfile(LIBRARY_PATH):
        return (
            None,
            None,
            f"{LIBRARY_PATH} was not built (nvcc missing at install time, or BAGUA_BUILD_CUDA=0)",
        )
    if not torch.cuda.is_available():
        return None, None, "no CUDA device (torch.cuda.is_available() is False)"
    try:
        from bagua_core.runtime.native.ffi_loader import load_ffi

        ffi = load_ffi("_native_cuda_ffi")
        lib = ffi.dlopen(LIBRARY_PATH)
    except (ImportError, OSError) as exc:
        return None, None, f"cannot load {LIBRARY_PATH}: {exc}"
    rc = lib.bagua_cuda_probe()
    if rc != 0:
        return None, None, f"CUDA kernels unusable: {ffi.string(lib.bagua_cuda_error_string(rc)).decode()}"
    return ffi, lib, ""


def available() -> bool:
    """True when the CUDA kernels are built and a CUDA device can run them."""
    return _load()[1] is not None


def unavailable_reason() -> str:
    """Why ``available()`` is False ("" when it is True)."""
    return _load()[2]


def _call(function: str, *args: Any) -> None:
    ffi, lib, reason = _load()
    if lib is None:
        raise RuntimeError(f"the bagua CUDA kernels are unavailable: {reason}")
    rc = getattr(lib, function)(*args)
    if rc != 0:
        message = ffi.string(lib.bagua_cuda_error_string(rc)).decode()
        raise (ValueError if rc < 0 else RuntimeError)(f"{function} failed: {message}")


def _ptr(t: torch.Tensor, ctype: str) -> Any:
    return _load()[0].cast(ctype, t.data_ptr())


def _stream(device: torch.device) -> Any:
    return _load()[0].cast("void *", torch.cuda.current_stream(device).cuda_stream)


def compress(x: torch.Tensor, n_chunks: int, nonfinite: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """The compressed uint8 buffer of the CUDA tensor ``x`` (fp32 arithmetic)."""
    xf = x if x.dtype == torch.float32 else x.float()
    numel = x.numel()
    if out is None:
        out = torch.empty(compressed_size(numel, n_chunks), dtype=torch.uint8, device=x.device)
    workspace = torch.empty(
        max(_load()[1].bagua_cuda_minmax_workspace_bytes(numel, n_chunks), 1),
        dtype=torch.uint8,
        device=x.device,
    )
    status = torch.empty(n_chunks, dtype=torch.int32, device=x.device)
    with torch.cuda.device(x.device):
        _call(
            "bagua_cuda_minmax_compress_f32",
            _ptr(xf, "float *"),
            numel,
            n_chunks,
            _ptr(out, "uint8_t *"),
            out.numel(),
            _ptr(workspace, "void *"),
            _ptr(status, "int *"),
            _stream(x.device),
        )
    if nonfinite == "raise":
        bad = status.nonzero()
        if bad.numel():
            chunk = int(bad[0, 0])
            raise NonFiniteError(nonfinite_message(chunk, overflow=int(status[chunk]) == -3))
    return out


def decompress(buf: torch.Tensor, n_chunks: int, out: torch.Tensor, accumulate: bool) -> torch.Tensor:
    """``out = D(buf)`` or ``out += D(buf)`` in fp32, on the current stream."""
    if out.dtype == torch.float32:
        target = out
    else:
        target = out.float() if accumulate else torch.empty(out.shape, dtype=torch.float32, device=out.device)
    with torch.cuda.device(out.device):
        _call(
            "bagua_cuda_minmax_decompress_f32",
            _ptr(buf, "uint8_t *"),
            buf.numel(),
            out.numel(),
            n_chunks,
            _ptr(target, "float *"),
            int(accumulate),
            _stream(out.device),
        )
    if target is not out:
        out.copy_(target)
    return out


def decompress_sum(
    bufs: Sequence[torch.Tensor] | torch.Tensor, out: torch.Tensor, average: bool
) -> torch.Tensor:
    """``out = sum_k D(bufs[k])`` (or the mean) in fp32; a list of buffers is concatenated first."""
    stacked = bufs if isinstance(bufs, torch.Tensor) else torch.cat(list(bufs))
    n_bufs = stacked.numel() // compressed_size(out.numel(), 1)
    target = (
        out if out.dtype == torch.float32 else torch.empty(out.shape, dtype=torch.float32, device=out.device)
    )
    with torch.cuda.device(out.device):
        _call(
            "bagua_cuda_minmax_decompress_sum_f32",
            _ptr(stacked, "uint8_t *"),
            n_bufs,
            compressed_size(out.numel(), 1),
            out.numel(),
            _ptr(target, "float *"),
            int(average),
            _stream(out.device),
        )
    if target is not out:
        out.copy_(target)
    return out


def lpd_diff(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``z = x + left/3 + right/3 - (5/3) w`` in torch's fp32 order (fp32 CUDA tensors), on the current stream."""
    with torch.cuda.device(x.device):
        _call("bagua_cuda_lpd_diff_f32", _ptr(x, "float *"), _ptr(w, "float *"), _ptr(left, "float *"),
              _ptr(right, "float *"), x.numel(), _ptr(z, "float *"), _stream(x.device))
    return z


def lpd_update(q_left: torch.Tensor, q_right: torch.Tensor, q_own: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
               right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """``left += D(q_left)``, ``right += D(q_right)``, ``w += D(q_own)``, ``x = w`` on [begin, end), on the current stream."""
    with torch.cuda.device(w.device):
        _call("bagua_cuda_lpd_update_f32", _ptr(q_left, "uint8_t *"), _ptr(q_right, "uint8_t *"),
              _ptr(q_own, "uint8_t *"), q_own.numel(), w.numel(), _ptr(w, "float *"), _ptr(left, "float *"),
              _ptr(right, "float *"), _load()[0].NULL if x is None else _ptr(x, "float *"), begin, end,
              _stream(w.device))
