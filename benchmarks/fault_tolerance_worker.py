"""One training process of the fault-tolerance benchmark (:mod:`benchmarks.fault_tolerance`), started by
``bagua run`` on an emulated host: ``--mode ft`` under ``bagua run --fault-tolerant`` (one replica, reading
its batches through ``QuorumSampler``), ``--mode failfast`` under ``bagua run --nnodes 3 --max-restarts N``
(one rank of a fixed world, resuming from the last ``save_checkpoint`` after a restart).

It writes its pid to ``<out>/<name>.pid`` first (the benchmark's killer reads it: the training process is
killed, not its launcher), then one JSON line per step to ``<out>/<name>.jsonl``: the time, the pid, the
step (the quorum's committed step, or the fail-fast step number), whether it committed, the quorum's size,
the heals so far and their bytes; and once an ``event: start`` line with when the process started, when its
imports were done, when the process group was up, when the model was wrapped and, for a warm standby
(``--standby``), when it was activated (it writes its pid file then). It stops when ``<out>/stop`` exists.

    bagua run --fault-tolerant --lighthouse http://10.77.0.1:29510 --max-restarts 1000 \\
        benchmarks/fault_tolerance_worker.py --mode ft --out /tmp/ft --algorithm '{"name": "bytegrad"}'
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the heavy imports: a restart's time to its first commit counts them

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script by torchrun

import torch  # noqa: E402

import bagua_core as bagua  # noqa: E402
from benchmarks.models import build_model, parameter_count  # noqa: E402

IMPORTED = time.time()
# Subnormal floats are flushed to zero: a step then costs the same at minute 10 as at minute 1, as in the shorter
# fault-free run it is compared with. Without it, diloco's inner SGD on mlp2m fills its momentum with subnormals
# (a weight whose gradient stays zero decays to the smallest one, and 0.9 times it rounds back to it) and slows
# down as it trains: its step took 1.45 ms over the first 1,000 inner steps, 9.2 over the eighth 1,000 (748k of
# 1.3M momentum entries subnormal), so a 10-minute chaos run kept "58%" of the fault-free rate with 3% of the time
# in stalls. The loss is the same to three significant digits either way at 1,000-4,000 steps.
torch.set_flush_denormal(True)


def process_name(mode: str) -> str:
    """The name of this process's files: ``BAGUA_BENCH_HOST`` (the emulated host, set by the benchmark: a
    fail-fast rank's GROUP_RANK may change at a restart), else the replica id or ``node<GROUP_RANK>``."""
    if os.environ.get("BAGUA_BENCH_HOST"):
        return os.environ["BAGUA_BENCH_HOST"]
    if mode == "ft":
        return os.environ.get("BAGUA_FT_REPLICA_ID", f"replica_{os.getpid()}")
    return f"node{os.environ.get('GROUP_RANK', os.environ.get('RANK', '0'))}"


