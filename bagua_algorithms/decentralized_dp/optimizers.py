"""Optimizers that carry the communication information, and the accumulated-moment Adam/AdamW.

The engine calls ``optimizer.pre_average_hook(edge, weight)`` (when the optimizer has one) for each
bucket right after the bucket's optimizer step and before its parameters are sent to be mixed over
``edge`` with self-weight ``weight``. :class:`AccumAdam` / :class:`AccumAdamW` refresh their moments
only every ``accum_iter`` steps, from the mean of the gradients accumulated since the last refresh
(a local gradient of a decentralized worker is noisy; the accumulated mean is closer to the
gradient a global batch would give). Their hook mixes the accumulated gradients over the edge,
with the parameters' weights, once before each refresh: an extra synchronous ``all_reduce(SUM)`` of
the accumulated gradients in their dtype, every ``accum_iter`` steps.

Update, step ``t`` (1-based), ``K = accum_iter``, ``g = grad`` (``+ wd*p`` for AccumAdam; AccumAdamW
decays ``p *= 1 - lr*wd`` instead): ``a += g``; on ``t = 1, 1+K, 1+2K, ...``: ``g_bar = a / (gradients
in a)``, ``m = b1*m + (1-b1)*g_bar``, ``v = b2*v + (1-b2)*g_bar^2``, ``k += 1``, ``a = 0``; every step:
``p -= lr * (m/(1-b1^k)) / (sqrt(v/(1-b2^k)) + eps)``. With ``accum_iter=1`` it is exactly Adam / AdamW.

Example::

    >>> optim_fn = lambda named: AccumAdamW([p for _, p in named], lr=1e-3, accum_iter=4)
    >>> model = DecentralizedDataParallel(net, optim_fn, topology="ring")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from bagua_algorithms.decentralized_dp.topology import Edge, mix_inplace
from bagua_core.api import record_payload

__all__ = ["AccumAdam", "AccumAdamW", "DecentralizedOptimizer"]


class DecentralizedOptimizer(torch.optim.Optimizer):
    """Base of optimizers told about communication: ``pre_average_hook`` records the last edge and weight."""

    last_edge: Edge | None = None
    last_weight: float | None = None

    def pre_average_hook(self, edge: Edge, weight: float) -> None:
        """Called before the parameters of this optimizer are mixed over ``edge`` with self-weight ``weight``."""
        self.last_edge, self.last_weight = edge, weight


class AccumAdam(DecentralizedOptimizer):
    """Adam whose moments are refreshed every ``accum_iter`` steps from accumulated gradients."""

    decoupled_weight_decay = False

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, accum_iter: int = 4,
                 mix_accumulated: bool = True) -> None:
        if not lr >= 0.0:
            raise ValueError(f"lr must be non-negative, got {lr}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {betas}")
        if not eps >= 0.0 or not weight_decay >= 0.0:
            raise ValueError(f"eps and weight_decay must be non-negative, got {eps} and {weight_decay}")
        if not isinstance(accum_iter, int) or accum_iter < 1:
            raise ValueError(f"accum_iter must be a positive integer, got {accum_iter!r}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "accum_iter": accum_iter,
                        "mix_accumulated": mix_accumulated}
        super().__init__(params, defaults)

    def _state(self, param: torch.Tensor) -> dict[str, Any]:
        state = self.state[param]
        if not state:
            state.update(step=0, refreshes=0, accumulated=0, exp_avg=torch.zeros_like(param),
                         exp_avg_sq=torch.zeros_like(param), grad_accum=torch.zeros_like(param))
        return state

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            for param in group["params"]:
                if param.grad is None:
                    continue
                state = self._state(param)
                grad = param.grad
                if wd and self.decoupled_weight_decay:
                    param.mul_(1 - lr * wd)
                elif wd:
                    grad = grad.add(param, alpha=wd)
                state["grad_accum"].add_(grad)
                state["accumulated"] += 1
                state["step"] += 1
                if (state["step"] - 1) % group["accum_iter"] == 0:
                    mean = state["grad_accum"].div_(state["accumulated"])
                    state["exp_avg"].mul_(beta1).add_(mean, alpha=1 - beta1)
                    state["exp_avg_sq"].mul_(beta2).addcmul_(mean, mean, value=1 - beta2)
                    state["grad_accum"].zero_()
                    state["accumulated"] = 0
                    state["refreshes"] += 1
                k = state["refreshes"]
                denom = (state["exp_avg_sq"] / (1 - beta2**k)).sqrt_().add_(eps)
                param.addcdiv_(state["exp_avg"], denom, value=-lr / (1 - beta1**k))
        return loss

    @torch.no_grad()
    def pre_average_hook(self, edge: Edge, weight: float) -> None:
        """Before the step that refreshes the moments, mix the accumulated gradients over ``edge``.

        Whether to mix is decided from the number of hook calls (the same on every rank of the edge),
        never from local state, so the ranks of an edge always agree on the collective."""
        super().pre_average_hook(edge, weight)
        self._hook_calls = getattr(self, "_hook_calls", 0) + 1
        if edge.size < 2 or edge.group is None:
            return
        buffers = [
            self._state(p)["grad_accum"]
            for group in self.param_groups
            if group["mix_accumulated"] and group["accum_iter"] > 1 and self._hook_calls % group["accum_iter"] == 0
            for p in group["params"]
        ]
        if not buffers:
            return
        flat = torch.cat([b.reshape(-1) for b in buffers])
        total = flat.clone()
        record_payload("allreduce", total.numel() * total.element_size())
        dist.all_reduce(total, op=dist.ReduceOp.SUM, group=edge.group)
        mix_inplace(flat, total, edge)
        offset = 0
        for buffer in buffers:
            buffer.copy_(flat[offset : offset + buffer.numel()].view(buffer.shape))
            offset += buffer.numel()


    def state_dict(self) -> dict[str, Any]:
        """Torch's, plus the number of ``pre_average_hook`` calls (it decides which steps mix the
        accumulated gradients), so a resumed run mixes on the same steps."""
        return {**super().state_dict(), "hook_calls": getattr(self, "_hook_calls", 0)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        self._hook_calls = int(state_dict.pop("hook_calls", 0))
        super().load_state_dict(state_dict)


class AccumAdamW(AccumAdam):
    """:class:`AccumAdam` with decoupled weight decay (``p *= 1 - lr*wd`` every step), default 1e-2."""

    decoupled_weight_decay = True

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, accum_iter: int = 4,
                 mix_accumulated: bool = True) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, accum_iter, mix_accumulated)
