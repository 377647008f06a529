"""Fault-tolerant mode, the parts that need no replicas: options, declarations, the joiner check, the step
copy, the quorum sampler, the managed group's error handling, the CLI's arguments, the refusal of an algorithm that declares no
fault tolerance or an unsupported option (the fault matrix is in test_fault_tolerant_matrix.py)."""

from __future__ import annotations

import types

import pytest
import torch
import torch.distributed as dist

from bagua_core.lifecycle.capabilities import FaultTolerance
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_features.fault_tolerance import FaultTolerantOptions, QuorumSampler, resolve_options
from bagua_features.fault_tolerance import state as ft_state
from bagua_core.plugins import algorithm_registry

DECLARED = {"gradient_allreduce", "bytegrad", "powersgd", "qadam", "diloco", "sparseloco", "decentralized",
            "low_precision_decentralized", "decentralized_dp", "async", "auto"}


def test_capability_rejects_unknown_parts() -> None:
    with pytest.raises(BaguaConfigError, match="heals may hold"):
        FaultTolerance(heals=("weights", "gossip"))
    with pytest.raises(BaguaConfigError, match="commit must be"):
        FaultTolerance(commit="whenever")  # type: ignore[arg-type]
    assert FaultTolerance(commit="at_round").commit == "at_round"


def test_declarations() -> None:
    for name in algorithm_registry.names():
        if not algorithm_registry.get(name).__module__.startswith("bagua_algorithms"):
            continue  # a third party's (local_sgd: its source declares it; the fault matrix runs it)
        declared = algorithm_registry.get(name).capabilities.fault_tolerance
        assert (declared is not None) == (name in DECLARED), name
    assert algorithm_registry.get("gradient_allreduce").capabilities.fault_tolerance.commit == "before_optimizer_step"
    assert algorithm_registry.get("powersgd").capabilities.fault_tolerance.commit == "after_step"
    assert "algorithm_state" in algorithm_registry.get("diloco").capabilities.fault_tolerance.heals
    for name in ("diloco", "sparseloco"):  # round-based: a transaction per round
        assert algorithm_registry.get(name).capabilities.fault_tolerance.commit == "at_round"


def test_options_from_env_and_errors(monkeypatch) -> None:
    env = {"BAGUA_FAULT_TOLERANT": "1", "TORCHFT_LIGHTHOUSE": "http://h:1", "BAGUA_FT_MIN_REPLICAS": "2",
           "BAGUA_FT_TIMEOUT_S": "7.5"}
    options = FaultTolerantOptions.from_env(env, hang_timeout_s=9)
    assert (options.lighthouse, options.min_replicas, options.timeout_s, options.hang_timeout_s) == \
        ("http://h:1", 2, 7.5, 9)
    with pytest.raises(BaguaConfigError, match="BAGUA_FT_TIMEOUT_S='soon'"):
        FaultTolerantOptions.from_env({**env, "BAGUA_FT_TIMEOUT_S": "soon"})
    with pytest.raises(BaguaConfigError, match="needs a lighthouse"):
        FaultTolerantOptions.from_env({})
    with pytest.raises(BaguaConfigError, match="min_replicas must be a positive integer"):
        FaultTolerantOptions.from_env(env, min_replicas=0)
    with pytest.raises(BaguaConfigError, match="unknown fault-tolerant option"):
        FaultTolerantOptions.from_env(env, min_replica=2)
    monkeypatch.delenv("BAGUA_FAULT_TOLERANT", raising=False)
    assert resolve_options(None) is None  # fail-fast stays the default
    assert resolve_options(False) is None
    with pytest.raises(BaguaConfigError, match="takes None, a bool"):
        resolve_options("yes")


def test_joiner_check_names_the_field() -> None:
    quorum = {"algorithm": "bytegrad", "options": {"average": True, "compression": "MinMaxUInt8"},
              "model": {"0.weight": {"shape": [4, 8], "dtype": "torch.float32"}}, "optimizers": []}
    ft_state.check_joiner(quorum, dict(quorum))
    with pytest.raises(BaguaConfigError, match=r"options\.compression differs: quorum 'MinMaxUInt8', this replica "
                                               r"'MinMaxUInt4'"):
        ft_state.check_joiner({**quorum, "options": {"average": True, "compression": "MinMaxUInt4"}}, quorum)
    with pytest.raises(BaguaConfigError, match=r"model\.0\.weight\.shape differs: quorum \[4, 8\], this replica \[5, 8\]"):
        ft_state.check_joiner({**quorum, "model": {"0.weight": {"shape": [5, 8], "dtype": "torch.float32"}}}, quorum)
    with pytest.raises(BaguaConfigError, match=r"model\.1\.bias differs: quorum '\(absent\)'"):
        ft_state.check_joiner({**quorum, "model": {**quorum["model"], "1.bias": {"shape": [2], "dtype": "x"}}}, quorum)
    with pytest.raises(BaguaConfigError, match="algorithm differs"):
        ft_state.check_joiner({**quorum, "algorithm": "gradient_allreduce"}, quorum)


