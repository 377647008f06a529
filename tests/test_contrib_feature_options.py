"""The contrib features' options and refusals: a misspelt option is refused with a guess (where the feature
has options to guess from), in ``with_bagua(features=...)`` and in a config file; what each feature's
``check`` refuses or warns about; the named costs of ``load_balancing_sampler``; ``bagua plugins`` lists the
five."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from bagua_core.runtime.exceptions import BaguaConfigError, UnknownNameError
from bagua_core.selection.features import selection_of
from tests.distributed import run_workers


@pytest.mark.parametrize("features,expected", [
    ({"fused_optimizer": {"do_flaten": True}},
     "do_flaten: Extra inputs are not permitted (unknown field; allowed: check_flatten, do_flatten; did you "
     "mean 'do_flatten'?)"),
    ({"load_balancing_sampler": {"random_levle": 0.5}}, "did you mean 'random_level'?"),
    ({"load_balancing_sampler": {"complexity": "lenn"}},
     "complexity must be one of 'len', 'numel', 'sum' or 'module:function', got 'lenn' (did you mean "
     "'len'?)"),
    ({"load_balancing_sampler": {"random_level": 2}},
     "random_level: Input should be less than or equal to 1"),
    ({"cached_dataset": {"writer_bufer_size": 3}}, "did you mean 'writer_buffer_size'?"),
    ({"cached_dataset": {"writer_buffer_size": 0}},
     "writer_buffer_size: Input should be greater than or equal to 1"),
    # no options: nothing to guess from, the option is named
    ({"sync_batchnorm": {"momentum": 0.1}}, "momentum: Extra inputs are not permitted"),
    ({"moe": {"k": 2}}, "k: Extra inputs are not permitted"),
])
def test_a_bad_option_is_refused_with_a_guess(features: dict[str, Any], expected: str) -> None:
    name = next(iter(features))
    with pytest.raises(BaguaConfigError, match=f"invalid options for feature '{name}'") as info:
        selection_of(features)
    assert expected in str(info.value), str(info.value)


def test_a_config_files_bad_option_is_refused_with_a_guess(tmp_path: Path) -> None:
    from bagua_core.selection.config import validate_config_file

    path = tmp_path / "job.toml"
    path.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.fused_optimizer]\n'
                    'do_flaten = true\n')
    with pytest.raises(BaguaConfigError, match=r"did you mean 'do_flatten'\?"):
        validate_config_file(str(path))
    path.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.load_balancing_sampler]\n'
                    'complexity = "numel"\nrandom_level = 0.2\n\n[features.sync_batchnorm]\n')
    validate_config_file(str(path))


def test_sync_batchnorm_refuses_a_batchnorm_root_and_warns_without_batchnorm(caplog) -> None:
    from bagua_contrib.sync_batchnorm import SyncBatchNormFeature

    feature = SyncBatchNormFeature()
    with pytest.raises(BaguaConfigError, match=r"this model is one \(BatchNorm2d\): convert it by hand, "
                                               r"model = SyncBatchNorm.convert_sync_batchnorm\(model\)"):
        feature.check(torch.nn.BatchNorm2d(3), None)
    with caplog.at_level(logging.WARNING, logger="bagua.contrib"):
        feature.check(torch.nn.Sequential(torch.nn.Linear(2, 2)), None)
        feature.check(torch.nn.Sequential(torch.nn.BatchNorm1d(2)), None)
    assert [r.name for r in caplog.records] == ["bagua.contrib"]
    assert "Sequential has no BatchNorm layer to convert" in caplog.records[0].getMessage()


def test_moe_warns_without_a_moe_layer(caplog) -> None:
    from bagua_contrib.moe import MoE, MoEFeature

    feature = MoEFeature()
    with caplog.at_level(logging.WARNING, logger="bagua.contrib"):
        feature.check(torch.nn.Linear(2, 2), None)
    assert [r.name for r in caplog.records] == ["bagua.contrib"]
    assert "Linear has no mixture-of-experts layer" in caplog.records[0].getMessage()
    model = torch.nn.ModuleDict({"a": MoE(4, torch.nn.Linear(4, 4), num_local_experts=3)})
    assert feature.agreed_fields(model) == {"mixture-of-experts layers (name, experts)": [("a", 3)]}


def test_cached_dataset_refuses_an_unknown_store() -> None:
    from bagua_contrib.cached_dataset import CachedDatasetFeature

    with pytest.raises(UnknownNameError, match=r"unknown cache store 'rediss' \(did you mean 'redis'\?\)"):
        CachedDatasetFeature(backend="rediss").check(torch.nn.Linear(2, 2), None)
    CachedDatasetFeature().check(torch.nn.Linear(2, 2), None)


def cost(sample: Any) -> float:
    return 2.0


def test_load_balancing_samplers_named_costs() -> None:
    from bagua_contrib.load_balancing_sampler import LoadBalancingSamplerFeature, complexity_function

    sample = (torch.tensor([[1.0, -2.0], [3.0, 4.5]]), 0)
    assert complexity_function("len")(sample) == 2 and complexity_function("len")([[1, 2, 3]]) == 3
    assert complexity_function("numel")(sample) == 4
    assert complexity_function("sum")(sample) == 6.5
    assert complexity_function("sum")(torch.tensor([1, 2])) == 3.0  # a sample that is not a tuple: itself
    assert complexity_function(f"{__name__}:cost") is cost
    for name, expected in ((f"{__name__}:nothing", "cannot import"), ("no_such_module_x:f", "cannot import"),
                           (f"{__name__}:Path", None)):
        feature = LoadBalancingSamplerFeature(complexity=name)
        if expected is None:
            feature.check(torch.nn.Linear(2, 2), None)  # a class is callable
        else:
            with pytest.raises(BaguaConfigError, match=expected):
                feature.check(torch.nn.Linear(2, 2), None)


def _refused_on_every_rank(rank: int) -> list[str]:
    messages = []
    for model, features in ((torch.nn.BatchNorm1d(3), ["sync_batchnorm"]),
                            (torch.nn.Linear(3, 3), {"fused_optimizer": {"do_flaten": False}})):
        try:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model.with_bagua([optimizer], "gradient_allreduce", features=features)
            messages.append("wrapped")
        except BaguaConfigError as exc:
            messages.append(str(exc))
    return messages


def test_the_refusals_come_on_every_rank_before_the_first_collective() -> None:
    for root, option in run_workers(_refused_on_every_rank, 2, timeout=120):
        assert "feature 'sync_batchnorm' converts the BatchNorm layers inside the wrapped model" in root, root
        assert "did you mean 'do_flatten'?" in option, option
