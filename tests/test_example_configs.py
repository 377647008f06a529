"""Every config shipped in bagua_examples/configs validates: its algorithm table against the
installed algorithms' configs (built-in ones only: a shipped config must not need another plugin),
its training table against the main job's TrainingConfig, and the main job's option parser takes it."""

from __future__ import annotations

import importlib.resources
import subprocess
import sys
from pathlib import Path

import pytest

from bagua_core.selection.config import CONFIG_SUFFIXES, algorithm_config_of, load_config_file
from bagua_examples.train_digits import parse_args
from bagua_examples.training_config import TrainingConfig
from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.plugins import algorithm_registry

CONFIG_DIR = Path(str(importlib.resources.files("bagua_examples") / "configs"))
SHIPPED = sorted(p for p in CONFIG_DIR.iterdir() if p.suffix in CONFIG_SUFFIXES)


def test_every_format_is_shipped() -> None:
    assert {p.suffix for p in SHIPPED} >= {".toml", ".yaml", ".json"}
    assert not [p.name for p in CONFIG_DIR.iterdir() if p.suffix not in CONFIG_SUFFIXES and p.name != "__pycache__"]


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_config_validates(path: Path) -> None:
    config = algorithm_config_of(path)
    cls = algorithm_registry.get(config.name)
    assert cls.__module__.startswith("bagua_algorithms."), f"{path.name} needs a plugin that bagua does not ship"
    data = load_config_file(path)
    if "training" in data:
        training = TrainingConfig(**data["training"])
    else:
        training = TrainingConfig()
    parsed, algorithm, _ = parse_args(["--config", str(path)])
    assert parsed == training and algorithm_config_of(algorithm) == config


def test_a_typo_names_the_file_and_the_field(tmp_path) -> None:
    bad = tmp_path / "typo.yaml"
    bad.write_text((CONFIG_DIR / "bytegrad.yaml").read_text().replace("hierarchical", "hierarchicl"))
    with pytest.raises(BaguaConfigError, match=r"typo\.yaml(.|\n)*hierarchicl"):
        algorithm_config_of(bad)
    bad_training = tmp_path / "bad_training.toml"
    bad_training.write_text((CONFIG_DIR / "gradient_allreduce.toml").read_text().replace("epochs = 10", "epochs = 0"))
    with pytest.raises(ValueError, match="epochs"):
        parse_args(["--config", str(bad_training)])


def test_check_config_command_on_a_shipped_config() -> None:
    path = CONFIG_DIR / "decentralized.json"
    proc = subprocess.run([sys.executable, "-m", "bagua_cli", "check-config", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "decentralized" in proc.stdout and "shift_one" in proc.stdout, proc.stderr
