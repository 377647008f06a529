"""Where ``bagua train`` finds the main job: the ``bagua.jobs`` entry point named ``train``.

The core imports nothing above it (``tests/test_core_import_graph.py``): the main job lives in a
package of its own (``bagua_examples.train_digits``, named in bagua's ``pyproject.toml``), and the
CLI finds it through its distribution's metadata at run time. A job module provides
``parse_args(argv) -> (training_config, algorithm, namespace)`` (it validates the options; ``--help``
prints them; an optional ``prog=`` keyword names the command in its usage) and ``main(argv)``;
``bagua train`` starts ``python -m <module>`` on every worker. A job that reads tables of a config
file besides the algorithm's declares their schemas in ``CONFIG_TABLES`` (table name -> pydantic
model), so ``bagua check-config`` validates them without the core importing the job.
Another distribution may register a job under another name (``bagua train`` runs ``train``).

Example::

    >>> module_name, module = find_job()
    >>> module_name
    'bagua_examples.train_digits'
"""

from __future__ import annotations

import importlib
from importlib import metadata
from types import ModuleType

from pydantic import BaseModel

from bagua_core.runtime.exceptions import BaguaConfigError

__all__ = ["JOB_GROUP", "find_job", "job_config_tables"]

JOB_GROUP = "bagua.jobs"


def find_job(name: str = "train") -> tuple[str, ModuleType]:
    """The module path and the imported module of the job ``name`` in the ``bagua.jobs`` entry points."""
    found = [ep for ep in metadata.entry_points(group=JOB_GROUP) if ep.name == name]
    if not found:
        raise BaguaConfigError(f"no job named {name!r} is installed (entry point group {JOB_GROUP!r}); "
                               "reinstall bagua (pip install -e .), whose bagua_examples package provides it")
    if len({ep.value for ep in found}) > 1:
        raise BaguaConfigError(f"several distributions register the job {name!r} in {JOB_GROUP!r}: "
                               + ", ".join(sorted(ep.value for ep in found)))
    module_name = found[0].value.split(":")[0]
    module = importlib.import_module(module_name)
    for attribute in ("parse_args", "main"):
        if not callable(getattr(module, attribute, None)):
            raise BaguaConfigError(f"the job {name!r} ({module_name}) has no {attribute}(argv)")
    return module_name, module


def job_config_tables() -> dict[str, type[BaseModel]]:
    """The config-file tables every installed job declares (``CONFIG_TABLES``), e.g. ``training``."""
    tables: dict[str, type[BaseModel]] = {}
    owners: dict[str, str] = {}
    for ep in metadata.entry_points(group=JOB_GROUP):
        module_name = ep.value.split(":")[0]
        declared = getattr(importlib.import_module(module_name), "CONFIG_TABLES", None) or {}
        for table, model in declared.items():
            if table in tables and tables[table] is not model:
                raise BaguaConfigError(f"the jobs {owners[table]} and {module_name} both declare the config table "
                                       f"[{table}] with different schemas; uninstall one of them")
            tables[table], owners[table] = model, module_name
    return tables
