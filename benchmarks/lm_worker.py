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
between the hosts on the shards; the method ``hsdp`` (torch's HSDP) joins them. ``alone`` (every host
training alone, nothing between hosts) runs in both forms: its throughput is the zero-communication limit's.
``torchft_diloco`` is torchft's DiLoCo (:mod:`benchmarks.lm_torchft`). ``--seed`` seeds the initial weights
and the data order; ``--slow-host I:F`` runs host I at F of its speed (:mod:`benchmarks.slow_host`).

Methods whose ranks take their steps independently (:func:`steps_independently`: ``alone``, and ``async``
without warmup, whose training thread issues no collective; replicated runs only) evaluate at agreed training-clock times instead
of agreed step counts, so that a faster rank takes more steps, as it would without the benchmark; each
curve point carries the samples every rank trained on (``samples``). ``diloco`` and ``sparseloco`` with rounds
bounded in time (``round_seconds``: :func:`merges_in_rounds`) also let a faster host take more steps; they
evaluate once every rank has merged an agreed number of rounds (each rank counts its own merges; a rank that
gets there first waits in the evaluation's allgather, which no round waits for).
``--eval-after-merges`` evaluates ``diloco`` and ``sparseloco`` with rounds of inner steps right after their merges
too (:func:`steps_per_round`): every row of a comparison then sees the global weights, what the job holds after a
round, where by default those rows see the average of the local weights in the middle of a round (for sparseloco
that includes what still waits in its error-feedback accumulator).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from bagua_core.api import WrappedModule
from benchmarks.e2e_worker import hang_watchdog, read_counter
from benchmarks.lm_data import load_corpus
from benchmarks.lm_measure import averaged_weights, held_bytes, replicated_bytes
from benchmarks.lm_model import LM_CONFIGS, build_lm, lm_loss
from benchmarks.lm_torchft import TORCHFT_DILOCO, TorchftDiLoCo
from benchmarks.methods import finish, is_ddp, prepare
from benchmarks.slow_host import Pace, SlowHost

__all__ = ["LM_METHOD_OPTIONS", "LM_ROUND_SECONDS", "BASELINES", "SHARDED_BASELINES", "PEERS", "algorithm_of",
           "steps_independently", "merges_in_rounds", "steps_per_round", "train_method", "main"]

LM_ROUND_SECONDS = 21.0
"""``round_seconds`` of the modes that do not wait for a slow host: about what diloco's 25 inner steps of the
LM take on a host at full speed: ``lm11m`` alone took 0.86 s a step (42 steps in 36 s, 2 hosts on loopback, the
2-core VM: ``python -m benchmarks.lm --loopback --networks loopback --budget 30 --methods alone,diloco``)."""

LM_METHOD_OPTIONS: dict[str, tuple[str, dict[str, Any]]] = {
    # method -> (algorithm or DDP baseline, its options); methods not listed use the algorithm's defaults
    "ddp_powersgd": ("ddp_powersgd", {"matrix_approximation_rank": 4, "start_iter": 10}),
    "powersgd": ("powersgd", {"matrix_approximation_rank": 4, "start_iter": 10}),
    "async": ("async", {"sync_interval_ms": 100}),
    "local_sgd": ("local_sgd", {"sync_every": 8}),
    "diloco": ("diloco", {"inner_steps": 25}),
    # 12 inner steps: torchft's streaming needs a multiple of the fragment count, and both stream alike
    "diloco_streaming": ("diloco", {"inner_steps": 12, "streaming": True, "fragments": 4, "overlap_steps": 1,
                                    "compression": "MinMaxUInt4"}),
    "sparseloco": ("sparseloco", {"inner_steps": 25}),
    # overlapped rounds: the exchange travels during overlap_steps inner steps (eager: from a proxy outer step)
    "sparseloco_h5": ("sparseloco", {"inner_steps": 5}),
    "sparseloco_overlap": ("sparseloco", {"inner_steps": 5, "overlap_steps": 2}),
    "sparseloco_eager": ("sparseloco", {"inner_steps": 5, "overlap_steps": 2, "eager": True}),
    "diloco_overlap": ("diloco", {"inner_steps": 25, "overlap_steps": 8}),
    "diloco_eager": ("diloco", {"inner_steps": 25, "overlap_steps": 8, "eager": True}),
    # the modes where no host waits for a slower one: rounds bounded in time, merges weighted by samples
    "diloco_timed": ("diloco", {"round_seconds": LM_ROUND_SECONDS}),
    "sparseloco_timed": ("sparseloco", {"round_seconds": LM_ROUND_SECONDS}),
    "async_samples": ("async", {"sync_interval_ms": 100, "weighting": "samples"}),
    # the field's peers at bagua's settings (outer SGD lr 0.7, momentum 0.9, Nesterov: their defaults here)
    # (use_bucketization: one allreduce per fragment, not one per tensor: torchft's fastest form on a slow link)
    "torchft_diloco": (TORCHFT_DILOCO, {"inner_steps": 25, "use_bucketization": True}),
    "torchft_diloco_streaming": (TORCHFT_DILOCO, {"inner_steps": 12, "fragments": 4, "fragment_sync_delay": 1,
                                                  "fragment_update_alpha": 0.5, "use_bucketization": True}),
}
"""What each method of the LM benchmark runs; a registered algorithm not listed runs with its defaults. An
entry whose algorithm is not installed is left out of the method list (``sparseloco`` until it is)."""

LR, WARMUP_STEPS = 1e-3, 20
ALONE = "alone"
BASELINES = (ALONE,)
"""Methods that are no bagua algorithm and no DDP: ``alone``, every host training alone, nothing between
hosts (FSDP2 inside the host when sharded): the throughput of the zero-communication limit, measured the
same way, and each host's own model evaluated."""
SHARDED_BASELINES = ("hsdp", ALONE)
"""Baselines of a sharded run (``--ranks-per-host`` > 1): ``hsdp``, torch's HSDP (FSDP2 on the 2-D mesh, its
all-reduce between hosts), and ``alone``."""
PEERS = (TORCHFT_DILOCO,)
"""Methods from other libraries (:mod:`benchmarks.lm_torchft`)."""


def algorithm_of(method: str) -> tuple[str, dict[str, Any] | None]:
    return LM_METHOD_OPTIONS.get(method, (method, None))


def merges_in_rounds(name: str, options: dict[str, Any] | None) -> bool:
    """Whether ``name`` runs rounds bounded in time (diloco's and sparseloco's ``round_seconds``): every host takes
    its own number of steps and all of them merge at each round's end (evaluated after agreed merges)."""
    return name in ("diloco", "sparseloco") and (options or {}).get("round_seconds") is not None


def steps_independently(name: str, options: dict[str, Any] | None, sharded: bool = False) -> bool:
    """Whether each host of ``name`` may take its own number of steps: ``alone``, and ``async`` without warmup (its
    training thread issues no collective, its averaging runs on a thread of its own), never when sharded (FSDP2's
    collectives inside a host keep its ranks in step); and rounds bounded in time (:func:`merges_in_rounds`), where
    the ranks of a sharded host agree on their steps and the hosts do not."""
    if merges_in_rounds(name, options):
        return True
    return not sharded and (name == ALONE or (name == "async" and not (options or {}).get("warmup_steps", 0)))


def steps_per_round(name: str, model: torch.nn.Module) -> tuple[int, int] | None:
    """(inner steps H, warmup steps) of a method that merges every H steps after its warmup (``diloco`` and
    ``sparseloco`` without streaming or ``round_seconds``: one merge after the inner steps H, 2H, ...), else None.
    ``model``: prepared for ``name``."""
    if name not in ("diloco", "sparseloco"):
        return None
    config = model.bagua_algorithm.config
    if config.round_seconds is not None or (name == "diloco" and config.streaming):  # (sparseloco never streams)
        return None
    return config.inner_steps, config.warmup_steps


def _rounds_merged(model: torch.nn.Module) -> int:
    """Rounds bounded in time merged so far on this rank (every rank merges every round)."""
    return model.bagua_algorithm.merged.rounds


def _make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), weight_decay=0.1)


