"""Fault-tolerant mode, the parts that need no replicas: options, declarations, the joiner check, the step
copy, the quorum sampler, the managed group's error handling, the CLI's arguments; and, with one replica,
the refusal of an algorithm that declares no fault tolerance (the fault matrix is in
test_fault_tolerant_matrix.py)."""

from __future__ import annotations

import types

import pytest
import torch
import torch.distributed as dist

from bagua_core.lifecycle.capabilities import FaultTolerance
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.fault_tolerance import FaultTolerantOptions, QuorumSampler, resolve_options
from bagua_core.fault_tolerance import state as ft_state
from bagua_core.plugins import algorithm_registry

DECLARED = {"gradient_allreduce", "bytegrad", "powersgd", "qadam", "diloco", "decentralized"}


def test_capability_rejects_unknown_parts() -> None:
    with pytest.raises(BaguaConfigError, match="heals may hold"):
        FaultTolerance(heals=("weights", "gossip"))
    with pytest.raises(BaguaConfigError, match="commit must be"):
        FaultTolerance(commit="whenever")  # type: ignore[arg-type]


def test_declarations() -> None:
    for name in algorithm_registry.names():
        if not algorithm_registry.get(name).__module__.startswith("bagua_algorithms"):
            continue  # a third party's (local_sgd: its source declares it; the fault matrix runs it)
        declared = algorithm_registry.get(name).capabilities.fault_tolerance
        assert (declared is not None) == (name in DECLARED), name
    assert algorithm_registry.get("gradient_allreduce").capabilities.fault_tolerance.commit == "before_optimizer_step"
    assert algorithm_registry.get("powersgd").capabilities.fault_tolerance.commit == "after_step"
    assert "algorithm_state" in algorithm_registry.get("diloco").capabilities.fault_tolerance.heals


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


def test_capture_and_restore_round_trip() -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    impl_state = {"q": torch.ones(2)}
    model.bagua_optimizers = [optimizer]
    model.bagua_train_step_counter = 5
    model.bagua_algorithm = types.SimpleNamespace(state_dict=lambda: impl_state,
                                                  load_state_dict=lambda s: impl_state.update(s))
    saved = ft_state.capture(model, ("weights", "optimizer", "algorithm_state", "step"))
    # weights (6 + 2 floats), momentum (the same) and the impl's 2 floats: what a heal of this state moves
    assert ft_state.tree_bytes(saved) == (8 + 8 + 2) * 4
    before = [p.detach().clone() for p in model.parameters()]
    optimizer.step()  # the step that fails
    impl_state["q"].add_(1)  # captured tensors are copies: this must not leak into `saved`
    model.bagua_train_step_counter = 6
    ft_state.restore(model, saved)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert torch.equal(impl_state["q"], torch.ones(2)) and model.bagua_train_step_counter == 5
    momentum = optimizer.state_dict()["state"][0]["momentum_buffer"]
    assert torch.equal(momentum, saved["optimizer"][0]["state"][0]["momentum_buffer"])


def test_quorum_sampler_follows_the_quorum(monkeypatch) -> None:
    runtime = types.SimpleNamespace(data_epoch=0, data_position=0, rank=0, size=3, ended=0)
    runtime.shard = lambda batch: (runtime.data_position, runtime.rank, runtime.size)
    runtime.end_without_step = lambda: setattr(runtime, "ended", runtime.ended + 1)
    import bagua_core.fault_tolerance.current as current

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


class _FailingInner:
    def __init__(self) -> None:
        self.calls = 0

    def allreduce(self, *args):
        self.calls += 1
        raise RuntimeError("Connection closed by peer")


def test_managed_group_reports_errors_instead_of_raising() -> None:
    from bagua_core.fault_tolerance.managed_group import VIRTUAL_RANK_BASE, ManagedGroup

    started = not dist.is_initialized()
    if started:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        errors: list[Exception] = []
        inner = _FailingInner()
        group = ManagedGroup(inner, 1, 3, "test_quorum", errors.append)
        assert group.ranks == [VIRTUAL_RANK_BASE, dist.get_rank(), VIRTUAL_RANK_BASE + 2]
        group.register()
        try:
            assert dist.get_backend(group) == "gloo"
            assert dist.get_group_rank(group, dist.get_rank()) == 1
            tensor = torch.ones(3)
            dist.all_reduce(tensor, group=group)  # the peer is gone: completes, reported, not raised
            dist.all_reduce(tensor, group=group)  # nothing more runs in this quorum
        finally:
            group.unregister()
        assert len(errors) == 1 and inner.calls == 1 and torch.equal(tensor, torch.ones(3))
        assert group not in dist.distributed_c10d._world.pg_map
    finally:
        if started:
            dist.destroy_process_group()


def test_cli_splits_fault_tolerant_options() -> None:
    from bagua_core.cli.fault_tolerant import split_fault_tolerant_args

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


@pytest.mark.timeout(200, func_only=True)
def test_undeclared_algorithm_and_unsupported_option_are_refused(tmp_path) -> None:
    from tests.fault_tolerant_job import Job

    job = Job(tmp_path)
    try:
        job.start("x", "--algorithm", '{"name": "low_precision_decentralized"}')
        job.start("y", "--algorithm", '{"name": "decentralized", "peer_selection_mode": "shift_one"}')
        assert job.wait_exit("x", 150) != 0
        assert job.wait_exit("y", 150) != 0
        output = job.output("x")
        assert "algorithm 'low_precision_decentralized' cannot run in fault-tolerant mode" in output, output[-3000:]
        assert "Capabilities.fault_tolerance" in output and "gradient_allreduce" in output
        output = job.output("y")
        assert "algorithm 'decentralized' with peer_selection_mode='shift_one' cannot run in fault-tolerant mode: " \
               "its pairs need an even number of replicas" in output, output[-3000:]
    finally:
        job.close()


@pytest.mark.slow
@pytest.mark.timeout(300, func_only=True)
def test_main_job_fault_tolerant(tmp_path) -> None:
    """``bagua train --fault-tolerant --replicas 2``: the main job's shard follows the quorum; both replicas
    commit the same steps, read each sample once per epoch and end with the same weights (same accuracy)."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    summary = tmp_path / "summary.json"
    command = [sys.executable, "-m", "bagua_core.cli", "train", "--fault-tolerant", "--replicas", "2",
               "--lighthouse-port", str(port), "--ft-join-timeout-ms", "1500", "--epochs", "2", "--no-progress",
               "--algorithm", "gradient_allreduce", "--summary-json", str(summary)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "RUST_LOG": "warn"}
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"bagua train --fault-tolerant hung past 240 s: {str(exc.stdout)[-3000:]}") from None
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    lines = [line for line in output.splitlines() if line.startswith("gradient_allreduce on 2 workers")]
    assert len(lines) == 2, output[-3000:]  # each replica's rank 0 prints its summary
    assert lines[0].split("test accuracy")[1].split(",")[0] == lines[1].split("test accuracy")[1].split(",")[0]
    result = json.loads(summary.read_text())
    from bagua_examples.digits import load_digits

    per_epoch = len(load_digits()[1]) // (2 * 32)  # two replicas of one rank, 32 samples each per step
    assert result["fault_tolerance"]["committed"] == 2 * per_epoch, result
    assert result["test_accuracy"] > 0.5, result
