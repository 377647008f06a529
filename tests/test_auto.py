"""``algorithm="auto"``: candidates from the capabilities, a choice agreed on every rank, a third-party
algorithm taking part (an inline plugin), and the options validated."""

from __future__ import annotations

import time
import types
from typing import Literal

import pytest
import torch

from bagua_core import Algorithm, AlgorithmConfig, BaguaConfigError, Capabilities
from bagua_algorithms.auto import AutoAlgorithm, candidate_names
from bagua_core.lifecycle.module_state import state_of
from bagua_core.selection.config import algorithm_config_of
from bagua_algorithms.auto.link import bandwidth_of, describe_bandwidth, measure_link
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import run_workers, run_workers_outcomes

WARMUP, TRIAL = 1, 4
LOOPBACK_BYTES_PER_S = 50e9
"""More than two processes on one machine can move through gloo over loopback (memory copies, ~10 GB/s)."""


class SleepyConfig(AlgorithmConfig):
    name: Literal["sleepy_allreduce"] = "sleepy_allreduce"


SLEEP_S = 0.3


class SleepyAllReduce(Algorithm):
    """A third-party drop-in: gradient allreduce that sleeps 300 ms per step (it must lose: the other candidates'
    steps took 60 ms on a loaded 2-core machine, when it slept 30 ms and won)."""

    name = "sleepy_allreduce"
    Config = SleepyConfig
    capabilities = Capabilities(keeps_optimizer_semantics=True, tunable_bucket_size=True)

    def reify(self, process_group):
        from bagua_core.plugins import algorithm_registry

        impl = algorithm_registry.get("gradient_allreduce")().reify(process_group)
        post_backward = impl.init_post_backward_hook

        def slow(module):
            hook = post_backward(module)
            return lambda: (time.sleep(SLEEP_S), hook())

        impl.init_post_backward_hook = slow
        return impl


def _register_sleepy() -> None:
    from bagua_core.plugins import get_plugin_manager, hookimpl

    plugin = types.SimpleNamespace(bagua_register_algorithms=hookimpl(lambda: [SleepyAllReduce]))
    get_plugin_manager().register(plugin, name="test_sleepy_plugin")


