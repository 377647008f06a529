"""``QAdamOptimizer``: Adam whose second moment freezes after ``warmup_steps`` so that only the
momentum needs communicating (compressed) afterwards.

Per step, with ``g = grad + weight_decay * p``:

- the first ``warmup_steps`` steps are exactly ``torch.optim.Adam`` (L2 weight decay, foreach=False):
  ``m = lerp(m, g, 1 - b1)``, ``v = b2 v + (1 - b2) g^2``;
- later steps freeze ``v``; ``m = lerp(m, g, 1 - b1)`` is computed from the *local* gradient (by the
  qadam algorithm on the communication thread, which then averages m compressed, or here when no
  algorithm took that over);
- update: ``p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)``; after warmup in one
  fused pass (``bagua_algorithms.q_adam.kernels.adam_update``: torch's operations in order, the square root
  correctly rounded).

Caution (inherent to freezing v): a weight whose gradient is exactly zero through the whole warmup
(an input feature that is always 0 in the warmup batches, a dead ReLU unit) keeps ``v = 0``, and its
first later gradient is divided by ``eps`` alone. Use a warmup that sees the whole data set, and a
larger ``eps`` (1e-4, say) when such weights exist.

Example::

    >>> optimizer = QAdamOptimizer(model.parameters(), lr=1e-3, warmup_steps=100)
    >>> model = model.with_bagua([optimizer], "qadam")
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from bagua_algorithms.q_adam.kernels import adam_update, native_takes, reference_adam_update
from bagua_algorithms.q_adam.loss_scaling import LossScaling, unscale_gradients
from bagua_core.api import tensors

__all__ = ["QAdamOptimizer"]


def _check(name: str, ok: bool, value: object, requirement: str) -> None:
    if not ok:
        raise ValueError(f"{name} must be {requirement}, got {value!r}")


class QAdamOptimizer(torch.optim.Optimizer):
    """Adam with a frozen second moment after warmup (the optimizer of the ``qadam`` algorithm)."""

    bagua_elementwise_step = True
    """Every update is element-wise, so ``bagua_contrib.fused_optimizer`` may step flat tensors standing for
    several parameters (their ``bagua_fused_params``); see :meth:`_finish_external`."""

    _step_supports_amp_scaling = True
    """``GradScaler.step`` hands this optimizer the loss scale and its overflow check instead of
    unscaling: see :mod:`bagua_algorithms.q_adam.loss_scaling`."""

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        warmup_steps: int = 100,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        _check("lr", lr >= 0.0, lr, "a non-negative number")
        _check("warmup_steps", isinstance(warmup_steps, int) and not isinstance(warmup_steps, bool)
               and warmup_steps >= 0, warmup_steps, "a non-negative integer")
        _check("betas", len(betas) == 2 and all(0.0 <= b < 1.0 for b in betas), betas, "two numbers in [0, 1)")
        _check("eps", eps >= 0.0, eps, "a non-negative number")
        _check("weight_decay", weight_decay >= 0.0, weight_decay, "a non-negative number")
        super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay})
        self.warmup_steps = warmup_steps
        self.step_id = 0
        """Number of completed steps."""
        self.externally_updated_momentum: set[int] = set()
        """ids of parameters whose post-warmup momentum the qadam algorithm updates and averages."""
        self.loss_scaling = LossScaling()
        for group in self.param_groups:
            for param in group["params"]:
                state = self.state[param]
                state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)

    @property
    def in_warmup(self) -> bool:
        """Whether the next step is a warmup (full Adam) step."""
        return self.step_id < self.warmup_steps

    def _group_of(self) -> dict[int, dict[str, Any]]:
        return {id(p): group for group in self.param_groups for p in group["params"]}

    @torch.no_grad()
    def update_momentum_(self, params: Iterable[torch.Tensor], weight_decay: bool = True) -> None:
        """``m = lerp(m, grad + weight_decay * p, 1 - b1)`` for ``params`` (a missing grad counts as 0), a
        few ``_foreach`` kernels per parameter group."""
        groups = self._group_of()
        by_group: dict[int, list[torch.Tensor]] = {}
        for param in params:
            by_group.setdefault(id(groups[id(param)]), []).append(param)
        for group in self.param_groups:
            chosen = by_group.get(id(group))
            if not chosen:
                continue
            beta1, wd = group["betas"][0], group["weight_decay"]
            grads = [tensors.local_shard(p.grad) if p.grad is not None else torch.zeros_like(tensors.local_shard(p)) for p in chosen]
            if wd != 0 and weight_decay:
                grads = torch._foreach_add(grads, [tensors.local_shard(p) for p in chosen], alpha=wd)
            torch._foreach_lerp_([tensors.local_shard(self.state[p]["exp_avg"]) for p in chosen], grads, 1 - beta1)

    def update_external_momentum_(self, params: list[torch.Tensor]) -> None:
        """The qadam algorithm's update of the momentum during backward (then averaged): keeps what a
        skipped or loss-scaled step needs (:class:`~bagua_algorithms.q_adam.loss_scaling.LossScaling`)."""
        self.update_momentum_(params, weight_decay=self.loss_scaling.keep_previous(self.state, params))

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        self.loss_scaling.used = found_inf is not None  # set by GradScaler.step (amp scaling protocol)
        if found_inf is not None and float(found_inf) > 0:  # an overflow: skipped, as GradScaler does
            self.loss_scaling.restore(self.state)
            return loss
        self.loss_scaling.check_scale_known(grad_scale, found_inf)
        inv_scale = None
        if grad_scale is not None:
            inv_scale = grad_scale.double().reciprocal().float()
            unscale_gradients([p for group in self.param_groups for p in group["params"]], inv_scale)
        warmup = self.in_warmup
        self.step_id += 1
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            bias_correction1 = 1 - beta1**self.step_id
            bias_correction2 = 1 - beta2**self.step_id
            params, own_momentum = [], []
            for param in group["params"]:
                fused = getattr(param, "bagua_fused_params", None) or [param]  # a fused optimizer's flat tensor
                external = not warmup and all(id(p) in self.externally_updated_momentum for p in fused)
                if param.grad is None and not external:
                    continue
                params.append(param)
                if external:
                    self._finish_external(fused, self.state[param]["exp_avg"], group, inv_scale)
                elif not warmup:
                    own_momentum.append(param)
            if not params:
                continue
            # a model sharded with FSDP2: every tensor is this rank's shard (element-wise: shards step alone)
            exp_avgs = [tensors.local_shard(self.state[p]["exp_avg"]) for p in params]
            exp_avg_sqs = [tensors.local_shard(self.state[p]["exp_avg_sq"]) for p in params]
            if warmup:
                _adam_step([tensors.local_shard(p) for p in params], [tensors.local_shard(p.grad) for p in params], exp_avgs,
                           exp_avg_sqs, beta1, beta2, wd, -(lr / bias_correction1), bias_correction2**0.5, eps)
            else:
                if own_momentum:  # no algorithm took the momentum over: update it from the local gradient
                    self.update_momentum_(own_momentum)
                _frozen_step([tensors.local_shard(p) for p in params], exp_avgs, exp_avg_sqs, -(lr / bias_correction1),
                             bias_correction2**0.5, eps)
        return loss

    def _finish_external(self, params: list[torch.Tensor], exp_avg: torch.Tensor, group: dict[str, Any],
                         inv_scale: torch.Tensor | None) -> None:
        """Finish the momentum the algorithm updated in backward, per parameter (what it kept is per
        parameter); a fused flat tensor's momentum ``exp_avg`` gets each finished slice where the
        parameter's own momentum is not already a view of it (the first fused step)."""
        offset = 0
        for param in params:
            self.loss_scaling.finish(self.state, param, group, inv_scale)
            own = self.state[param]["exp_avg"]
            if own is not exp_avg:
                piece = exp_avg.view(-1)[offset:offset + param.numel()]
                if own.data_ptr() != piece.data_ptr():
                    piece.copy_(own.reshape(-1))
            offset += param.numel()

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["step_id"] = self.step_id
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        step_id = int(state_dict.pop("step_id", 0))
        super().load_state_dict(state_dict)
        self.step_id = step_id


