"""Run by the tests on 2 workers: ``bagua run --standalone --nproc_per_node=2 tests/clipping_worker.py OUT_DIR
CONFIG...``. For every config file (an ``[algorithm]`` and a ``[features.gradient_clipping]`` table) it trains
the model with the file, and a copy with the file's algorithm alone, clipping by hand between backward and the
optimizer step (the reference); writes ``OUT_DIR/rank<r>.json``."""

from __future__ import annotations

import json
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_core import destroy_process_group, get_rank, get_world_size, init_process_group  # a training script
from bagua_core.api import BaguaConfigError, WrappedModule

STEPS = 6


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))


def data(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(100 * step + rank)
    return 4 * torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen)


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def train(algorithm, features, clip_by_hand: float | None, rank: int) -> tuple[torch.Tensor, list[float]]:
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model = model.with_bagua([optimizer], algorithm, features=features)
    norms = []
    for step in range(STEPS):
        x, y = data(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        if clip_by_hand is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip_by_hand)))
        optimizer.step()
        clipping = [f for f in WrappedModule(model).features if f.name == "gradient_clipping"]
        if clipping:
            norms.append(clipping[0].last_norm)
    weights = flat(model)
    WrappedModule(model).shutdown()
    return weights, norms


def torch_reference(max_norm: float, rank: int) -> torch.Tensor:
    """gradient_allreduce with clipping written with torch.distributed alone: the averaged gradients, clipped."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        x, y = data(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= get_world_size()
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm)
        optimizer.step()
    return flat(model)


def main() -> None:
    out, configs = sys.argv[1], sys.argv[2:]
    init_process_group()
    rank = get_rank()
    report: dict = {}
    for path in configs:
        with open(path, "rb") as f:
            table = tomllib.load(f)
        algorithm, max_norm = table["algorithm"], table["features"]["gradient_clipping"]["max_norm"]
        with_feature, feature_norms = train(path, None, None, rank)  # the file selects the algorithm and feature
        by_hand, hand_norms = train(dict(algorithm), None, max_norm, rank)
        unclipped, _ = train(dict(algorithm), None, None, rank)
        row = {"equal_to_by_hand": bool(torch.equal(with_feature, by_hand)),
               "clipping_changed_the_weights": not bool(torch.equal(with_feature, unclipped)),
               "norms_equal": feature_norms == hand_norms, "largest_norm": max(feature_norms)}
        if algorithm["name"] == "gradient_allreduce":
            row["equal_to_torch"] = bool(torch.equal(with_feature, torch_reference(max_norm, rank)))
        gathered = [torch.empty_like(with_feature) for _ in range(get_world_size())]
        dist.all_gather(gathered, with_feature)
        row["ranks_identical"] = all(torch.equal(gathered[0], g) for g in gathered)
        report[algorithm["name"]] = row
    try:
        model = make_model()
        model.with_bagua([torch.optim.SGD(model.parameters(), lr=0.1)], "decentralized_dp",
                         features={"gradient_clipping": {"max_norm": 1.0}})
        report["decentralized_dp"] = "wrapped"
    except BaguaConfigError as exc:
        report["decentralized_dp"] = str(exc)
    with open(f"{out}/rank{rank}.json", "w") as f:
        json.dump(report, f)
    destroy_process_group()


if __name__ == "__main__":
    main()
