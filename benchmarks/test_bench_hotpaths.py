"""pytest-benchmark micro-benchmarks of the framework's hot paths (one process, one thread).

* bucket flatten: building the flattened buckets of a 2M-parameter model, ``flattened_tensor`` on a
  flattened bucket (no copy) and on an unflattened one (a ``torch.cat``), and ``write_back``;
* hook overhead per step: one training step of a tiny model plain, under torch DDP and under bagua's
  gradient_allreduce, in a world of one process (the collective is a no-op copy there, so the difference
  to the plain step is the framework's own per-step cost).

    python -m pytest benchmarks/test_bench_hotpaths.py                    # tables
    python -m pytest benchmarks/test_bench_hotpaths.py --benchmark-disable  # run once each (smoke)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

from bagua_core.lifecycle import proxies

from benchmarks.models import build_model, synthetic_batch

__all__: list[str] = []


@pytest.fixture(scope="module")
def world_of_one() -> Iterator[None]:
    """A bagua process group of one rank (gloo on loopback) for the module's tests."""
    import torch.distributed as dist

    import bagua_core as bagua

    if dist.is_initialized():
        yield
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    bagua.init_process_group()
    try:
        yield
    finally:
        bagua.destroy_process_group()
        torch.set_num_threads(threads)


def _bagua_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    import bagua_core  # noqa: F401  (adds the bagua_* tensor methods)

    tensors = []
    for name, param in reversed(list(model.named_parameters())):
        param.grad = torch.randn_like(param)
        tensors.append(proxies.mark(param, name, "bench", lambda p: p.grad, lambda p, g: setattr(p, "grad", g)))
    return tensors


# --- bucket flatten ----------------------------------------------------------------------------------------
def test_bucket_build_flattened(benchmark) -> None:  # noqa: ANN001
    from bagua_core.lifecycle.algorithm import split_into_buckets

    tensors = _bagua_tensors(build_model("mlp2m"))
    buckets = benchmark(lambda: split_into_buckets(tensors, 10 * 1024 * 1024, do_flatten=True))
    assert all(bucket.check_flatten() for bucket in buckets)


@pytest.mark.parametrize("flatten", [True, False], ids=["flattened", "unflattened"])
def test_bucket_flattened_tensor(benchmark, flatten: bool) -> None:  # noqa: ANN001
    from bagua_core.lifecycle.bucket import BaguaBucket

    tensors = _bagua_tensors(build_model("mlp2m"))
    bucket = BaguaBucket(tensors, "bench", flatten=flatten)
    flat = benchmark(bucket.flattened_tensor)
    assert flat.numel() == bucket.padded_numel


def test_bucket_write_back_unflattened(benchmark) -> None:  # noqa: ANN001
    from bagua_core.lifecycle.bucket import BaguaBucket

    tensors = _bagua_tensors(build_model("mlp2m"))
    bucket = BaguaBucket(tensors, "bench", flatten=False)
    flat = bucket.flattened_tensor().clone()
    benchmark(bucket.write_back, flat)
    assert torch.equal(tensors[0].grad.reshape(-1), flat[: tensors[0].numel()])


# --- hook overhead per step --------------------------------------------------------------------------------
def _stepper(wrap: Callable[[torch.nn.Module, torch.optim.Optimizer], torch.nn.Module]) -> Callable[[], None]:
    model = build_model("tiny")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model = wrap(model, optimizer)
    x, y = synthetic_batch("tiny", 32, seed=0)

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for _ in range(5):
        step()
    return step


WRAPPERS: dict[str, Callable[[torch.nn.Module, torch.optim.Optimizer], torch.nn.Module]] = {
    "plain": lambda model, optimizer: model,
    "torch_ddp": lambda model, optimizer: torch.nn.parallel.DistributedDataParallel(model),
    "bagua_gradient_allreduce": lambda model, optimizer: model.with_bagua([optimizer], "gradient_allreduce"),
}


@pytest.mark.parametrize("wrapper", list(WRAPPERS))
def test_step_overhead_tiny_model(benchmark, world_of_one, wrapper: str) -> None:  # noqa: ANN001
    step = _stepper(WRAPPERS[wrapper])
    benchmark.pedantic(step, rounds=200, iterations=1, warmup_rounds=10)
