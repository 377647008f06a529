"""``CacheLoader``: read-through cache of expensive loads in a store found by name (``backend``).

Values are serialised with :mod:`bagua_contrib.utils.serialization` (no pickle: a store others can
write cannot run code here). Writes are buffered and sent ``writer_buffer_size`` at a time with one
``mset``; a pending write is served from the buffer.

Example::

    >>> loader = CacheLoader(backend="redis", dataset_name="train", capacity_per_node=1 << 30)
    >>> sample = loader.get(7, lambda i: expensive_decode(i))    # loads, then caches
    >>> sample = loader.get(7, lambda i: expensive_decode(i))    # served from redis
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bagua_contrib.utils import serialization
from bagua_contrib.utils.store import Store

__all__ = ["CacheLoader"]


def _make_store(backend: str, kwargs: dict[str, Any]) -> Store:
    from bagua_contrib.hookspecs import cache_store_registry

    return cache_store_registry.get(backend)(**kwargs)


class CacheLoader:
    """``backend``: a registered cache store name; ``kwargs`` go to the store (e.g. ``hosts``,
    ``cluster_mode``, ``capacity_per_node`` for redis). Values are stored under ``"{dataset_name}_{key}"``
    (as the original documents), so several datasets can share a store."""

    def __init__(self, backend: str = "redis", dataset_name: str = "", writer_buffer_size: int = 1,
                 **kwargs: Any) -> None:
        if not isinstance(writer_buffer_size, int) or writer_buffer_size < 1:
            raise ValueError(f"writer_buffer_size must be a positive integer, got {writer_buffer_size!r}")
        self.backend = backend
        self.dataset_name = dataset_name
        self.writer_buffer_size = writer_buffer_size
        self.store = _make_store(backend, kwargs)
        self._pending: dict[str, bytes] = {}

    def _key(self, key: Any) -> str:
        return f"{self.dataset_name}_{key}"

    def get(self, key: Any, load_fn: Callable[[Any], Any]) -> Any:
        """The cached value of ``key``; on a miss ``load_fn(key)``, which is then cached."""
        cache_key = self._key(key)
        blob = self._pending.get(cache_key)
        if blob is None:
            blob = self.store.get(cache_key)
        if blob is not None:
            return serialization.loads(blob)
        value = load_fn(key)
        self._pending[cache_key] = serialization.dumps(value)
        if len(self._pending) >= self.writer_buffer_size:
            self.flush()
        return value

    def flush(self) -> None:
        """Write the buffered values to the store."""
        if self._pending:
            pending, self._pending = self._pending, {}
            self.store.mset(pending)

    def num_keys(self) -> int:
        """Number of keys in the store (after writing the buffered ones)."""
        self.flush()
        return self.store.num_keys()

    def shutdown(self) -> None:
        """Flush and release the store (stops a server only if this process spawned it)."""
        try:
            self.flush()
        finally:
            self.store.shutdown()
