"""``DecentralizedEngine``: the decent-dp step, shared by the wrapper and the ``decentralized_dp`` plugin.

The engine holds what the core's lifecycle does not: the topology, the per-bucket optimizers and LR
schedulers, the rounds in flight. Its user (:class:`~.plugin.DecentralizedDPAlgorithmImpl`) drives it
from the core's hooks. In the first backward the engine records the order in which gradients become
ready (:meth:`note_gradient`); :meth:`agreed_order` checks it is the same on every rank (an all_gather
of the parameter names; a mismatch raises on every rank); the core then buckets the parameters in that
order and :meth:`use_buckets` gives each bucket its optimizer and LR scheduler. From then on, when a
bucket's last gradient is ready (the core's bucket ready hook, buckets strictly in order),
:meth:`step_bucket` waits for the bucket's previous round and mixes it in, steps the bucket's
optimizer, then starts the next round (an async SUM of the bucket's parameters, in their dtype, over
this step's edge). So ``x_{t+1} = mix(x_t) - lr * g(x_t)``, and the first step is local.

Example::

    >>> engine = DecentralizedEngine(model.named_parameters(), optim_fn, get_topology("ring", 4))
    >>> engine.use_buckets([ParamBucket(named, as_view=True)])   # in the agreed order
    >>> engine.step_bucket(engine.buckets[0]); engine.end_step()  # each backward
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from bagua_algorithms.decentralized_dp.buckets import ParamBucket
from bagua_algorithms.decentralized_dp.topology import Topology
from bagua_core.api import (BaguaConfigError, BaguaError, BaguaProcessGroup, RankMismatchError, group_failure,
                           record_payload)

__all__ = ["DecentralizedEngine", "NamedParams", "OptimFn", "SchedulerFn", "validate_engine_options"]

NamedParams = Sequence[tuple[str, torch.nn.Parameter]]
OptimFn = Callable[[list[tuple[str, torch.nn.Parameter]]], torch.optim.Optimizer]
SchedulerFn = Callable[[torch.optim.Optimizer], Any]


def validate_engine_options(grad_clip_norm: float, bucket_size_in_mb: float) -> None:
    """Raise ``BaguaConfigError`` (identically on every rank) for bad options."""
    if not isinstance(grad_clip_norm, (int, float)) or grad_clip_norm < 0:
        raise BaguaConfigError(f"grad_clip_norm must be a non-negative number, got {grad_clip_norm!r}")
    if not isinstance(bucket_size_in_mb, (int, float)) or bucket_size_in_mb <= 0:
        raise BaguaConfigError(f"bucket_size_in_mb must be a positive number, got {bucket_size_in_mb!r}")


class DecentralizedEngine:
    """Per-bucket optimizer steps fused into backward, parameters mixed over the topology's edges.

    Construction is collective (it creates the topology's process groups and one of all ranks)."""

    def __init__(self, named_params: NamedParams, optim_fn: OptimFn, topology: Topology,
                 lr_scheduler_fn: SchedulerFn | None = None, scaler: Any = None, grad_clip_norm: float = 0.0,
                 param_as_bucket_view: bool = True, bucket_size_in_mb: float = 25.0,
                 update_scaler: bool = True, quorum: Any = None) -> None:
        validate_engine_options(grad_clip_norm, bucket_size_in_mb)
        self.named_params = [(n, p) for n, p in named_params if p.requires_grad]
        self.optim_fn, self.lr_scheduler_fn, self.topology = optim_fn, lr_scheduler_fn, topology
        self.scaler, self.grad_clip_norm = scaler, float(grad_clip_norm)
        self.update_scaler = update_scaler  # False: the user's loop calls scaler.update() (with_bagua)
        self.as_view, self.bucket_bytes = param_as_bucket_view, int(bucket_size_in_mb * 1024 * 1024)
        self.quorum = quorum
        """Fault-tolerant mode: the communicator over every rank of the quorum (None otherwise). The edges
        then have no groups of their own and sum on it (``ParamBucket.launch``), and every round is mixed
        in before the step ends (:meth:`end_step`): a step is a transaction, no round may outlive it."""
        if quorum is not None:
            self.rank, self.world_size = quorum.rank(), quorum.nranks()
        else:
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        if topology.world_size != self.world_size:
            raise BaguaConfigError(f"topology is for {topology.world_size} ranks, the job has {self.world_size}")
        if quorum is not None:
            self.world_group = quorum.torch_group
        else:
            self.world_group = BaguaProcessGroup.new_torch_group(list(range(self.world_size)))
            topology.build_groups()
        self._name_of = {id(p): n for n, p in self.named_params}
        self.trace: list[str] = []
        self.buckets: list[ParamBucket] | None = None
        self._seen: set[int] = set()
        self.step = 0
        """Training steps completed (the edge of step ``t`` is ``topology.edge(rank, t)``)."""
        self._pending_buckets: list[dict] | None = None  # a checkpoint's per-bucket state, until the buckets exist
        self.adaptive_factor = 1.0
        """``a`` in ``x <- (1 - a) x + a mix(x)`` (decent-dp's adaptive factor; 1 = plain gossip)."""
        self._backups: list[torch.Tensor] = []

    # --- called by the hooks --------------------------------------------------------------------
    def note_gradient(self, param: torch.Tensor) -> bool:
        """A parameter's gradient is accumulated: refuse a second one in this backward, record the order
        in the first backward. Returns whether the parameter belongs to a built bucket (step it then)."""
        key = id(param)
        if key not in self._name_of:
            return False
        if key in self._seen:
            raise BaguaError(
                f"parameter {self._name_of[key]!r} received its gradient twice in one backward (used twice, e.g. "
                "inside and outside a reentrant checkpoint); decentralized data parallel steps every parameter "
                "once per backward: use torch.utils.checkpoint(use_reentrant=False) or a single use"
            )
        self._seen.add(key)
        if self.buckets is None:
            self.trace.append(self._name_of[key])
            return False
        return True

    def end_backward_pass(self) -> None:
        """Forget the gradients seen in this backward (the next may see every parameter again)."""
        self._seen.clear()

    def end_step(self) -> None:
        """Every bucket stepped: update the scaler (when the engine owns it) and count the step. On a
        quorum, the rounds just started are waited for and mixed in now (the next forward sees the mixed
        parameters: the gradient is taken at them, where the overlapping form takes it at the local ones)."""
        if self.quorum is not None:
            for bucket in self.buckets or ():
                bucket.finish(self.adaptive_factor)
        if self.scaler is not None and self.update_scaler:
            self.scaler.update()
        self.step += 1

    # --- internals ------------------------------------------------------------------------------
    def agreed_order(self) -> list[str]:
        """The parameters' names in the order their gradients became ready in the first backward (then
        those that got none, last registered first), checked equal on every rank (an all_gather of the
        names; a difference raises ``RankMismatchError`` on every rank)."""
        traced = set(self.trace)
        order = self.trace + [n for n, _ in reversed(self.named_params) if n not in traced]
        gathered: list[Any] = [None] * self.world_size
        try:
            dist.all_gather_object(gathered, order, group=self.world_group)
        except Exception:
            if group_failure(self.world_group) is None:
                raise
        if group_failure(self.world_group) is not None:
            return order  # a quorum whose participant failed: this step is committed nowhere, compare next time
        for rank, other in enumerate(gathered):
            if other != order:
                where = next((i for i, (a, b) in enumerate(zip(order, other)) if a != b), min(len(order), len(other)))
                raise RankMismatchError(
                    f"the order in which gradients become ready differs between rank {self.rank} and rank {rank} "
                    f"at position {where}: {order[where:where + 1]} vs {other[where:where + 1]} (of {len(order)} "
                    f"vs {len(other)} parameters); every rank must run the same model and the same backward"
                )
        return order

    def ordered_params(self, order: Sequence[str]) -> list[tuple[str, torch.nn.Parameter]]:
        by_name = dict(self.named_params)
        return [(n, by_name[n]) for n in order]

    def use_buckets(self, buckets: list[ParamBucket]) -> None:
        """Adopt ``buckets`` (in launch order): build each one's optimizer and LR scheduler, apply a
        checkpoint's per-bucket state loaded before they existed."""
        self.buckets = list(buckets)
        for bucket in self.buckets:
            bucket.optimizer = self.optim_fn(list(zip(bucket.names, bucket.params)))
            if self.lr_scheduler_fn is not None:
                bucket.scheduler = self.lr_scheduler_fn(bucket.optimizer)
        if self._pending_buckets is not None:
            self._restore_buckets(self._pending_buckets)
            self._pending_buckets = None

    @torch.no_grad()
    def step_bucket(self, bucket: ParamBucket) -> None:
        """Mix the bucket's last round in, step its optimizer (through the scaler, clipped if asked),
        then start its next round over this step's edge."""
        bucket.finish(self.adaptive_factor)
        optimizer = bucket.optimizer
        if any(p.grad is not None for p in bucket.params):
            if self.scaler is not None:
                if self.grad_clip_norm > 0:
                    self.scaler.unscale_(optimizer)
                    torch.nn.utils.clip_grad_norm_(bucket.params, self.grad_clip_norm)
                self.scaler.step(optimizer)
            else:
                if self.grad_clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(bucket.params, self.grad_clip_norm)
                optimizer.step()
        if bucket.scheduler is not None:
            bucket.scheduler.step()
        for param in bucket.params:
            param.grad = None
        edge = self.topology.edge(self.rank, self.step)
        hook = getattr(optimizer, "pre_average_hook", None)
        if hook is not None:
            hook(edge, edge.weight)
        bucket.launch(edge, self.quorum)

    # --- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What an exact resume needs: the rounds in flight are finished first (mixed into the parameters,
        as the next step would do before stepping), then the step (it selects the topology's edge) and
        each bucket's optimizer and LR scheduler state. This rank's; save the parameters after this."""
        for bucket in self.buckets or ():
            bucket.finish(self.adaptive_factor)
        buckets = None
        if self.buckets is not None:
            buckets = [{"optimizer": b.optimizer.state_dict(),
                        "scheduler": b.scheduler.state_dict() if b.scheduler is not None else None}
                       for b in self.buckets]
        return {"step": self.step, "buckets": buckets if buckets is not None else self._pending_buckets}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the per-bucket states are applied when the buckets are built, at
        the first backward, if they do not exist yet)."""
        self.step = int(state["step"])
        if state.get("buckets") is None:
            return
        if self.buckets is None:
            self._pending_buckets = list(state["buckets"])
        else:
            self._restore_buckets(state["buckets"])

    def _restore_buckets(self, saved: list[dict]) -> None:
        assert self.buckets is not None
        if len(saved) != len(self.buckets):
            raise BaguaError(f"the checkpoint has {len(saved)} decentralized buckets, this model {len(self.buckets)}: "
                             "resume with the model and bucket_size_in_mb that saved it")
        for bucket, state in zip(self.buckets, saved):
            bucket.optimizer.load_state_dict(state["optimizer"])
            if bucket.scheduler is not None and state.get("scheduler") is not None:
                bucket.scheduler.load_state_dict(state["scheduler"])

    # --- evaluation and shutdown ----------------------------------------------------------------
    def wait(self) -> None:
        """Wait for every round in flight and drop it (the parameters keep their local values)."""
        for bucket in self.buckets or ():
            bucket.discard()

    @torch.no_grad()
    def global_avg(self, buffers: Iterable[torch.Tensor] = (), will_revert: bool = True,
                   return_d2c: bool = False) -> float | None:
        """Average every parameter (and floating ``buffers``) over all ranks exactly: a SUM allreduce in
        each tensor's dtype, divided by the world size, written back in place; non-floating buffers are
        broadcast from rank 0. Every rank ends bit-identical. As decent-dp 0.2.3: ``will_revert`` keeps a
        copy of the parameters for :meth:`revert_global_avg` and keeps the rounds in flight (waited for,
        mixed at the next step as if nothing happened); without it the rounds in flight are dropped.
        ``return_d2c``: return the distance of this rank's parameters to the average (2-norm)."""
        params = [p.data for _, p in self.named_params]
        for bucket in self.buckets or ():
            bucket.settle() if will_revert else bucket.discard()
        if will_revert or return_d2c:
            self._backups = [p.clone() for p in params]
        groups: dict[tuple, list[torch.Tensor]] = {}
        for tensor in params + list(buffers):
            groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
        for (dtype, _), members in groups.items():
            flat = torch.cat([t.reshape(-1) for t in members])
            record_payload("allreduce" if dtype.is_floating_point or dtype.is_complex else "broadcast",
                         flat.numel() * flat.element_size())
            if dtype.is_floating_point or dtype.is_complex:
                dist.all_reduce(flat, op=dist.ReduceOp.SUM, group=self.world_group)
                flat.div_(self.world_size)
            else:
                source = self.quorum.group_rank(0) if self.quorum is not None else 0  # world_group's rank
                dist.broadcast(flat, group=self.world_group, group_src=source)
            offset = 0
            for tensor in members:
                tensor.copy_(flat[offset : offset + tensor.numel()].view(tensor.shape))
                offset += tensor.numel()
        if return_d2c:
            return torch.norm(torch.stack([torch.norm(p - b) for p, b in zip(params, self._backups)])).item()
        return None

    @torch.no_grad()
    def revert_global_avg(self) -> None:
        """Put back the parameters saved by the last ``global_avg(will_revert=True)``."""
        if not self._backups:
            raise BaguaError("no backup to revert to: call global_avg(will_revert=True) first")
        for (_, param), backup in zip(self.named_params, self._backups):
            param.data.copy_(backup)

    def get_lr(self) -> float:
        """The learning rate of the first bucket's scheduler (0.0 before the first backward built them)."""
        if self.buckets is None:
            return 0.0
        scheduler = self.buckets[0].scheduler
        if scheduler is None:
            raise BaguaError("no learning rate scheduler is defined: pass lr_scheduler_fn to use get_lr()")
        return scheduler.get_last_lr()[0]
