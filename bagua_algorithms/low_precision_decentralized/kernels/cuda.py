"""low_precision_decentralized's CUDA kernels (``native/low_precision_decentralized_cuda.cu`` in the CUDA
library that ``bagua_core.runtime.native.cuda`` loads), for fp32 CUDA tensors, queued on the current stream.

Example::

    >>> if bagua_core.runtime.native.cuda.available():
    ...     lpd_diff(x, w, left, right, z)      # z = x + left/3 + right/3 - (5/3) w, no stats
"""

from __future__ import annotations

import torch

from bagua_core.kernels import cuda_call, cuda_null, cuda_pointer, cuda_stream

__all__ = ["lpd_diff", "lpd_update"]


def lpd_diff(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """``z = x + left/3 + right/3 - (5/3) w`` in torch's fp32 order (fp32 CUDA tensors), on the current stream."""
    with torch.cuda.device(x.device):
        cuda_call("bagua_cuda_lpd_diff_f32", cuda_pointer(x, "float *"), cuda_pointer(w, "float *"), cuda_pointer(left, "float *"),
             cuda_pointer(right, "float *"), x.numel(), cuda_pointer(z, "float *"), cuda_stream(x.device))
    return z


def lpd_update(q_left: torch.Tensor, q_right: torch.Tensor, q_own: torch.Tensor, w: torch.Tensor, left: torch.Tensor,
               right: torch.Tensor, x: torch.Tensor | None, begin: int, end: int) -> None:
    """``left += D(q_left)``, ``right += D(q_right)``, ``w += D(q_own)``, ``x = w`` on [begin, end), on the current stream."""
    with torch.cuda.device(w.device):
        cuda_call("bagua_cuda_lpd_update_f32", cuda_pointer(q_left, "uint8_t *"), cuda_pointer(q_right, "uint8_t *"),
             cuda_pointer(q_own, "uint8_t *"), q_own.numel(), w.numel(), cuda_pointer(w, "float *"), cuda_pointer(left, "float *"),
             cuda_pointer(right, "float *"), cuda_null() if x is None else cuda_pointer(x, "float *"), begin, end,
             cuda_stream(w.device))