def _as_wrapped(model: torch.nn.Module, optimizer: torch.optim.Optimizer, impl: object, step: int) -> None:
    """Give ``model`` the module state a wrap would (the parts capture and restore read), without a wrap."""
    from bagua_core.lifecycle.capabilities import Capabilities
    from bagua_core.lifecycle.module_state import ModuleState
    from bagua_core.lifecycle.state import set_state
    from bagua_core.module.bagua_module import wrapped_class

    declaration = types.SimpleNamespace(name="probe", canonical_options=lambda: {})
    set_state(model, ModuleState(declaration, impl, Capabilities(), None, [optimizer], "probe", True,  # type: ignore
                                 train_step_counter=step))
    model.__class__ = wrapped_class(type(model))  # (what with_bagua does: the module's own class, and BaguaModule)


def test_a_discarded_steps_cause_is_one_line_without_gloos_advice() -> None:
    from bagua_features.fault_tolerance.runtime import _one_line

    crash = RuntimeError("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
                         "peer [127.0.0.1]:5545. This is typically caused by a remote worker crashing. Check the logs "
                         "of the remote worker before reporting an error. GLHF! \U0001F3D6\ufe0f")
    assert _one_line(crash) == "Connection closed by peer [127.0.0.1]:5545."
    assert _one_line(RuntimeError("Read error [127.0.0.1]:3717: Connection reset by peer")) == \
        "Read error [127.0.0.1]:3717: Connection reset by peer"


def test_capture_and_restore_round_trip() -> None:
    from bagua_core.lifecycle.module_state import state_of

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    impl_state = {"q": torch.ones(2)}
    _as_wrapped(model, optimizer, types.SimpleNamespace(state_dict=lambda: impl_state,
                                                         load_state_dict=lambda s: impl_state.update(s)), 5)
    saved = ft_state.capture(model, ("weights", "optimizer", "algorithm_state", "step"))
    # weights (6 + 2 floats), momentum (the same) and the impl's 2 floats: what a heal of this state moves
    assert ft_state.tree_bytes(saved) == (8 + 8 + 2) * 4
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()  # the step that fails
    impl_state["q"].add_(1)  # captured tensors are copies: this must not leak into `saved`
    state_of(model).train_step_counter = 6
    ft_state.restore(model, saved)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(impl_state["q"], torch.ones(2)) and model.bagua_train_step_counter == 5
    momentum = optimizer.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, saved["optimizer"][0]["state"][0]["momentum_buffer"])


def test_a_heal_leaves_the_per_replica_state_out() -> None:
    """``FaultTolerance.per_replica_state``: the copy a joiner heals from holds the algorithm's state without those
    keys (the joiner keeps its own, fresh ones); the step's copy holds them."""
    model = torch.nn.Linear(3, 2)
    _as_wrapped(model, torch.optim.SGD(model.parameters(), lr=0.1),
                types.SimpleNamespace(state_dict=lambda: {"residuals": [torch.ones(3)], "starts": [torch.zeros(3)]}), 1)
    healing = ft_state.capture(model, ("algorithm_state",), per_replica=("residuals",))
    assert list(healing["algorithm_state"]) == ["starts"]
    assert list(ft_state.capture(model, ("algorithm_state",))["algorithm_state"]) == ["residuals", "starts"]
    assert algorithm_registry.get("diloco").capabilities.fault_tolerance.per_replica_state == ("residuals", "round_samples")


def test_capture_copies_a_tensor_reached_twice_once() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # an algorithm's state holding the parameters (as diloco's local copy), and fresh scalars of equal shape
    _as_wrapped(model, optimizer, types.SimpleNamespace(state_dict=lambda: {
        "local": [p.detach() for p in model.parameters()], "a": torch.tensor(1.0), "b": torch.tensor(2.0)}), 1)
    saved = ft_state.capture(model, ("weights", "optimizer", "algorithm_state", "step"))
    assert saved["algorithm_state"]["local"][0] is saved["weights"]["weight"]
    assert saved["weights"]["weight"].data_ptr() != model.weight.data_ptr()
    assert (float(saved["algorithm_state"]["a"]), float(saved["algorithm_state"]["b"])) == (1.0, 2.0)


