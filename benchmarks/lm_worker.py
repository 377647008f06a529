"""One rank of the language-model benchmark: each method trains a fresh model for a wall-clock budget.

Started by :mod:`benchmarks.lm` on every emulated host with the torchrun variables set. Every method
starts from the same weights and sees the same batches at the same step. The training clock runs only
while training (validation, and its communication, are excluded); every ``eval_every`` steps the
validation loss of the average of the ranks' weights (:func:`averaged_weights`) is computed on fixed
held-out windows, and one allgather agrees it and the slowest rank's clock, which also decides, on every
rank alike, when the budget is spent and how many steps to take before the next evaluation (about
``--evals`` per budget). After each method rank 0 appends its curve as one JSON line to ``--out``.

    python -m benchmarks.lm_worker --methods ddp,diloco --budget 120 --out curves.jsonl

With ``--ranks-per-host`` > 1 the model is sharded with FSDP2 over each host's ranks and the method runs
between the hosts on the shards; the methods ``hsdp`` and ``alone`` (:data:`SHARDED_BASELINES`) join them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from benchmarks.e2e_worker import hang_watchdog, read_counter
from benchmarks.lm_data import load_corpus
from benchmarks.lm_model import LM_CONFIGS, build_lm, lm_loss
from benchmarks.methods import finish, is_ddp, prepare

__all__ = ["LM_METHOD_OPTIONS", "algorithm_of", "train_method", "main"]

LM_METHOD_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    # method -> (algorithm or DDP baseline, its options); methods not listed use the algorithm's defaults
    "ddp_powersgd": ("ddp_powersgd", {"matrix_approximation_rank": 4, "start_iter": 10}),
    "powersgd": ("powersgd", {"matrix_approximation_rank": 4, "start_iter": 10}),
    "async": ("async", {"sync_interval_ms": 100}),
    "local_sgd": ("local_sgd", {"sync_every": 8}),
    "diloco": ("diloco", {"inner_steps": 25}),
    "diloco_streaming": ("diloco", {"inner_steps": 10, "streaming": True, "fragments": 4, "overlap_steps": 1,
                                    "compression": "MinMaxUInt4"}),
}
"""What each method of the LM benchmark runs; a registered algorithm not listed runs with its defaults."""

LR, WARMUP_STEPS = 1e-3, 20
SHARDED_ALONE = ("alone",)
SHARDED_BASELINES = ("hsdp",) + SHARDED_ALONE
"""Methods of a sharded run (``--ranks-per-host`` > 1) that are not bagua algorithms: ``hsdp``, torch's HSDP
(FSDP2 on the 2-D mesh, its all-reduce between hosts); ``alone``, every host training alone (FSDP2 inside
the host, nothing between hosts: the zero-communication limit, measured the same way)."""


def algorithm_of(method: str) -> tuple[str, dict[str, Any] | None]:
    return LM_METHOD_OPTIONS.get(method, (method, None))


def _make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), weight_decay=0.1)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


@contextlib.contextmanager
def averaged_weights(model: torch.nn.Module, group: Any = None) -> Iterator[None]:
    """Inside the block the model holds the average of the ranks' weights (what the job has trained;
    local weights differ between synchronisations for decentralized methods and DiLoCo); a checksum
    skips the allreduce where every rank holds the same weights. The local weights come back after.
    A sharded model: each rank's shards, averaged over ``group`` (the ranks holding the same shard)."""
    params = [_local(p) for p in model.parameters()]
    size = dist.get_world_size(group)
    flat = torch.cat([p.detach().reshape(-1).double() for p in params])
    checksum = torch.stack([flat.sum(), (flat * torch.arange(flat.numel(), dtype=torch.float64) % 9973).sum()])
    everyone = [torch.empty_like(checksum) for _ in range(size)]
    dist.all_gather(everyone, checksum, group=group)
    if all(torch.equal(everyone[0], other) for other in everyone):
        yield
        return
    saved = [p.detach().clone() for p in params]
    average = torch.cat([p.reshape(-1).float() for p in saved])
    dist.all_reduce(average, group=group)
    average /= size
    at = 0
    for p in params:
        p.copy_(average[at : at + p.numel()].view_as(p))
        at += p.numel()
    try:
        yield
    finally:
        for p, value in zip(params, saved):
            p.copy_(value)


def _agree(loss: float, clock: float) -> tuple[float, float]:
    """(mean validation loss, slowest clock) over the ranks."""
    mine = torch.tensor([loss, clock], dtype=torch.float64)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    stacked = torch.stack(everyone)
    return float(stacked[:, 0].mean()), float(stacked[:, 1].max())


