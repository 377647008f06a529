"""``init_process_group``: the one call that starts a process of a bagua job.

It starts the runtime's default group and, in this one place, the features that run for the whole process
(``Feature.scope == "process"``): each is turned on by its keyword argument (``Feature.init_argument``) or its
environment (``Feature.requested(None)``), checked before any rendezvous, compared by every rank, started once the
group is up (``Feature.process_started``), and run by every module wrapped in the process. A process feature is
also listed in the entry points of ``bagua.process_features`` (name -> ``module:Class``): the process imports just
those before its rendezvous, not every plugin.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from typing import Any

import torch.distributed as dist

from bagua_core.lifecycle.feature import Feature
from bagua_core.plugins.manager import disabled_plugin_names
from bagua_core.runtime import process_group
from bagua_core.runtime.exceptions import PluginError, PluginLoadError
from bagua_core.runtime.process_group import BaguaProcessGroup

__all__ = ["PROCESS_FEATURES_GROUP", "init_process_group", "process_feature_classes", "process_features",
           "running_features"]

PROCESS_FEATURES_GROUP = "bagua.process_features"

_running: list[Feature] = []


def running_features() -> list[Feature]:
    """The process features this process started (``init_process_group``), in the order started."""
    return list(_running)


def process_feature_classes() -> list[type[Feature]]:
    """The process features the installed packages list in ``bagua.process_features``, by name (the entry points
    ``BAGUA_DISABLE_PLUGINS`` names are skipped); a class that does not load, or is no process feature, raises."""
    found = []
    for entry in sorted(importlib.metadata.entry_points(group=PROCESS_FEATURES_GROUP), key=lambda e: e.name):
        if entry.name in disabled_plugin_names():
            continue
        try:
            cls = entry.load()
        except Exception as exc:  # a broken plugin is never hidden
            raise PluginLoadError(f"process feature {entry.name!r} ({entry.value}) failed to load: "
                                  f"{type(exc).__name__}: {exc}; fix or uninstall it, or skip it with "
                                  f"BAGUA_DISABLE_PLUGINS={entry.name}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Feature) and cls.scope == "process" and cls.name == entry.name):
            raise PluginError(f"entry point {entry.name!r} of {PROCESS_FEATURES_GROUP} ({entry.value}) must name a "
                              f"Feature class with scope 'process' and name {entry.name!r}")
        found.append(cls)
    return found


def process_features(arguments: dict[str, Any]) -> list[Feature]:
    """The process features ``init_process_group(**arguments)`` turns on, validated (their names' order). An
    argument no installed process feature takes raises ``TypeError`` naming those that exist."""
    classes = process_feature_classes()
    by_argument = {cls.init_argument: cls for cls in classes if cls.init_argument}
    for argument in arguments:
        if argument not in by_argument:
            close = difflib.get_close_matches(argument, list(by_argument), n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            taken = ", ".join(f"{a} ({cls.name})" for a, cls in sorted(by_argument.items())) or "none"
            raise TypeError(f"init_process_group() got an unexpected keyword argument {argument!r}{guess}; the "
                            f"installed process features take: {taken}")
    started = []
    for cls in classes:
        value = arguments.get(cls.init_argument) if cls.init_argument else None
        options = cls.from_init_argument(value) if value is not None else cls.requested(None)
        if options is not None:
            started.append(cls(**dict(options)))
    return started


def init_process_group(store: dist.Store | None = None, **feature_arguments: Any) -> BaguaProcessGroup:
    """Start the default process group from the torchrun variables (``bagua run`` sets them): gloo on
    CPU; with CUDA, NCCL for CUDA tensors and gloo for CPU tensors. ``store`` replaces the
    ``MASTER_ADDR``/``MASTER_PORT`` rendezvous; if torch.distributed is already initialized (by
    Lightning, say) its default group is used. ``BAGUA_BACKEND`` overrides the backend;
    ``BAGUA_COMMUNICATOR=nccl`` runs the collectives on CUDA tensors through bagua's native NCCL
    communicator (an error here, on every rank, says why when it is unavailable).

    ``feature_arguments``: the options of the installed process features, each under its keyword
    (``bagua plugins`` lists them): ``fault_tolerant=True`` (or a dict of options) makes this process a replica
    of a fault-tolerant job (``docs/fault_tolerance.md``). A bad option fails here, before any rendezvous; every
    rank must start the same features with the same options.

    Example::

        >>> import bagua_core as bagua
        >>> bagua.init_process_group()      # in a script started by `bagua run --nproc_per_node 2 ...`
        >>> bagua.get_rank(), bagua.get_world_size()
    """
    features = process_features(feature_arguments)
    group = process_group.init_process_group(store, {f.name: f.canonical_options() for f in features})
    _running[:] = features
    for feature in features:
        feature.process_started(group)
    return group