def build_optimizer(model: torch.nn.Module, algorithm: dict) -> torch.optim.Optimizer:
    from bagua_core.plugins import algorithm_registry

    declared = algorithm_registry.get(algorithm["name"])
    if declared.capabilities.builds_optimizer:
        return declared.build_optimizer(model.parameters(), lr=0.01, steps_per_epoch=100)
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", choices=("ft", "failfast"), required=True)
    parser.add_argument("--algorithm", default='{"name": "gradient_allreduce"}', help="JSON, as with_bagua takes it")
    parser.add_argument("--model", default="mlp2m", help="a model of benchmarks/models.py")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--dataset", type=int, default=8192, help="synthetic samples")
    parser.add_argument("--out", required=True, help="folder of the pid files, the records and the stop file")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="failfast: steps between checkpoints")
    args = parser.parse_args()
    out = Path(args.out)
    name = process_name(args.mode)
    from bagua_features.fault_tolerance import standby

    if not standby.is_standby():  # (a warm standby writes it once it replaces a replica)
        (out / f"{name}.pid").write_text(str(os.getpid()))
    stop = out / "stop"
    if stop.exists():  # restarted after the end: nothing to do
        return
    algorithm = json.loads(args.algorithm)

    bagua.init_process_group()
    initialized = time.time()
    model = build_model(args.model, seed=0)
    optimizer = build_optimizer(model, algorithm)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.dataset, model[0].in_features, generator=generator)
    y = torch.randint(0, model[-1].out_features, (args.dataset,), generator=generator)
    start = 0
    if args.mode == "failfast":
        from bagua_features.checkpoints.checkpoint import load_checkpoint

        start = load_checkpoint(str(out / "checkpoints"), model, optimizer)
    model = model.with_bagua([optimizer], algorithm)
    wrapped = time.time()
    activated = standby.wait_for_activation()  # a warm standby waits here until it replaces a killed replica
    if activated is not None:
        (out / f"{name}.pid").write_text(str(os.getpid()))
    with open(out / f"{name}.jsonl", "a") as log:
        log.write(json.dumps({"event": "start", "pid": os.getpid(), "name": name, "started": STARTED,
                              "imported": IMPORTED, "initialized": initialized, "wrapped": wrapped,
                              "activated": activated,
                              "resumed_from": start, "params": parameter_count(model),
                              "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))}) + "\n")
        log.flush()
        if args.mode == "ft":
            train_ft(args, model, optimizer, x, y, log, stop)
        else:
            train_failfast(args, model, optimizer, x, y, log, stop, start)
    bagua.destroy_process_group()


def train_ft(args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
             y: torch.Tensor, log, stop: Path) -> None:
    from bagua_features.fault_tolerance import QuorumSampler, current_runtime

    runtime = current_runtime()
    if runtime is None:
        raise SystemExit("benchmarks/fault_tolerance_worker.py --mode ft must run under bagua run --fault-tolerant "
                         "(BAGUA_FAULT_TOLERANT=1)")
    sampler = QuorumSampler(len(x), batch_size=args.batch_size, seed=0)
    while not stop.exists():
        indices = sampler.next_indices(model)
        if indices is None:
            continue
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[indices]), y[indices]).backward()
        optimizer.step()
        log.write(json.dumps({
            "t": time.time(), "pid": os.getpid(), "step": runtime.manager.current_step(),
            "committed": bool(runtime.decision), "quorum": runtime.group.num_nodes,
            "healed": runtime.stats["healed"], "healed_bytes": runtime.stats["healed_bytes"],
        }) + "\n")
        log.flush()


def train_failfast(args: argparse.Namespace, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                   x: torch.Tensor, y: torch.Tensor, log, stop: Path, start: int) -> None:
    from bagua_features.checkpoints.checkpoint import save_checkpoint

    rank, world = bagua.get_rank(), bagua.get_world_size()
    step = start
    while True:
        # every rank stops at the same step: the stop file is looked at only on checkpoint steps, agreed by
        # an allreduce (a rank that saw it alone would leave the others in the next collective)
        if step % args.checkpoint_every == 0:
            flag = torch.tensor([1.0 if stop.exists() else 0.0])
            bagua.allreduce_inplace(flag)
            if flag.item() > 0:
                return
        step += 1
        # the data is indexed by the step: a resumed run retraces the same batches
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(step))
        indices = order[rank * args.batch_size:(rank + 1) * args.batch_size]
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x[indices]), y[indices]).backward()
        optimizer.step()
        if step % args.checkpoint_every == 0:
            save_checkpoint(step, str(Path(args.out) / "checkpoints"), model, optimizer)
        log.write(json.dumps({"t": time.time(), "pid": os.getpid(), "step": step, "committed": True,
                              "quorum": world, "checkpoint": step % args.checkpoint_every == 0}) + "\n")
        log.flush()


if __name__ == "__main__":
    main()