def _held_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of parameters, gradients and optimizer state this rank holds (its shards on a sharded model)."""
    tensors = [_local(p) for p in model.parameters()] + [_local(p.grad) for p in model.parameters()
                                                         if p.grad is not None]
    tensors += [_local(v) for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return sum(t.numel() * t.element_size() for t in tensors)


def replicated_bytes(name: str) -> int:
    """What one rank holds of the replicated model after a step, measured (a local step, no communication)."""
    model = build_lm(name, seed=0)
    optimizer = _make_optimizer(model.parameters())
    x = torch.randint(0, 256, (1, LM_CONFIGS[name]["seq_len"] + 1))
    lm_loss(model, x[:, :-1], x[:, 1:]).backward()
    optimizer.step()
    return _held_bytes(model, optimizer)


def _shard(method: str, model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """FSDP2 on every block and the root: on the 2-D mesh for torch's HSDP, on the node's ranks (the mesh's
    ``"shard"`` row) for bagua's methods, which run between the nodes, and for ``alone`` (no communication
    between nodes: the zero-communication limit)."""
    from torch.distributed.fsdp import fully_shard

    target = mesh if method == "hsdp" else mesh["shard"]
    for block in model.blocks:
        fully_shard(block, mesh=target)
    fully_shard(model, mesh=target)
    return model


def train_method(method: str, corpus, args: argparse.Namespace, mesh: Any = None) -> dict[str, Any]:
    """``mesh``: the 2-D ("replicate", "shard") mesh of a sharded run (FSDP2 inside each host)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    seq_len = LM_CONFIGS[args.model]["seq_len"]
    model = build_lm(args.model, seed=0)
    params = sum(p.numel() for p in model.parameters())
    name, options = algorithm_of(method)
    if mesh is not None:
        model = _shard(name, model, mesh)
    if name in SHARDED_BASELINES:
        optimizer = _make_optimizer(model.parameters())
    else:
        model, optimizer = prepare(name, model, lr=LR, qadam_lr=LR, qadam_warmup=WARMUP_STEPS,
                                   make_optimizer=_make_optimizer, options=options)
    group = mesh["replicate"].get_group() if mesh is not None else None
    held = None
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    val_x, val_y = corpus.validation_windows(args.val_windows, seq_len)

    eval_tx = [0]  # bytes the evaluations' averaging sent: not training traffic

    def evaluate() -> float:
        before = read_counter(args.iface)
        model.eval()
        with torch.no_grad(), averaged_weights(model, group):
            loss = float(lm_loss(model, val_x, val_y))
        model.train()
        eval_tx[0] += read_counter(args.iface) - before
        return loss

    curve = [{"seconds": 0.0, "step": 0, "loss": _agree(evaluate(), 0.0)[0]}]
    clock, step, eval_every = 0.0, 0, args.first_eval_every
    tx0 = read_counter(args.iface)
    while True:
        x, y = corpus.batch(rank, step, args.batch_size, seq_len)
        started = time.perf_counter()
        optimizer.zero_grad()
        lm_loss(model, x, y).backward()
        optimizer.step()
        scheduler.step()
        clock += time.perf_counter() - started
        step += 1
        if held is None:
            held = _held_bytes(model, optimizer)
        if step % eval_every:
            continue
        loss, slowest = _agree(evaluate(), clock)
        curve.append({"seconds": slowest, "step": step, "loss": loss})
        if slowest >= args.budget or not torch.isfinite(torch.tensor(loss)):
            break
        eval_every = max(1, round(step / slowest * args.budget / args.evals))
    tx = read_counter(args.iface) - tx0 - eval_tx[0]
    if name not in SHARDED_BASELINES:
        finish(name, model)
    everyone = [None] * world
    dist.all_gather_object(everyone, held)
    return {"method": method, "algorithm": name, "options": options, "ddp": is_ddp(name) or name in SHARDED_BASELINES,
            "model": args.model, "params": params, "world_size": world, "batch_size": args.batch_size,
            "seq_len": seq_len, "budget_s": args.budget, "steps": step, "tx_bytes": tx, "curve": curve,
            "held_bytes_per_rank": max(everyone), "sharded": mesh is not None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", required=True, help="comma list of methods, run in this order")
    parser.add_argument("--model", default="lm11m")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--budget", type=float, default=120.0, help="training seconds per method")
    parser.add_argument("--evals", type=int, default=12, help="about this many evaluations per budget")
    parser.add_argument("--first-eval-every", type=int, default=5)
    parser.add_argument("--val-windows", type=int, default=16)
    parser.add_argument("--corpus-bytes", type=int, default=0, help="cap the training split (smoke runs)")
    parser.add_argument("--iface", default="eth0")
    parser.add_argument("--out", required=True)
    parser.add_argument("--method-timeout", type=float, default=900.0)
    parser.add_argument("--variants", default="{}", help='JSON: more methods, {"label": ["algorithm", {options}]}')
    parser.add_argument("--ranks-per-host", type=int, default=1,
                        help="> 1: FSDP2 shards the model over a host's ranks, the method runs between hosts")
    args = parser.parse_args(argv)
    LM_METHOD_OPTIONS.update({label: (name, options) for label, (name, options) in json.loads(args.variants).items()})
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import bagua_core as bagua

    corpus = load_corpus(max_bytes=args.corpus_bytes or None)
    bagua.init_process_group()
    mesh = None
    if args.ranks_per_host > 1:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (dist.get_world_size() // args.ranks_per_host, args.ranks_per_host),
                                mesh_dim_names=("replicate", "shard"))
    try:
        for method in args.methods.split(","):
            watchdog = hang_watchdog(method, args.method_timeout)
            row = train_method(method, corpus, args, mesh)
            if dist.get_rank() == 0:
                row["corpus"] = corpus.describe()
                row["replicated_bytes_per_rank"] = replicated_bytes(args.model)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            watchdog.cancel()
    finally:
        bagua.destroy_process_group()


if __name__ == "__main__":
    main()
