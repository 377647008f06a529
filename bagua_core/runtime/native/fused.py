"""Fused MinMaxUInt8 kernels: one pass over memory where composing the plain kernels takes two.

Bit-identical to composing the plain kernels (``bagua_core.runtime.native.fallback_fused`` is that
composition, the reference of the tests); native where it pays (C on the CPU, CUDA kernels for the
low-precision decentralized update), the torch composition elsewhere. Re-exported by
``bagua_core.runtime.native``.

* ``minmax_stats()`` starts the running ``{min, max, NaN seen}`` of values a kernel writes, which
  ``decompress_average_minmax_uint8(..., stats=)`` fills and ``minmax_uint8_headers_from_stats``
  turns into the header ``compress_minmax_uint8_headers`` would compute (no second min/max pass);
* ``lpd_difference`` / ``lpd_update``: the two passes of a low_precision_decentralized round;
* ``adam_update``: Adam's parameter update from given moments in one pass (qadam after warmup).

Example::

    >>> stats = minmax_stats()
    >>> lpd_difference(x, w, left, right, z, stats)    # z = x + left/3 + right/3 - (5/3) w, min/max of z
    >>> minmax_uint8_headers_from_stats(stats, z.numel(), buf)  # == compress_minmax_uint8_headers(z, 1, buf)
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch.autograd.graph import increment_version

from bagua_core.runtime.native import cuda as _cuda
from bagua_core.runtime.native import fallback_fused as _reference
from bagua_core.runtime.native.layout import check_buffer, check_nonfinite
from bagua_core.runtime.native.policy import cpu_backend

__all__ = ["adam_update", "lpd_difference", "lpd_update", "minmax_stats", "minmax_uint8_headers_from_stats"]


def _cpu_impl(*tensors: torch.Tensor) -> ModuleType | None:
    """The C kernels when every tensor is an fp32 CPU tensor and they are loaded, else None."""
    cpu = cpu_backend()[0]
    if cpu is None:
        return None
    if all(t.device.type == "cpu" and (t.dtype in (torch.float32, torch.uint8)) for t in tensors):
        return cpu
    return None


def _check_f32(name: str, t: object, numel: int | None = None, device: torch.device | None = None) -> torch.Tensor:
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


def minmax_stats(device: torch.device | str = "cpu") -> torch.Tensor:
    """A fresh ``{min, max, NaN seen}``: ``tensor([inf, -inf, 0.])`` (fp32) on ``device``."""
    return _reference.new_stats(torch.device(device))


def minmax_uint8_headers_from_stats(stats: torch.Tensor, numel: int, out: torch.Tensor, *,
                                    nonfinite: str = "raise") -> torch.Tensor:
    """Writes the header (fp32 min/max) and zero padding of the one-chunk buffer ``out`` of ``numel``
    values whose stats were merged over all of them: the bytes ``compress_minmax_uint8_headers(x, 1, out)``
    writes. Non-finite values raise ``NonFiniteError`` (``nonfinite="raise"``) or make a NaN chunk."""
    _check_f32("stats", stats, 3)
    check_nonfinite(nonfinite)
    check_buffer(out, numel, 1, "out")
    impl = _cpu_impl(stats, out)
    return (impl or _reference).headers_from_stats(stats, numel, out, nonfinite)


def lpd_difference(x: torch.Tensor, w: torch.Tensor, left: torch.Tensor, right: torch.Tensor, out: torch.Tensor,
                   stats: torch.Tensor | None = None) -> torch.Tensor:
    """``out = x + left/3 + right/3 - w * (5/3)`` evaluated as torch evaluates that expression in fp32
    (``((x + left/3) + right/3) - w * float(5/3)``), and the min/max/NaN flag of ``out`` merged into ``stats``
    when given. All fp32, contiguous, same size and device. Returns ``out``."""
    _check_f32("x", x)
    for name, t in (("w", w), ("left", left), ("right", right), ("out", out)):
        _check_f32(name, t, x.numel(), x.device)
    if stats is not None:
        _check_f32("stats", stats, 3)
    impl = _cpu_impl(x, w, left, right, out, *(() if stats is None else (stats,)))
    if impl is not None and stats is not None:
        return impl.lpd_diff(x, w, left, right, out, stats)
    if x.device.type == "cuda" and _cuda.available():
        _cuda.lpd_diff(x, w, left, right, out)
        if stats is not None:
            _reference.merge_stats(stats, out)
        return out
    return _reference.lpd_diff(x, w, left, right, out, stats)


def lpd_update(from_left: torch.Tensor, from_right: torch.Tensor, own: torch.Tensor, w: torch.Tensor,
               left: torch.Tensor, right: torch.Tensor, x: torch.Tensor | None = None, *, begin: int = 0,
               end: int | None = None) -> None:
    """On the elements [begin, end): ``left += D(from_left)``, ``right += D(from_right)``, ``w += D(own)``
    (fp32, one-chunk MinMaxUInt8 buffers of ``w.numel()`` values), then ``x = w`` when ``x`` is given.
    ``from_left`` may be ``from_right`` (two ranks: one neighbour)."""
    _check_f32("w", w)
    numel = w.numel()
    for name, t in (("left", left), ("right", right)) + ((("x", x),) if x is not None else ()):
        _check_f32(name, t, numel, w.device)
    for name, buf in (("from_left", from_left), ("from_right", from_right), ("own", own)):
        check_buffer(buf, numel, 1, name)
        if buf.device != w.device:
            raise ValueError(f"{name} is on {buf.device}, expected {w.device}")
    end = numel if end is None else end
    if isinstance(begin, bool) or not isinstance(begin, int) or begin < 0 or end < begin:
        raise ValueError(f"need 0 <= begin <= end, got begin={begin!r}, end={end!r}")
    impl = _cpu_impl(w, left, right, from_left, from_right, own, *(() if x is None else (x,)))
    if impl is not None:
        return impl.lpd_update(from_left, from_right, own, w, left, right, x, begin, end)
    if w.device.type == "cuda" and _cuda.available():
        return _cuda.lpd_update(from_left, from_right, own, w, left, right, x, begin, min(end, numel))
    return _reference.lpd_update(from_left, from_right, own, w, left, right, x, begin, end)


def adam_update(param: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, step_size: float,
                bias_correction2_sqrt: float, eps: float) -> None:
    """``param += step_size * exp_avg / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)`` in one pass:
    torch's ``param.addcdiv_(exp_avg, (exp_avg_sq.sqrt() / c).add_(eps), value=step_size)`` operation by
    operation in fp32 (the Python floats rounded to fp32), except that the square root is correctly
    rounded everywhere (torch's CPU ``sqrt`` may be one ulp off). fp32 CPU tensors take the C kernel,
    others the same arithmetic in torch."""
    same = param.shape == exp_avg.shape == exp_avg_sq.shape and param.dtype == exp_avg.dtype == exp_avg_sq.dtype
    if not same:
        raise ValueError("adam_update: param, exp_avg and exp_avg_sq must have one shape and dtype")
    impl = _cpu_impl(param, exp_avg, exp_avg_sq)
    if impl is not None and param.dtype == torch.float32 and all(
            t.is_contiguous() for t in (param, exp_avg, exp_avg_sq)):
        impl.adam_update(param, exp_avg, exp_avg_sq, step_size, bias_correction2_sqrt, eps)
        increment_version(param)  # written behind autograd's back, as an in-place op would count it
        return None
    return _reference.adam_update(param, exp_avg, exp_avg_sq, step_size, bias_correction2_sqrt, eps)
