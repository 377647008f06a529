"""Run by the tests on 2 workers: ``bagua run --config configs/local_sgd.toml --standalone
--nproc_per_node=2 tests/local_sgd_worker.py OUT_DIR``. Compares local_sgd with a reference written
with plain torch.distributed and writes ``OUT_DIR/rank<r>.json``; any mismatch raises (exit != 0)."""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_core import destroy_process_group, get_rank, init_process_group  # the user API: this is a training script
from bagua_core.api import WrappedModule


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def data(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * step + rank)
    return torch.randn(5, 6, generator=gen), torch.randint(0, 3, (5,), generator=gen)


def flat_params(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def identical_on_all_ranks(t: torch.Tensor) -> bool:
    gathered = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, t)
    return all(torch.equal(gathered[0], g) for g in gathered)


def reference_step(model, optimizer, rank: int, step: int, sync_every: int, warmup: int) -> None:
    n = dist.get_world_size()
    x, y = data(rank, step)
    optimizer.zero_grad()
    F.cross_entropy(model(x), y).backward()
    if step <= warmup:
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= n
    optimizer.step()
    if step > warmup and (step - warmup) % sync_every == 0:
        with torch.no_grad():
            for p in model.parameters():
                dist.all_reduce(p)
                p /= n


def compare(algorithm, sync_every: int, warmup: int, steps: int, rank: int) -> list[int]:
    """Train both for ``steps``; return the steps after which all ranks held identical parameters."""
    reference = make_model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model = model.with_bagua([optimizer], algorithm) if algorithm is not None else model.with_bagua([optimizer])
    impl = WrappedModule(model).impl
    assert type(impl).__name__ == "LocalSGDAlgorithmImpl", type(impl)
    identical = []
    for step in range(1, steps + 1):
        reference_step(reference, ref_opt, rank, step, sync_every, warmup)
        x, y = data(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        torch.testing.assert_close(flat_params(model), flat_params(reference), rtol=1e-5, atol=1e-6)
        if identical_on_all_ranks(flat_params(model)):
            identical.append(step)
    WrappedModule(model).shutdown()
    return identical


def main() -> None:
    out_dir = sys.argv[1]
    torch.set_num_threads(1)
    init_process_group()
    rank = get_rank()
    from bagua_local_sgd import LocalSGDAlgorithm

    report = {
        "dict": compare({"name": "local_sgd", "sync_every": 3}, 3, 0, 7, rank),
        "warmup": compare(LocalSGDAlgorithm(sync_every=2, warmup_steps=3), 2, 3, 8, rank),
        "name": compare("local_sgd", 4, 0, 5, rank),
        # no algorithm given: read from BAGUA_CONFIG_FILE, set by `bagua run --config`
        "config_file": compare(None, 4, 10, 14, rank),
        "config_file_env": os.environ.get("BAGUA_CONFIG_FILE"),
    }
    destroy_process_group()
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as fh:
        json.dump(report, fh)


if __name__ == "__main__":
    main()
