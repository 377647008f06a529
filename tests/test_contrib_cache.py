"""CachedDataset / CacheLoader against real spawned redis-servers; stores, sharding, eviction, outages."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset

from bagua_contrib.cached_dataset import CacheLoader
from bagua_contrib.cached_dataset import CachedDataset
from bagua_contrib.utils import serialization
from bagua_contrib.utils.redis_server import acquire_local_server
from bagua_contrib.utils.redis_store import RedisShard, RedisStore
from bagua_contrib.utils.store import ClusterStore, Store, StoreUnavailableError
from bagua_core.runtime.exceptions import UnknownNameError
from bagua_contrib.hookspecs import cache_store_registry
from bagua_core.plugins import get_plugin_manager, hookimpl
from tests.distributed import free_port, run_workers

MB = 1 << 20


@pytest.fixture(autouse=True)
def _private_state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BAGUA_REDIS_STATE_DIR", str(tmp_path / "redis-state"))


class SlowDataset(Dataset):
    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def __getitem__(self, i: int):
        time.sleep(self.delay)
        gen = torch.Generator().manual_seed(i)
        return {"x": torch.randn(3, 4, generator=gen), "y": i % 3, "name": f"s{i}", "np": np.arange(i + 1)}

    def __len__(self) -> int:
        return self.n


def test_serialization_round_trip_and_no_pickle() -> None:
    value = {"t": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "b": torch.tensor([True, False]),
             "e": torch.empty(0, 2), "a": np.eye(2, dtype=np.float16), "n": None, "big": 2**80,
             "f": 1.5, "s": "é", "raw": b"\x00\x01", "tup": (1, [2, (3.0,)]), 7: False}
    back = serialization.loads(serialization.dumps(value))
    assert back.keys() == value.keys()
    assert torch.equal(back["t"], value["t"]) and back["t"].dtype == torch.bfloat16
    assert torch.equal(back["b"], value["b"]) and back["e"].shape == (0, 2)
    assert np.array_equal(back["a"], value["a"]) and back["a"].dtype == np.float16
    assert [back[k] for k in ("n", "big", "f", "s", "raw", "tup", 7)] == [None, 2**80, 1.5, "é", b"\x00\x01",
                                                                        (1, [2, (3.0,)]), False]
    import pickle

    with pytest.raises(TypeError, match="cannot cache"):
        serialization.dumps(object())
    with pytest.raises(TypeError, match="dtype object"):
        serialization.dumps(np.array([object()]))
    for bad in (pickle.dumps(os.getcwd), serialization.dumps([1, 2])[:-3], serialization.dumps(1) + b"x"):
        with pytest.raises(ValueError):
            serialization.loads(bad)


@pytest.mark.redis
def test_cached_dataset_is_faster_and_equal() -> None:
    source = SlowDataset(8, delay=0.05)
    dataset = CachedDataset(source, backend="redis", dataset_name="slow", writer_buffer_size=3,
                            capacity_per_node=64 * MB)
    try:
        assert isinstance(dataset.cache_loader.store, RedisStore) and len(dataset) == 8
        start = time.perf_counter()
        first = [dataset[i] for i in range(8)]
        cold = time.perf_counter() - start
        start = time.perf_counter()
        second = [dataset[i] for i in range(8)]
        warm = time.perf_counter() - start
        assert warm < cold / 4, (cold, warm)
        assert dataset.cache_loader.num_keys() == 8
        # a fresh loader (another job on the node) reads the same cache through the shared server
        other = CacheLoader("redis", dataset_name="slow", capacity_per_node=64 * MB)
        third = [other.get(i, lambda i: pytest.fail("should be cached")) for i in range(8)]
        assert not other.store.stores[0].server.spawned
        other.shutdown()
        for a, b, c in zip(first, second, third, strict=True):
            for got in (b, c):
                assert torch.equal(a["x"], got["x"]) and np.array_equal(a["np"], got["np"])
                assert (a["y"], a["name"]) == (got["y"], got["name"])
        assert dataset.cache_loader.store.status()  # the joiner's shutdown left the server running
    finally:
        dataset.cache_loader.shutdown()
    assert not dataset.cache_loader.store.status()
    with pytest.raises(StoreUnavailableError, match="not reachable"):
        dataset[0]


@pytest.mark.redis
def test_cluster_store_shards_keys(monkeypatch) -> None:
    servers = [acquire_local_server(16 * MB + i) for i in range(2)]
    store = RedisStore(hosts=[{"host": "127.0.0.1", "port": s.port} for s in servers])
    try:
        assert store.num_stores == 2
        store.clear()
        data = {f"k{i}": bytes([i]) * 10 for i in range(40)}
        store.mset(dict(list(data.items())[:20]))
        for key, value in list(data.items())[20:]:
            store.set(key, value)
        keys = list(data) + ["missing"]
        assert store.mget(keys) == list(data.values()) + [None]
        assert store.get("k3") == data["k3"] and store.num_keys() == 40
        counts = [shard.num_keys() for shard in store.stores]
        assert sum(counts) == 40 and min(counts) >= 8, counts
        for key, value in data.items():  # every key lives on exactly the shard the hash routes it to
            assert [shard.get(key) is not None for shard in store.stores].count(True) == 1
            assert store.route(key).get(key) == value
        single = RedisStore(hosts=[("127.0.0.1", s.port) for s in servers], cluster_mode=False)
        assert single.num_stores == 1 and single.num_keys() == counts[0]  # node 0: host 0
        for node in (1, 2, 3):  # node n uses host n % len(hosts)
            monkeypatch.setenv("GROUP_RANK", str(node))
            single = RedisStore(hosts=[("127.0.0.1", s.port) for s in servers], cluster_mode=False)
            assert single.stores[0].port == servers[node % 2].port and single.num_keys() == counts[node % 2]
        assert store.clear() and store.num_keys() == 0
    finally:
        for server in servers:
            server.stop()


@pytest.mark.redis
def test_eviction_at_capacity() -> None:
    capacity = 4 * MB
    store = RedisStore(capacity_per_node=capacity)
    try:
        value = os.urandom(16 * 1024)
        for start in range(0, 1024, 64):  # 16 MB written into a 4 MB server
            store.mset({f"v{i}": value for i in range(start, start + 64)})
        kept = store.num_keys()
        assert 0 < kept < 1024 // 4, kept
        used = int(store.stores[0].client.info("memory")["used_memory"])
        assert used <= capacity * 1.1, used
        assert store.get("v1023") == value  # the newest keys survive LRU eviction
        config = store.stores[0].client.config_get("*")
        assert config["maxmemory-policy"] == "allkeys-lru" and config["bind"] == "127.0.0.1"
        assert config["save"] == "" and config["appendonly"] == "no" and config["protected-mode"] == "yes"
    finally:
        store.shutdown()


def test_store_that_is_down_gives_a_clear_error() -> None:
    port = free_port()
    store = RedisStore(hosts=[{"host": "127.0.0.1", "port": port}])
    assert store.status() is False
    with pytest.raises(StoreUnavailableError, match=f"127.0.0.1:{port} is not reachable"):
        store.get("a")
    loader = CacheLoader("redis", hosts=[("127.0.0.1", port)])
    with pytest.raises(StoreUnavailableError, match="is the server running"):
        loader.get(1, lambda k: k)


class DictStore(Store):
    name = "test-dict"

    def __init__(self, prefix: str = "") -> None:
        self.data: dict[str, bytes] = {}
        self.prefix = prefix

    def set(self, key, value):
        self.data[key] = value

    def get(self, key):
        return self.data.get(key)

    def mset(self, dictionary):
        self.data.update(dictionary)

    def mget(self, keys):
        return [self.data.get(k) for k in keys]

    def num_keys(self):
        return len(self.data)

    def clear(self):
        self.data.clear()
        return True

    def status(self):
        return True

    def shutdown(self):
        pass


class _InlinePlugin:
    @hookimpl
    def bagua_register_cache_stores(self):
        return [DictStore]


def test_backend_is_a_plugin_and_values_are_not_pickled() -> None:
    assert cache_store_registry.get("redis") is RedisStore  # the built-in, through its entry point
    pm = get_plugin_manager()
    plugin = _InlinePlugin()
    pm.register(plugin, name="test-dict-store")
    try:
        dataset = CachedDataset(SlowDataset(4, 0.0), backend="test-dict", dataset_name="d", prefix="p")
        assert isinstance(dataset.cache_loader.store, DictStore) and dataset.cache_loader.store.prefix == "p"
        value = dataset[2]
        assert dataset.cache_loader.store.num_keys() == 0  # buffered (writer_buffer_size=20)
        assert torch.equal(dataset[2]["x"], value["x"])   # served from the write buffer
        assert dataset.cache_loader.num_keys() == 1
        assert dataset.cache_loader.store.get("d_2") is not None  # "{dataset_name}_{key}", as documented
        import pickle

        dataset.cache_loader.store.set("d_3", pickle.dumps(value))  # someone else wrote a pickle
        with pytest.raises(ValueError, match="bad header"):
            dataset[3]
        cluster = ClusterStore([DictStore(), DictStore()])
        cluster.mset({str(i): b"x" for i in range(20)})
        assert cluster.num_keys() == 20 and all(s.num_keys() for s in cluster.stores)
    finally:
        pm.unregister(plugin)
    with pytest.raises(UnknownNameError, match="redis"):
        CachedDataset(SlowDataset(1, 0.0), backend="test-dict")
    with pytest.raises(ValueError, match="writer_buffer_size must be a positive integer, got 0"):
        CacheLoader("redis", writer_buffer_size=0, hosts=[("127.0.0.1", 1)])
    assert RedisShard.name != RedisStore.name


def _join_node_server(rank: int, capacity: int) -> tuple[int, bool]:
    store = RedisStore(capacity_per_node=capacity)
    store.set(f"from-{rank}", str(rank).encode())
    import bagua_core as bagua

    bagua.barrier()
    assert store.get(f"from-{1 - rank}") == str(1 - rank).encode()  # the same server
    server = store.stores[0].server
    bagua.barrier()
    return server.port, server.spawned


@pytest.mark.redis
def test_jobs_on_a_node_share_one_server(tmp_path) -> None:
    import json
    import signal

    state = tmp_path / "shared"
    results = run_workers(_join_node_server, 2, 8 * MB, env={"BAGUA_REDIS_STATE_DIR": str(state)})
    record = json.loads((state / f"redis-{8 * MB}.json").read_text())
    try:
        assert results[0][0] == results[1][0] == record["port"]
        assert sorted(spawned for _, spawned in results) == [False, True]  # exactly one spawned it
    finally:
        os.kill(record["pid"], signal.SIGTERM)  # its spawner exited without shutdown(): clean up here
