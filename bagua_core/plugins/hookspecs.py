"""Every hook a bagua plugin can implement. All hooks are prefixed ``bagua_``.

A plugin is any module or object with functions decorated by :data:`bagua_core.plugins.hookimpl`,
announced through an entry point in the group ``bagua``::

    [project.entry-points.bagua]
    my_algorithm = "my_package.my_algorithm"

Each registration hook returns a list of classes, each declaring its ``name`` (a missing or duplicate one is
refused, naming both providers). Only the hooks whose contract lives in the core are specified here: algorithms,
features and codecs; a plugin package whose contract lives in the package brings its own specs through
:func:`bagua_add_hookspecs`, like pytest's ``pytest_addhooks`` (topologies, cache stores; docs/plugins.md lists
every spec). The machinery sits below the contracts it carries, so a spec's return type is ``list[type]``, the
base class in its docstring, checked where the contract is used.
"""

from __future__ import annotations

import pluggy

__all__ = ["hookspec", "PROJECT_NAME", "ENTRY_POINT_GROUP"]

PROJECT_NAME = "bagua"
ENTRY_POINT_GROUP = "bagua"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec(historic=True)
def bagua_add_hookspecs(plugin_manager: pluggy.PluginManager) -> None:
    """Add the hook specs your package defines: call ``plugin_manager.add_hookspecs(your_spec_module)``.

    Fires once for every plugin as it is registered (a historic hook: a plugin registered later, inline
    or at run time, is called at once), before the manager checks every implementation against its spec.
    Adding the same module again is a no-op, so every plugin of a package may add the package's specs.
    Pair the spec with a registry, ``NamedRegistry(kind, "bagua_register_<things>")``, kept next to it;
    ``bagua plugins`` lists the names registered through every ``bagua_register_<things>`` spec.
    """


@hookspec
def bagua_register_algorithms() -> list[type]:
    """Return the :class:`~bagua_core.lifecycle.algorithm.Algorithm` subclasses this plugin provides.

    Fires once, when the algorithm registry is first built (the first ``with_bagua``, ``bagua plugins``
    or config load). Each class sets ``name`` (the name users select it by) and ``Config`` (a pydantic
    model deriving from :class:`~bagua_core.lifecycle.algorithm.AlgorithmConfig` with ``name: Literal[...]``).
    """


@hookspec
def bagua_register_features() -> list[type]:
    """Return the :class:`~bagua_core.lifecycle.feature.Feature` subclasses this plugin provides.

    Fires when the feature registry is built (a wrap, ``init_process_group``, ``bagua plugins`` or a config
    file's ``[features.<name>]`` table). Each class sets ``name`` (what users select it by) and ``Config`` (a
    pydantic model deriving from :class:`~bagua_core.lifecycle.feature.FeatureConfig` with
    ``name: Literal[...]``).
    """


@hookspec
def bagua_register_codecs() -> list[type]:
    """Return the :class:`~bagua_core.codecs.Codec` subclasses this plugin provides (compressors).

    Fires once, when the codec registry is first built (the first ``get_codec``, a config naming a
    ``compression``, or ``bagua plugins``). Each class sets ``name`` (the ``compression=`` string),
    ``bits_per_element``, ``header_bytes`` and ``unbiased``, and is built with no arguments.
    """
