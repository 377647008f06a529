"""The ``qadam`` algorithm: what is communicated before and after the warmup of a ``QAdamOptimizer``.

Warmup (the optimizer's next step is one of its first ``warmup_steps``): the gradients are
allreduced (AVG) in full precision, in their dtype, bucket by bucket while backward runs, and the
optimizer does Adam, exactly ``torch.optim.Adam`` on the averaged gradient. From then on the
buckets hold the optimizer's momentum ``exp_avg`` instead: when a bucket's gradients are ready, each
worker updates m from its local gradient (weight decay included) and the bucket is averaged with
bytegrad's exchange (its op, imported: MinMaxUInt8, every rank bit-identical); the optimizer then applies m with
the frozen v. The warmup is the core's (``warming_up``: while the optimizer is in warmup); the
first forward after it rebuilds the buckets over the momentum tensors. Under ``torch.amp.GradScaler``
an overflow on any rank is skipped on every rank, with the same scale everywhere (see
``bagua_algorithms.q_adam.loss_scaling``).

Example::

    >>> model = model.with_bagua([optimizer], QAdamAlgorithm(optimizer, hierarchical=False))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from bagua_algorithms.bytegrad import CompressedAllReduceOp
from bagua_algorithms.q_adam.config import QAdamConfig
from bagua_algorithms.q_adam.optimizer import QAdamOptimizer
from bagua_core.api import (
    Algorithm,
    AlgorithmImpl,
    BaguaBucket,
    BaguaConfigError,
    Capabilities,
    FaultTolerance,
    WrappedModule,
    has_nonfinite,
    tensors,
)

__all__ = ["QAdamAlgorithm", "QAdamAlgorithmImpl"]


class QAdamAlgorithmImpl(AlgorithmImpl):
    """Buckets of momentum averaged by bytegrad's op, after the core's full-precision warmup (``warming_up``)."""

    config: QAdamConfig

    def __init__(self, process_group, config: QAdamConfig, q_adam_optimizer: QAdamOptimizer) -> None:
        super().__init__(process_group, config)
        self.optimizer = q_adam_optimizer

    def warming_up(self, bagua_module: torch.nn.Module) -> bool:
        """While the optimizer's next step is a warmup (Adam) step: the core's full-precision gradient allreduce
        (the optimizer ignores ``externally_updated_momentum`` then)."""
        return self.optimizer.in_warmup

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        state = self.optimizer.state
        owned = {id(p) for group in self.optimizer.param_groups for p in group["params"]}
        wrapped = WrappedModule(bagua_module)
        marked = []
        for name, param in reversed(wrapped.build_params()):
            if id(param) not in owned:
                continue
            tensors.ensure_grad(param)
            marked.append(tensors.mark(
                param, name, wrapped.module_name,
                getter=lambda p: state[p]["exp_avg"],
                setter=lambda p, value: state[p].__setitem__("exp_avg", value),
            ))
        self.optimizer.externally_updated_momentum = {id(t) for t in marked}
        return marked

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        bucket.append_op(lambda b: self.optimizer.update_external_momentum_(b.tensors))
        bucket.append_op(CompressedAllReduceOp(self.process_group, self.hierarchical, True,
                                               self.config.compression))

    def init_post_backward_hook(self, bagua_module: torch.nn.Module):
        """Wait for the buckets; an averaged momentum holding inf/NaN (the same bytes on every rank: an
        overflow on any rank) puts a NaN into every rank's gradients, so a GradScaler
        skips this step on every rank (see ``bagua_algorithms.q_adam.loss_scaling``)."""

        def hook() -> None:
            wrapped = WrappedModule(bagua_module)
            wrapped.wait_for_communication()
            momenta = [tensors.effective(t) for bucket in wrapped.buckets for t in bucket.tensors]
            if has_nonfinite(momenta):
                with torch.no_grad():
                    for bucket in wrapped.buckets:
                        for tensor in bucket.tensors:
                            if tensor.grad is not None:
                                tensors.local_shard(tensor.grad).view(-1)[0] = float("nan")

        return hook

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        self.optimizer.externally_updated_momentum = set()


class QAdamAlgorithm(Algorithm):
    """QAdam (1-bit-Adam style): full Adam during warmup, then compressed momentum averaging."""

    name = "qadam"
    Config = QAdamConfig
    capabilities = Capabilities(communicates="momentum", tunable_bucket_size=True, builds_optimizer=True,
                                relative_bytes=0.25, supports_sharding=True,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="after_step",
                                    rederives=("chunking by world size", "averaging denominator",
                                               "hierarchy (a replica is a node)")))
    """Full-precision gradients during warmup, then the momentum compressed to a byte per value."""

    def __init__(self, q_adam_optimizer: QAdamOptimizer, **options: Any) -> None:
        """``q_adam_optimizer``: the ``QAdamOptimizer`` of the model; ``options``: those of ``QAdamConfig``."""
        if not isinstance(q_adam_optimizer, QAdamOptimizer):
            raise BaguaConfigError(
                "QAdamAlgorithm needs a bagua_algorithms.q_adam.QAdamOptimizer, got "
                f"{type(q_adam_optimizer).__name__}"
            )
        super().__init__(**options)
        self.optimizer = q_adam_optimizer

    @classmethod
    def from_config(cls, config: QAdamConfig, optimizers: Sequence[torch.optim.Optimizer] = ()) -> QAdamAlgorithm:
        found = [opt for opt in optimizers if isinstance(opt, QAdamOptimizer)]
        if len(found) != 1:
            given = ", ".join(type(opt).__name__ for opt in optimizers) or "none"
            raise BaguaConfigError(
                f"algorithm 'qadam' needs exactly one QAdamOptimizer among the optimizers passed to with_bagua, "
                f"found {len(found)} (optimizers given: {given}); create it with "
                "bagua_algorithms.q_adam.QAdamOptimizer(model.parameters(), ...)"
            )
        return cls(found[0], **config.model_dump(exclude={"name"}))

    @classmethod
    def build_optimizer(cls, params, *, lr: float | None = None, steps_per_epoch: int = 1) -> QAdamOptimizer:
        """A ``QAdamOptimizer`` warming up for two epochs, with ``eps=1e-4``: the second moment is frozen
        after warmup, so a parameter whose gradient stayed zero in every warmup batch would otherwise
        see its first gradient divided by Adam's tiny default eps. ``lr`` None: 0.005."""
        return QAdamOptimizer(params, lr=0.005 if lr is None else lr, warmup_steps=2 * steps_per_epoch, eps=1e-4)

    def canonical_options(self) -> dict:
        """The config's options and the optimizer's ``warmup_steps``, which decides when the buckets
        switch from gradients to momentum (compared across ranks by ``with_bagua``)."""
        return {**super().canonical_options(), "optimizer warmup_steps": self.optimizer.warmup_steps}

    def reify(self, process_group) -> QAdamAlgorithmImpl:
        return QAdamAlgorithmImpl(process_group, self.config, self.optimizer)
