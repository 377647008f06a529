"""MinMaxUInt8's CUDA kernels (``native/minmax_uint8_cuda.cu`` in the CUDA library that
``bagua_core.runtime.native.cuda`` loads) for CUDA tensors.

Same formula, layout and NaN rules as the CPU kernels; all work is queued on the current torch CUDA
stream. With ``nonfinite="raise"`` compression reads the per-chunk status back (one device sync);
``"propagate"`` never syncs. fp16/bf16 are converted by torch through fp32, like on the CPU.

Example::

    >>> if bagua_core.runtime.native.cuda.available():
    ...     buf = compress(torch.randn(1000, device="cuda"), 4, "propagate")
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from bagua_codecs.minmax_kernels.layout import NonFiniteError, compressed_size, nonfinite_message
from bagua_core.kernels import cuda_call, cuda_library, cuda_pointer, cuda_stream

__all__ = ["compress", "decompress", "decompress_sum"]


def compress(x: torch.Tensor, n_chunks: int, nonfinite: str, out: torch.Tensor | None = None) -> torch.Tensor:
    """The compressed uint8 buffer of the CUDA tensor ``x`` (fp32 arithmetic)."""
    xf = x if x.dtype == torch.float32 else x.float()
    numel = x.numel()
    if out is None:
        out = torch.empty(compressed_size(numel, n_chunks), dtype=torch.uint8, device=x.device)
    workspace = torch.empty(
        max(cuda_library().bagua_cuda_minmax_workspace_bytes(numel, n_chunks), 1),
        dtype=torch.uint8,
        device=x.device,
    )
    status = torch.empty(n_chunks, dtype=torch.int32, device=x.device)
    with torch.cuda.device(x.device):
        cuda_call(
            "bagua_cuda_minmax_compress_f32",
            cuda_pointer(xf, "float *"),
            numel,
            n_chunks,
            cuda_pointer(out, "uint8_t *"),
            out.numel(),
            cuda_pointer(workspace, "void *"),
            cuda_pointer(status, "int *"),
            cuda_stream(x.device),
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
        cuda_call(
            "bagua_cuda_minmax_decompress_f32",
            cuda_pointer(buf, "uint8_t *"),
            buf.numel(),
            out.numel(),
            n_chunks,
            cuda_pointer(target, "float *"),
            int(accumulate),
            cuda_stream(out.device),
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
        cuda_call(
            "bagua_cuda_minmax_decompress_sum_f32",
            cuda_pointer(stacked, "uint8_t *"),
            n_bufs,
            compressed_size(out.numel(), 1),
            out.numel(),
            cuda_pointer(target, "float *"),
            int(average),
            cuda_stream(out.device),
        )
    if target is not out:
        out.copy_(target)
    return out
