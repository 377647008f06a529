"""Bad options of bytegrad, decentralized, low_precision_decentralized, qadam and async raise a clear
error on every rank (never a hang), in every form: instance, name, dict, config file."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from bagua_algorithms.async_model_average import AsyncModelAverageAlgorithm
from bagua_algorithms.bytegrad import ByteGradAlgorithm
from bagua_algorithms.decentralized import DecentralizedAlgorithm
from bagua_algorithms.low_precision_decentralized import LowPrecisionDecentralizedAlgorithm
from bagua_algorithms.q_adam import QAdamAlgorithm
from bagua_core.runtime.exceptions import BaguaConfigError
from tests.distributed import run_workers
from tests.models import SmallNet

WRAP_CASES = [  # (algorithm given to with_bagua, text the error must contain)
    ({"name": "decentralized", "communication_interval": -1}, "communication_interval must be a positive integer, got -1"),
    ({"name": "decentralized", "peer_selection_mode": "ring"}, "peer_selection_mode"),
    ({"name": "low_precision_decentralized", "communication_interval": 0}, "must be a positive integer, got 0"),
    ({"name": "bytegrad", "average": "maybe"}, "average"),
    ({"name": "async", "sync_interval_ms": 0}, "sync_interval_ms must be a positive integer, got 0"),
    ({"name": "async", "peer_selection_mode": "shift_one"}, "peer_selection_mode"),
    ({"name": "async", "warmup_steps": -3}, "warmup_steps must be a non-negative integer, got -3"),
    ({"name": "async", "weighting": "tokens"}, "weighting"),
    ("qadam", "needs exactly one QAdamOptimizer"),
    ({"name": "qadam", "hierarchical": False, "lr": 0.1}, "lr"),
]


def _wrap_errors(rank: int, config_dir: str) -> list[str]:
    import os

    messages = []
    for algorithm, _ in WRAP_CASES + [(os.path.join(config_dir, "bad.toml"), None)]:
        model = SmallNet(seed=rank)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        try:
            model.with_bagua([optimizer], algorithm)
        except Exception as exc:  # every rank must get here
            messages.append(f"{type(exc).__name__}: {exc}")
        else:
            messages.append("no error")
        dist.barrier()  # the ranks are still in step
    return messages


def test_bad_options_raise_on_every_rank(tmp_path) -> None:
    (tmp_path / "bad.toml").write_text('[algorithm]\nname = "decentralized"\ncommunication_interval = 0\n')
    results = run_workers(_wrap_errors, 3, str(tmp_path), timeout=120)
    expected = [text for _, text in WRAP_CASES] + ["bad.toml"]
    for rank, messages in enumerate(results):
        for message, text in zip(messages, expected):
            assert message != "no error" and text in message, (rank, message, text)


@pytest.mark.parametrize(
    "make,text",
    [
        (lambda: DecentralizedAlgorithm(communication_interval=-1), "communication_interval must be a positive integer"),
        (lambda: DecentralizedAlgorithm(peer_selection_mode="random"), "peer_selection_mode"),
        (lambda: LowPrecisionDecentralizedAlgorithm(communication_interval=1.5), "communication_interval"),
        (lambda: ByteGradAlgorithm(hierarchical="yes please"), "hierarchical"),
        (lambda: AsyncModelAverageAlgorithm(sync_interval_ms=-5), "sync_interval_ms"),
        (lambda: QAdamAlgorithm(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)), "QAdamOptimizer"),
    ],
)
def test_bad_options_in_constructors(make, text) -> None:
    with pytest.raises(BaguaConfigError, match=text):
        make()


@pytest.mark.parametrize(
    "text,cls,options",
    [
        ('name = "bytegrad"\nhierarchical = false\n', ByteGradAlgorithm,
         {"hierarchical": False, "average": True, "compression": "MinMaxUInt8"}),
        ('[algorithm]\nname = "decentralized"\npeer_selection_mode = "shift_one"\ncommunication_interval = 3\n',
         DecentralizedAlgorithm, {"hierarchical": True, "peer_selection_mode": "shift_one", "communication_interval": 3}),
        ('name = "low_precision_decentralized"\ncommunication_interval = 2\n', LowPrecisionDecentralizedAlgorithm,
         {"hierarchical": True, "communication_interval": 2, "compression": "MinMaxUInt8"}),
        ('name = "qadam"\nhierarchical = false\n', QAdamAlgorithm, {"hierarchical": False, "compression": "MinMaxUInt8"}),
        ('name = "async"\nsync_interval_ms = 20\nwarmup_steps = 5\n', AsyncModelAverageAlgorithm,
         {"peer_selection_mode": "all", "sync_interval_ms": 20, "warmup_steps": 5, "weighting": "equal"}),
    ],
)
def test_selected_by_config_file(tmp_path, text: str, cls: type, options: dict) -> None:
    from bagua_algorithms.q_adam import QAdamOptimizer
    from bagua_core.selection.config import resolve_algorithm

    path = tmp_path / "algorithm.toml"
    path.write_text(text)
    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizers = [torch.optim.SGD(params, lr=0.1), QAdamOptimizer(params)]
    algorithm = resolve_algorithm(str(path), optimizers)
    assert type(algorithm) is cls
    assert algorithm.config.model_dump(exclude={"name"}) == options
    if cls is QAdamAlgorithm:
        assert algorithm.optimizer is optimizers[1]
