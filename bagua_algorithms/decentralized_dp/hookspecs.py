"""The hook spec decentralized data parallel brings to the plugin manager, and its registry.

Added by this package's plugins (``bagua_add_hookspecs``), not by the core: the contract, the
:class:`~bagua_algorithms.decentralized_dp.topology.Topology` base, lives here.

Example::

    >>> from bagua_core.plugins import hookimpl
    >>> class StarPlugin:
    ...     @hookimpl
    ...     def bagua_register_topologies(self):
    ...         return [StarTopology]       # StarTopology.name == "star" -> topology="star"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bagua_core.plugins import NamedRegistry
from bagua_core.plugins.hookspecs import hookspec

if TYPE_CHECKING:  # pragma: no cover
    from bagua_algorithms.decentralized_dp.topology import Topology

__all__ = ["bagua_register_topologies", "topology_registry"]


@hookspec
def bagua_register_topologies() -> list[type[Topology]]:
    """Return the communication topology classes this plugin provides (decentralized data parallel).

    Fires once, when the topology registry is first built. Each class sets ``name`` and derives from
    ``bagua_algorithms.decentralized_dp.topology.Topology``.
    """


topology_registry: NamedRegistry = NamedRegistry("topology", "bagua_register_topologies")
