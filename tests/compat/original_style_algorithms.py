# ruff: noqa  (written in the original's style on purpose: typing.List, unused loop index, as its algorithms)
"""Two algorithms written for the original Bagua's author API, as its documentation and built-in
algorithms write them (imports from ``bagua.torch_api`` only): a decentralized one that owns its
``peer_weight`` replica, and a gradient one whose bucket op is a Python function."""

from typing import List

import torch

import bagua.torch_api as bagua
from bagua.torch_api.algorithms import Algorithm, AlgorithmImpl
from bagua.torch_api.bucket import BaguaBucket
from bagua.torch_api.communication import BaguaProcessGroup
from bagua.torch_api.tensor import BaguaTensor


class MyDecentralizedAlgorithmImpl(AlgorithmImpl):
    def __init__(self, process_group: BaguaProcessGroup, peer_selection_mode: str = "all"):
        super(MyDecentralizedAlgorithmImpl, self).__init__(process_group)
        self.peer_selection_mode = peer_selection_mode

    def init_tensors(self, bagua_ddp) -> List[BaguaTensor]:
        parameters = bagua_ddp.bagua_build_params()
        self.tensors = [
            param.ensure_bagua_tensor(name, bagua_ddp.bagua_module_name)
            for name, param in parameters.__reversed__()
        ]
        return self.tensors

    def tensors_to_buckets(self, tensors: List[List[BaguaTensor]], do_flatten: bool) -> List[BaguaBucket]:
        all_tensors = []
        for idx, bucket in enumerate(tensors):
            all_tensors.extend(bucket)
        bagua_bucket = BaguaBucket(all_tensors, flatten=do_flatten, name=str(0))
        return [bagua_bucket]

    def init_forward_pre_hook(self, bagua_ddp):
        def hook(input):
            for tensor in self.tensors:
                tensor.bagua_mark_communication_ready()

        return hook

    def init_backward_hook(self, bagua_ddp):
        def hook(parameter_name, parameter):
            return

        return hook

    def init_post_backward_hook(self, bagua_ddp):
        def hook():
            bagua_ddp._bagua_backend.wait_pending_comm_ops()
            for bucket in bagua_ddp.bagua_buckets:
                bucket._decentralized_op.copy_back_peer_weight(bucket.backend_bucket)

        return hook

    def init_operations(self, bagua_ddp, bucket: BaguaBucket):
        bucket._peer_weight = bucket.flattened_tensor().ensure_bagua_tensor("peer_weight")
        bucket.clear_ops()
        bucket._decentralized_op = bucket.append_decentralized_synchronous_op(
            peer_weight=bucket._peer_weight,
            hierarchical=False,
            peer_selection_mode=self.peer_selection_mode,
            group=self.process_group,
        )


class MyDecentralizedAlgorithm(Algorithm):
    def __init__(self, peer_selection_mode: str = "all"):
        self.peer_selection_mode = peer_selection_mode

    def reify(self, process_group: BaguaProcessGroup) -> MyDecentralizedAlgorithmImpl:
        return MyDecentralizedAlgorithmImpl(process_group, peer_selection_mode=self.peer_selection_mode)


class PythonOpAllReduceImpl(AlgorithmImpl):
    """Default tensors and bucketing; the bucket's op averages the gradients with bagua.allreduce."""

    def init_operations(self, bagua_ddp, bucket: BaguaBucket):
        bucket.clear_ops()

        def average(name):
            for tensor in bucket.tensors:
                grad = tensor.bagua_getter_closure()
                bagua.allreduce_inplace(grad, op=bagua.ReduceOp.AVG)

        bucket.append_python_op(average, group=self.process_group)


class PythonOpAllReduce(Algorithm):
    def reify(self, process_group):
        return PythonOpAllReduceImpl(process_group)
