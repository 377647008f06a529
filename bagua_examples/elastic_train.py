"""Elastic training demo: checkpoints every ``--save-every`` steps and resumes from the last one.

Run through ``bagua run`` with torch's elastic options; when a worker dies, torchrun stops the
others, starts the whole group again (up to ``--max-restarts`` times) and every worker resumes from
the last complete checkpoint::

    bagua run --nnodes=1:2 --nproc_per_node=2 --max-restarts=3 \\
        --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:29400 \\
        -m bagua_examples.elastic_train --checkpoint-dir /tmp/ckpt --steps 200

``--kill-at-step S`` makes rank ``--kill-rank`` SIGKILL itself at step S of the first attempt
(``TORCHELASTIC_RESTART_COUNT == 0``), to see the restart. Communicated: gradients, by the chosen
algorithm (default gradient_allreduce); checkpoints are written by rank 0 (see
:mod:`bagua_features.checkpoints.checkpoint`). Rank 0 appends a JSON line to ``--events`` when an attempt starts and when it finishes, and the
final parameters go to ``--final-params`` (rank 0), so a test can check what happened.
"""

from __future__ import annotations

import argparse
import json
import os
import signal

import torch
import torch.nn.functional as F

import bagua_core as bagua
from bagua_features.checkpoints.checkpoint import load_checkpoint, save_checkpoint

__all__ = ["make_model", "make_optimizer", "batch", "main", "train"]


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def make_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's data of ``step``: the same whichever attempt computes it, so a resumed run retraces
    the uninterrupted one."""
    gen = torch.Generator().manual_seed(7919 * step + rank)
    return torch.randn(8, 10, generator=gen), torch.randint(0, 4, (8,), generator=gen)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--algorithm", default=None, help="algorithm name or config file (default: --config/gradient_allreduce)")
    parser.add_argument("--kill-at-step", type=int, default=None)
    parser.add_argument("--kill-rank", type=int, default=1)
    parser.add_argument("--events", default=None, help="append a JSON line per attempt here (rank 0)")
    parser.add_argument("--final-params", default=None, help="torch.save the final parameters here (rank 0)")
    args = parser.parse_args(argv)
    for name in ("steps", "save_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    return args


def _event(path: str | None, **event: object) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps(event) + "\n")


def main(argv: list[str] | None = None) -> None:
    args = _parse(argv)
    torch.set_num_threads(1)
    bagua.init_process_group()  # under torchelastic: a store prefix per restart attempt
    train(args)
    bagua.destroy_process_group()


def train(args: argparse.Namespace) -> list[torch.Tensor]:
    """The training loop of one attempt (after ``init_process_group``); returns the final parameters."""
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    rank = bagua.get_rank()
    model = make_model()
    optimizer = make_optimizer(model)
    start = load_checkpoint(args.checkpoint_dir, model, optimizer)  # 0 when there is none yet
    model = model.with_bagua([optimizer], args.algorithm)
    if rank == 0:
        print(f"attempt {attempt}: world size {bagua.get_world_size()}, resuming from iteration {start}", flush=True)
        _event(args.events, event="start", attempt=attempt, resumed_from=start, world_size=bagua.get_world_size())
    for step in range(start + 1, args.steps + 1):
        if attempt == 0 and step == args.kill_at_step and rank == args.kill_rank:
            os.kill(os.getpid(), signal.SIGKILL)  # a worker lost mid-training
        x, y = batch(rank, step)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step % args.save_every == 0:
            save_checkpoint(step, args.checkpoint_dir, model, optimizer)
    final = [p.detach().clone() for p in model.parameters()]
    if rank == 0:
        _event(args.events, event="finish", attempt=attempt, step=args.steps)
        if args.final_params:
            torch.save(final, args.final_params)
    model.bagua_shutdown()
    return final


if __name__ == "__main__":
    main()
