"""Plugin system of bagua: quick start for plugin authors.

A plugin is a module with functions marked by :data:`hookimpl` (the hooks: :mod:`bagua_core.plugins.hookspecs`;
a package may add its own, ``bagua_add_hookspecs``), announced through an entry point of group ``bagua``
(``[project.entry-points.bagua]`` ``local_sgd = "my_package.local_sgd"``); after ``pip install``,
``with_bagua(optimizers, "local_sgd")`` and ``bagua plugins`` find what it registers (``docs/plugins.md``). Names are
unique across all installed plugins: a duplicate is an error that names both providers.
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
