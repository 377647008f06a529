"""Every hook a bagua plugin can implement. All hooks are prefixed ``bagua_``.

A plugin is any module or object with functions decorated by :data:`bagua_core.plugins.hookimpl`,
announced through an entry point in the group ``bagua``::

    [project.entry-points.bagua]
    my_algorithm = "my_package.my_algorithm"

Each registration hook returns a list of classes; every class declares its ``name``. The registry
refuses a missing or duplicate name and names both providers of a duplicate.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from bagua_core.algorithm import Algorithm
    from bagua_core.codecs import Codec

__all__ = ["hookspec", "PROJECT_NAME", "ENTRY_POINT_GROUP"]

PROJECT_NAME = "bagua"
ENTRY_POINT_GROUP = "bagua"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)


@hookspec
def bagua_register_algorithms() -> list[type[Algorithm]]:
    """Return the :class:`~bagua_core.algorithm.Algorithm` subclasses this plugin provides.

    Fires once, when the algorithm registry is first built (the first ``with_bagua``, ``bagua plugins``
    or config load). Each class sets ``name`` (the name users select it by) and ``Config`` (a pydantic
    model deriving from :class:`~bagua_core.algorithm.AlgorithmConfig` with ``name: Literal[...]``).
    """


@hookspec
def bagua_register_topologies() -> list[type]:
    """Return the communication topology classes this plugin provides (decentralized data parallel).

    Fires once, when the topology registry is first built. Each class sets ``name`` and derives from
    ``bagua_algorithms.decentralized_dp.topology.Topology``.
    """


@hookspec
def bagua_register_cache_stores() -> list[type]:
    """Return the cache store classes this plugin provides (``CachedDataset(backend=...)``).

    Fires once, when the store registry is first built. Each class sets ``name`` (the ``backend``
    string) and derives from ``bagua_contrib.utils.store.Store``.
    """


@hookspec
def bagua_register_codecs() -> list[type[Codec]]:
    """Return the :class:`~bagua_core.codecs.Codec` subclasses this plugin provides (compressors).

    Fires once, when the codec registry is first built (the first ``get_codec``, a config naming a
    ``compression``, or ``bagua plugins``). Each class sets ``name`` (the ``compression=`` string),
    ``bits_per_element``, ``header_bytes`` and ``unbiased``, and is built with no arguments.
    """
