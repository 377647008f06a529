"""What a diloco checkpoint holds on each rank, and how it is restored (``bagua_core.checkpoints.checkpoint`` calls
``state_dict``/``load_state_dict`` of the impl, which use these).

Saved: the outer state (every fragment's start weights and the outer optimizer), the residuals of error
feedback, the outer gradients received or in flight (waited for here, merged at their step after the
restart), the schedule position (train step, last inner step whose events ran), this rank's local
parameters and its inner optimizers (the dense checkpoint file holds rank 0's only). Restored, a run
continues exactly as if it had not stopped.

Example::

    >>> state = state_of(model.bagua_algorithm)     # on every rank
    >>> restore(resumed.bagua_algorithm, state)
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from bagua_algorithms.diloco.exchange import FragmentExchange

__all__ = ["DiLoCoRankState", "state_of", "restore"]


class DiLoCoRankState(Protocol):
    """What a checkpoint reads and writes of the impl (``DiLoCoAlgorithmImpl`` has it). The impl uses
    this module, so this module describes the impl instead of importing it."""

    _inner_phase: bool
    _module: Any  # the wrapped module, None before the first wrap
    step_offset: int
    done_through: int
    starts: list[torch.Tensor]
    outer: torch.optim.Optimizer | None
    exchanges: list[FragmentExchange]
    pending: dict[int, int]
    landed: dict[int, torch.Tensor]

    def train_step(self) -> int: ...

    def need_reset(self) -> bool: ...


def state_of(impl: DiLoCoRankState) -> dict[str, Any]:
    """The rank's state ({} during warmup: the model and optimizer are all there is)."""
    if not impl._inner_phase or impl._module is None:
        return {}
    for fragment in impl.pending:
        if fragment not in impl.landed:
            impl.landed[fragment] = impl.exchanges[fragment].wait().clone()
    module = impl._module
    return {"train_step": impl.train_step(), "done_through": impl.done_through,
            "starts": [s.clone() for s in impl.starts], "outer": impl.outer.state_dict(),
            "residuals": [e.residual for e in impl.exchanges],
            "pending": [[f, step] for f, step in sorted(impl.pending.items())],
            "landed": [[f, t] for f, t in sorted(impl.landed.items())],
            "local": [p.detach().clone() for _, p in module.bagua_named_parameters()],
            "inner_optimizers": [optimizer.state_dict() for optimizer in module.bagua_optimizers]}


def restore(impl: DiLoCoRankState, state: dict[str, Any]) -> None:
    """Restore :func:`state_of`'s result into a freshly wrapped module's impl."""
    if not state:
        return
    module = impl._module
    impl.step_offset = int(state["train_step"]) - module.bagua_train_step_counter
    if impl.need_reset():
        module.bagua_reset()  # into the inner phase
    with torch.no_grad():
        for param, saved in zip((p for _, p in module.bagua_named_parameters()), state["local"]):
            param.copy_(saved)
        for start, saved in zip(impl.starts, state["starts"]):
            start.copy_(saved)
    for optimizer, saved in zip(module.bagua_optimizers, state["inner_optimizers"]):
        optimizer.load_state_dict(saved)
    impl.outer.load_state_dict(state["outer"])
    for exchange, residual in zip(impl.exchanges, state["residuals"]):
        if residual is not None:
            exchange.residual = residual.clone()
    impl.done_through = int(state["done_through"])
    impl.pending = {int(f): int(step) for f, step in state["pending"]}
    impl.landed = {int(f): t.clone() for f, t in state["landed"]}
