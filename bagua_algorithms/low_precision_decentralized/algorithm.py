"""``low_precision_decentralized``: after each optimizer step, exchange compressed weight
differences with the two ring neighbours.

Every bucket (default bucket size, effective tensors = the weights) keeps the replicas ``w``, ``l``,
``r``; after the optimizer step of a communication step (``t % communication_interval == 0``) the
stepped weights x become ``w + D(C(x + l/3 + r/3 - 5/3 w))`` (see
``bagua_algorithms.low_precision_decentralized.op``). Communicated: one MinMaxUInt8-compressed
copy of each bucket (uint8 payload plus its fp32 min/max) to each ring neighbour. The training thread
computes each bucket's difference pass while the communication thread exchanges the buckets before
it. The step returns once this rank's messages are sent and its weights updated (they depend on its own
message only); the neighbours' messages, which update only the replicas ``l`` and ``r``, travel during the
next step's forward and backward and are added before the next difference (same bits as waiting for
them: the op's "Overlapped"); whatever reads the replicas between steps (the buckets' ``_weight``,
``_left_peer_weight``, ``_right_peer_weight``, ``state_dict``, a checkpoint, shutdown) adds them first. Hierarchical: averaged inside the node first, the ring runs
among the node leaders, broadcast inside the node.
Fault-tolerant mode: the ring is the quorum's replicas, so the first step on every new quorum averages the
weights over the quorum and restarts ``w``, ``l``, ``r`` from the average (the way the algorithm starts).

Example::

    >>> model = model.with_bagua([optimizer], LowPrecisionDecentralizedAlgorithm(hierarchical=False))
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bagua_algorithms.decentralized import WeightCommunicatingImpl, is_communication_step
from bagua_algorithms.low_precision_decentralized.config import LowPrecisionDecentralizedConfig
from bagua_algorithms.low_precision_decentralized.op import LowPrecisionDecentralizedOp
from bagua_core.api import (
    Algorithm,
    BaguaBucket,
    BaguaError,
    Capabilities,
    FaultTolerance,
    WrappedModule,
    first_failure,
    tensors,
)

_REPLICAS = ("weight", "left_peer_weight", "right_peer_weight")

__all__ = ["LowPrecisionDecentralizedAlgorithm", "LowPrecisionDecentralizedAlgorithmImpl", "ReplicaBucket"]


class ReplicaBucket(BaguaBucket):
    """A bucket of weights with its ring op's replicas as the original's attributes ``_weight``,
    ``_left_peer_weight`` and ``_right_peer_weight``: reading one first adds the neighbours' messages
    still in flight (the impl's :meth:`~LowPrecisionDecentralizedAlgorithmImpl.complete_exchanges`), so
    what is read between steps is current."""

    ring: LowPrecisionDecentralizedOp | None = None
    settle: Callable[[], None] | None = None

    def _replica(self, key: str) -> torch.Tensor:
        if self.settle is not None:
            self.settle()
        return getattr(self.ring, key)

    _weight = property(lambda self: self._replica("weight"))
    _left_peer_weight = property(lambda self: self._replica("left_peer_weight"))
    _right_peer_weight = property(lambda self: self._replica("right_peer_weight"))


class LowPrecisionDecentralizedAlgorithmImpl(WeightCommunicatingImpl):
    """Buckets of weights (:class:`ReplicaBucket`), each with a
    :class:`~bagua_algorithms.low_precision_decentralized.op.LowPrecisionDecentralizedOp` run after the
    optimizer step."""

    config: LowPrecisionDecentralizedConfig

    def __init__(self, process_group, config: LowPrecisionDecentralizedConfig) -> None:
        super().__init__(process_group, config)
        self._module: torch.nn.Module | None = None
        # reified on a quorum (fault-tolerant mode): the ring is other replicas now, the first step re-derives
        # the replicas
        self._resynchronize = process_group.membership.on_quorum
    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        self.complete_exchanges()  # buckets are being rebuilt: the old ops' rounds must not stay in flight
        return super().init_tensors(bagua_module)

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        """One :class:`ReplicaBucket` per suggested group."""
        return [ReplicaBucket(group, f"bucket_{i}", do_flatten) for i, group in enumerate(tensors)]

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        self._module = bagua_module  # its buckets hold the replicas (state_dict)
        bucket.clear_ops()
        name = WrappedModule(bagua_module).module_name
        weight, left, right = (tensors.mark(bucket.flattened_tensor().float(), key, name) for key in _REPLICAS)
        op = LowPrecisionDecentralizedOp(self.process_group, self.config.hierarchical, weight, left, right,
                                         compression=self.config.compression)
        op.overlap = True  # the neighbours' messages travel during the next forward and backward (complete_exchanges)
        bucket.append_op(op)
        if isinstance(bucket, ReplicaBucket):
            bucket.ring, bucket.settle = op, self.complete_exchanges

    def _finish_in_background(self) -> bool:
        """Queue every op's :meth:`~LowPrecisionDecentralizedOp.complete` on the communication thread (after
        the bucket operations, as every collective: a failure there is the group's failure, raised on
        every rank); False when there is no op."""
        ops = [op for _, op in self._replica_ops()]
        if ops:
            worker = WrappedModule(self._module).process_group.worker
            for op in ops:
                worker.submit(op.complete)
        return bool(ops)

    def complete_exchanges(self) -> None:
        """Wait until the neighbours' messages of the last round are added into the replicas ``l`` and
        ``r``: before the next difference reads them, before they are read or saved, and before the module
        is unwrapped (so no message is left in flight)."""
        if self._finish_in_background():
            WrappedModule(self._module).process_group.worker.synchronize()

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook(inputs) -> None:
            if self._resynchronize:  # the first step on a new quorum: average, restart the replicas
                self._resynchronize = False
                self.complete_exchanges()  # no neighbour's message may land in l or r after the restart
                for bucket, op in self._replica_ops():
                    op.resynchronize(bucket)

        return hook

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        def hook() -> None:
            return None

        return hook

    def _replica_ops(self) -> list[tuple[BaguaBucket, LowPrecisionDecentralizedOp]]:
        buckets = WrappedModule(self._module).buckets if self._module is not None else []
        return [(bucket, op) for bucket in buckets for op in bucket.ops if isinstance(op, LowPrecisionDecentralizedOp)]

    def state_dict(self) -> dict:
        """Every bucket's replicas: this rank's weights as its neighbours know them (``weight``) and its
        view of its left and right neighbours' (an exact resume needs all three)."""
        self.complete_exchanges()
        return {bucket.name: {key: getattr(op, key).clone() for key in _REPLICAS} for bucket, op in self._replica_ops()}

    def load_state_dict(self, state: dict) -> None:
        self.complete_exchanges()
        ops = {bucket.name: op for bucket, op in self._replica_ops()}
        if set(ops) != set(state) or any(state[n][k].shape != getattr(ops[n], k).shape for n in ops for k in _REPLICAS):
            raise BaguaError(
                f"the checkpoint's low_precision_decentralized replicas are for buckets {sorted(state)}, this module "
                f"has {sorted(ops)} (or other sizes): resume with the model and BAGUA_DEFAULT_BUCKET_SIZE that saved it"
            )
        with torch.no_grad():
            for name, op in ops.items():
                for key in _REPLICAS:
                    getattr(op, key).copy_(state[name][key])

    def communicates_after_optimizer_step(self, bagua_module: torch.nn.Module) -> bool:
        return is_communication_step(bagua_module, self.config.communication_interval)

    def quiesce(self, bagua_module: torch.nn.Module) -> None:
        """Fault-tolerant mode: the step's neighbour messages are part of its transaction, so they are added
        before the commit decision (the overlap with the next forward is given up there)."""
        self.complete_exchanges()

    def shutdown(self, bagua_module: torch.nn.Module) -> None:
        if first_failure() is None:  # after a failure, what is in flight never completes
            self.complete_exchanges()

    def init_step_end_hook(self, bagua_module: torch.nn.Module) -> Callable:
        wrapped = WrappedModule(bagua_module)

        def hook() -> None:  # (every optimizer has stepped)
            if not is_communication_step(bagua_module, self.config.communication_interval):
                return
            self.complete_exchanges()  # the last round's l and r: this round's difference reads them
            for bucket in wrapped.buckets:
                for op in bucket.ops:  # the difference pass here, while the buckets before it are on the wire
                    if isinstance(op, LowPrecisionDecentralizedOp):
                        op.prepare(bucket)
                for tensor in bucket.tensors:
                    tensors.mark_ready(tensor)
            wrapped.wait_for_communication()
            # x and w are final; the neighbours' segments are added into l and r on the communication
            # thread while the next forward and backward run (the next round waits for it)
            self._finish_in_background()

        return hook


class LowPrecisionDecentralizedAlgorithm(Algorithm):
    """Decentralized SGD with compressed (MinMaxUInt8) ring communication of weight differences."""

    name = "low_precision_decentralized"
    Config = LowPrecisionDecentralizedConfig
    Impl = LowPrecisionDecentralizedAlgorithmImpl
    capabilities = Capabilities(communicates="weights", weights_differ_across_ranks=True,
                                supports_sharding=True,
                                communicates_after_optimizer_step=True, relative_bytes=0.5,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "step"), commit="after_step",
                                    rederives=("ring neighbours (the quorum's replicas in quorum order)",
                                               "the neighbour replicas w, l, r: on a new quorum every replica's "
                                               "weights are averaged and the replicas restart from the average",
                                               "hierarchy (a replica is a node)")))
    """Compressed weight differences to the two ring neighbours (a byte per value each way). In
    fault-tolerant mode the first step on each new quorum averages the weights over the quorum and
    restarts ``w``, ``l``, ``r`` from them (:meth:`LowPrecisionDecentralizedOp.resynchronize`)."""
