"""ENTRYPOINT-PENDING: the installed entry point still names this module; the plugin is the package."""

from bagua_algorithms.decentralized_dp import bagua_add_hookspecs, bagua_register_algorithms  # noqa: F401
