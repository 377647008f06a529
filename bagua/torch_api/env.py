"""The launcher's environment (ranks, sizes, bucket size)."""

from __future__ import annotations

from bagua_core.runtime.env import (
    find_free_network_port,
    get_autotune_server_wait_time,
    get_default_bucket_size,
    get_local_rank,
    get_local_size,
    get_master_addr,
    get_node_rank,
    get_rank,
    get_world_size,
)

__all__ = [
    "find_free_network_port", "get_autotune_server_wait_time", "get_default_bucket_size", "get_local_rank",
    "get_local_size", "get_master_addr", "get_node_rank", "get_rank", "get_world_size",
]