def test_quorum_sampler_follows_the_quorum(monkeypatch) -> None:
    runtime = types.SimpleNamespace(data_epoch=0, data_position=0, rank=0, size=3, ended=0)
    runtime.shard = lambda batch: (runtime.data_position, runtime.rank, runtime.size)
    runtime.end_without_step = lambda: setattr(runtime, "ended", runtime.ended + 1)
    import bagua_features.fault_tolerance.current as current

    monkeypatch.setattr(current, "_runtime", runtime)
    sampler = QuorumSampler(20, batch_size=2, seed=3)
    seen = []
    for rank in range(3):  # one step of a quorum of 3: disjoint slices
        runtime.rank = rank
        seen += sampler.next_indices(None).tolist()
    runtime.data_position += 6  # committed
    runtime.size, runtime.rank = 2, 1  # a replica left: the next step's shards come from a quorum of 2
    seen += sampler.next_indices(None).tolist()
    runtime.rank = 0
    seen += sampler.next_indices(None).tolist()
    assert sorted(seen) == sorted(set(seen)) and len(seen) == 10
    assert seen[6:10] == sampler.order(0)[8:10].tolist() + sampler.order(0)[6:8].tolist()
    runtime.data_position = 18  # 2 samples left: too few for a step of 2 replicas of 2
    assert sampler.next_indices(None) is None
    assert (sampler.epoch, runtime.data_position, runtime.ended) == (1, 0, 1)  # every replica moves on alike
    assert not torch.equal(sampler.order(1), sampler.order(0))


def test_auto_in_fault_tolerant_mode_chooses_among_fault_tolerant_candidates(monkeypatch) -> None:
    """Its policy is its candidates' (both commit before the optimizer step) plus the choice it heals; every
    replica is a node (no single-node variants); a candidate declaring no fault tolerance is left out, and
    refused when named."""
    import dataclasses

    from bagua_algorithms.auto import AutoAlgorithm
    from bagua_core.plugins import algorithm_registry
    from bagua_core.runtime.membership import Membership

    changing = Membership(changes=True, commit="quorum")  # what a fault-tolerant replica's group says
    auto = AutoAlgorithm(candidates=["bytegrad", "gradient_allreduce"])
    plan = auto.plan(changing)
    assert [d.name for d in plan.declarations] == ["bytegrad", "gradient_allreduce"]
    assert plan.fault_tolerance.commit == "before_optimizer_step"
    assert plan.fault_tolerance.heals == ("weights", "optimizer", "algorithm_state", "step")
    assert plan.overrides == {}
    allreduce = algorithm_registry.get("gradient_allreduce")
    monkeypatch.setattr(allreduce, "capabilities", dataclasses.replace(allreduce.capabilities, fault_tolerance=None))
    assert [d.name for d in AutoAlgorithm().plan(changing).declarations] == ["bytegrad"]
    assert "gradient_allreduce" in [d.name for d in AutoAlgorithm().declarations]  # a fixed membership keeps it
    with pytest.raises(BaguaConfigError, match=r"candidate\(s\) \['gradient_allreduce'\] cannot run in fault-tolerant"):
        AutoAlgorithm(candidates=["bytegrad", "gradient_allreduce"]).plan(changing)


def _stub_runtime(model: torch.nn.Module, commit: str, manager: types.SimpleNamespace, batch_samples: int,
                  readers: tuple[int, int], replicas: int = 1):
    """A ``FaultTolerantRuntime`` without torchft: ``manager`` stands for its ``Manager``, a quorum (id 7) of
    ``replicas`` is configured, and the transaction's fields are those of a fresh runtime."""
    from bagua_features.fault_tolerance.runtime import FaultTolerantRuntime

    runtime = FaultTolerantRuntime.__new__(FaultTolerantRuntime)
    runtime.options = types.SimpleNamespace(replica_id="r", timeout_s=4.0)
    runtime.ft_group = types.SimpleNamespace(quorum_id=7)
    runtime.manager = manager
    runtime.quorum_id, runtime.module, runtime.policy = 7, model, FaultTolerance(commit=commit)
    runtime.group = types.SimpleNamespace(managed_groups=[], world_size=replicas,
                                          managed=types.SimpleNamespace(size=lambda: replicas))
    runtime.stats = {"committed": 0, "discarded": 0, "first_commit_s": 1.0, "healed": 0, "heal_s": 0.0}
    runtime.data_position, runtime.data_epoch, runtime._batch_samples, runtime.step_open = 0, 0, batch_samples, False
    runtime._readers, runtime.round_open, runtime._healed_round_start = readers, False, None
    runtime._held_quorum, runtime._joined_in_step, runtime._agreed_position = False, False, None
    runtime.faults, runtime._fault, runtime._last_commit = [], None, None
    return runtime


