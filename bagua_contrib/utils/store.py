"""The cache store interface (:class:`Store`) and :class:`ClusterStore`, which shards keys over stores.

A store maps ``str`` keys to ``bytes`` values. Backends are plugins: a class deriving from
:class:`Store` with a ``name`` (the ``backend=`` string of ``CachedDataset``/``CacheLoader``),
returned by a ``bagua_register_cache_stores`` hook implementation.

Example::

    >>> store = ClusterStore([RedisStore(hosts=[h]) for h in hosts])   # keys hashed over the hosts
    >>> store.mset({"a": b"1", "b": b"2"})
    >>> store.mget(["a", "b", "c"])
    [b'1', b'2', None]
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from bagua_core.runtime.exceptions import BaguaError

__all__ = ["ClusterStore", "Store", "StoreUnavailableError"]


class StoreUnavailableError(BaguaError):
    """A cache store could not be reached (a server that is down, a wrong host or port)."""


class Store:
    """Interface of a key-value cache store. Subclasses set ``name`` and implement every method."""

    name: str = ""

    def set(self, key: str, value: bytes) -> None:
        """Store ``value`` under ``key``."""
        raise NotImplementedError

    def get(self, key: str) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        raise NotImplementedError

    def num_keys(self) -> int:
        """Number of keys stored."""
        raise NotImplementedError

    def clear(self) -> bool:
        """Delete every key; ``True`` on success."""
        raise NotImplementedError

    def mset(self, dictionary: dict[str, bytes]) -> None:
        """Store several values at once."""
        raise NotImplementedError

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        """The values of ``keys`` in order, ``None`` for missing ones."""
        raise NotImplementedError

    def status(self) -> bool:
        """``True`` when the store is reachable."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Release the store (a store that started a server stops it)."""
        raise NotImplementedError


class ClusterStore(Store):
    """Shards keys over ``stores`` by a stable hash (crc32) of the key, the same in every process."""

    def __init__(self, stores: Sequence[Store]) -> None:
        if not stores:
            raise ValueError("ClusterStore needs at least one store, got none")
        self.stores = list(stores)
        self.num_stores = len(self.stores)

    def route(self, key: str) -> Store:
        """The store that holds ``key``."""
        return self.stores[zlib.crc32(key.encode("utf-8")) % self.num_stores]

    def set(self, key: str, value: bytes) -> None:
        self.route(key).set(key, value)

    def get(self, key: str) -> bytes | None:
        return self.route(key).get(key)

    def num_keys(self) -> int:
        return sum(store.num_keys() for store in self.stores)

    def clear(self) -> bool:
        return all([store.clear() for store in self.stores])  # noqa: C419  (clear every store)

    def mset(self, dictionary: dict[str, bytes]) -> None:
        shards: dict[int, dict[str, bytes]] = {}
        for key, value in dictionary.items():
            shards.setdefault(id(self.route(key)), {})[key] = value
        for store in self.stores:
            if id(store) in shards:
                store.mset(shards[id(store)])

    def mget(self, keys: Sequence[str]) -> list[bytes | None]:
        positions: dict[int, list[int]] = {}
        for index, key in enumerate(keys):
            positions.setdefault(id(self.route(key)), []).append(index)
        result: list[bytes | None] = [None] * len(keys)
        for store in self.stores:
            indices = positions.get(id(store))
            if indices:
                for index, value in zip(indices, store.mget([keys[i] for i in indices]), strict=True):
                    result[index] = value
        return result

    def status(self) -> bool:
        return all([store.status() for store in self.stores])  # noqa: C419  (ask every store)

    def shutdown(self) -> None:
        for store in self.stores:
            store.shutdown()
