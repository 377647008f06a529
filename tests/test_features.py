"""The feature contract (``bagua_core.lifecycle.feature``): a third party's feature registered as a plugin, selected
by name (``with_bagua(features=...)``, a config file's ``[features.<name>]`` tables), its hooks called by the core at
the documented points and in order, its state saved with the module's; a misspelt name or option refused on every
rank with a guess before the first collective, a different selection on one rank refused on every rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

import pytest
import torch

from bagua_core.api import Feature, FeatureConfig, hookimpl
from tests.distributed import run_workers

ROOT = Path(__file__).resolve().parents[1]


class RecorderConfig(FeatureConfig):
    name: Literal["recorder"] = "recorder"
    tag: str = "default"
    """Written into every call recorded."""


CALLS: list[str] = []


class RecorderFeature(Feature):
    """Records the hooks the core calls on it."""

    name, Config = "recorder", RecorderConfig
    module_attributes = {"bagua_recorded": lambda module: list(CALLS)}

    def agreed_fields(self, module):
        CALLS.append("agreed_fields")
        return {"tag twice": self.config.tag * 2}

    def setup(self, module, optimizers):
        CALLS.append(f"setup:{len(optimizers)}")

    def keeps_own_weights(self, module, algorithm):
        CALLS.append(f"keeps_own_weights:{algorithm.name}")
        return False

    def wrapped(self, module):
        CALLS.append("wrapped")

    def before_forward(self, module):
        CALLS.append("before_forward")
        return False

    def before_optimizer_step(self, module):
        grads = [p.grad is not None for p in module.parameters()]
        CALLS.append(f"before_optimizer_step:{all(grads)}")

    def after_step(self, module):
        CALLS.append("after_step")

    def state_dict(self, module):
        CALLS.append("state_dict")
        return {"tag": self.config.tag, "calls": len(CALLS)}

    def load_state_dict(self, module, state):
        CALLS.append(f"load_state_dict:{state['tag']}")

    def membership_changed(self, module):
        CALLS.append(f"membership_changed:{module.process_group.name}")

    def unwrap(self, module):
        CALLS.append("unwrap")


class RecorderPlugin:
    @hookimpl
    def bagua_register_features(self):
        return [RecorderFeature]


def _registered(fn, *args):
    """``fn(*args)`` with the recorder registered as an inline plugin (always unregistered after)."""
    from bagua_core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    plugin = RecorderPlugin()
    manager.register(plugin, name="test-recorder")
    CALLS.clear()
    try:
        return fn(*args)
    finally:
        manager.unregister(plugin)


def _recorded(rank: int, fn, *args):
    """A worker: ``fn(rank, *args)`` with the recorder registered."""
    return _registered(fn, rank, *args)


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, rank: int) -> None:
    optimizer.zero_grad()
    model(torch.randn(3, 4, generator=torch.Generator().manual_seed(rank))).sum().backward()
    optimizer.step()


def _lifecycle(rank: int, directory: str) -> dict[str, Any]:
    import bagua_core

    model, optimizer = _model()
    model = model.with_bagua([optimizer], "gradient_allreduce", features={"recorder": {"tag": "x"}})
    wrapped = list(CALLS)
    for _ in range(2):
        _step(model, optimizer, rank)
    with model.no_sync():  # no exchange, so no "between the exchange and the optimizer step"
        model(torch.randn(3, 4)).sum().backward()
    stepped = list(CALLS)
    # a new group (a new quorum's, in fault-tolerant mode) is announced to the features before the next step
    from bagua_core.lifecycle.algorithm import switch_algorithm

    group = bagua_core.new_group()
    switch_algorithm(model, process_group=group)
    changed = CALLS[len(stepped):], group.name
    _step(model, optimizer, rank)
    bagua_core.save_checkpoint(2, directory, model, optimizer)  # (the counter is 4: no_sync's forward counted)
    recorded = model.bagua_recorded
    model.bagua_shutdown()
    fresh, fresh_optimizer = _model()
    bagua_core.load_checkpoint(directory, fresh, fresh_optimizer)
    CALLS.clear()
    fresh = fresh.with_bagua([fresh_optimizer], "gradient_allreduce", features=["recorder"])
    resumed = list(CALLS), fresh.bagua_train_step_counter
    fresh.bagua_shutdown()
    return {"wrapped": wrapped, "stepped": stepped, "changed": changed, "recorded": recorded, "resumed": resumed}


def test_a_third_party_registers_a_feature(tmp_path: Path) -> None:
    for seen in run_workers(_recorded, 2, _lifecycle, str(tmp_path), timeout=120):
        assert seen["wrapped"] == ["agreed_fields", "setup:1", "keeps_own_weights:gradient_allreduce", "wrapped"]
        step = ["before_forward", "before_optimizer_step:True", "after_step"]
        assert seen["stepped"] == seen["wrapped"] + step + step + ["before_forward"]
        calls, name = seen["changed"]
        assert calls == [f"membership_changed:{name}"]  # once, with the module's group already the new one
        assert seen["recorded"][-1] == "state_dict"  # save_checkpoint kept the feature's state
        # the resumed wrap runs the recorder selected by name and hands it its saved state once it is wrapped
        calls, counter = seen["resumed"]
        assert counter == 4 and calls[-2:] == ["wrapped", "load_state_dict:x"], calls


def _refused(rank: int, features: Any) -> str:
    model, optimizer = _model()
    try:
        model.with_bagua([optimizer], "gradient_allreduce", features=features)
    except Exception as exc:  # every rank raises, before any collective
        return f"{type(exc).__name__}: {exc}"
    return "wrapped"


@pytest.mark.parametrize("features,expected", [
    ({"recordr": {}}, "UnknownNameError: unknown feature 'recordr' (did you mean 'recorder'?)"),
    ({"recorder": {"tga": "y"}}, "tga: Extra inputs are not permitted"),
    (["recorder", 3], "a feature is selected by its name"),
])
def test_an_unknown_feature_or_option_is_refused_on_every_rank(features: Any, expected: str) -> None:
    for message in run_workers(_recorded, 2, _refused, features, timeout=120):
        assert expected in message, message
    if "tga" in expected:
        assert "did you mean 'tag'?" in message, message


def _selected_on_rank_zero(rank: int) -> str:
    return _refused(rank, {"recorder": {}} if rank == 0 else None)


def test_ranks_that_select_different_features_are_refused_on_every_rank() -> None:
    for message in run_workers(_recorded, 2, _selected_on_rank_zero, timeout=120):
        assert message.startswith("RankMismatchError") and "features" in message, message


def _from_a_file(rank: int, path: str) -> list[tuple[str, dict]]:
    from bagua_core.api import WrappedModule

    model, optimizer = _model()
    model = model.with_bagua([optimizer], path)
    first = [(f.name, f.canonical_options()) for f in WrappedModule(model).features]
    model = model.with_bagua([optimizer], path, features={"recorder": {"tag": "argument"}})
    second = [(f.name, f.canonical_options()) for f in WrappedModule(model).features]
    model.bagua_shutdown()
    return first + second


def test_a_config_file_selects_features_beside_its_algorithm(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.recorder]\ntag = "file"\n')
    for running in run_workers(_recorded, 2, _from_a_file, str(path), timeout=120):
        assert running == [("recorder", {"tag": "file"}), ("recorder", {"tag": "argument"})]


def test_a_process_feature_is_not_turned_on_by_a_wrap() -> None:
    for message in run_workers(_refused, 1, {"fault_tolerant": {}}, timeout=120):
        assert "runs for a whole process" in message and "init_process_group(fault_tolerant=...)" in message


def test_init_process_group_refuses_an_argument_no_feature_takes() -> None:
    from bagua_core.bootstrap import process_features

    with pytest.raises(TypeError, match=r"'fault_tolerent' \(did you mean 'fault_tolerant'\?\).*fault_tolerant "
                                        r"\(fault_tolerant\)"):
        process_features({"fault_tolerent": True})
    assert process_features({"fault_tolerant": False}) == []


def _check_config(path: str) -> str:
    from bagua_core.runtime.exceptions import BaguaConfigError
    from bagua_core.selection.config import validate_config_file

    try:
        validate_config_file(path)
    except BaguaConfigError as exc:
        return str(exc)
    return "ok"


def test_a_config_files_feature_tables_are_checked(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.recorder]\ntga = "x"\n\n'
                   '[features.recordr]\n')
    message = _registered(_check_config, str(bad))
    assert f"{bad}: features." in message and "tga: Extra inputs are not permitted" in message, message
    good = tmp_path / "good.toml"
    good.write_text('[algorithm]\nname = "gradient_allreduce"\n\n[features.recorder]\ntag = "x"\n')
    assert _registered(_check_config, str(good)) == "ok"


def test_bagua_plugins_lists_the_features_with_their_options() -> None:
    done = subprocess.run([sys.executable, "-m", "bagua_cli", "plugins", "--json"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    features = {row["name"]: row for row in json.loads(done.stdout)["features"]}
    assert {"autotune", "checkpoints", "fault_tolerant", "metrics", "fused_optimizer", "sync_batchnorm",
            "load_balancing_sampler", "cached_dataset", "moe"} <= set(features)
    assert features["metrics"]["package"] == "bagua_features.metrics" and features["metrics"]["scope"] == "module"
    assert features["fault_tolerant"]["scope"] == "process"
    assert "min_replicas" in [option["name"] for option in features["fault_tolerant"]["options"]]
    assert features["fused_optimizer"]["package"] == "bagua_contrib.fused_optimizer"
    assert [option["name"] for option in features["load_balancing_sampler"]["options"]] == ["complexity",
                                                                                           "random_level"]


def test_every_process_feature_is_listed_for_init_process_group() -> None:
    """A process feature is registered as every feature is and listed in ``bagua.process_features`` too, the index
    ``init_process_group`` reads before its rendezvous (so it imports no other plugin): the two agree."""
    from bagua_core.bootstrap import process_feature_classes
    from bagua_core.plugins import feature_registry

    listed = process_feature_classes()
    registered = {name for name in feature_registry.names() if feature_registry.get(name).scope == "process"}
    assert {cls.name for cls in listed} == registered and "fault_tolerant" in registered
    assert all(feature_registry.get(cls.name) is cls for cls in listed)


class _EveryOther(torch.utils.data.Sampler):
    """A sampler of the even indices of this rank's half, in order (what the recorder's sampler gives)."""

    def __init__(self, n: int, rank: int, replicas: int) -> None:
        self.indices = [i for i in range(rank, n, replicas)][::2]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


class ShardingConfig(FeatureConfig):
    name: Literal["sharding"] = "sharding"


class ShardingFeature(Feature):
    """Doubles every sample's input (``dataset``) and draws every other index of the rank's share (``sampler``)."""

    name, Config = "sharding", ShardingConfig

    def dataset(self, module, dataset):
        return [(2 * x, y) for x, y in dataset]

    def sampler(self, module, dataset, *, num_replicas, rank, shuffle, seed, drop_last):
        return _EveryOther(len(dataset), rank, num_replicas)


class ShardingPlugin:
    @hookimpl
    def bagua_register_features(self):
        return [ShardingFeature]


def _data(rank: int) -> dict[str, Any]:
    from bagua_core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    plugin = ShardingPlugin()
    manager.register(plugin, name="test-sharding")
    try:
        dataset = torch.utils.data.TensorDataset(torch.arange(20.0).view(10, 2), torch.arange(10))
        model, optimizer = _model()
        model = torch.nn.Sequential(torch.nn.Linear(2, 2)).with_bagua([torch.optim.SGD(model.parameters(), lr=0.1)])
        plain = model.bagua_data_loader(dataset, batch_size=2, seed=3)
        sampler = torch.utils.data.DistributedSampler(dataset, seed=3)  # by hand
        by_hand = [y.tolist() for _, y in torch.utils.data.DataLoader(dataset, batch_size=2, sampler=sampler)]
        shaped = model.with_bagua([torch.optim.SGD(model.parameters(), lr=0.1)], features=["sharding"])
        loader = shaped.bagua_data_loader(dataset, batch_size=2)
        return {"plain": [y.tolist() for _, y in plain], "by_hand": by_hand,
                "shaped": [(x[:, 0] / 2).tolist() for x, _ in loader], "type": type(plain.sampler).__name__}
    finally:
        manager.unregister(plugin)


def test_the_data_loader_is_shaped_by_the_features() -> None:
    """Without a data feature, ``bagua_data_loader`` is torch's DataLoader over a DistributedSampler (the same batches
    as written by hand); a feature's ``dataset`` and ``sampler`` hooks shape it."""
    for rank, seen in enumerate(run_workers(_data, 2, timeout=120)):
        assert seen["type"] == "DistributedSampler" and seen["plain"] == seen["by_hand"]
        indices = [i for i in range(rank, 10, 2)][::2]
        # sample i's first input is 2i, doubled by the feature's dataset; the loader's batches give back x / 2 = 2i
        assert sum(seen["shaped"], []) == [2.0 * i for i in indices]