def test_runtime_quiesces_before_the_quorum_and_the_commit_decision() -> None:
    """``AlgorithmImpl.quiesce`` runs before the quorum is joined (which may reconfigure the group) and before
    ``should_commit``; its exception is reported as the step's failure, not raised."""

    calls: list[str] = []
    failing = [False]

    def quiesce(module) -> None:
        calls.append("quiesce")
        if failing[0]:
            raise RuntimeError("round failed")

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    _as_wrapped(model, optimizer, types.SimpleNamespace(state_dict=lambda: {}, load_state_dict=lambda s: None,
                                                         quiesce=quiesce), 1)
    runtime = _stub_runtime(model, "after_step", types.SimpleNamespace(
        start_quorum=lambda: calls.append("quorum"), errored=lambda: None,
        should_commit=lambda timeout=None: calls.append("commit") or "error" not in calls[-2],
        report_error=lambda exc: calls.append(f"error {exc}")), 0, (0, 1))
    for fail in (False, True):
        failing[0], calls[:] = fail, []
        runtime.begin_step(model)
        model(torch.randn(2, 3)).sum().backward()
        runtime._step(optimizer, optimizer.step, (), {})
        assert calls == ["quiesce", "quorum", "quiesce", "commit"] if not fail else \
            ["quiesce", "error round failed", "quorum", "quiesce", "error round failed", "commit"], calls
    assert runtime.stats["committed"] == 1 and runtime.stats["discarded"] == 1


def test_a_round_is_one_transaction(monkeypatch) -> None:
    """``commit="at_round"``: the copy is taken before a round's first step only, the quorum joined before the step
    ``round_syncs`` names (the one whose end exchanges) and before a first step without a quorum, the commit decided
    after the step at which ``round_ends`` says the round ended; the other steps ask nothing (and say they stand);
    a round during which a step failed is restored on its last step to the copy taken before its first: weights,
    step counter and data position; the next round then joins a quorum at its first step."""

    calls: list[str] = []
    errors: list[Exception] = []
    steps_per_round = 3
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    asked, begun = [0], [0]

    def round_ends(module) -> bool:
        calls.append("round_ends")
        asked[0] += 1
        return asked[0] % steps_per_round == 0

    def round_syncs(module) -> bool:  # the round's last step exchanges
        calls.append("round_syncs")
        begun[0] += 1
        return begun[0] % steps_per_round == 0

    _as_wrapped(model, optimizer, types.SimpleNamespace(state_dict=lambda: {}, load_state_dict=lambda s: None,
                                                         quiesce=lambda module: None, round_ends=round_ends,
                                                         round_syncs=round_syncs), 0)
    capture = ft_state.capture
    monkeypatch.setattr(ft_state, "capture", lambda *a, **k: calls.append("copy") or capture(*a, **k))
    runtime = _stub_runtime(model, "at_round", types.SimpleNamespace(
        start_quorum=lambda: calls.append("quorum"), errored=lambda: errors[0] if errors else None,
        should_commit=lambda timeout=None: calls.append("commit") or not errors, report_error=errors.append), 4, (0, 2))
    from bagua_core.lifecycle.module_state import state_of

    def step() -> tuple[bool, bool]:
        runtime.begin_step(model)
        model(torch.randn(2, 3)).sum().backward()
        state_of(model).stepped.clear()
        runtime._step(optimizer, optimizer.step, (), {})
        state_of(model).train_step_counter += 1  # (the core's step hook counts it)
        return runtime.decision, runtime.closed_transaction

    for index in range(steps_per_round):  # a round that commits
        assert step() == (True, index == steps_per_round - 1)
    assert calls == ["round_syncs", "copy", "round_ends", "round_syncs", "round_ends", "round_syncs", "quorum",
                     "round_ends", "commit"], calls  # (the stub's quorum_id is the group's: no quorum at the start)
    assert runtime.stats["committed"] == 1 and runtime.data_position == 3 * 4 * 2
    committed = [p.detach().clone() for p in model.parameters()]
    calls[:] = []
    assert step() == (True, False)
    assert calls == ["round_syncs", "copy", "round_ends"], calls
    errors.append(RuntimeError("a peer died"))  # the round's second step fails
    calls[:] = []
    assert step() == (True, False) and calls == ["round_syncs", "round_ends"], calls
    calls[:] = []
    assert step() == (False, True) and calls == ["round_syncs", "quorum", "round_ends", "commit"], calls
    assert all(torch.equal(a, b) for a, b in zip(committed, model.parameters()))
    # (the core's hook counted the failed step after the restore: without it the counter is the round's start)
    assert model.bagua_train_step_counter - 1 == steps_per_round and runtime.data_position == 3 * 4 * 2
    assert runtime.stats["discarded"] == 1 and not runtime.round_open and runtime.quorum_id is None
    calls[:] = []
    errors.clear()
    runtime.ft_group.quorum_id = None  # (the stub's group: no new quorum to configure)
    step()
    assert calls == ["round_syncs", "quorum", "copy", "round_ends"], calls  # a quorum at the next round's start


