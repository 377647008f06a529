"""The main job: data-parallel training of an MLP on the shipped digits data set.

Started on every worker by ``bagua train`` (through torch's launcher); can also be run directly with
``bagua run --nproc_per_node 2 -m bagua_examples.train_digits --algorithm bytegrad``.
Rank 0 shows a progress bar and prints the summary: loss, test accuracy, samples/s and the payload
bytes handed to collectives.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import typing
from typing import Any

import torch
import torch.nn.functional as F
import tqdm

import bagua_core as bagua
from bagua_core.communication import stats
from bagua_core.config import algorithm_class_of, algorithm_config_of, load_config_file
from bagua_core.plugins import algorithm_registry
from bagua_examples.digits import DigitsMLP, load_digits
from bagua_examples.training_config import DEFAULT_LR, TrainingConfig

__all__ = ["train", "main", "parse_args"]


def _make_optimizer(
    model: torch.nn.Module, cfg: TrainingConfig, algorithm: type[bagua.Algorithm], steps_per_epoch: int
) -> torch.optim.Optimizer:
    if algorithm.capabilities.builds_optimizer:  # it needs an optimizer of its own kind
        return algorithm.build_optimizer(model.parameters(), lr=cfg.lr, steps_per_epoch=steps_per_epoch)
    lr = cfg.lr if cfg.lr is not None else DEFAULT_LR[cfg.optimizer]
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    return torch.optim.SGD(model.parameters(), lr=lr, momentum=cfg.momentum)


def resolve_device(choice: str) -> torch.device:
    """The device of ``--device``: ``auto`` is CUDA when every local rank has a GPU of its own.
    Call after ``init_process_group`` (which selected this rank's GPU)."""
    if choice == "cuda" and not torch.cuda.is_available():
        raise bagua.BaguaError("--device cuda, but torch sees no CUDA device here; use --device cpu or auto")
    if choice == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    if choice == "auto" and torch.cuda.device_count() < bagua.get_local_size():
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def _mean_over_ranks(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    bagua.allreduce_inplace(t, op=bagua.ReduceOp.AVG)
    return float(t.item())


def train(cfg: TrainingConfig, algorithm: Any) -> dict[str, Any]:
    """Train on this worker's shard; every rank returns the same summary dict."""
    rank, world = bagua.get_rank(), bagua.get_world_size()
    device = resolve_device(cfg.device)
    train_x, train_y, test_x, test_y = (t.to(device) for t in load_digits(seed=cfg.seed))
    torch.manual_seed(cfg.seed)
    model = DigitsMLP(cfg.hidden).to(device)
    name = algorithm_config_of(algorithm).name
    shard = torch.arange(rank, len(train_y), world, device=device)  # disjoint shards of equal size (+-1)
    steps_per_epoch = len(train_y) // world // cfg.batch_size  # equal on every rank
    optimizer = _make_optimizer(model, cfg, algorithm_class_of(name), steps_per_epoch)
    model = model.with_bagua([optimizer], algorithm)
    stats.reset()
    bar = tqdm.tqdm(total=cfg.epochs * steps_per_epoch, disable=rank != 0 or not cfg.progress,
                    desc=f"{name} x{world}", unit="step")
    started = time.perf_counter()
    loss_value = float("nan")
    for epoch in range(cfg.epochs):
        permutation = torch.randperm(len(shard), generator=torch.Generator().manual_seed(cfg.seed + epoch))
        order = shard[permutation.to(device)]
        for step in range(steps_per_epoch):
            idx = order[step * cfg.batch_size : (step + 1) * cfg.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            loss_value = loss.item()
            bar.update(1)
            bar.set_postfix(epoch=epoch + 1, loss=f"{loss_value:.4f}")
    elapsed = time.perf_counter() - started
    bar.close()
    if model.bagua_capabilities.background_work:
        model.bagua_algorithm.abort(model)  # stop its background communication on every rank
    communicated = stats.total_bytes()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    auto = getattr(model, "bagua_auto_result", None)
    summary = {
        "algorithm": name,
        "auto": auto,
        "world_size": world,
        "device": device.type,
        "epochs": cfg.epochs,
        "final_loss": _mean_over_ranks(loss_value),
        "test_accuracy": _mean_over_ranks(accuracy),
        "samples_per_s": world * cfg.epochs * steps_per_epoch * cfg.batch_size / max(_mean_over_ranks(elapsed), 1e-9),
        "bytes_communicated_per_rank": int(_mean_over_ranks(float(communicated))),
        "seconds": _mean_over_ranks(elapsed),
    }
    model.bagua_shutdown()
    return summary


def parse_args(argv: list[str] | None) -> tuple[TrainingConfig, Any, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithm", default=None, choices=[*algorithm_registry.names(), "auto"],
                        help="registered algorithm name, or auto: the fastest drop-in one, chosen while "
                             "training (default gradient_allreduce)")
    parser.add_argument("--config", default=os.environ.get("BAGUA_CONFIG_FILE"),
                        help="config file with [algorithm] and [training] tables")
    parser.add_argument("--summary-json", default=None, help="also write the summary to this file (rank 0)")
    for name, field in TrainingConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=field.description)
        elif typing.get_origin(field.annotation) is typing.Literal:
            parser.add_argument(flag, default=None, choices=typing.get_args(field.annotation), help=field.description)
        else:
            arg_type = type(field.default) if field.default is not None else float
            parser.add_argument(flag, default=None, type=arg_type, help=field.description)
    args = parser.parse_args(argv)
    options: dict[str, Any] = {}
    algorithm: Any = "gradient_allreduce"
    if args.config:
        data = load_config_file(args.config)
        options.update(data.get("training", {}))
        if "algorithm" in data or "name" in data:
            algorithm = args.config
    options.update({k: v for k, v in vars(args).items() if k in TrainingConfig.model_fields and v is not None})
    if args.algorithm:
        algorithm = args.algorithm
    return TrainingConfig(**options), algorithm, args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    cfg, algorithm, args = parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    bagua.init_process_group()  # a replica of a fault-tolerant job under `bagua train --fault-tolerant`
    rank = bagua.get_rank()
    try:
        from bagua_core.fault_tolerance import current_runtime

        if current_runtime() is not None:  # the shard follows each step's quorum
            from bagua_examples.train_digits_ft import train_fault_tolerant

            summary = train_fault_tolerant(cfg, algorithm)
        else:
            summary = train(cfg, algorithm)
    finally:
        bagua.destroy_process_group()
    if rank == 0:
        print(
            f"\n{summary['algorithm']} on {summary['world_size']} workers ({summary['device']}), "
            f"{summary['epochs']} epochs: "
            f"loss {summary['final_loss']:.4f}, test accuracy {summary['test_accuracy'] * 100:.2f}%, "
            f"{summary['samples_per_s']:.0f} samples/s, "
            f"{summary['bytes_communicated_per_rank'] / 1e6:.2f} MB handed to collectives per worker"
        )
        if summary.get("fault_tolerance"):
            print("fault-tolerant: " + ", ".join(f"{k} {v}" for k, v in summary["fault_tolerance"].items()))
        if summary["auto"]:
            auto = summary["auto"]
            times = ", ".join(f"{n} {t * 1e3:.2f} ms" for n, t in auto["step_time_s"].items())
            print(f"auto chose {auto['algorithm']} at step {auto['decided_at_step']} (step time per candidate: "
                  f"{times}; link latency {auto['latency_s'] * 1e3:.3f} ms, "
                  f"{auto['bandwidth_bytes_per_s'] / 1e6:.1f} MB/s)")
        if args.summary_json:
            with open(args.summary_json, "w") as fh:
                json.dump(summary, fh, indent=2)
    return summary


if __name__ == "__main__":
    main()
