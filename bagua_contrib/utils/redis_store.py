"""``RedisStore``: the ``backend="redis"`` cache store, on given hosts or on a spawned local server.

Example::

    >>> store = RedisStore(capacity_per_node=2 << 30)      # spawns (or joins) this node's redis-server
    >>> store.set("k", b"v"); store.get("k")
    b'v'
    >>> store.shutdown()                                    # stops the server only if we spawned it
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bagua_contrib.utils.redis_server import LocalRedisServer, acquire_local_server
from bagua_contrib.utils.store import ClusterStore, Store, StoreUnavailableError

__all__ = ["DEFAULT_CAPACITY_PER_NODE", "RedisShard", "RedisStore"]

DEFAULT_CAPACITY_PER_NODE = 107_374_182_400  # 100 GB, the seed's default
T = TypeVar("T")


class RedisShard(Store):
    """One redis server at ``host:port``; a server that cannot be reached raises
    :class:`StoreUnavailableError` naming it."""

    name = "redis-shard"

    def __init__(self, host: str = "127.0.0.1", port: int = 6379, server: LocalRedisServer | None = None) -> None:
        self.host, self.port, self.server = host, int(port), server
        self.client = redis.Redis(host=host, port=self.port, socket_connect_timeout=2.0, socket_timeout=30.0,
                                  retry=Retry(NoBackoff(), 1))  # a server that is down fails fast

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            raise StoreUnavailableError(
                f"redis cache store at {self.host}:{self.port} is not reachable ({exc}); is the server running?"
            ) from exc

    def set(self, key: str, value: bytes) -> None:
        self._call(lambda: self.client.set(key, value))

    def get(self, key: str) -> bytes | None:
        return self._call(lambda: self.client.get(key))

    def num_keys(self) -> int:
        return int(self._call(self.client.dbsize))

    def clear(self) -> bool:
        return bool(self._call(self.client.flushdb))

    def mset(self, dictionary: dict[str, bytes]) -> None:
        if dictionary:
            self._call(lambda: self.client.mset(dictionary))

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        return list(self._call(lambda: self.client.mget(list(keys)))) if keys else []

    def status(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.exceptions.RedisError:
            return False

    def shutdown(self) -> None:
        self.client.close()
        if self.server is not None:
            self.server.stop()


class RedisStore(ClusterStore):
    """Cache store on redis.

    ``hosts``: a list of ``{"host": ..., "port": ...}`` dicts (or ``(host, port)`` pairs) of running
    servers. ``cluster_mode=True`` shards keys over all of them; ``False``: node n (``get_node_rank()``)
    uses host ``n % len(hosts)`` only, as the original.
    ``hosts=None`` spawns (or joins) a ``redis-server`` on this node, bound to 127.0.0.1, holding at
    most ``capacity_per_node`` bytes (then evicting least recently used keys); because it is reachable
    from this node only, each node caches its own samples. Values are bytes; nothing is pickled here.
    """

    name = "redis"

    def __init__(self, hosts: Sequence[Any] | None = None, cluster_mode: bool = True,
                 capacity_per_node: int = DEFAULT_CAPACITY_PER_NODE) -> None:
        if not isinstance(capacity_per_node, int) or capacity_per_node <= 0:
            raise ValueError(f"capacity_per_node must be a positive number of bytes, got {capacity_per_node!r}")
        self.capacity_per_node = capacity_per_node
        self.cluster_mode = cluster_mode
        if hosts is None:
            server = acquire_local_server(capacity_per_node)
            shards = [RedisShard("127.0.0.1", server.port, server)]
        else:
            addresses = [(h["host"], h["port"]) if isinstance(h, dict) else tuple(h) for h in hosts]
            if not addresses:
                raise ValueError("hosts must name at least one redis server, or be None to spawn one")
            if not cluster_mode:
                from bagua_core.runtime.env import get_node_rank

                addresses = [addresses[get_node_rank() % len(addresses)]]
            shards = [RedisShard(host, port) for host, port in addresses]
        super().__init__(shards)
