"""The hooks' module parameter answers to ``bagua_module`` (the original's API, the name written here) and
``bagua_ddp`` (the original's 0.9 API pages) on the original's classes (``bagua.torch_api.algorithms``: its base
class, its built-ins under their original names, a subclass written with either name): keyword calls with either
name run the same hook. This project's own impls (the core's ``AlgorithmImpl`` and every installed algorithm's) are
not adapted: ``inspect`` and a stack trace show their methods as written, with ``bagua_module``."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F

from bagua_core.lifecycle.proxies import name_of

from bagua.torch_api.algorithms import AlgorithmImpl as OriginalAlgorithmImpl
from bagua.torch_api.algorithms.base import OriginalImpl
from bagua.torch_api.algorithms.hook_parameters import HOOKS_TAKING_THE_MODULE, MODULE_PARAMETER_NAMES
from bagua_core.lifecycle.algorithm import AlgorithmImpl
from bagua_core.plugins import algorithm_registry
from tests.distributed import run_workers
from tests.models import SmallNet, batch


def _impl_classes() -> list[type]:
    for name in algorithm_registry.names():
        algorithm_registry.get(name)  # imports every installed algorithm's module
    found, todo = [], [AlgorithmImpl]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_this_projects_impls_are_written_with_bagua_module_and_the_originals_accept_both() -> None:
    import bagua.torch_api.algorithms  # noqa: F401 (the original's classes, as subclasses to walk)

    written = adapted = 0
    for cls in _impl_classes():
        for hook in HOOKS_TAKING_THE_MODULE:
            method = getattr(cls, hook, None)
            if method is None:
                continue
            names = list(inspect.signature(method).parameters)
            if issubclass(cls, OriginalImpl):
                if names[1] in MODULE_PARAMETER_NAMES:
                    assert set(method.bagua_module_parameter_names) == set(MODULE_PARAMETER_NAMES), (cls, hook)
                    adapted += 1
                continue
            assert not hasattr(method, "bagua_module_parameter_names") and inspect.unwrap(method) is method, \
                f"{cls.__qualname__}.{hook} is wrapped: this project's impls are what they write"
            if cls.__module__.startswith(("bagua_core", "bagua_algorithms", "bagua_contrib", "bagua_local_sgd")):
                assert names[1] == "bagua_module", f"{cls.__qualname__}.{hook}({names[1]}, ...)"
                written += 1
    assert written > 40 and adapted > 40  # the base class's hooks and every built-in's overrides, both ways


class _WrittenFromThe09Pages(OriginalAlgorithmImpl):
    def init_post_backward_hook(self, bagua_ddp):
        return lambda: ("0.9", bagua_ddp)

    def abort(self, bagua_ddp):
        return ("abort", bagua_ddp)


def test_a_subclass_with_either_name_takes_keyword_calls_with_either() -> None:
    impl = _WrittenFromThe09Pages.__new__(_WrittenFromThe09Pages)
    module = object()
    assert impl.init_post_backward_hook(bagua_module=module)() == ("0.9", module)
    assert impl.init_post_backward_hook(bagua_ddp=module)() == ("0.9", module)
    assert impl.abort(module) == impl.abort(bagua_module=module) == ("abort", module)
    assert list(inspect.signature(_WrittenFromThe09Pages.abort).parameters) == ["self", "bagua_ddp"]
    with pytest.raises(TypeError, match="got the module twice"):
        impl.abort(module, bagua_module=module)
    with pytest.raises(TypeError, match="got the module twice"):
        impl.abort(bagua_ddp=module, bagua_module=module)


def _keyword_calls(rank: int) -> dict:
    from bagua.torch_api.algorithms.async_model_average import AsyncModelAverageAlgorithm
    from bagua.torch_api.algorithms.bytegrad import ByteGradAlgorithm
    from bagua.torch_api.algorithms.decentralized import DecentralizedAlgorithm, LowPrecisionDecentralizedAlgorithm
    from bagua.torch_api.algorithms.gradient_allreduce import GradientAllReduceAlgorithm

    out = {}
    originals = {"gradient_allreduce": GradientAllReduceAlgorithm(), "bytegrad": ByteGradAlgorithm(),
                 "decentralized": DecentralizedAlgorithm(),
                 "low_precision_decentralized": LowPrecisionDecentralizedAlgorithm(),
                 "async": AsyncModelAverageAlgorithm(sync_interval_ms=10)}
    for name, algorithm in originals.items():
        model = SmallNet(seed=0)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model = model.with_bagua([optimizer], algorithm)
        impl = model.bagua_algorithm
        assert isinstance(impl, OriginalImpl), type(impl)
        tensors = impl.init_tensors(bagua_ddp=model)
        again = impl.init_tensors(bagua_module=model)
        assert [name_of(t) for t in tensors] == [name_of(t) for t in again]
        model.bagua_reset()  # init_tensors may rebind the impl's own tensor list: rebuild the buckets around it
        warming = impl.warming_up(bagua_ddp=model)
        assert warming == impl.warming_up(bagua_module=model) == (name == "async")  # async: from the wrap on
        for bucket in model.bagua_buckets if not warming else ():  # (the warmup's buckets are the core's)
            impl.init_operations(bagua_ddp=model, bucket=bucket)  # the ops these calls append are those training runs
            impl.init_operations(bagua_module=model, bucket=bucket)
        for step in range(2):
            x, y = batch(rank, step)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        if name == "async":
            impl.abort(bagua_ddp=model)
            impl.resume(bagua_module=model)
            impl.abort(bagua_module=model)
        out[name] = torch.isfinite(torch.cat([p.detach().reshape(-1) for p in model.parameters()])).all().item()
        model.bagua_shutdown()
    return out


def test_keyword_calls_with_either_name_on_the_originals_built_ins() -> None:
    for out in run_workers(_keyword_calls, 2, timeout=180):
        assert out == {name: True for name in out} and len(out) == 5
