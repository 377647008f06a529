"""``QAdamOptimizer`` under ``torch.amp.GradScaler``: skips and loss scale as with any torch optimizer.

After warmup the qadam algorithm updates the momentum during backward, from the *scaled* local
gradients (``S * g``), and averages it compressed, before the scaler has looked at them. So the
optimizer declares ``_step_supports_amp_scaling``: ``GradScaler.step`` then hands it the scale
(``grad_scale``) and its overflow check (``found_inf``) instead of unscaling, and the optimizer

- skips the step when ``found_inf`` (as the scaler would), putting back the momentum it had before
  the backward (kept by :meth:`LossScaling.keep_previous`);
- otherwise unscales the gradients in place as the scaler's own kernel does (so warmup steps are
  bit-identical to ``scaler.step(torch.optim.Adam)``), and finishes the momentum updated in backward:
  ``m = b1 m_prev + (m - b1 m_prev) / S + (1 - b1) wd p`` (weight decay is left out of the scaled
  update, since ``p`` is not scaled).

The qadam algorithm makes ``found_inf`` the same on every rank: an overflow on one rank reaches the
averaged momentum (a NaN chunk), and then every rank puts a NaN in its gradients.
Without a scaler nothing changes (the momentum is not kept once a step without scaler was seen).

Example::

    >>> scaler = torch.amp.GradScaler("cpu")
    >>> scaler.scale(loss).backward(); scaler.step(qadam_optimizer); scaler.update()
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.api import BaguaError

__all__ = ["LossScaling", "unscale_gradients"]


def unscale_gradients(params: list[torch.Tensor], inv_scale: torch.Tensor) -> None:
    """``grad *= inv_scale`` in place, bit for bit what ``GradScaler.unscale_`` writes: its kernel takes each
    element to float (``opmath``), multiplies it by the float ``inv_scale`` and rounds the product to the
    gradient's dtype. torch's public multi-tensor ``_foreach_mul_`` (what its optimizers run) does the same, one
    fused pass per device and dtype, given the scale in the form each path keeps exact:

    - the 0-dim ``inv_scale`` tensor, where the gradients share its dtype (float32), and on CPU for every dtype
      (its kernels take a 0-dim tensor's value to ``opmath``; tests/test_public_torch_replacements.py compares
      the bits with the scaler's kernel for float32, float16, bfloat16 and float64);
    - its value as a Python float for CUDA gradients of another dtype: torch's CUDA kernels round a 0-dim CUDA
      tensor of another dtype to the gradients' dtype first (an ``inv_scale`` of 1/3 to half precision, one
      under 2**-24 to 0), while a Python float reaches ``opmath`` exactly (read in torch's source, not run here).
      ``float(inv_scale)`` waits for the device; the step has already waited for ``found_inf``. (On CPU it is
      the other way round: a Python float is rounded to half precision first.)"""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for param in params:
        if param.grad is not None:
            groups.setdefault((param.grad.device, param.grad.dtype), []).append(param.grad)
    value = None
    with torch.no_grad():
        for (device, dtype), grads in groups.items():
            if dtype == inv_scale.dtype or device.type != "cuda":
                torch._foreach_mul_(grads, inv_scale.reshape(()).to(device))
            else:
                value = float(inv_scale) if value is None else value
                torch._foreach_mul_(grads, value)


class LossScaling:
    """What a ``QAdamOptimizer`` keeps between the backward's momentum update and its step."""

    def __init__(self) -> None:
        self.used: bool | None = None
        """Whether steps come with a loss scale (a GradScaler); None until the first step."""
        self.previous: dict[int, torch.Tensor] = {}
        self.pending: dict[int, torch.Tensor] = {}
        """Parameters updated in this backward with the previous momentum kept (id -> parameter)."""

    def keep_previous(self, state: dict, params: list[torch.Tensor]) -> bool:
        """Before the backward's momentum update of ``params``: keep their momentum unless no scaler is
        used. Returns whether the update includes weight decay (only without a scaler)."""
        if self.used is False:
            return True
        with torch.no_grad():
            for param in params:
                momentum = state[param]["exp_avg"]
                kept = self.previous.get(id(param))
                if kept is None or kept.shape != momentum.shape:
                    kept = self.previous[id(param)] = torch.empty_like(momentum)
                kept.copy_(momentum)
                self.pending[id(param)] = param
        return False

    def restore(self, state: dict) -> None:
        """The step is skipped: put back the momentum the backward updated."""
        with torch.no_grad():
            for key, param in self.pending.items():
                state[param]["exp_avg"].copy_(self.previous[key])
        self.pending.clear()

    def check_scale_known(self, grad_scale: Any, found_inf: Any) -> None:
        if grad_scale is None and found_inf is not None and self.pending:
            raise BaguaError(
                "qadam after warmup updated its momentum from the scaled gradients during backward, but "
                "scaler.unscale_(optimizer) was called before scaler.step(optimizer), so the scale is unknown "
                "here; call scaler.step(optimizer) directly (clip with the unscaled momentum instead)"
            )

    @torch.no_grad()
    def finish(self, state: dict, param: torch.Tensor, group: dict, inv_scale: torch.Tensor | None) -> None:
        """The momentum of ``param`` updated in backward becomes the unscaled update, weight decay added."""
        key = id(param)
        if self.pending.pop(key, None) is None:
            return
        beta1, wd = group["betas"][0], group["weight_decay"]
        momentum, kept = state[param]["exp_avg"], self.previous[key]
        if inv_scale is not None:
            momentum.sub_(kept, alpha=beta1).mul_(inv_scale).add_(kept, alpha=beta1)
        if wd != 0:
            momentum.add_(param, alpha=(1 - beta1) * wd)
