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
from collections.abc import Iterable, Mapping, Sequence

import torch
import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig
from bagua_core.lifecycle.feature import Feature, FeatureConfig
from bagua_core.runtime.exceptions import format_validation_error
from bagua_core.runtime.exceptions import BaguaConfigError, UnknownNameError
from bagua_core.plugins import algorithm_registry, feature_registry

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
    "validate_config_file",
    "resolve_algorithm",
    "algorithm_config_of",
    "DEFAULT_ALGORITHM",
    "algorithm_class_of",
    "build_feature",
    "features_table",
    "FEATURES_TABLE",
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


FEATURES_TABLE = "features"
"""The table of a config file that holds the features, one ``[features.<name>]`` table each."""
# tables of the main job's config files (bagua_examples' [training]), always left out of the algorithm's
# options; a job contributes its tables' schemas through bagua_cli.jobs.job_config_tables
OTHER_SECTIONS = ("training", FEATURES_TABLE)


def algorithm_section(data: Mapping[str, Any], other_tables: Iterable[str] = ()) -> dict[str, Any]:
    """The ``[algorithm]`` table if there is one, else the top level (less other tables: ``[training]``
    and ``other_tables``)."""
    others = {*OTHER_SECTIONS, *other_tables}
    section = data["algorithm"] if "algorithm" in data else {k: v for k, v in data.items() if k not in others}
    if not isinstance(section, Mapping):
        raise BaguaConfigError(f"algorithm: must be a table with a 'name' key, got {section!r}")
    return dict(section)


def algorithm_config_adapter() -> TypeAdapter:
    """A discriminated union over ``name`` of every installed algorithm's config model."""
    models = [algorithm_registry.get(name).Config for name in algorithm_registry.names()]
    if len(models) == 1:
        return TypeAdapter(models[0])
    return TypeAdapter(Annotated[functools.reduce(operator.or_, models), Field(discriminator="name")])


def validate_algorithm_config(data: Mapping[str, Any], source: str | None = None, table: str | None = None) -> AlgorithmConfig:
    """Validate ``data`` (``name`` + options) against the installed algorithms' configs. ``source`` (a
    file) and ``table`` (the table holding ``data`` there) name where each error is."""
    where = f"{source}: " if source else ""
    prefix = f"{table}." if table else ""
    name = data.get("name")
    if not isinstance(name, str):
        available = ", ".join(algorithm_registry.names())
        raise BaguaConfigError(f"{where}{prefix}name: an algorithm config needs a 'name' (one of: {available}), "
                               f"got {name!r}")
    try:
        cls = algorithm_registry.get(name)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{where}{prefix}name: {exc}") from None
    try:
        return algorithm_config_adapter().validate_python(dict(data))
    except ValidationError as exc:
        # the discriminated union puts the name first in each location (diloco.inner_steps); in a file's
        # table the table's name replaces it (algorithm.inner_steps)
        tagged = len(algorithm_registry.names()) > 1
        raise BaguaConfigError(format_validation_error(exc, f"{source or 'options'} for algorithm {name!r}", prefix,
                                                       drop=1 if tagged and table else 0,
                                                       allowed=cls.Config.model_fields)) from None


def build_feature(name: str, options: Mapping[str, Any] | FeatureConfig | None = None, where: str = "") -> Feature:
    """The installed feature ``name`` built with ``options`` (``where``, e.g. ``"job.toml: features."``, prefixes
    an error). An unknown name raises ``UnknownNameError`` with a guess and the installed names."""
    if not isinstance(name, str):
        raise BaguaConfigError(f"{where}a feature is selected by its name (a str), got {name!r}")
    try:
        cls = feature_registry.get(name)
    except UnknownNameError as exc:
        raise UnknownNameError(f"{where}{exc}") from None
    if isinstance(options, FeatureConfig):
        options = options.model_dump(exclude={"name"})
    if options is not None and not isinstance(options, Mapping):
        raise BaguaConfigError(f"{where}{name}: a feature's options are a table/mapping, got {options!r}")
    options = dict(options or {})
    options.pop("name", None)
    try:
        return cls(**options)
    except BaguaConfigError as exc:
        raise BaguaConfigError(f"{where}{exc}" if where else str(exc)) from None


def features_table(data: Mapping[str, Any], source: str | None = None) -> list[Feature]:
    """The features of a config file's ``[features]`` table (``data`` is the whole file), validated; an error
    names the file and ``features.<name>.<field>``."""
    table = data.get(FEATURES_TABLE)
    if table is None:
        return []
    where = f"{source}: " if source else ""
    if not isinstance(table, Mapping):
        raise BaguaConfigError(f"{where}{FEATURES_TABLE}: must be a table of feature tables ([features.<name>]), "
                               f"got {table!r}")
    return [build_feature(name, options, f"{where}{FEATURES_TABLE}.") for name, options in table.items()]


def validate_config_file(
    path: str | os.PathLike, tables: Mapping[str, type[BaseModel]] | None = None
) -> tuple[AlgorithmConfig | None, dict[str, BaseModel]]:
    """Validate every table of a config file: the algorithm (its ``[algorithm]`` table, else the top
    level), its ``[features.<name>]`` tables (:func:`features_table` returns them) and each table of ``tables`` (name -> pydantic model; the CLI passes the tables the installed
    jobs read, ``bagua_cli.jobs.job_config_tables``). Every problem is reported at once, in one
    error naming the file and each ``table.field``. Without an ``[algorithm]`` table and without
    ``name`` at the top level the algorithm is ``None`` (the job's default)."""
    tables = dict(tables or {})
    data = load_config_file(path)
    problems: list[str] = []
    algorithm: AlgorithmConfig | None = None
    known = ["algorithm", *tables, FEATURES_TABLE]
    if "algorithm" in data:
        for key in data:
            if key not in known:
                problems.append(f"{path}: [{key}]: unknown table; a config file holds "
                                f"{', '.join(f'[{k}]' for k in known)} (rename or remove it)")
    for name, model in tables.items():
        if name in data and not isinstance(data[name], Mapping):
            problems.append(f"{path}: {name}: must be a table of options, got {data[name]!r}")
        elif name in data:
            try:
                model.model_validate(dict(data[name]))
            except ValidationError as exc:
                problems.append(format_validation_error(exc, f"{path}: [{name}] table", f"{name}.",
                                                        allowed=model.model_fields))
    try:
        features_table(data, str(path))
    except BaguaConfigError as exc:
        problems.append(str(exc))
    section = algorithm_section(data, other_tables=tables)
    if "algorithm" in data or "name" in section:
        try:
            algorithm = validate_algorithm_config(section, source=str(path),
                                                  table="algorithm" if "algorithm" in data else None)
        except BaguaConfigError as exc:
            problems.insert(0, str(exc))
    elif section:
        problems.insert(0, f"{path}: no algorithm 'name' at the top level or in an [algorithm] table, but "
                           f"options {sorted(section)}; add name = \"...\" (bagua plugins lists the algorithms)")
    if problems:
        raise BaguaConfigError("\n".join(problems))
    return algorithm, {name: model.model_validate(dict(data[name])) for name, model in tables.items() if name in data}


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
