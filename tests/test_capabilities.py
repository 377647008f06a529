"""Every algorithm declares its capabilities (``bagua_core.lifecycle.capabilities``); the core reads them."""

from __future__ import annotations

import dataclasses

import pytest

from bagua.torch_api.algorithms import Algorithm as OriginalAlgorithm
from bagua.torch_api.algorithms import AlgorithmImpl as OriginalAlgorithmImpl
from bagua_core import Algorithm, AlgorithmImpl, BaguaConfigError, Capabilities
from bagua_algorithms.auto import auto_candidate
from bagua_core.lifecycle.capabilities import capabilities_of
from bagua_core.plugins import algorithm_registry

BUILT_IN = ("gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam", "async",
            "decentralized_dp", "powersgd", "diloco", "sparseloco")


@pytest.mark.parametrize("name", BUILT_IN + ("local_sgd",))
def test_every_algorithm_declares_its_own(name: str) -> None:
    cls = algorithm_registry.get(name)
    assert isinstance(cls.__dict__.get("capabilities"), Capabilities), f"{name} declares no capabilities of its own"


def test_declarations_say_what_the_core_needs() -> None:
    caps = {name: algorithm_registry.get(name).capabilities for name in BUILT_IN}
    assert {n for n, c in caps.items() if c.builds_optimizer} == {"qadam"}
    assert {n for n, c in caps.items() if c.background_work} == {"async"}
    assert {n for n, c in caps.items() if c.steps_optimizer_in_backward} == {"decentralized_dp"}
    assert {n for n, c in caps.items() if not c.exact_resume} == {"async"}
    assert {n for n, c in caps.items() if c.tunable_bucket_size} == {"gradient_allreduce", "bytegrad", "qadam"}
    assert {n for n in BUILT_IN if auto_candidate(algorithm_registry.get(n))} == {"gradient_allreduce", "bytegrad"}
    assert {n for n, c in caps.items() if c.weights_differ_across_ranks} == {
        "decentralized", "low_precision_decentralized", "async", "decentralized_dp", "diloco", "sparseloco"}
    assert caps["low_precision_decentralized"].communicates_after_optimizer_step
    assert algorithm_registry.get("local_sgd").capabilities.weights_differ_across_ranks


def test_build_optimizer() -> None:
    import torch

    from bagua_algorithms.q_adam import QAdamOptimizer

    params = [torch.nn.Parameter(torch.zeros(3))]
    optimizer = algorithm_registry.get("qadam").build_optimizer(params, lr=0.01, steps_per_epoch=7)
    assert isinstance(optimizer, QAdamOptimizer) and optimizer.warmup_steps == 14
    with pytest.raises(BaguaConfigError, match="builds no optimizer"):
        algorithm_registry.get("gradient_allreduce").build_optimizer(params)


def test_bad_declaration_is_an_error() -> None:
    with pytest.raises(BaguaConfigError, match="communicates"):
        Capabilities(communicates="gradient")
    with pytest.raises(BaguaConfigError, match="relative_bytes"):
        Capabilities(relative_bytes=-1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Capabilities().exact_resume = False  # type: ignore[misc]


class _Plain(Algorithm):
    name = "plain_for_capabilities"

    def reify(self, process_group):
        return AlgorithmImpl(process_group)


class _Background(_Plain):
    capabilities = Capabilities(background_work=True)


class _OriginalPlain(OriginalAlgorithm):
    """An algorithm written for the original (``bagua.torch_api.algorithms``), declaring no capabilities."""

    name = "original_plain_for_capabilities"

    def reify(self, process_group):
        return OriginalAlgorithmImpl(process_group)


class _LegacyImpl(OriginalAlgorithmImpl):
    weights_differ_across_ranks = True
    exact_resume = False
    supports_autotune = True

    def abort(self, module) -> None: ...

    def resume(self, module) -> None: ...

    def communicates_after_optimizer_step(self, module) -> bool:
        return False


class _CoreImplWithTheOriginalsAttributes(AlgorithmImpl):
    weights_differ_across_ranks = True
    exact_resume = False


def test_impl_level_declarations_still_count_for_the_originals_classes() -> None:
    caps = capabilities_of(_OriginalPlain(), _LegacyImpl(None))
    assert caps == Capabilities(weights_differ_across_ranks=True, exact_resume=False, tunable_bucket_size=True,
                                background_work=True, communicates_after_optimizer_step=True)
    assert capabilities_of(_OriginalPlain(), OriginalAlgorithmImpl(None)) == Capabilities()
    assert capabilities_of(_Plain(), AlgorithmImpl(None)) == Capabilities()
    # this project's classes have one form, the declaration's: the original's attributes mean nothing to the core
    assert capabilities_of(_Plain(), _CoreImplWithTheOriginalsAttributes(None)) == Capabilities()


def test_background_work_needs_abort_and_resume() -> None:
    with pytest.raises(BaguaConfigError, match="abort"):
        capabilities_of(_Background(), AlgorithmImpl(None))
    # a declaring algorithm's declaration is authoritative: its impl's older attributes are not folded in
    assert capabilities_of(_Background(), _LegacyImpl(None)) == Capabilities(background_work=True)