def test_a_round_commits_the_quorums_furthest_position_and_a_quorum_for_a_step_not_taken_stands(monkeypatch) -> None:
    """``commit="at_round"`` with rounds whose steps differ between replicas (rounds bounded in time): the quorum
    joined before a round's last step that is then not taken (the epoch ended there: ``end_without_step``) stands
    for the next step, which neither asks ``round_syncs`` nor joins another (the other replicas are in that step's
    exchange); the round commits the furthest (epoch, position) of the quorum's readers (a MAX over its group), a
    peer's when it read further, this replica's own when it did."""
    import bagua_features.fault_tolerance.runtime as runtime_module

    calls: list[str] = []
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    begun, asked = [0], [0]

    def round_syncs(module) -> bool:  # a round of 2 steps, the second exchanges
        calls.append("round_syncs")
        begun[0] += 1
        return begun[0] % 2 == 0

    def round_ends(module) -> bool:
        calls.append("round_ends")
        asked[0] += 1
        return asked[0] % 2 == 0

    _as_wrapped(model, optimizer, types.SimpleNamespace(state_dict=lambda: {}, load_state_dict=lambda s: None,
                                                         quiesce=lambda module: None, round_ends=round_ends,
                                                         round_syncs=round_syncs), 0)
    peer = [0]

    def all_reduce(value, op=None, group=None):  # the peer's position: MAX with it
        calls.append("max")
        value.copy_(torch.maximum(value, torch.tensor([peer[0]])))

    monkeypatch.setattr(runtime_module.dist, "all_reduce", all_reduce)
    runtime = _stub_runtime(model, "at_round", types.SimpleNamespace(
        start_quorum=lambda: calls.append("quorum"), errored=lambda: None,
        should_commit=lambda timeout=None: calls.append("commit") or True), 4, (0, 2), replicas=2)
    from bagua_core.lifecycle.module_state import state_of

    def train() -> None:
        model(torch.randn(2, 3)).sum().backward()
        state_of(model).stepped.clear()
        runtime._step(optimizer, optimizer.step, (), {})
        state_of(model).train_step_counter += 1

    runtime.begin_step(model)
    train()
    runtime.begin_step(model)  # the round's last step: its quorum is joined...
    runtime.data_epoch, runtime.data_position = 1, 0  # ...but the epoch ended (QuorumSampler)
    runtime.end_without_step()
    runtime.begin_step(model)  # the quorum stands for the step that takes its place
    peer[0] = 1 * runtime_module._EPOCH_STRIDE + 40  # a faster replica read further into epoch 1
    train()
    assert calls == ["round_syncs", "round_ends", "round_syncs", "quorum", "round_ends", "max", "commit"], calls
    assert (runtime.data_epoch, runtime.data_position) == (1, 40) and runtime.closed_transaction
    calls[:] = []
    peer[0] = 0  # a slower peer: this replica's own position after the round (2 steps of 2 readers x 4 samples)
    for _ in range(2):
        runtime.begin_step(model)
        train()
    assert calls == ["round_syncs", "round_ends", "round_syncs", "quorum", "round_ends", "max", "commit"], calls
    assert (runtime.data_epoch, runtime.data_position) == (1, 40 + 2 * 2 * 4)


