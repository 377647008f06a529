"""Selecting an algorithm: by instance, name, dict, config model or config file.

A config file (``.toml``, ``.yaml``/``.yml``, ``.json``; safe loaders only) holds ``name`` and the
options at its top level or in an ``[algorithm]`` table::

    [algorithm]
    name = "gradient_allreduce"
    hierarchical = false

Errors name the file and each ``field: message``; an unknown name lists every installed algorithm
(``auto``, which chooses among the others while training, is one of them: a plugin like the rest).
"""

from __future__ import annotations

import functools
import json
import operator
import os
from pathlib import Path
from typing import Annotated, Any
from collections.abc import Mapping, Sequence

import torch
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from bagua_core.algorithm import Algorithm, AlgorithmConfig
from bagua_core.errors_format import format_validation_error
from bagua_core.exceptions import BaguaConfigError, UnknownNameError
from bagua_core.plugins import algorithm_registry

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "CONFIG_SUFFIXES",
    "load_config_file",
    "algorithm_section",
    "algorithm_config_adapter",
    "validate_algorithm_config",
    "resolve_algorithm",
    "algorithm_config_of",
    "DEFAULT_ALGORITHM",
    "algorithm_class_of",
]

CONFIG_SUFFIXES = (".toml", ".yaml", ".yml", ".json")
DEFAULT_ALGORITHM = "gradient_allreduce"


def load_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Read a config file with a safe loader; the error names the file."""
    path = Path(path)
    if path.suffix not in CONFIG_SUFFIXES:
        raise BaguaConfigError(f"{path}: unsupported config file type {path.suffix!r}; use one of {CONFIG_SUFFIXES}")
    try:
        text = path.read_text()
    except OSError as exc:
        raise BaguaConfigError(f"{path}: cannot read config file: {exc.strerror or exc}") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise BaguaConfigError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise BaguaConfigError(f"{path}: the top level must be a table/mapping, got {type(data).__name__}")
    return data


OTHER_SECTIONS = ("training",)


def algorithm_section(data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[algorithm]`` table if there is one, else the top level (less other tables: ``[training]``)."""
    section = data["algorithm"] if "algorithm" in data else {k: v for k, v in data.items() if k not in OTHER_SECTIONS}
    if not isinstance(section, Mapping):
        raise BaguaConfigError(f"'algorithm' must be a table with a 'name' key, got {section!r}")
    return dict(section)


def algorithm_config_adapter() -> TypeAdapter:
    """A discriminated union over ``name`` of every installed algorithm's config model."""
    models = [algorithm_registry.get(name).Config for name in algorithm_registry.names()]
    if len(models) == 1:
        return TypeAdapter(models[0])
    return TypeAdapter(Annotated[functools.reduce(operator.or_, models), Field(discriminator="name")])


def validate_algorithm_config(data: Mapping[str, Any], source: str | None = None) -> AlgorithmConfig:
    """Validate ``data`` (``name`` + options) against the installed algorithms' configs."""
    where = f"{source}: " if source else ""
    name = data.get("name")
    if not isinstance(name, str):
        available = ", ".join(algorithm_registry.names())
        raise BaguaConfigError(f"{where}algorithm config needs a 'name' (one of: {available}), got {name!r}")
    try:
        algorithm_registry.get(name)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{where}{exc}") from None
    try:
        return algorithm_config_adapter().validate_python(dict(data))
    except ValidationError as exc:
        raise BaguaConfigError(format_validation_error(exc, f"{source or 'options'} for algorithm {name!r}")) from None


def algorithm_class_of(name: str) -> type[Algorithm]:
    """The registered algorithm class selected by ``name`` (``UnknownNameError`` lists the installed ones)."""
    return algorithm_registry.get(name)


def _from_config(config: AlgorithmConfig, optimizers: Sequence[torch.optim.Optimizer]) -> Algorithm:
    return algorithm_class_of(config.name).from_config(config, optimizers=optimizers)


def algorithm_config_of(algorithm: Any) -> AlgorithmConfig:
    """Validate any accepted form of ``algorithm`` into its config, without building the algorithm
    (no optimizer needed): launchers use it to fail before starting workers."""
    if algorithm is None:
        algorithm = os.environ.get("BAGUA_CONFIG_FILE") or DEFAULT_ALGORITHM
    if isinstance(algorithm, Algorithm):
        return algorithm.config
    if isinstance(algorithm, AlgorithmConfig):
        return algorithm
    if isinstance(algorithm, os.PathLike) or (isinstance(algorithm, str) and algorithm.endswith(CONFIG_SUFFIXES)):
        return validate_algorithm_config(algorithm_section(load_config_file(algorithm)), source=str(algorithm))
    if isinstance(algorithm, str):
        return validate_algorithm_config({"name": algorithm})
    if isinstance(algorithm, Mapping):
        return validate_algorithm_config(algorithm)
    raise BaguaConfigError(
        f"algorithm must be an Algorithm, a name, a dict with 'name', a config model or a config file path, "
        f"got {type(algorithm).__name__}"
    )


def resolve_algorithm(algorithm: Any, optimizers: Sequence[torch.optim.Optimizer] = ()) -> Algorithm:
    """Turn any accepted form of ``algorithm`` into an :class:`Algorithm`.

    Example::

        >>> resolve_algorithm({"name": "gradient_allreduce", "hierarchical": True})
        GradientAllReduceAlgorithm(hierarchical=True, average=True)
    """
    if isinstance(algorithm, Algorithm):
        return algorithm
    return _from_config(algorithm_config_of(algorithm), optimizers)
