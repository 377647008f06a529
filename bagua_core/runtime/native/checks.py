"""Argument checks every kernel wrapper shares (the core's codecs, the codec packages' and the
algorithms' kernels), and the error of a value that cannot be encoded.

Each raises a ``TypeError``/``ValueError`` whose message says what to change.

Example::

    >>> check_input(torch.randn(4, 4).t())
    Traceback (most recent call last):
    ...
    ValueError: x must be contiguous; call x.contiguous() first
"""

from __future__ import annotations

import torch

__all__ = [
    "FLOAT_DTYPES",
    "NONFINITE_MODES",
    "NonFiniteError",
    "check_f32",
    "check_input",
    "check_nonfinite",
    "check_output",
    "check_range",
]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
NONFINITE_MODES = ("raise", "propagate")


class NonFiniteError(ValueError):
    """A chunk holds NaN/Inf, or values so large that its encoding overflows fp32."""


def check_input(x: object, name: str = "x") -> torch.Tensor:
    """A contiguous fp32/fp16/bf16 tensor, or a ValueError/TypeError that says what to change."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float32, float16 or bfloat16, got {x.dtype}")
    if not x.is_contiguous():
        raise ValueError(f"{name} must be contiguous; call {name}.contiguous() first")
    return x


def check_output(out: object, device: torch.device | None = None, name: str = "out") -> torch.Tensor:
    """Like ``check_input``, plus: on ``device`` when given."""
    out = check_input(out, name)
    if device is not None and out.device != device:
        raise ValueError(f"{name} is on {out.device} but the compressed buffer is on {device}")
    return out


def check_f32(name: str, t: object, numel: int | None = None, device: torch.device | None = None) -> torch.Tensor:
    """A contiguous float32 tensor (of ``numel`` elements on ``device`` when given)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32 or not t.is_contiguous():
        raise ValueError(f"{name} must be a contiguous float32 tensor, got {t.dtype}"
                         + ("" if t.is_contiguous() else " (not contiguous)"))
    if numel is not None and t.numel() != numel:
        raise ValueError(f"{name} has {t.numel()} elements, expected {numel}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} is on {t.device}, expected {device}")
    return t


def check_range(begin: int, end: int | None) -> bool:
    """Validates a chunk-local element range ``[begin, end)`` (``end=None``: to the chunk's end); True when
    it is not the whole chunk."""
    if isinstance(begin, bool) or not isinstance(begin, int) or begin < 0:
        raise ValueError(f"begin must be an integer >= 0, got {begin!r}")
    if end is not None and (isinstance(end, bool) or not isinstance(end, int) or end < begin):
        raise ValueError(f"end must be None or an integer >= begin ({begin}), got {end!r}")
    return begin > 0 or end is not None


def check_nonfinite(mode: str) -> str:
    """``"raise"`` or ``"propagate"``."""
    if mode not in NONFINITE_MODES:
        raise ValueError(f"nonfinite must be 'raise' or 'propagate', got {mode!r}")
    return mode