def _train(rank: int, algorithm, steps: int, register: bool) -> dict:
    if register:
        _register_sleepy()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], algorithm)
    torch.manual_seed(rank + 1)  # different data per rank: equal weights only if gradients are averaged
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(torch.randn(8, 16)), torch.randint(0, 4, (8,))).backward()
        optimizer.step()
    result = {"auto": getattr(model, "bagua_auto_result", None),
              "autotune": getattr(model, "bagua_autotune_result", None), "impl": type(model.bagua_algorithm).__name__,
              "declaration": state_of(model).declaration.name,
              "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()])}
    model.bagua_shutdown()
    return result


def test_third_party_candidate_takes_part_and_every_rank_agrees() -> None:
    algorithm = {"name": "auto", "warmup_steps": WARMUP, "trial_steps": TRIAL}
    steps = WARMUP + 3 * TRIAL + 4  # gradient_allreduce, bytegrad and the plugin's, then 4 steps on the choice
    results = run_workers(_train, 2, algorithm, steps, True, timeout=120)
    first = results[0]["auto"]
    assert first is not None and set(first["step_time_s"]) == {"bytegrad", "gradient_allreduce", "sleepy_allreduce"}
    assert first["step_time_s"]["sleepy_allreduce"] > SLEEP_S and first["algorithm"] != "sleepy_allreduce"
    assert first["decided_at_step"] == WARMUP + 3 * TRIAL + 1
    assert first["latency_s"] > 0 and first["model_bytes"] == (16 * 32 + 32 + 32 * 4 + 4) * 4
    bandwidth = first["bandwidth_bytes_per_s"]  # None: too fast to measure with the buffers tried
    assert bandwidth is None or 0 < bandwidth < LOOPBACK_BYTES_PER_S, first
    for result in results:
        assert result["auto"]["algorithm"] == first["algorithm"] == result["declaration"]
        assert result["impl"] != "AutoImpl"
    assert torch.equal(results[0]["params"], results[1]["params"])


def test_autotune_tunes_the_choice_after_it_is_made() -> None:
    env = {"BAGUA_AUTOTUNE": "1", "BAGUA_AUTOTUNE_WARMUP_STEPS": "1", "BAGUA_AUTOTUNE_TRIAL_STEPS": "2",
           "BAGUA_AUTOTUNE_BUCKET_SIZES": "64,1048576"}
    algorithm = {"name": "auto", "warmup_steps": 1, "trial_steps": 2}
    # auto decides at step 6; autotune's tuner of the chosen impl starts there: 1 warmup + 2 x 2 steps
    results = run_workers(_train, 2, algorithm, 13, False, env=env, timeout=120)
    for result in results:
        assert result["auto"]["decided_at_step"] == 6 and result["auto"] == {**results[0]["auto"], **{
            k: result["auto"][k] for k in ("step_time_s", "latency_s", "bandwidth_bytes_per_s")}}
        assert result["autotune"] is not None and result["autotune"]["bucket_size"] in (64, 1048576)
        assert result["autotune"]["bucket_size"] == results[0]["autotune"]["bucket_size"]
    assert torch.equal(results[0]["params"], results[1]["params"])


def test_ranks_with_other_candidates_installed_fail_at_wrap() -> None:
    outcomes = run_workers_outcomes(_train_registered_on_rank_1, 2, timeout=60)
    for outcome in outcomes:  # the candidate lists differ: every rank raises before the first collective
        assert outcome.status == "error" and "sleepy_allreduce" in str(outcome.value), outcome


def _train_registered_on_rank_1(rank: int) -> dict:
    return _train(rank, "auto", 1, rank == 1)


def test_candidates_and_options() -> None:
    assert {"gradient_allreduce", "bytegrad"} <= set(candidate_names())
    assert "qadam" not in candidate_names() and "async" not in candidate_names()
    assert algorithm_config_of("auto").name == "auto"
    config = algorithm_config_of({"name": "auto", "candidates": ["bytegrad"], "trial_steps": 4})
    assert config.candidates == ("bytegrad",)
    assert [d.name for d in AutoAlgorithm(candidates=["bytegrad"]).declarations] == ["bytegrad"]
    with pytest.raises(BaguaConfigError, match="candidates"):
        algorithm_config_of({"name": "auto", "candidates": ["qadam"]})
    with pytest.raises(BaguaConfigError, match="trial_steps"):
        algorithm_config_of({"name": "auto", "trial_steps": 1})


def test_on_one_node_candidates_run_without_hierarchy(monkeypatch) -> None:
    """A candidate whose config defaults to hierarchical=True is tried with hierarchical=False when every
    rank is on one node (torchrun's LOCAL_WORLD_SIZE == WORLD_SIZE before init), with its defaults on
    several nodes."""
    from bagua_core.selection.single_node import defaults_to_hierarchical

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    one_node = AutoAlgorithm()
    hierarchical_by_default = {d.name for d in one_node.declarations if defaults_to_hierarchical(type(d.config))}
    assert "bytegrad" in hierarchical_by_default
    for declaration in one_node.declarations:
        assert getattr(declaration.config, "hierarchical", False) is False, declaration
    assert one_node.overrides == {name: {"hierarchical": False} for name in hierarchical_by_default}
    assert one_node.canonical_options()["candidates"]["bytegrad"]["hierarchical"] is False  # agreed across ranks

    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two nodes of two
    two_nodes = AutoAlgorithm()
    assert two_nodes.overrides == {}
    assert {d.name: d.config.hierarchical for d in two_nodes.declarations if d.name in hierarchical_by_default} == {
        name: True for name in hierarchical_by_default}


def _node_view(rank: int) -> dict:
    from bagua_core.selection.single_node import on_one_node

    auto = AutoAlgorithm(candidates=["bytegrad"])
    return {"one_node": on_one_node(), "bytegrad_hierarchical": auto.declarations[0].config.hierarchical}


def test_single_node_is_the_groups_membership() -> None:
    assert run_workers(_node_view, 2) == [{"one_node": True, "bytegrad_hierarchical": False}] * 2
    assert run_workers(_node_view, 2, local_size=1) == [{"one_node": False, "bytegrad_hierarchical": True}] * 2


def test_a_latency_as_long_as_the_transfer_gives_no_bandwidth() -> None:
    """The issue's case: a 3.1 ms latency measured beside a 3.0 ms transfer of 1 MB once gave
    1e14 B/s (a division by the floor of a negative difference); now it is no figure at all."""
    assert bandwidth_of(1e6, 3.0e-3, 3.1e-3) is None
    assert bandwidth_of(1e6, 3.0e-3, 2.0e-3) is None  # the latency is most of the time: nothing resolved
    assert bandwidth_of(1e6, 10e-3, 1e-3) == pytest.approx(1e6 / 9e-3)
    assert describe_bandwidth({"bandwidth_bytes_per_s": 5.427e8}) == "542.7 MB/s"
    assert describe_bandwidth({"bandwidth_bytes_per_s": None, "measured_bytes": 16 << 20}) == \
        "too fast to measure with 16 MiB"


def _link(rank: int) -> dict:
    return measure_link(get_default_group().get_global_communicator(), large_bytes=64 << 10)


def test_the_link_over_loopback_is_what_loopback_can_do() -> None:
    results = run_workers(_link, 2, timeout=120)
    assert results[0] == results[1]  # the ranks agree on the figures (they decided the buffer sizes together)
    link = results[0]
    assert 0 < link["latency_s"] < 1.0 and link["measured_bytes"] >= 64 << 10, link
    bandwidth = link["bandwidth_bytes_per_s"]
    assert bandwidth is None or 1e6 < bandwidth < LOOPBACK_BYTES_PER_S, link
    assert bandwidth is not None or link["measured_bytes"] == 16 << 20, link  # None only after the largest buffer


def test_a_candidates_warmup_is_the_cores() -> None:
    """auto asks its current candidate whether it warms up, so a candidate with a warmup of its own trains it
    through the core's warmup phase during its trial (as it would alone)."""
    from bagua_algorithms.auto.chooser import AutoImpl

    impl = object.__new__(AutoImpl)  # only the candidate matters here
    impl.current = types.SimpleNamespace(warming_up=lambda module: module == "warming")
    assert impl.warming_up("warming") and not impl.warming_up("trained")


def test_auto_forwards_every_hook_of_the_contract_by_construction() -> None:
    """Every public method of ``AlgorithmImpl`` (the contract) is forwarded to the current candidate, without one
    written by hand: a hook added to the contract is forwarded too (planted here on a subclass's contract)."""
    import inspect

    from bagua_algorithms.auto.chooser import AutoImpl
    from bagua_algorithms.auto.delegation import CONTRACT_HOOKS, DelegatingImpl, forwarded
    from bagua_core.api import AlgorithmImpl

    public = [n for n, v in vars(AlgorithmImpl).items() if inspect.isfunction(v) and not n.startswith("_")]
    assert list(CONTRACT_HOOKS) == public and len(public) >= 22

    class Recording:
        def __getattr__(self, name):
            return lambda *args, **kwargs: (name, args, kwargs)

    impl = DelegatingImpl.__new__(DelegatingImpl)
    impl.current = Recording()
    for name in public:
        assert getattr(impl, name)("m", key=1) == (name, ("m",), {"key": 1}), name
        assert inspect.signature(getattr(DelegatingImpl, name)) == inspect.signature(getattr(AlgorithmImpl, name))
    own = {"need_reset", "init_tensors", "state_dict", "load_state_dict"}  # what auto does itself
    assert {n for n in public if n in vars(AutoImpl)} == own
    assert issubclass(AutoImpl, DelegatingImpl) and forwarded("quiesce").__name__ == "quiesce"

    import importlib

    from bagua_algorithms.auto import delegation

    AlgorithmImpl.a_new_hook = lambda self, bagua_module: "the contract's default"  # a hook added to the contract
    try:
        cls = importlib.reload(delegation).DelegatingImpl
        grown = cls.__new__(cls)
        grown.current = Recording()
        assert grown.a_new_hook("m") == ("a_new_hook", ("m",), {})
    finally:
        del AlgorithmImpl.a_new_hook
        importlib.reload(delegation)
