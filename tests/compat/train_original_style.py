"""A complete training script written for the original Bagua (its API only), run by the tests with
``python -m bagua.distributed.launch --nproc_per_node=2``. ``--ddp`` wraps the model with
``bagua.data_parallel.DistributedDataParallel`` instead of ``with_bagua``. Rank 0 writes what it saw
to ``--out``: the loss before/after and whether every rank ends with the same weights."""

import argparse
import json

import torch
import torch.nn.functional as F

import bagua.torch_api as bagua
from bagua.torch_api.algorithms import gradient_allreduce


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ddp", action="store_true")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    bagua.init_process_group()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    algorithm = gradient_allreduce.GradientAllReduceAlgorithm()
    if args.ddp:
        model = bagua.data_parallel.DistributedDataParallel(model, optimizers=[optimizer], algorithm=algorithm)
    else:
        model = model.with_bagua([optimizer], algorithm)

    generator = torch.Generator().manual_seed(1 + bagua.get_rank())  # each rank its own data
    x = torch.randn(64, 8, generator=generator)
    y = (x[:, 0] > 0).long()
    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = torch.zeros(flat.numel() * bagua.get_world_size())
    bagua.allgather(flat, gathered)
    same = all(torch.equal(chunk, flat) for chunk in gathered.chunk(bagua.get_world_size()))
    if bagua.get_rank() == 0:
        with open(args.out, "w") as f:
            json.dump({"world": bagua.get_world_size(), "first": losses[0], "last": losses[-1], "same": same,
                       "buckets": len(model.bagua_buckets)}, f)


if __name__ == "__main__":
    main()
