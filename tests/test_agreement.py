"""Ranks that disagree on what decides their collectives fail together, before the first one, with a
message naming the field and each rank's value (``with_bagua``, the decentralized data-parallel
wrapper, ``bagua run --config`` files that differ between nodes)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from bagua_core.runtime.agreement import describe_differences, format_values
from bagua_core.runtime.exceptions import RankMismatchError
from tests.distributed import run_workers
from tests.models import SmallNet


def test_values_listed_per_rank_and_grouped_beyond_eight() -> None:
    assert format_values([True, False]) == "rank 0 True, rank 1 False"
    assert format_values([None, 3]) == "rank 0 (unset), rank 1 3"
    many = format_values([1] * 5 + [2] + [1] * 4)
    assert many == "ranks 0-4, 6-9 1; ranks 5 2"
    lines = describe_differences([{"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}], [{"from": "x"}, {"from": "y"}])
    assert lines == ["b differs: rank 0 2, rank 1 3", "c differs: rank 0 (unset), rank 1 4", "(from: rank 0 x, rank 1 y)"]
    assert describe_differences([{"a": 1}, {"a": 1}], [{"from": "x"}, {"from": "y"}]) == []


def _qadam(model: torch.nn.Module, warmup: int) -> torch.optim.Optimizer:
    from bagua_algorithms.q_adam import QAdamOptimizer

    return QAdamOptimizer(model.parameters(), warmup_steps=warmup)


# (what differs, {rank: kwargs of the wrap on that rank}, text every rank's error must contain)
CASES: list[tuple[str, dict, str]] = [
    ("do_flatten", {1: {"do_flatten": False}}, "do_flatten differs: rank 0 True, rank 1 False"),
    ("optimizer", {1: {"optimizer": "adam"}}, "optimizers differs: rank 0 torch.optim.sgd.SGD, rank 1 torch.optim.adam.Adam"),
    ("qadam warmup", {0: {"algorithm": "qadam", "optimizer": "qadam5"}, 1: {"algorithm": "qadam", "optimizer": "qadam7"}},
     "algorithm option 'optimizer warmup_steps' differs: rank 0 5, rank 1 7"),
    ("hierarchical", {1: {"algorithm": {"name": "bytegrad", "hierarchical": False}}, 0: {"algorithm": "bytegrad"}},
     "algorithm option 'hierarchical' differs: rank 0 True, rank 1 False"),
]


def _wrap(rank: int, case: dict) -> None:
    model = SmallNet(seed=rank)
    kind = case.get("optimizer", "sgd")
    if kind.startswith("qadam"):
        optimizer = _qadam(model, int(kind[5:]))
    elif kind == "adam":
        optimizer = torch.optim.Adam(model.parameters())
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.with_bagua([optimizer], case.get("algorithm", "gradient_allreduce"), do_flatten=case.get("do_flatten", True))


def _disagreements(rank: int, config_dir: str) -> list[str]:
    messages = []
    for _, per_rank, _ in CASES:
        try:
            _wrap(rank, per_rank.get(rank, {}))
        except RankMismatchError as exc:
            messages.append(str(exc))
        else:
            messages.append("no error")
        dist.barrier()  # the ranks are still in step: nobody waits in a collective of its own
    os.environ["BAGUA_CONFIG_FILE"] = os.path.join(config_dir, f"node{rank}.toml")  # `bagua run --config` per node
    try:
        _wrap(rank, {"algorithm": None})
    except RankMismatchError as exc:
        messages.append(str(exc))
    os.environ["BAGUA_AUTOTUNE"] = "1" if rank == 0 else "0"
    try:
        _wrap(rank, {})
    except RankMismatchError as exc:
        messages.append(str(exc))
    del os.environ["BAGUA_AUTOTUNE"]
    _wrap(rank, {})  # agreeing ranks still wrap
    return messages


def test_with_bagua_disagreements_raise_on_every_rank(tmp_path) -> None:
    (tmp_path / "node0.toml").write_text('[algorithm]\nname = "bytegrad"\naverage = true\n')
    (tmp_path / "node1.toml").write_text('[algorithm]\nname = "bytegrad"\naverage = false\n')
    results = run_workers(_disagreements, 2, str(tmp_path), timeout=90)
    expected = [text for *_, text in CASES] + [
        "algorithm option 'average' differs: rank 0 True, rank 1 False",
        "features differs: rank 0 ['autotune'], rank 1 []",  # BAGUA_AUTOTUNE=1 on rank 0 turns the feature on
    ]
    for rank, messages in enumerate(results):
        assert len(messages) == len(expected), messages
        for message, text in zip(messages, expected):
            assert text in message, (rank, message)
    assert results[0] == results[1]  # the same messages on every rank
    config_message = results[0][len(CASES)]
    assert f"BAGUA_CONFIG_FILE={tmp_path / 'node0.toml'}" in config_message, config_message
    assert f"BAGUA_CONFIG_FILE={tmp_path / 'node1.toml'}" in config_message


def _wrapper_disagreements(rank: int) -> list[str]:
    from bagua_algorithms.decentralized_dp import DecentralizedDataParallel

    def optim_fn(named):
        return torch.optim.SGD([p for _, p in named], lr=0.1)

    messages = []
    for options in ({"grad_clip_norm": 1.0 if rank else 0.0}, {"topology": "ring" if rank else "complete"}):
        with pytest.raises(RankMismatchError) as info:
            DecentralizedDataParallel(SmallNet(), optim_fn, **options)
        messages.append(str(info.value))
    # one rank wraps with the wrapper, the other with with_bagua: the first gathers meet and compare
    model = SmallNet()
    with pytest.raises(RankMismatchError) as info:
        if rank == 0:
            DecentralizedDataParallel(model, optim_fn)
        else:
            model.with_bagua([torch.optim.SGD(model.parameters(), lr=0.1)], "gradient_allreduce")
    messages.append(str(info.value))
    DecentralizedDataParallel(SmallNet(), optim_fn)  # agreeing ranks still wrap
    return messages


def test_decentralized_dp_wrapper_disagreements_raise_on_every_rank() -> None:
    for messages in run_workers(_wrapper_disagreements, 2, timeout=90):
        assert "grad_clip_norm differs: rank 0 0.0, rank 1 1.0" in messages[0]
        assert "topology differs: rank 0 complete, rank 1 ring" in messages[1]
        assert "entry point differs: rank 0 DecentralizedDataParallel, rank 1 with_bagua" in messages[2]


def _lightning_disagreements(rank: int) -> list[str]:
    from types import SimpleNamespace

    from bagua_contrib.lightning import BaguaStrategy

    messages = []
    cases = [({"average": rank == 0}, {}), ({}, {"accumulate_grad_batches": 1 + rank})]
    for options, trainer_settings in cases:
        strategy = BaguaStrategy(algorithm="gradient_allreduce", **options)
        model = SmallNet()
        strategy.model = model
        strategy.optimizers = [torch.optim.SGD(model.parameters(), lr=0.1)]
        trainer = SimpleNamespace(accumulate_grad_batches=1, precision="32-true", gradient_clip_val=None,
                                  gradient_clip_algorithm=None, max_steps=10, max_epochs=None)
        for key, value in trainer_settings.items():
            setattr(trainer, key, value)
        with pytest.raises(RankMismatchError) as info:
            strategy._configure_bagua_model(trainer)  # what BaguaStrategy.setup runs when fitting starts
        messages.append(str(info.value))
    return messages


def test_lightning_strategy_disagreements_raise_on_every_rank() -> None:
    pytest.importorskip("lightning", reason="the `lightning` extra is not installed")
    for messages in run_workers(_lightning_disagreements, 2, timeout=90):
        assert "algorithm option 'average' differs: rank 0 True, rank 1 False" in messages[0]
        assert "Trainer accumulate_grad_batches differs: rank 0 1, rank 1 2" in messages[1]
        assert messages[1].startswith("BaguaStrategy:")
