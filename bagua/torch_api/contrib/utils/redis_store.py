"""``RedisStore`` and ``start_redis_server_cli``."""

from __future__ import annotations

from bagua_contrib.utils.redis_server import start_redis_server_cli
from bagua_contrib.utils.redis_store import RedisStore

__all__ = ["RedisStore", "start_redis_server_cli"]
