"""``QAdamOptimizer`` under ``torch.amp.GradScaler``: skips and loss scale as with any torch optimizer.

After warmup the qadam algorithm updates the momentum during backward, from the *scaled* local
gradients (``S * g``), and averages it compressed, before the scaler has looked at them. So the
optimizer declares ``_step_supports_amp_scaling``: ``GradScaler.step`` then hands it the scale
(``grad_scale``) and its overflow check (``found_inf``) instead of unscaling, and the optimizer

- skips the step when ``found_inf`` (as the scaler would), putting back the momentum it had before
  the backward (kept by :meth:`LossScaling.keep_previous`);
- otherwise unscales the gradients in place with the scaler's own kernel (so warmup steps are
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
    """``grad *= inv_scale`` in place, with the kernel ``GradScaler.unscale_`` uses."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for param in params:
        if param.grad is not None:
            groups.setdefault((param.grad.device, param.grad.dtype), []).append(param.grad)
    for (device, _), grads in groups.items():
        found = torch.zeros(1, device=device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv_scale.to(device))


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