def _adam_step(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avgs: list[torch.Tensor],
               exp_avg_sqs: list[torch.Tensor], beta1: float, beta2: float, weight_decay: float, step_size: float,
               bias_correction2_sqrt: float, eps: float) -> None:
    """One step of ``torch.optim.Adam`` (L2 weight decay) over every tensor, a kernel per operation."""
    if weight_decay != 0:
        grads = torch._foreach_add(grads, params, alpha=weight_decay)
    torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    torch._foreach_mul_(exp_avg_sqs, beta2)
    torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    denom = torch._foreach_sqrt(exp_avg_sqs)
    torch._foreach_div_(denom, bias_correction2_sqrt)
    torch._foreach_add_(denom, eps)
    torch._foreach_addcdiv_(params, exp_avgs, denom, value=step_size)


def _frozen_step(params: list[torch.Tensor], exp_avgs: list[torch.Tensor], exp_avg_sqs: list[torch.Tensor],
                 step_size: float, bias_correction2_sqrt: float, eps: float) -> None:
    """``p += step_size * m / (sqrt(v) / c + eps)`` with v frozen: on the CPU the native fused pass per tensor
    (:func:`~bagua_algorithms.q_adam.kernels.adam_update`), on CUDA its operations as ``_foreach`` kernels in
    the same order (``(step_size * m) / denom``; CUDA's ``sqrt`` is correctly rounded, its ``_foreach_div_`` by the
    scalar c multiplies by the reciprocal, so 2,831 of ResNet-50's first 471,616 parameters differ from the CPU
    kernel's, within 2 eps of |update| + |parameter|), elsewhere the torch reference per tensor."""
    if native_takes(params, exp_avgs, exp_avg_sqs):
        for param, exp_avg, exp_avg_sq in zip(params, exp_avgs, exp_avg_sqs):
            adam_update(param, exp_avg, exp_avg_sq, step_size, bias_correction2_sqrt, eps)
        return
    if all(p.device.type == "cuda" and p.dtype == torch.float32 for p in params):
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bias_correction2_sqrt)
        torch._foreach_add_(denom, eps)
        update = torch._foreach_mul(exp_avgs, step_size)
        torch._foreach_div_(update, denom)
        torch._foreach_add_(params, update)
        return
    for param, exp_avg, exp_avg_sq in zip(params, exp_avgs, exp_avg_sqs):
        reference_adam_update(param, exp_avg, exp_avg_sq, step_size, bias_correction2_sqrt, eps)
