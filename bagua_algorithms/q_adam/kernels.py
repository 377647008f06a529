"""qadam's fused Adam update after warmup: the C kernel (``native/adam_update.c`` in the CPU library
``bagua_core._native_cpu``) and its torch reference.

``param += step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)`` in one pass over
memory, no temporaries: torch's ``param.addcdiv_(exp_avg, (exp_avg_sq.sqrt() / c).add_(eps), value=step_size)``
operation by operation in fp32, except that the square root is correctly rounded everywhere (torch's CPU
``sqrt`` may be one ulp off).

Example::

    >>> adam_update(param, exp_avg, exp_avg_sq, -(lr / (1 - b1**t)), (1 - b2**t) ** 0.5, eps)
"""

from __future__ import annotations

import torch
from torch.autograd.graph import increment_version

from bagua_core.kernels import check_status, cpu_kernels_take, cpu_library, float_ptr

__all__ = ["adam_update", "native_takes", "reference_adam_update"]


def native_takes(*tensor_lists: list[torch.Tensor]) -> bool:
    """Whether :func:`adam_update` runs the C kernel for every tensor of these lists (contiguous fp32 CPU
    tensors, the native library loaded under the ``BAGUA_NATIVE`` policy)."""
    tensors = [t for tensors in tensor_lists for t in tensors]
    return bool(tensors) and all(t.dtype == torch.float32 and t.is_contiguous() for t in tensors) and \
        cpu_kernels_take(*tensors)


def adam_update(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step_size: float,
                bias_correction2_sqrt: float, eps: float) -> None:
    """``param += step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)`` in one pass:
    torch's ``param.addcdiv_(exp_avg, (exp_avg_sq.sqrt() / c).add_(eps), value=step_size)`` operation by
    operation in fp32 (the Python floats rounded to fp32), except that the square root is correctly
    rounded everywhere. Contiguous fp32 CPU tensors take the C kernel (``BAGUA_NATIVE`` policy), others
    :func:`reference_adam_update` (the same arithmetic in torch)."""
    same = param.shape == exp_avg.shape == exp_avg_sq.shape and param.dtype == exp_avg.dtype == exp_avg_sq.dtype
    if not same:
        raise ValueError("adam_update: param, exp_avg and exp_avg_sq must have one shape and dtype")
    if (param.dtype == torch.float32 and cpu_kernels_take(param, exp_avg, exp_avg_sq)
            and all(t.is_contiguous() for t in (param, exp_avg, exp_avg_sq))):
        rc = cpu_library().lib.bagua_adam_update_f32(float_ptr(param), float_ptr(exp_avg), float_ptr(exp_avg_sq),
                                                 param.numel(), step_size, bias_correction2_sqrt, eps)
        check_status(rc, "adam_update")
        increment_version(param)  # written behind autograd's back, as an in-place op would count it
        return None
    return reference_adam_update(param, exp_avg, exp_avg_sq, step_size, bias_correction2_sqrt, eps)


def reference_adam_update(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step_size: float,
                          bias_correction2_sqrt: float, eps: float) -> None:
    """``param += (step_size * exp_avg) / (sqrt(exp_avg_sq) / c + eps)``, one rounding per operation in
    that order (torch's CPU ``addcdiv_`` order), the square root correctly rounded (through float64), the
    scalars as tensors (so CUDA neither multiplies by a reciprocal nor fuses a multiply-add). Other
    float dtypes are computed in fp32 and rounded once."""
    root = exp_avg_sq.double().sqrt().float()

    def scalar(value: float) -> torch.Tensor:
        return torch.full_like(root, value)

    denom = root.div(scalar(bias_correction2_sqrt)).add(scalar(eps))
    update = exp_avg.float().mul(scalar(step_size)).div(denom)
    if param.dtype == torch.float32:
        param.add_(update)
    else:
        param.copy_(param.float().add(update))
