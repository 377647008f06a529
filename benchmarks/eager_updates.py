"""Eager updates (Kale, Douillard, Donchev 2025) against references written from the paper, on the digits data.

Four ways of running DiLoCo's rounds (``inner_steps`` H, the exchange overlapped with ``overlap_steps`` tau inner
steps), written here in plain torch on 2 ranks over gloo, the same data, model and inner optimizer as ``bagua train``
(``DigitsMLP``, SGD lr 0.05, momentum 0.9, batches of 32), the outer optimizer SGD with Nesterov momentum:

- ``none``: no overlap (tau = 0): the outer step at the round's end;
- ``overlap``: the exchange overlapped; the replica trains on from its own weights and merges the outer step when
  the average lands, keeping what it trained meanwhile (bagua's ``overlap_steps``);
- ``eager``: bagua's ``eager=true`` (``bagua_algorithms/diloco/eager.py``): at the round's end the replica goes on
  from a proxy outer step with ``(own delta + the others' of the round before) / R``, and corrects it with the true
  outer step when the average lands;
- ``eager_paper``: the paper's reading without a correction: that proxy step *is* the replica's outer step (its own
  delta counted at once, the others' a round later), its momentum kept.

    python -m benchmarks.eager_updates [--seeds 3] [--steps 600] [--outer-momenta 0.9,0] [--markdown FILE]

It reports the test loss of the replicas' mean weights after ``steps`` steps (no timing: a loss per step count,
the same on any machine), per seed.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
from pathlib import Path

__all__ = ["VARIANTS", "main"]

VARIANTS = ("none", "overlap", "eager", "eager_paper")


def _flat(model) -> "torch.Tensor":
    import torch

    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _assign(model, values) -> None:
    import torch

    with torch.no_grad():
        at = 0
        for p in model.parameters():
            p.copy_(values[at : at + p.numel()].view_as(p))
            at += p.numel()


def _rank(rank: int, variant: str, H: int, tau: int, seed: int, steps: int, outer_lr: float, momentum: float,
          port: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    from bagua_examples.digits import DigitsMLP, load_digits

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    R = 2

    def outer_step(theta, g, buf):
        buf = g.clone() if buf is None else buf * momentum + g
        return theta - outer_lr * (g + momentum * buf if momentum else g), buf

    torch.manual_seed(seed)
    model = DigitsMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    train_x, train_y, test_x, test_y = load_digits(seed=seed)
    order = torch.Generator().manual_seed(seed * 10 + rank)
    index = torch.cat([torch.randperm(len(train_y), generator=order) for _ in range(32 * steps // len(train_y) + 1)])
    theta, buf, others, pending = _flat(model).clone(), None, None, None
    for t in range(1, steps + 1):
        batch = index[32 * (t - 1) : 32 * t]
        optimizer.zero_grad()
        F.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
        optimizer.step()
        if pending is not None and t == pending[0]:  # the round's average landed
            _, average, anchor, own = pending
            if variant != "eager_paper":  # the true outer step, what was trained since kept
                theta, buf = outer_step(theta, average, buf)
                _assign(model, _flat(model) - anchor + theta)
            if variant in ("eager", "eager_paper"):
                others = average * R - own
            pending = None
        if t % H:
            continue
        sent = _flat(model)
        delta = theta - sent
        total = delta.clone()
        dist.all_reduce(total)
        average = total / R
        if tau == 0:
            theta, buf = outer_step(theta, average, buf)
            _assign(model, theta)
            continue
        anchor = sent
        proxy = delta if others is None else (delta + others) / R
        if variant == "eager":  # on copies of theta and the momentum
            anchor, _ = outer_step(theta, proxy, buf)
            _assign(model, anchor)
        elif variant == "eager_paper":
            theta, buf = outer_step(theta, proxy, buf)
            anchor = theta
            _assign(model, theta)
        pending = (t + tau, average, anchor, delta)
    weights = _flat(model)
    dist.all_reduce(weights)
    _assign(model, weights / R)
    with torch.no_grad():
        loss = F.cross_entropy(model(test_x), test_y).item()
    if rank == 0:
        Path(out).write_text(f"{loss}")
    dist.barrier()  # both done before either tears the group down
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _run(variant: str, H: int, tau: int, seed: int, steps: int, outer_lr: float, momentum: float) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "loss")
        for attempt in range(2):
            try:
                mp.start_processes(_rank, args=(variant, H, tau, seed, steps, outer_lr, momentum, _free_port(), out),
                                   nprocs=2, start_method="spawn")
            except mp.ProcessExitedException:
                # gloo's teardown aborts a spawned rank now and then ("terminate called without an active exception")
                # after the run wrote its loss: the loss stands; before it, the run is made again, once
                if not os.path.exists(out) and attempt == 1:
                    raise
            if os.path.exists(out):
                return float(Path(out).read_text())
        raise RuntimeError(f"{variant}, seed {seed}: no loss written")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eager_updates", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--inner-steps", type=int, default=10)
    parser.add_argument("--overlap-steps", type=int, default=5)
    parser.add_argument("--outer-lr", type=float, default=0.7)
    parser.add_argument("--outer-momenta", default="0.9,0", help="outer Nesterov momenta to run, comma-separated")
    parser.add_argument("--markdown", default="")
    args = parser.parse_args(argv)
    rows = []
    for momentum in (float(m) for m in args.outer_momenta.split(",")):
        for variant in VARIANTS:
            tau = 0 if variant == "none" else args.overlap_steps
            losses = [_run(variant, args.inner_steps, tau, seed, args.steps, args.outer_lr, momentum)
                      for seed in range(args.seeds)]
            rows.append({"momentum": momentum, "variant": variant, "losses": losses})
            print(f"outer momentum {momentum:g}, {variant}: test loss {', '.join(f'{x:.3f}' for x in losses)}",
                  flush=True)
    lines = [f"`python -m benchmarks.eager_updates {' '.join(argv if argv is not None else sys.argv[1:])}`: 2 ranks, "
             f"H={args.inner_steps}, tau={args.overlap_steps} (none: 0), outer lr {args.outer_lr:g}, {args.steps} "
             f"steps; test loss of the replicas' mean weights, seed by seed (median).", "",
             "| outer momentum | variant | test loss per seed | median |", "| ---: | --- | --- | ---: |"]
    for row in rows:
        lines.append(f"| {row['momentum']:g} | {row['variant']} | {', '.join(f'{x:.3f}' for x in row['losses'])} | "
                     f"{statistics.median(row['losses']):.3f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return rows


if __name__ == "__main__":
    main()