def test_a_joiner_healed_inside_a_round_takes_the_rounds_start() -> None:
    """``commit="at_round"``: a healer inside its round sends its copy of the round's start with the state (its
    per-replica state left out), and the joiner keeps it as its own copy, so that a failed round sends it back
    where the others go; a healer at a round's start sends none."""
    from bagua_features.fault_tolerance.runtime import FaultTolerantRuntime

    def replica(step: int) -> tuple[FaultTolerantRuntime, torch.nn.Module]:
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        algorithm = {"residuals": [torch.ones(2)], "starts": [torch.zeros(2)]}
        _as_wrapped(model, optimizer, types.SimpleNamespace(state_dict=lambda: algorithm,
                                                             load_state_dict=algorithm.update), step)
        runtime = FaultTolerantRuntime.__new__(FaultTolerantRuntime)
        runtime.options = types.SimpleNamespace(replica_id="r", timeout_s=4.0)
        runtime.manager = types.SimpleNamespace(current_step=lambda: 3)
        runtime.module, runtime.fingerprint = model, {"algorithm": "probe"}
        runtime.policy = FaultTolerance(commit="at_round", per_replica_state=("residuals",))
        runtime.stats = {"healed": 0, "healed_bytes": 0}
        runtime.data_position, runtime.data_epoch, runtime.round_open, runtime._healed_round_start = 40, 0, False, None
        return runtime, model

    healer, model = replica(8)
    assert "round_start" not in healer._healing_state()  # at a round's start: the state is the round's start
    healer._take_copy(model)  # the round begins (step 8, 40 samples read)
    healer.round_open = True
    state_of_healer = healer._saved
    with torch.no_grad():
        model.weight.add_(1.0)
    healer.data_position = 56
    healing = healer._healing_state()
    start = healing["round_start"]
    assert start["step"] == 8 and start["data_position"] == 40 and list(start["algorithm_state"]) == ["starts"]
    assert torch.equal(start["weights"]["weight"], state_of_healer["weights"]["weight"])
    joiner, joined = replica(0)
    joiner._load_healed(healing)
    assert torch.equal(joined.weight, model.weight) and joiner.data_position == 56
    joiner._take_copy(joined)  # its first step: the copy is the healer's round start
    assert joiner._saved is start and joiner._healed_round_start is None
    ft_state.restore(joined, joiner._saved)  # the round fails: back to the round's start, as the healer
    assert torch.equal(joined.weight, state_of_healer["weights"]["weight"]) and joined.bagua_train_step_counter == 8


