"""The lifecycle order of DESIGN.md, checked with an inline plugin selected by name on 2 ranks."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig, AlgorithmImpl
from bagua_core.lifecycle.bucket_ops.centralized import CentralizedSynchronousOp
from bagua_core.plugins import get_plugin_manager, hookimpl
from tests.distributed import run_workers
from tests.models import SmallNet, batch


class RecorderConfig(AlgorithmConfig):
    name: Literal["recorder"] = "recorder"
    reset_at_step: int = 2


class RecorderImpl(AlgorithmImpl):
    def __init__(self, process_group, reset_at_step: int) -> None:
        super().__init__(process_group)
        self.reset_at_step = reset_at_step
        self.calls: list[str] = []
        self.weights_at_init: torch.Tensor | None = None

    def need_reset(self) -> bool:
        self.calls.append("need_reset")
        return self._module.bagua_train_step_counter == self.reset_at_step

    def init_tensors(self, bagua_module):
        self._module = bagua_module
        self.calls.append("init_tensors")
        self.weights_at_init = bagua_module.fc1.weight.detach().clone()
        return super().init_tensors(bagua_module)

    def tensors_to_buckets(self, tensors, do_flatten):
        self.calls.append("tensors_to_buckets")
        return super().tensors_to_buckets(tensors, do_flatten)

    def init_operations(self, bagua_module, bucket):
        self.calls.append("init_operations")
        super().init_operations(bagua_module, bucket)
        bucket.append_op(lambda bucket: self.calls.append("bucket_op"))
        bucket.append_op(CentralizedSynchronousOp(average=True))

    def init_forward_pre_hook(self, bagua_module):
        return lambda inputs: self.calls.append(f"forward_pre:{bagua_module.bagua_train_step_counter}")

    def init_backward_hook(self, bagua_module):
        parent = super().init_backward_hook(bagua_module)

        def hook(name, param):
            self.calls.append(f"backward:{name}")
            parent(name, param)

        return hook

    def init_post_backward_hook(self, bagua_module):
        parent = super().init_post_backward_hook(bagua_module)

        def hook():
            self.calls.append("post_backward")
            parent()

        return hook

    def init_post_optimizer_step_hook(self, bagua_module):
        return lambda optimizer: self.calls.append(f"post_step:{type(optimizer).__name__}")


class RecorderAlgorithm(Algorithm):
    name = "recorder"
    Config = RecorderConfig

    def reify(self, process_group):
        return RecorderImpl(process_group, self.config.reset_at_step)


class RecorderPlugin:
    @hookimpl
    def bagua_register_algorithms(self):
        return [RecorderAlgorithm]


def _record(rank: int) -> list[str]:
    pm = get_plugin_manager()
    plugin = RecorderPlugin()
    pm.register(plugin, name="recorder-inline")
    try:
        model = SmallNet(seed=rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model = model.with_bagua([optimizer], {"name": "recorder", "reset_at_step": 2})
        impl = model.bagua_algorithm
        gathered = [torch.empty_like(impl.weights_at_init) for _ in range(2)]
        torch.distributed.all_gather(gathered, impl.weights_at_init)
        assert torch.equal(gathered[0], gathered[1]), "init_tensors must see the broadcast weights"
        for step in range(3):
            x, y = batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        model.eval()
        model(x)  # eval forward: no step, no hooks
        return impl.calls
    finally:
        pm.unregister(plugin)


def test_lifecycle_order() -> None:
    calls = run_workers(_record, 2)[0]
    n_params = 6
    build = ["init_tensors", "tensors_to_buckets", "init_operations"]
    assert calls[:3] == build
    steps: list[list[str]] = []
    for call in calls[3:]:
        if call == "need_reset":
            steps.append([])
        steps[-1].append(call)
    assert len(steps) == 3
    for step, seq in enumerate(steps, start=1):
        prefix = ["need_reset"] + (build if step == 2 else []) + [f"forward_pre:{step}"]
        assert seq[: len(prefix)] == prefix, seq
        rest = seq[len(prefix):]
        backward = [c for c in rest if c.startswith("backward:")]
        assert len(backward) == n_params
        # reverse registration order: the head's gradients are ready first
        assert backward[0].startswith("backward:head") and backward[-1].startswith("backward:fc1")
        last_backward = rest.index(backward[-1])
        # the bucket's ops run once all its tensors are ready (on the communication thread, so possibly
        # after post_backward started waiting), and always before the optimizer step
        assert last_backward < rest.index("bucket_op") < rest.index("post_step:SGD")
        assert last_backward < rest.index("post_backward")
        assert rest[-1] == "post_step:SGD" and rest.count("bucket_op") == 1


# --- the core's warmup: gradient allreduce while the impl says so, then the impl's own hooks ------------------------

class WarmingConfig(AlgorithmConfig):
    name: Literal["warming"] = "warming"
    warmup_steps: int = 2


class WarmingImpl(AlgorithmImpl):
    """Communicates nothing of its own (its op only records); the core's warmup averages the gradients before."""

    def __init__(self, process_group, config) -> None:
        super().__init__(process_group, config)
        self.calls: list[str] = []

    def warming_up(self, bagua_module) -> bool:
        self.calls.append(f"warming_up:{bagua_module.bagua_train_step_counter}")
        return bagua_module.bagua_train_step_counter <= self.config.warmup_steps

    def init_tensors(self, bagua_module):
        self.calls.append("init_tensors")
        return super().init_tensors(bagua_module)

    def init_operations(self, bagua_module, bucket):
        bucket.clear_ops()
        bucket.append_op(lambda bucket: self.calls.append("own_op"))

    def init_forward_pre_hook(self, bagua_module):
        return lambda inputs: self.calls.append(f"forward_pre:{bagua_module.bagua_train_step_counter}")

    def state_dict(self):
        return {"calls": len(self.calls)}


class WarmingAlgorithm(Algorithm):
    name = "warming"
    Config = WarmingConfig
    Impl = WarmingImpl


class WarmingPlugin:
    @hookimpl
    def bagua_register_algorithms(self):
        return [WarmingAlgorithm]


def _warm(rank: int) -> tuple[list[str], list[bool]]:
    pm = get_plugin_manager()
    plugin = WarmingPlugin()
    pm.register(plugin, name="warming-inline")
    try:
        model = SmallNet(seed=rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model = model.with_bagua([optimizer], {"name": "warming", "warmup_steps": 2})
        impl = model.bagua_algorithm
        averaged = []
        for step in range(4):
            x, y = batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            grad = model.fc1.weight.grad.clone()
            gathered = [torch.empty_like(grad) for _ in range(2)]
            torch.distributed.all_gather(gathered, grad)
            averaged.append(torch.equal(gathered[0], gathered[1]))
            optimizer.step()
            assert model.bagua_algorithm is impl and impl.state_dict()["calls"] == len(impl.calls)
        return impl.calls, averaged
    finally:
        pm.unregister(plugin)


def test_warmup_is_the_cores_gradient_allreduce_then_the_impls_own_hooks() -> None:
    calls, averaged = run_workers(_warm, 2)[0]
    # the wrap and steps 1-2 warm up: the impl is asked, its hooks are not built nor run; step 3 switches
    assert calls[:3] == ["warming_up:0", "warming_up:1", "warming_up:2"]
    assert calls[3:] == ["warming_up:3", "warming_up:3", "init_tensors", "forward_pre:3", "own_op",
                         "warming_up:4", "forward_pre:4", "own_op"]
    assert averaged == [True, True, False, False]  # the warmup's allreduce averaged the gradients
