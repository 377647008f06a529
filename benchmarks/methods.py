"""What the benchmarks compare: torch DDP baselines and every installed bagua algorithm.

A *method* is a name: ``ddp``, ``ddp_fp16`` (DDP with its fp16 compression hook), ``ddp_powersgd``
(DDP with PowerSGD, rank 1), a variant of an algorithm (:data:`VARIANTS`, e.g. ``decentralized_shift_one``),
the registered name of a bagua algorithm
(``bagua_core.plugins.algorithm_registry.names()``, so plugins installed later are benchmarked too),
or ``auto`` (``with_bagua(..., "auto")``: it chooses while it trains, so the benchmarks time it from
its first step, choosing included; see :data:`UNTIMED_WARMUP`).
:func:`prepare` wraps a model for one method and returns it with its optimizer.

Example::

    >>> methods = available_methods()          # ["ddp", "ddp_fp16", "ddp_powersgd", "bytegrad", ...]
    >>> model, optimizer = prepare("bytegrad", build_model("tiny"), lr=0.01)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

__all__ = ["DDP_METHODS", "VARIANTS", "AUTO_METHOD", "UNTIMED_WARMUP", "BENCH_OPTIONS", "available_methods", "prepare", "finish",
           "is_ddp"]

DDP_METHODS = ("ddp", "ddp_fp16", "ddp_powersgd")

BENCH_OPTIONS: dict[str, dict[str, Any]] = {
    # async: the background averaging every 100 ms so that a short benchmark sees it happen
    "async": {"sync_interval_ms": 100},
    # powersgd at the settings of the ddp_powersgd baseline (rank 1, compression from the third step)
    "powersgd": {"start_iter": 2},
    # diloco: a synchronisation every 4 steps, so that a short benchmark sees its cost amortised
    "diloco": {"inner_steps": 4},
}
"""Options given to a bagua algorithm in the benchmarks (defaults otherwise)."""

VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "decentralized_shift_one": ("decentralized", {"peer_selection_mode": "shift_one"}),
}
"""Methods that are a registered algorithm with other options: method -> (algorithm, options)."""

QADAM_WARMUP_STEPS = 2
QADAM_EPS = 1e-4
"""qadam's eps: its second moment is frozen after warmup, and a coordinate whose v stayed near zero
would see quantisation error divided by Adam's default 1e-8 (as in the main job)."""
"""qadam's full-precision warmup; shorter than the benchmark's warmup so timed steps are compressed."""

AUTO_METHOD = "auto"
UNTIMED_WARMUP = {AUTO_METHOD: False}
"""Methods whose warmup steps are timed too (a benchmark runs them as timed steps): ``auto`` spends
its first steps choosing, and that time counts."""

# algorithms whose wrapping is not ``with_bagua(name)`` (decentralized_dp has its own wrapper)
_NOT_WITH_BAGUA = {"decentralized_dp"}


def is_ddp(method: str) -> bool:
    return method in DDP_METHODS


def available_methods() -> list[str]:
    """The DDP baselines, then every registered bagua algorithm (gradient_allreduce first), then auto."""
    from bagua_core.plugins import algorithm_registry

    names = [n for n in algorithm_registry.names() if n not in _NOT_WITH_BAGUA and n != AUTO_METHOD]
    names.sort(key=lambda n: (n != "gradient_allreduce", n))
    return list(DDP_METHODS) + names + [AUTO_METHOD]


def _ddp(method: str, model: torch.nn.Module, options: dict[str, Any] | None = None) -> torch.nn.Module:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel

    # PowerSGD's hook issues allreduces from its futures' callbacks: with several buckets in flight on
    # gloo (two worker threads) their order differs between ranks ("Received data size doesn't match
    # expected size", 21M MLP), so that baseline gets one bucket for the whole model
    ddp = DistributedDataParallel(model, bucket_cap_mb=1024 if method == "ddp_powersgd" else 25)
    if method == "ddp_fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif method == "ddp_powersgd":
        options = options or {}
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=options.get("matrix_approximation_rank", 1),
            start_powerSGD_iter=max(2, options.get("start_iter", 2)), min_compression_rate=2
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    return ddp


def prepare(method: str, model: torch.nn.Module, lr: float, momentum: float = 0.0, qadam_lr: float = 1e-3,
            qadam_warmup: int = QADAM_WARMUP_STEPS,
            make_optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer] | None = None,
            options: dict[str, Any] | None = None) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """Wrap ``model`` for ``method`` (collective: every rank calls it) and return ``(model, optimizer)``:
    SGD(lr, momentum) or ``make_optimizer(parameters)``, except qadam's own
    QAdamOptimizer(qadam_lr, warmup_steps=qadam_warmup, eps=QADAM_EPS). ``options``: the algorithm's
    options (default ``BENCH_OPTIONS``); for ``ddp_powersgd``, its ``matrix_approximation_rank`` and
    ``start_iter``."""
    make_optimizer = make_optimizer or (lambda params: torch.optim.SGD(params, lr=lr, momentum=momentum))
    if is_ddp(method):
        wrapped = _ddp(method, model, options)
        return wrapped, make_optimizer(wrapped.parameters())
    if method == "qadam":
        from bagua_algorithms.q_adam import QAdamOptimizer

        optimizer: torch.optim.Optimizer = QAdamOptimizer(
            model.parameters(), lr=qadam_lr, warmup_steps=qadam_warmup, eps=QADAM_EPS
        )
    else:
        optimizer = make_optimizer(model.parameters())
    name, variant = VARIANTS.get(method, (method, {}))
    options = {**BENCH_OPTIONS.get(name, {}), **variant} if options is None else options
    wrapped = model.with_bagua([optimizer], {"name": name, **options})
    return wrapped, optimizer


def finish(method: str, model: torch.nn.Module) -> None:
    """Stop background work (async's averaging loop) so that later collectives do not interleave."""
    if is_ddp(method):
        return
    capabilities = getattr(model, "bagua_capabilities", None)
    if capabilities is not None and capabilities.background_work:
        model.bagua_algorithm.abort(model)
    model.bagua_shutdown()
