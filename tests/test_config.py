"""Selecting algorithms by name, dict, config model and file; errors name the file and the field."""

from __future__ import annotations

import json

import pytest

from bagua_algorithms.gradient_allreduce import GradientAllReduceAlgorithm, GradientAllReduceConfig
from bagua_core.selection.config import algorithm_config_of, resolve_algorithm
from bagua_core.runtime.exceptions import BaguaConfigError, UnknownNameError


@pytest.mark.parametrize(
    "filename,text",
    [
        ("a.toml", 'name = "gradient_allreduce"\nhierarchical = true\n'),
        ("b.toml", '[algorithm]\nname = "gradient_allreduce"\nhierarchical = true\n[training]\nepochs = 2\n'),
        ("c.yaml", "algorithm:\n  name: gradient_allreduce\n  hierarchical: true\n"),
        ("d.yml", "name: gradient_allreduce\nhierarchical: true\n"),
        ("e.json", json.dumps({"algorithm": {"name": "gradient_allreduce", "hierarchical": True}})),
    ],
)
def test_config_files(tmp_path, filename, text) -> None:
    path = tmp_path / filename
    path.write_text(text)
    algorithm = resolve_algorithm(str(path))
    assert isinstance(algorithm, GradientAllReduceAlgorithm)
    assert algorithm.hierarchical is True and algorithm.average is True
    assert resolve_algorithm(path).config == algorithm.config  # a Path works too


def test_every_form_gives_the_same_config() -> None:
    expected = GradientAllReduceConfig(hierarchical=True)
    forms = [
        GradientAllReduceAlgorithm(hierarchical=True),
        {"name": "gradient_allreduce", "hierarchical": True},
        GradientAllReduceConfig(hierarchical=True),
    ]
    for form in forms:
        assert resolve_algorithm(form).config == expected
        assert algorithm_config_of(form) == expected
    assert resolve_algorithm("gradient_allreduce").config == GradientAllReduceConfig()
    assert resolve_algorithm(None).config == GradientAllReduceConfig()


def test_config_file_from_environment(tmp_path, monkeypatch) -> None:
    path = tmp_path / "env.toml"
    path.write_text('name = "gradient_allreduce"\naverage = false\n')
    monkeypatch.setenv("BAGUA_CONFIG_FILE", str(path))
    assert resolve_algorithm(None).average is False


def test_errors_name_file_and_field(tmp_path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: gradient_allreduce\nhierarchical: 3\naveraeg: true\n")
    with pytest.raises(BaguaConfigError) as info:
        resolve_algorithm(str(bad))
    message = str(info.value)
    assert str(bad) in message and "hierarchical:" in message and "averaeg: Extra inputs are not permitted" in message

    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"name": "gradient_allreduse"}')
    with pytest.raises(UnknownNameError, match=r"unknown\.json.*'gradient_allreduse'.*available: .*gradient_allreduce"):
        resolve_algorithm(str(unknown))

    nameless = tmp_path / "nameless.toml"
    nameless.write_text("hierarchical = true\n")
    with pytest.raises(BaguaConfigError, match=r"nameless\.toml.*needs a 'name'.*gradient_allreduce"):
        resolve_algorithm(str(nameless))

    broken = tmp_path / "broken.toml"
    broken.write_text("name = \n")
    with pytest.raises(BaguaConfigError, match=r"broken\.toml: not valid TOML"):
        resolve_algorithm(str(broken))

    with pytest.raises(BaguaConfigError, match="cannot read config file"):
        resolve_algorithm(str(tmp_path / "missing.toml"))
    with pytest.raises(BaguaConfigError, match="must be an Algorithm"):
        resolve_algorithm(42)


def test_options_validated_in_constructor() -> None:
    with pytest.raises(BaguaConfigError, match="hierarchical: Input should be a valid boolean"):
        GradientAllReduceAlgorithm(hierarchical="sometimes")
    with pytest.raises(BaguaConfigError, match="unknown_option: Extra inputs are not permitted"):
        resolve_algorithm({"name": "gradient_allreduce", "unknown_option": 1})
