"""The hook spec decentralized data parallel brings to the plugin manager.

Added by this package's plugins (``bagua_add_hookspecs``), not by the core. The contract it carries,
the :class:`~bagua_algorithms.decentralized_dp.topology.Topology` base, and the registry the spec fills,
``topology.topology_registry``, live in :mod:`bagua_algorithms.decentralized_dp.topology`, below this
module.

Example::

    >>> from bagua_core.plugins import hookimpl
    >>> class StarPlugin:
    ...     @hookimpl
    ...     def bagua_register_topologies(self):
    ...         return [StarTopology]       # StarTopology.name == "star" -> topology="star"
"""

from __future__ import annotations

from bagua_algorithms.decentralized_dp.topology import Topology
from bagua_core.api import hookspec

__all__ = ["bagua_register_topologies"]


@hookspec
def bagua_register_topologies() -> list[type[Topology]]:
    """Return the communication topology classes this plugin provides (decentralized data parallel).

    Fires once, when the topology registry is first built. Each class sets ``name`` and derives from
    ``bagua_algorithms.decentralized_dp.topology.Topology``.
    """