class _PeerDiesInWeights:
    """A quorum's gloo group whose peer agrees on the stop flag (1 element), then dies in the weights'
    allreduce after part of it arrived (the buffer holds a partial sum)."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def allreduce(self, tensors, opts):
        self.calls.append(tensors[0].numel())
        if tensors[0].numel() == 1:
            return types.SimpleNamespace(wait=lambda: True, is_completed=lambda: True)
        tensors[0].add_(1000.0)  # garbage that must never reach the weights

        def wait():
            raise RuntimeError("Connection closed by peer")

        return types.SimpleNamespace(wait=wait, is_completed=lambda: False)


def test_async_round_that_fails_applies_nothing() -> None:
    """Fault-tolerant async: a round whose weights' allreduce fails mid-way is dropped (the weights keep their
    value), the failure is reported once, and the end-of-step stop raises it for the runtime."""
    from bagua_algorithms.async_model_average.averager import AsyncModelAverager
    from bagua_features.fault_tolerance.managed_group import ManagedGroup
    from bagua_core.runtime.communication.communicator import BaguaCommunicator

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        errors: list[Exception] = []
        inner = _PeerDiesInWeights()
        group = ManagedGroup(inner, 0, 2, "test_async_quorum", errors.append)
        bucket = types.SimpleNamespace(buffer=torch.ones(4), device=torch.device("cpu"), check_flatten=lambda: True)
        bucket.flattened_tensor = lambda: bucket.buffer.clone()
        averager = AsyncModelAverager([bucket], BaguaCommunicator(group, group.ranks, "test"), 10, step_bound=True)
        averager.start()
        averager._thread.join(10)
        assert not averager.running
        with pytest.raises(RuntimeError, match="nothing of it is applied: Connection closed by peer"):
            averager.stop_for_step(timeout=10)
        assert inner.calls == [1, 4] and len(errors) == 1  # the flag, then the weights (which failed)
        assert torch.equal(bucket.buffer, torch.ones(4))
    finally:
        if started:
            dist.destroy_process_group()


class _FailingInner:
    def __init__(self) -> None:
        self.calls = 0

    def allreduce(self, *args):
        self.calls += 1
        raise RuntimeError("Connection closed by peer")


def test_managed_group_reports_errors_instead_of_raising() -> None:
    from bagua_features.fault_tolerance.managed_group import VIRTUAL_RANK_BASE, ManagedGroup
    from bagua_core.runtime.torch_groups import backend_of

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        errors: list[Exception] = []
        inner = _FailingInner()
        group = ManagedGroup(inner, 1, 3, "test_quorum", errors.append)
        assert group.ranks == [VIRTUAL_RANK_BASE, dist.get_rank(), VIRTUAL_RANK_BASE + 2]  # bagua's bookkeeping
        assert (backend_of(group), group.rank(), group.size()) == ("gloo", 1, 3)  # asked of the group itself
        tensor = torch.ones(3)
        dist.all_reduce(tensor, group=group)  # the peer is gone: completes, reported, not raised
        dist.all_reduce(tensor, group=group)  # nothing more runs in this quorum
        assert len(errors) == 1 and inner.calls == 1 and torch.equal(tensor, torch.ones(3))
        with pytest.raises(ValueError):  # torch's tables never held it
            dist.get_group_rank(group, dist.get_rank())
    finally:
        if started:
            dist.destroy_process_group()


def test_cli_splits_fault_tolerant_options() -> None:
    from bagua_cli.fault_tolerant import split_fault_tolerant_args

    options, rest = split_fault_tolerant_args(["--fault-tolerant", "--replicas", "3", "--max-restarts=2",
                                               "--min-replicas=2", "train.py", "--replicas", "9"])
    assert (options.replicas, options.min_replicas) == (3, 2)
    assert rest == ["--max-restarts=2", "train.py", "--replicas", "9"]  # the script's own arguments stay
    assert split_fault_tolerant_args(["--nnodes=1", "train.py"]) == (None, ["--nnodes=1", "train.py"])
    options, rest = split_fault_tolerant_args(["--fault-tolerant", "--nproc_per_node", "2", "train.py"])
    assert rest == ["--nproc_per_node", "2", "train.py"]  # a replica of two ranks
    with pytest.raises(ValueError, match="--replicas must be >= 0"):
        split_fault_tolerant_args(["--fault-tolerant", "--min-replicas", "0", "train.py"])
    # the lighthouse's timeouts: a short join timeout (the survivors of a kill wait that long), torchft's heartbeat
    assert (options.ft_join_timeout_ms, options.ft_heartbeat_timeout_ms) == (1000, 5000)
    options, rest = split_fault_tolerant_args(["--fault-tolerant", "--ft-heartbeat-timeout-ms", "2000", "train.py"])
    assert options.ft_heartbeat_timeout_ms == 2000 and rest == ["train.py"]


def _attach_error(fault_tolerance: FaultTolerance | None, options: dict) -> str:
    """What ``FaultTolerantRuntime.attach`` raises for a module wrapped with an algorithm declaring
    ``fault_tolerance`` and given ``options`` (the check runs before anything needs a quorum)."""
    from bagua_features.fault_tolerance.runtime import FaultTolerantRuntime
    from bagua_core.lifecycle.capabilities import Capabilities

    runtime = FaultTolerantRuntime.__new__(FaultTolerantRuntime)  # no Manager: attach refuses first
    runtime.module, runtime._hook_handle = None, None
    from bagua_core.lifecycle.module_state import ModuleState
    from bagua_core.lifecycle.state import set_state

    declaration = types.SimpleNamespace(name="ft_probe", canonical_options=lambda: dict(options))
    capabilities = Capabilities(fault_tolerance=fault_tolerance)
    module = types.SimpleNamespace(bagua_capabilities=capabilities)
    set_state(module, ModuleState(declaration, None, capabilities, None, [], "probe", True))  # type: ignore[arg-type]
    with pytest.raises(BaguaConfigError) as info:
        runtime.attach(module, lambda _: None)  # type: ignore[arg-type]
    return str(info.value)


def test_undeclared_algorithm_and_unsupported_option_are_refused() -> None:
    message = _attach_error(None, {})
    assert "algorithm 'ft_probe' cannot run in fault-tolerant mode" in message
    assert "Capabilities.fault_tolerance" in message and "gradient_allreduce" in message and "decentralized" in message
    refusing = FaultTolerance(unsupported=(("mode", "fast", "it cannot follow a change of membership"),))
    message = _attach_error(refusing, {"mode": "fast"})
    assert message == ("algorithm 'ft_probe' with mode='fast' cannot run in fault-tolerant mode: it cannot follow "
                       "a change of membership")


@pytest.mark.slow
@pytest.mark.timeout(300, func_only=True)
def test_main_job_fault_tolerant(tmp_path) -> None:
    """``bagua train --fault-tolerant --replicas 2``: the main job's shard follows the quorum; both replicas
    commit the same steps, read each sample once per epoch and end with the same weights (same accuracy).

    ``--min-replicas 2``: the two replicas must train together from the first step. With 1 (the default)
    the first to reach the lighthouse trains alone until the other starts (the lighthouse waits only for
    replicas that already heartbeat), and on a loaded machine this job's 88 steps (a fraction of a second)
    ended before the second replica's Python had started (a CI run: first commits 1.2 s and 5.3 s, each
    replica alone in one quorum)."""
    import json
    import os
    import subprocess
    import sys

    from tests.distributed import free_port

    port = free_port()
    summary = tmp_path / "summary_{replica}.json"
    command = [sys.executable, "-m", "bagua_cli", "train", "--fault-tolerant", "--replicas", "2",
               "--min-replicas", "2", "--lighthouse-port", str(port), "--ft-join-timeout-ms", "1500", "--epochs", "2",
               "--no-progress",
               "--algorithm", "gradient_allreduce", "--summary-json", str(summary)]
    env = {k: v for k, v in os.environ.items() if k not in ("RUST_LOG", "BAGUA_VERBOSE")}
    env["OMP_NUM_THREADS"] = "1"
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"bagua train --fault-tolerant hung past 240 s: {str(exc.stdout)[-3000:]}") from None
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = [line for line in output.splitlines() if line.startswith("[replica 0] gradient_allreduce on 2 workers")]
    assert len(lines) == 1, output[-3000:]  # one summary for the job: the first replica's rank 0
    assert len([line for line in output.splitlines() if line.startswith("[replica 0] steps (replica 0's view)")]) == 1
    assert done.stdout.splitlines()[-1] == \
        "bagua: fault tolerance: 0 replica failures, 0 restarts, 0 heals; 2 of 2 replicas finished", output
    assert len(output.splitlines()) < 15, output  # torchft's logs at warning level: no INFO lines per step
    results = [json.loads((tmp_path / f"summary_{k}.json").read_text()) for k in (0, 1)]  # each replica's own
    assert results[0]["test_accuracy"] == results[1]["test_accuracy"]  # the same weights
    result = results[0]
    from bagua_examples.digits import load_digits

    per_epoch = len(load_digits()[1]) // (2 * 32)  # two replicas of one rank, 32 samples each per step
    assert result["fault_tolerance"]["committed"] == 2 * per_epoch, result
    assert result["test_accuracy"] > 0.5, result


@pytest.mark.slow
@pytest.mark.timeout(300, func_only=True)
def test_replicas_of_two_ranks_started_together_train_together(tmp_path) -> None:
    """Two replicas of two ranks each at the same step: torchft gives local rank 0 and local rank 1 the
    stores of different primaries, yet the group over all four ranks forms and every step commits with
    both replicas, bit-identical (it never formed before the fix: every step timed out configuring it)."""
    from tests.fault_tolerant_job import Job

    job = Job(tmp_path)
    try:
        job.start("a", ranks=2)
        job.start("b", ranks=2)
        for rank in ("a.0", "a.1", "b.0", "b.1"):
            job.wait_for("committed 3 steps with both replicas",
                         lambda rank=rank: len(job.committed(rank, quorum=2)) >= 3, 150.0, rank)
        mine = {r["step"]: r["hash"] for r in job.committed("a.0", quorum=2)}
        theirs = {r["step"]: r["hash"] for r in job.committed("b.0", quorum=2)}
        common = sorted(set(mine) & set(theirs))
        assert common and all(mine[s] == theirs[s] for s in common), (mine, theirs)
    finally:
        job.close()


def test_a_fault_is_named_by_its_cause_and_its_stall_measured_at_the_next_commit() -> None:
    """The faults a replica records (``ft/stall_s/<kind>`` in TensorBoard): a lost replica names the fault over the
    step it failed, that over a new quorum of as many replicas; the stall runs from the commit before to the next."""
    import time

    model = torch.nn.Linear(3, 2)
    runtime = _stub_runtime(model, "before_optimizer_step", types.SimpleNamespace(current_step=lambda: 12), 4, (0, 1))
    runtime.decision = True
    runtime._close(model)  # a commit: nothing went wrong since the one before (there was none)
    assert runtime.faults == []
    runtime._last_commit -= 2.0  # two seconds ago
    for kind in ("quorum_changed", "replica_lost", "step_failed"):
        runtime._note_fault(kind)
    runtime.decision = True
    runtime._close(model)
    (fault,) = runtime.faults
    assert fault["kind"] == "replica_lost" and fault["step"] == 12 and 2.0 <= fault["stall_s"] < 60, fault
    runtime._note_fault("quorum_changed")
    runtime.decision = True
    runtime._close(model)
    assert [f["kind"] for f in runtime.faults] == ["replica_lost", "quorum_changed"]
