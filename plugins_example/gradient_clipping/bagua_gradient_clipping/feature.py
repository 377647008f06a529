"""``GradientClippingFeature``: the gradients the optimizer steps with, clipped to a total norm.

It acts between the exchange and the optimizer step (``Feature.before_optimizer_step``): at the end of every
backward that communicates, once the algorithm's exchange of the step is done, it calls
``torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type)`` on the parameters bagua trains
(``WrappedModule(module).named_parameters()``, in registration order). What those gradients are depends on what
the algorithm exchanges:

- a gradient algorithm (``gradient_allreduce``, or a compressed one: ``bytegrad``, ``powersgd``): the averaged
  gradient, the same on every rank, so every rank clips it alike and the ranks stay bit-identical;
- an algorithm exchanging weights or pseudo-gradients every few steps (``diloco``, ``sparseloco``,
  ``decentralized``, ``local_sgd``): each rank's own gradient, clipped before its inner step, as a script would
  clip it after ``loss.backward()``.

An algorithm whose optimizer steps inside backward (``Capabilities.steps_optimizer_in_backward``:
``decentralized_dp``) leaves no point between the exchange and the step: the wrap refuses it, on every rank
before the first collective (``Feature.check``). Inside
``no_sync()`` nothing is clipped (the gradients are clipped once, when the last micro-batch communicates). With a
``GradScaler``, the gradients are still scaled at that point: clip in the script after ``scaler.unscale_``.

Example::

    >>> model = model.with_bagua([optimizer], "bytegrad", features={"gradient_clipping": {"max_norm": 1.0}})
"""

from __future__ import annotations

from typing import Any

import torch

from bagua_core.api import BaguaConfigError, Feature, WrappedModule, capabilities_of
from bagua_gradient_clipping.config import GradientClippingConfig

__all__ = ["GradientClippingFeature"]


class GradientClippingFeature(Feature):
    """The gradients clipped to a total norm after the exchange, before the optimizer steps (module doc)."""

    name = "gradient_clipping"
    Config = GradientClippingConfig

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.last_norm: float | None = None
        """The total norm of the gradients before the last clipping (a float, read back by the tests and logs)."""

    def check(self, module: torch.nn.Module, algorithm: Any) -> None:
        if capabilities_of(algorithm).steps_optimizer_in_backward:
            raise BaguaConfigError(
                f"feature {self.name!r} cannot run with algorithm {algorithm.name!r}: its optimizer steps inside "
                f"backward, so no point lies between the exchange and the optimizer step (clip in the optimizer "
                f"instead)")

    def before_optimizer_step(self, module: torch.nn.Module) -> None:
        parameters = [p for _, p in WrappedModule(module).named_parameters() if p.grad is not None]
        if not parameters:
            return
        norm = torch.nn.utils.clip_grad_norm_(parameters, self.config.max_norm, self.config.norm_type,
                                              error_if_nonfinite=self.config.error_if_nonfinite)
        self.last_norm = float(norm)
