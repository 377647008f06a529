"""``local_sgd``: every rank takes optimizer steps on its own data; the parameters are averaged over
all ranks after every ``sync_every`` steps. Optionally the first ``warmup_steps`` steps allreduce the
gradients instead (plain data parallel), which helps early training when the weights move fast.

Communicated: during warmup, each bucket of gradients (allreduce AVG, in the gradients' dtype); after
it, nothing during backward, and every ``sync_every``-th step, after the optimizer step, one allreduce
(AVG) of all trainable parameters flattened per dtype, in the parameters' own dtype. With ``n`` ranks
and ``sync_every = k`` the traffic is ``1/k`` of gradient allreduce's.

With ``t`` the train step (1-based, counted by bagua's forward pre-hook) and ``W = warmup_steps``:
steps ``t <= W`` update with the averaged gradient; after the step ``t > W`` with
``(t - W) % sync_every == 0`` every rank's parameters become their average.

Example::

    >>> model = model.with_bagua([optimizer], {"name": "local_sgd", "sync_every": 4, "warmup_steps": 10})
"""

from __future__ import annotations

import torch

from bagua_core.api import (
    Algorithm,
    AlgorithmImpl,
    BaguaBucket,
    Capabilities,
    FaultTolerance,
    ReduceOp,
    WrappedModule,
    allreduce_inplace,
)

from bagua_local_sgd.config import LocalSGDConfig

__all__ = ["LocalSGDAlgorithm", "LocalSGDAlgorithmImpl"]


class LocalSGDAlgorithmImpl(AlgorithmImpl):
    """Hooks of local SGD: the core's warmup (gradient allreduce) first, then no bucket op; the parameter
    average runs after the optimizer step on the group's communication thread."""

    config: LocalSGDConfig

    def _in_warmup(self, step: int) -> bool:
        return max(step, 1) <= self.config.warmup_steps

    def warming_up(self, bagua_module: torch.nn.Module) -> bool:
        """Through step ``warmup_steps`` (the wrap's buckets included): the core's warmup, a full-precision
        gradient allreduce; the first step after it rebuilds the buckets with this impl's (no operation)."""
        return self._in_warmup(WrappedModule(bagua_module).train_step_counter)

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()  # after the warmup nothing is sent in backward: the average runs after the step

    def is_sync_step(self, step: int) -> bool:
        """Whether the parameters are averaged after the optimizer step of train step ``step``."""
        return step >= 1 and not self._in_warmup(step) and (step - self.config.warmup_steps) % self.config.sync_every == 0

    def average_parameters(self, bagua_module: torch.nn.Module) -> None:
        """Allreduce (AVG) every trainable parameter, flattened per dtype and device, in its own dtype.
        Runs on the communication thread, after everything submitted before it."""
        groups: dict[tuple, list[torch.Tensor]] = {}
        for _, param in WrappedModule(bagua_module).named_parameters():
            groups.setdefault((param.dtype, param.device), []).append(param)
        comm = self.process_group.get_global_communicator()
        with torch.no_grad():
            for params in groups.values():
                flat = torch.cat([p.detach().reshape(-1) for p in params])
                allreduce_inplace(flat, op=ReduceOp.AVG, comm=comm)
                offset = 0
                for param in params:
                    param.copy_(flat[offset : offset + param.numel()].view_as(param))
                    offset += param.numel()

    def communicates_after_optimizer_step(self, bagua_module: torch.nn.Module) -> bool:
        """The sync steps average after the optimizer step: bagua then makes an overflow on one rank
        skip that step on every rank (``GradScaler``), so every rank joins the average."""
        return self.is_sync_step(WrappedModule(bagua_module).train_step_counter)

    def init_step_end_hook(self, bagua_module: torch.nn.Module):
        def hook() -> None:  # once per step, after the last of the module's optimizers has stepped
            if not self.is_sync_step(WrappedModule(bagua_module).train_step_counter):
                return
            worker = self.process_group.worker
            worker.submit(self.average_parameters, bagua_module)
            worker.synchronize()

        return hook


class LocalSGDAlgorithm(Algorithm):
    """Local SGD (periodic parameter averaging), optionally after a gradient-allreduce warmup."""

    name = "local_sgd"
    Config = LocalSGDConfig
    Impl = LocalSGDAlgorithmImpl
    capabilities = Capabilities(communicates="weights", weights_differ_across_ranks=True,
                                communicates_after_optimizer_step=True, relative_bytes=0.25,
                                fault_tolerance=FaultTolerance(heals=("weights", "optimizer", "step"),
                                                               commit="after_step",
                                                               rederives=("averaging denominator",)))
    """Weights averaged after every ``sync_every``-th step: 1/sync_every of allreduce's bytes (default 4)."""