def _agree(loss: float, clock: float, step: int) -> tuple[float, list[float], list[int]]:
    """(mean validation loss, every rank's clock, every rank's steps)."""
    mine = torch.tensor([loss, clock, step], dtype=torch.float64)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    stacked = torch.stack(everyone)
    return float(stacked[:, 0].mean()), stacked[:, 1].tolist(), [int(s) for s in stacked[:, 2].tolist()]


def _shard(method: str, model: torch.nn.Module, mesh: Any) -> torch.nn.Module:
    """FSDP2 on every block and the root: on the 2-D mesh for torch's HSDP, on the node's ranks (the mesh's
    ``"shard"`` row) for everything else: bagua's methods (which run between the nodes), torchft's exchange,
    and ``alone`` (nothing between nodes)."""
    from torch.distributed.fsdp import fully_shard

    target = mesh if method == "hsdp" else mesh["shard"]
    for block in model.blocks:
        fully_shard(block, mesh=target)
    fully_shard(model, mesh=target)
    return model


def train_method(method: str, corpus, args: argparse.Namespace, mesh: Any = None, pace: Pace | None = None,
                 seed: int = 0) -> dict[str, Any]:
    """``mesh``: the 2-D ("replicate", "shard") mesh of a sharded run (FSDP2 inside each host); ``pace``: the
    slow host's emulation; ``seed``: the initial weights' and the data order's."""
    rank, world = dist.get_rank(), dist.get_world_size()
    pace = pace or Pace(None, rank, args.ranks_per_host, world)
    added_before = pace.added_s
    seq_len = LM_CONFIGS[args.model]["seq_len"]
    model = build_lm(args.model, seed=seed)
    corpus.seed = seed
    params = sum(p.numel() for p in model.parameters())
    name, options = algorithm_of(method)
    if mesh is not None:
        model = _shard(name, model, mesh)
    peer = None
    if name in SHARDED_BASELINES:
        optimizer = _make_optimizer(model.parameters())
    elif name == TORCHFT_DILOCO:
        optimizer = _make_optimizer(model.parameters())
        peer = TorchftDiLoCo(model, optimizer, options, host=rank // args.ranks_per_host,
                             hosts=world // args.ranks_per_host, local_rank=rank % args.ranks_per_host,
                             ranks_per_host=args.ranks_per_host, iface=args.iface)
    else:
        model, optimizer = prepare(name, model, lr=LR, qadam_lr=LR, qadam_warmup=WARMUP_STEPS,
                                   make_optimizer=_make_optimizer, options=options)
    group = mesh["replicate"].get_group() if mesh is not None else None
    # a bagua algorithm's seconds on the training thread in its hooks: what a step waited on communication
    metrics = model.bagua_metrics() if WrappedModule.is_wrapped(model) else None
    independent = steps_independently(name, options, sharded=mesh is not None)
    in_rounds = merges_in_rounds(name, options)
    # --eval-after-merges: rounds of H inner steps evaluated right after merges (steps counted from the warmup's end)
    rounds = steps_per_round(name, model) if args.eval_after_merges else None
    round_steps, offset = rounds if rounds is not None else (1, 0)
    held = None
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / WARMUP_STEPS))
    val_x, val_y = corpus.validation_windows(args.val_windows, seq_len)

    eval_tx = [0]  # bytes the evaluations' averaging sent: not training traffic
    averaged = [0]  # evaluations whose ranks held different weights (0 after merges: the global weights)

    def evaluate() -> float:
        before = read_counter(args.iface)
        model.eval()
        # alone: each host's own model; the others: the average of the ranks' weights (what the job holds)
        with torch.no_grad(), contextlib.nullcontext(False) if name == ALONE else averaged_weights(
                model, group, via=Path(args.out).parent) as differed:
            loss = float(lm_loss(model, val_x, val_y))
        averaged[0] += bool(differed)
        model.train()
        if isinstance(model, FSDPModule):  # the evaluation left the root unsharded, holding averaged weights
            model.reshard()
        eval_tx[0] += read_counter(args.iface) - before
        return loss

    curve = [{"seconds": 0.0, "step": 0, "samples": 0, "loss": _agree(evaluate(), 0.0, 0)[0]}]
    clock, step, next_at, next_round = 0.0, 0, None, 1
    eval_every = round_steps if rounds is not None else args.first_eval_every
    tx0 = read_counter(args.iface)
    while True:
        x, y = corpus.batch(rank, step, args.batch_size, seq_len)
        started = time.perf_counter()
        pace.begin()
        optimizer.zero_grad()
        lm_loss(model, x, y).backward()
        optimizer.step()
        scheduler.step()
        pace.end()
        clock += time.perf_counter() - started
        step += 1
        if held is None:
            held = held_bytes(model, optimizer)
        if in_rounds:  # right after an agreed merge
            due = _rounds_merged(model) >= next_round
        elif independent and next_at is not None:
            due = clock >= next_at
        else:
            due = step > offset and (step - offset) % eval_every == 0
        if not due:
            continue
        loss, clocks, steps = _agree(evaluate(), clock, step)
        slowest = max(clocks)
        curve.append({"seconds": slowest, "step": max(steps), "samples": sum(steps) * args.batch_size, "loss": loss})
        if slowest >= args.budget or not torch.isfinite(torch.tensor(loss)):
            break
        eval_every = round_steps * max(1, round(step / slowest * args.budget / args.evals / round_steps))
        next_at = slowest + args.budget / args.evals
        if in_rounds:
            merged = _rounds_merged(model)
            next_round = merged + max(1, round(merged / slowest * args.budget / args.evals))
    tx = read_counter(args.iface) - tx0 - eval_tx[0]
    extra: dict[str, Any] = {}
    if metrics is not None:  # the slowest rank's: the hosts wait for it at every evaluation
        exposed: list[Any] = [None] * world
        dist.all_gather_object(exposed, metrics.totals()["exposed_comm_s"] / max(step, 1))
        extra["exposed_s_per_step"] = max(exposed)
    if peer is not None:
        extra = peer.stats()
        peer.close()
    elif name not in SHARDED_BASELINES:
        finish(name, model)
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, (held, pace.added_s - added_before))
    return {"method": method, "algorithm": name, "options": options, "ddp": is_ddp(name) or name in SHARDED_BASELINES,
            "peer": name in PEERS, "model": args.model, "params": params, "world_size": world,
            "batch_size": args.batch_size, "seq_len": seq_len, "budget_s": args.budget, "steps": step, "tx_bytes": tx,
            "curve": curve, "held_bytes_per_rank": max(h for h, _ in everyone), "sharded": mesh is not None,
            "seed": seed, "independent_steps": independent,
            "evaluated": "after merges" if in_rounds or rounds is not None else "at clock times" if independent
            else "at step counts", "evals_averaged": averaged[0], "rank_steps": steps, "rank_clocks": clocks,
            "slow_host": None if pace.slow is None else [pace.slow.host, pace.slow.fraction], "pace": pace.describe(),
            "slow_added_s": [a for _, a in everyone], **extra}


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
    parser.add_argument("--seed", type=int, default=0, help="of the initial weights and the data order")
    parser.add_argument("--slow-host", default="", help="I:F: host I (from 0) at F of its speed (benchmarks.slow_host)")
    parser.add_argument("--eval-after-merges", action="store_true",
                        help="evaluate diloco and sparseloco with rounds of inner steps right after their merges")
    args = parser.parse_args(argv)
    LM_METHOD_OPTIONS.update({label: (name, options) for label, (name, options) in json.loads(args.variants).items()})
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    slow = SlowHost.parse(args.slow_host, world // args.ranks_per_host) if args.slow_host else None
    pace = Pace(slow, rank, args.ranks_per_host, world)  # pins this process before any thread starts
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
            row = train_method(method, corpus, args, mesh, pace, args.seed)
            if dist.get_rank() == 0:
                row["corpus"] = corpus.describe()
                row["replicated_bytes_per_rank"] = replicated_bytes(args.model, _make_optimizer)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            watchdog.cancel()
    finally:
        bagua.destroy_process_group()


if __name__ == "__main__":
    main()
