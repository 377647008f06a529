"""bagua-local-sgd, installed for real (``pip install ./plugins_example``): found through its entry
point, options validated, and on 2 workers it equals a reference written with torch.distributed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bagua_core.api import BaguaConfigError, algorithm_registry

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parent / "configs" / "local_sgd.toml"
INSTALL_HINT = "install the example plugin first: pip install --no-deps --no-build-isolation ./plugins_example"


def _bagua(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "bagua_cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_installed_and_found_through_its_entry_point() -> None:
    try:
        dist = importlib.metadata.distribution("bagua-local-sgd")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(INSTALL_HINT)
    entry_points = {ep.name: ep.value for ep in dist.entry_points if ep.group == "bagua"}
    assert entry_points == {"local_sgd": "bagua_local_sgd"}
    cls, plugin = algorithm_registry.providers()["local_sgd"]
    assert plugin == "local_sgd" and cls.__module__ == "bagua_local_sgd.algorithm"
    import bagua_local_sgd

    # a real install: the module comes from site-packages, not from this source tree
    assert HERE.parent not in Path(bagua_local_sgd.__file__).resolve().parents


def algorithm_config_of(options: dict):
    """The validated config of ``options`` (a dict with the algorithm's ``name``), as ``with_bagua`` builds it."""
    options = dict(options)
    return algorithm_registry.get(options.pop("name"))(**options).config


def test_options_are_validated() -> None:
    config = algorithm_config_of({"name": "local_sgd", "sync_every": 4})
    assert (config.sync_every, config.warmup_steps) == (4, 0)
    with pytest.raises(BaguaConfigError, match="sync_every must be a positive integer, got 0"):
        algorithm_config_of({"name": "local_sgd", "sync_every": 0})
    with pytest.raises(BaguaConfigError, match="warmup_steps must be a non-negative integer, got -1"):
        algorithm_config_of({"name": "local_sgd", "warmup_steps": -1})
    with pytest.raises(BaguaConfigError, match="sync_every"):
        algorithm_config_of({"name": "local_sgd", "sync_every": "4"})  # strict: no silent coercion
    with pytest.raises(BaguaConfigError, match="sync_evry"):
        algorithm_config_of({"name": "local_sgd", "sync_evry": 4})  # a typo is an error
    from bagua_local_sgd import LocalSGDAlgorithm

    with pytest.raises(BaguaConfigError, match="sync_every must be a positive integer, got -2"):
        LocalSGDAlgorithm(sync_every=-2)


def test_cli_lists_it_and_checks_its_config() -> None:
    listing = _bagua("plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)["algorithms"]}
    assert rows["local_sgd"]["class"] == "bagua_local_sgd.algorithm.LocalSGDAlgorithm"
    assert {o["name"]: o["default"] for o in rows["local_sgd"]["options"]} == {"sync_every": 4, "warmup_steps": 0}
    checked = _bagua("check-config", str(CONFIG))
    assert checked.returncode == 0 and "local_sgd" in checked.stdout, checked.stderr


def test_training_on_two_workers_equals_the_reference(tmp_path) -> None:
    result = _bagua("run", "--config", str(CONFIG), "--standalone", "--nproc_per_node=2",
                    str(HERE / "local_sgd_worker.py"), str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert reports[0] == reports[1]
    report = reports[0]
    # the steps after which every rank holds the same parameters: the parameter averages (and warmup)
    assert report["dict"] == [3, 6]
    assert report["warmup"] == [1, 2, 3, 5, 7]
    assert report["name"] == [4]
    assert report["config_file"] == list(range(1, 11)) + [14]
    assert report["config_file_env"] == str(CONFIG)
