"""The lifecycle's extension point ``AlgorithmImpl.init_bucket_ready_hook``: called once per bucket per
backward, in bucket order, on the training thread (never the communication thread), before the bucket's
operations run; an algorithm can step a per-bucket optimizer inside backward with it."""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl
from tests.distributed import run_workers
from tests.models import SmallNet, batch

STEPS = 3


class _StepInsideBackwardImpl(AlgorithmImpl):
    """Steps each bucket's own SGD on the local gradients inside backward (no communication; an op
    that counts its runs) and records where and when the hook ran."""

    def __init__(self, process_group) -> None:
        super().__init__(process_group)
        self.calls: list[tuple[str, int, int]] = []  # (bucket, thread id, ops run before the hook)
        self.ops_run = 0
        self.optimizers: dict[str, torch.optim.Optimizer] = {}

    def bucket_size_bytes(self) -> int:
        return 300  # several buckets for SmallNet

    def init_operations(self, bagua_ddp, bucket) -> None:
        bucket.clear_ops()
        bucket.append_op(lambda b: setattr(self, "ops_run", self.ops_run + 1))
        self.optimizers[bucket.name] = torch.optim.SGD(bucket.tensors, lr=0.1)

    def init_bucket_ready_hook(self, bagua_ddp):
        def hook(bucket) -> None:
            self.calls.append((bucket.name, threading.get_ident(), self.ops_run))
            self.optimizers[bucket.name].step()

        return hook


class _StepInsideBackward(Algorithm):
    name = "test_step_inside_backward"
    Config = AlgorithmConfig

    def reify(self, process_group) -> _StepInsideBackwardImpl:
        return _StepInsideBackwardImpl(process_group)


def _run(rank: int) -> dict:
    model = SmallNet(seed=0)
    reference = SmallNet(seed=0)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the user's step changes nothing
    model = model.with_bagua([optimizer], _StepInsideBackward(), do_flatten=False)
    impl = model.bagua_algorithm
    names = [bucket.name for bucket in model.bagua_buckets]
    orders, threads, before_ops = [], set(), []
    for step in range(STEPS):
        x, y = batch(rank, step)
        impl.calls.clear()
        ops_before = impl.ops_run
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        orders.append([name for name, _, _ in impl.calls])
        threads |= {thread for _, thread, _ in impl.calls}
        before_ops.append([ops - ops_before for _, _, ops in impl.calls])
        reference_optimizer.zero_grad()
        F.cross_entropy(reference(x), y).backward()
        reference_optimizer.step()
    model.bagua_shutdown()
    return {"names": names, "orders": orders, "threads": threads, "main": threading.get_ident(),
            "before_ops": before_ops,
            "equal": all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters()))}


def test_bucket_ready_hook_in_order_on_the_training_thread() -> None:
    for out in run_workers(_run, 2):
        assert len(out["names"]) >= 3
        assert out["orders"] == [out["names"]] * STEPS  # once per bucket per backward, in bucket order
        # CPU autograd runs the hooks on the calling thread; never the communication thread
        assert out["threads"] == {out["main"]}
        # bucket i's hook runs before bucket i's operations: at most the i earlier buckets' ops ran
        assert all(ran <= i for step in out["before_ops"] for i, ran in enumerate(step))
        assert out["equal"]  # each bucket's optimizer stepped exactly once per step, inside backward
