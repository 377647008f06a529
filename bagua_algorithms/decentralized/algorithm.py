"""``decentralized``: average the weights with peers while forward and backward run.

All parameters are in ONE bucket whose effective tensors are the weights. On communication steps
(``t % communication_interval == 0``, t = train step - 1) the forward pre-hook snapshots the weights
and the communication thread averages the snapshot with the round's peers (round
``s = t // communication_interval``): ``"all"`` averages over every rank, ``"shift_one"`` with one
partner that shifts every round (an odd number of peers: one of them keeps its weights that round). After backward the averaged weights overwrite the parameters and
the optimizer then applies the gradient computed at the old weights:
``x_{t+1} = avg(x_t) - lr * g(x_t)``. Communicated: the weights, in their dtype. Hierarchical:
averaged inside the node first, the peers are the nodes, broadcast inside the node last.

Example::

    >>> model = model.with_bagua([optimizer], DecentralizedAlgorithm(peer_selection_mode="shift_one"))
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from bagua_algorithms.decentralized.config import DecentralizedConfig
from bagua_algorithms.decentralized.op import DecentralizedSynchronousOp
from bagua_algorithms.decentralized.weights import WeightCommunicatingImpl, is_communication_step
from bagua_core.api import Algorithm, BaguaBucket, Capabilities, FaultTolerance, WrappedModule, tensors

__all__ = ["DecentralizedAlgorithm", "DecentralizedAlgorithmImpl"]


class DecentralizedAlgorithmImpl(WeightCommunicatingImpl):
    """One bucket of all the weights, with :class:`~bagua_algorithms.decentralized.op.DecentralizedSynchronousOp`."""

    config: DecentralizedConfig

    def __init__(self, process_group, config: DecentralizedConfig) -> None:
        super().__init__(process_group, config)
        self._ops: list[tuple[BaguaBucket, DecentralizedSynchronousOp]] = []
        self._in_flight = False

    def init_tensors(self, bagua_module: torch.nn.Module) -> list[torch.Tensor]:
        self._ops = []  # buckets are being rebuilt
        return super().init_tensors(bagua_module)

    def tensors_to_buckets(self, tensors: list[list[torch.Tensor]], do_flatten: bool) -> list[BaguaBucket]:
        """All weights in one bucket (the suggested groups joined, in their order)."""
        return [BaguaBucket([t for group in tensors for t in group], "decentralized_weights", do_flatten)]

    def init_operations(self, bagua_module: torch.nn.Module, bucket: BaguaBucket) -> None:
        bucket.clear_ops()
        peer_weight = tensors.mark(bucket.flattened_tensor(), "peer_weight", WrappedModule(bagua_module).module_name)
        op = DecentralizedSynchronousOp(self.process_group, self.config.hierarchical, self.config.peer_selection_mode,
                                        peer_weight=peer_weight)
        bucket.append_op(op)
        bucket._peer_weight = peer_weight  # the original's bucket attribute
        self._ops.append((bucket, op))

    def init_forward_pre_hook(self, bagua_module: torch.nn.Module) -> Callable:
        wrapped = WrappedModule(bagua_module)

        def hook(inputs) -> None:
            if self._in_flight:  # a forward without backward left a round running: finish it
                wrapped.wait_for_communication()
                self._in_flight = False
            interval = self.config.communication_interval
            if not is_communication_step(bagua_module, interval):
                return
            round_index = (wrapped.train_step_counter - 1) // interval
            self._in_flight = True
            for bucket, op in self._ops:
                op.take_snapshot(bucket, round_index)
                for tensor in bucket.tensors:
                    tensors.mark_ready(tensor)

        return hook

    def init_post_backward_hook(self, bagua_module: torch.nn.Module) -> Callable:
        wrapped = WrappedModule(bagua_module)

        def hook() -> None:
            if not self._in_flight:
                return
            wrapped.wait_for_communication()
            self._in_flight = False
            for bucket, op in self._ops:
                op.copy_back_peer_weight(bucket)

        return hook


class DecentralizedAlgorithm(Algorithm):
    """Decentralized SGD: average weights with peers (all, or one shifting partner) every few steps."""

    name = "decentralized"
    Config = DecentralizedConfig
    Impl = DecentralizedAlgorithmImpl
    capabilities = Capabilities(communicates="weights", weights_differ_across_ranks=True, relative_bytes=1.0,
                                supports_sharding=True,
                                fault_tolerance=FaultTolerance(
                                    heals=("weights", "optimizer", "algorithm_state", "step"), commit="after_step",
                                    rederives=("peers (all: the quorum's replicas; shift_one: the pairs among the "
                                               "quorum's replicas, one without a partner per round when odd)",
                                               "averaging denominator", "hierarchy (a replica is a node)")))
    """Weights averaged with the peers (all: an allreduce of the weights; shift_one: one exchange)."""
