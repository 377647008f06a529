"""bagua-gradient-clipping, installed for real (``pip install ./plugins_example/gradient_clipping``): found through
its entry point, its options validated, and on 2 workers, enabled from a config file, it trains exactly as the same
algorithm with the gradients clipped by hand between backward and the optimizer step: for a gradient algorithm
(gradient_allreduce, also against a reference written with torch.distributed alone), a compressed one (bytegrad),
and local-step ones (diloco, and the sibling example local_sgd)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bagua_core.api import BaguaConfigError, feature_registry

HERE = Path(__file__).resolve().parent
SHIPPED = HERE.parent / "configs" / "gradient_clipping.toml"
INSTALL_HINT = ("install the example feature first: pip install --no-deps --no-build-isolation "
                "./plugins_example/gradient_clipping")
ALGORITHMS = {
    "gradient_allreduce": 'name = "gradient_allreduce"',
    "diloco": 'name = "diloco"\ninner_steps = 2',
    "local_sgd": 'name = "local_sgd"\nsync_every = 2',
}


def _bagua(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "bagua_cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env)


def test_installed_and_found_through_its_entry_point() -> None:
    try:
        dist = importlib.metadata.distribution("bagua-gradient-clipping")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(INSTALL_HINT)
    assert {ep.name: ep.value for ep in dist.entry_points if ep.group == "bagua"} == {
        "gradient_clipping": "bagua_gradient_clipping"}
    cls, plugin = feature_registry.providers()["gradient_clipping"]
    assert plugin == "gradient_clipping" and cls.__module__ == "bagua_gradient_clipping.feature"
    import bagua_gradient_clipping

    assert HERE.parent not in Path(bagua_gradient_clipping.__file__).resolve().parents  # site-packages, not here


def test_options_are_validated() -> None:
    from bagua_gradient_clipping import GradientClippingFeature

    assert GradientClippingFeature(max_norm=0.5).config.norm_type == 2.0
    with pytest.raises(BaguaConfigError, match="max_norm: Field required"):
        GradientClippingFeature()
    with pytest.raises(BaguaConfigError, match="max_norm: Input should be greater than 0"):
        GradientClippingFeature(max_norm=0)
    with pytest.raises(BaguaConfigError, match="did you mean 'max_norm'"):
        GradientClippingFeature(max_nrom=1.0)


def test_cli_lists_it_and_checks_its_config() -> None:
    listing = _bagua("plugins", "--json")
    assert listing.returncode == 0, listing.stderr
    rows = {row["name"]: row for row in json.loads(listing.stdout)["features"]}
    assert rows["gradient_clipping"]["distribution"] == "bagua-gradient-clipping"
    assert [o["name"] for o in rows["gradient_clipping"]["options"]] == ["max_norm", "norm_type", "error_if_nonfinite"]
    checked = _bagua("check-config", str(SHIPPED))
    assert checked.returncode == 0 and "feature gradient_clipping: {'max_norm': 1.0" in checked.stdout, checked.stdout


def test_clipping_from_a_config_file_equals_clipping_by_hand(tmp_path: Path) -> None:
    configs = [str(SHIPPED)]  # bytegrad, compressed
    for name, algorithm in ALGORITHMS.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(f"[algorithm]\n{algorithm}\n\n[features.gradient_clipping]\nmax_norm = 0.5\n")
        configs.append(str(path))
    result = _bagua("run", "--standalone", "--nproc_per_node=2", str(HERE / "clipping_worker.py"), str(tmp_path),
                    *configs, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for report in reports:
        assert set(report) == {"bytegrad", *ALGORITHMS, "decentralized_dp"}
        for name, row in report.items():
            if name == "decentralized_dp":
                assert "steps inside backward" in row, row
                continue
            assert row["equal_to_by_hand"] and row["norms_equal"], (name, row)
            assert row["clipping_changed_the_weights"] and row["largest_norm"] > 0.5, (name, row)
        assert report["gradient_allreduce"]["equal_to_torch"], report["gradient_allreduce"]
        for name in ("gradient_allreduce", "bytegrad"):  # the averaged gradient is clipped alike on every rank
            assert report[name]["ranks_identical"], name
