"""Helpers the original's users reach for beyond the API pages (single process)."""

from __future__ import annotations

import pytest
import torch

from bagua.torch_api import utils
from bagua.torch_api.algorithms import Algorithm, AlgorithmImpl, GlobalAlgorithmRegistry
from bagua.torch_api.contrib.fuse.optimizer import calculate_mutual_groups, fuse_optimizer
from bagua_core.plugins import get_plugin_manager


def test_flatten_unflatten_and_contiguity():
    tensors = [torch.arange(3.0), torch.ones(2, 2)]
    flat = utils.flatten(tensors)
    assert flat.tolist() == [0, 1, 2, 1, 1, 1, 1]
    assert [t.shape for t in utils.unflatten(flat, tensors)] == [(3,), (2, 2)]
    base = torch.zeros(10)
    assert utils.check_contiguous([base[:4], base[4:]]) and not utils.check_contiguous([base[:4], base[5:]])
    assert utils.get_flattened_tensor(tensors).data_ptr() != tensors[0].data_ptr()


def test_statistical_average_of_a_constant_is_the_constant():
    import time

    assert utils.StatisticalAverage().records is not utils.StatisticalAverage().records
    average = utils.StatisticalAverage(last_update_time=time.time() - 4.0)  # 4 s of history at 2.5
    average.record(2.5)
    assert average.records == [2.5, 2.5, 2.5] and average.record_tail[1] == 2.5
    assert average.get(2.0) == pytest.approx(2.5) and average.get(100.0) == pytest.approx(2.5)


def test_calculate_mutual_groups_and_fused_count():
    base, other = torch.zeros(9), torch.zeros(9)
    a = [base[0:2], base[2:5], base[6:9]]  # 0 and 1 contiguous
    b = [other[0:2], other[2:5], other[5:8]]  # 0, 1, 2 contiguous
    assert calculate_mutual_groups([a]) == [[0, 1]]
    assert calculate_mutual_groups([b]) == [[0, 1, 2]]
    assert calculate_mutual_groups([a, b]) == []  # groups must be the same in every list
    assert calculate_mutual_groups([b, b]) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="equal lengths"):
        calculate_mutual_groups([a, a[:2]])
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    optimizer = fuse_optimizer(torch.optim.SGD(model.parameters(), lr=0.1))
    assert optimizer._bagua_fused_count == 0
    for _ in range(2):
        model(torch.randn(2, 3)).sum().backward()
        optimizer.fuse_step()
    assert optimizer._bagua_fused_count == 2


class _Impl(AlgorithmImpl):
    pass


class _MyAlgorithm(Algorithm):  # the original's style: plain attributes, no config
    def __init__(self, factor: float = 1.0):
        self.factor = factor

    def reify(self, process_group):
        return _Impl(process_group)


def test_global_algorithm_registry_and_init():
    assert {"gradient_allreduce", "bytegrad", "decentralized", "low_precision_decentralized", "qadam",
            "async"} <= set(GlobalAlgorithmRegistry.available_algorithms())
    assert GlobalAlgorithmRegistry.get("bytegrad").__name__ == "ByteGradAlgorithm"
    with pytest.raises(ValueError, match="already present"):
        GlobalAlgorithmRegistry.register("bytegrad", _MyAlgorithm)
    try:
        GlobalAlgorithmRegistry.register("my_algorithm", _MyAlgorithm, description="mine")
        assert GlobalAlgorithmRegistry["my_algorithm"] == {"algorithm": _MyAlgorithm, "description": "mine"}
        algorithm = Algorithm.init("my_algorithm", factor=2.0)
        assert isinstance(algorithm, _MyAlgorithm) and algorithm.factor == 2.0
        assert "my_algorithm" in str(GlobalAlgorithmRegistry)
    finally:
        get_plugin_manager().unregister(name="runtime-algorithm-my_algorithm")
    assert "my_algorithm" not in GlobalAlgorithmRegistry


@pytest.mark.redis
def test_start_redis_server_cli_starts_a_daemon(tmp_path):
    import redis

    from bagua.torch_api.contrib.utils.redis_store import RedisStore, start_redis_server_cli
    from bagua.torch_api.env import find_free_network_port

    port = find_free_network_port()
    start_redis_server_cli(port, 16 * 1024 * 1024, "--bind", "127.0.0.1", "--dir", str(tmp_path))
    client = redis.Redis(port=port)
    try:
        for _ in range(100):  # daemonized: it answers once it has forked
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                import time

                time.sleep(0.05)
        assert client.config_get("maxmemory")["maxmemory"] == str(16 * 1024 * 1024)
        store = RedisStore(hosts=[{"host": "127.0.0.1", "port": port}], cluster_mode=False)
        store.set("k", b"v")
        assert store.get("k") == b"v"
    finally:
        client.shutdown(nosave=True)
