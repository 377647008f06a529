"""Plugin system of bagua: quick start for plugin authors.

A plugin is a module with functions marked by :data:`hookimpl`; the core's hooks are in
:mod:`bagua_core.plugins.hookspecs`, and a plugin package may add hooks of its own there
(``bagua_add_hookspecs``, like pytest's ``pytest_addhooks``). Announce the module through an entry point of group ``bagua``
in your ``pyproject.toml``::

    [project.entry-points.bagua]
    local_sgd = "my_package.local_sgd"

and in ``my_package/local_sgd.py``::

    from bagua_core.lifecycle.algorithm import Algorithm, AlgorithmConfig
    from bagua_core.plugins import hookimpl

    class LocalSGDAlgorithm(Algorithm):
        name = "local_sgd"
        ...

    @hookimpl
    def bagua_register_algorithms():
        return [LocalSGDAlgorithm]

After ``pip install``, ``model.with_bagua(optimizers, "local_sgd")`` and ``bagua plugins`` find it.
Names are unique across all installed plugins: a duplicate is an error that names both providers.
``BAGUA_DISABLE_PLUGINS=name,...`` skips named entry points, ``BAGUA_DISABLE_PLUGIN_AUTOLOAD=1``
skips every third-party one.
"""

from __future__ import annotations

import pluggy

from bagua_core.plugins.hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)

from bagua_core.plugins.manager import BaguaPluginManager, get_plugin_manager, reset_plugin_manager  # noqa: E402
from bagua_core.plugins.registry import (  # noqa: E402
    NamedRegistry,
    algorithm_registry,
    codec_registry,
    feature_registry,
    registration_hooks,
)

__all__ = [
    "hookimpl",
    "BaguaPluginManager",
    "get_plugin_manager",
    "reset_plugin_manager",
    "NamedRegistry",
    "algorithm_registry",
    "codec_registry",
    "feature_registry",
    "registration_hooks",
    "ENTRY_POINT_GROUP",
    "PROJECT_NAME",
]
