"""The main job in fault-tolerant mode (``bagua train --fault-tolerant``): the same model and data as
``train_digits``, the batches drawn by ``QuorumSampler`` so that each step's shard follows the quorum (a
failed replica's share of the epoch is read by the survivors), each step committed or discarded on every
replica. The summary adds what the mode did to this replica's steps: committed and discarded, quorums,
heals."""

from __future__ import annotations

import os
import time
from typing import Any

import torch
import torch.nn.functional as F

import bagua_core as bagua
from bagua_core.runtime.communication import stats
from bagua_core.selection.config import algorithm_class_of, algorithm_config_of
from bagua_features.fault_tolerance import QuorumSampler, current_runtime, wait_for_activation
from bagua_examples.digits import DigitsMLP, load_digits
from bagua_examples.progress import Progress
from bagua_examples.run_metrics import metrics_summary, start_metrics
from bagua_examples.run_settings import make_optimizer, resolve_device
from bagua_examples.training_config import TrainingConfig

__all__ = ["format_fault_tolerance", "reports", "train_fault_tolerant"]


def reports() -> bool:
    """Whether this process draws the job's progress bar and prints its summary: rank 0 of the first replica
    ``bagua run --fault-tolerant`` started (``BAGUA_FT_REPLICA_INDEX``; every replica's rank 0 when unset)."""
    return bagua.get_rank() == 0 and os.environ.get("BAGUA_FT_REPLICA_INDEX", "0") == "0"


def format_fault_tolerance(stats: dict[str, Any]) -> str:
    """The summary's line on this replica's steps, rounded. Failures, restarts and heals of every replica are
    counted by the job's launcher, which sees them all (``bagua run --fault-tolerant`` prints them)."""
    parts = [f"{stats['committed']} committed, {stats['discarded']} discarded",
             f"{stats['quorums']} quorum{'' if stats['quorums'] == 1 else 's'}"]
    if stats["healed"]:
        parts.append(f"healed {stats['healed']} time{'' if stats['healed'] == 1 else 's'} "
                     f"({stats['heal_s']:.1f} s, {stats['healed_bytes'] / 1e6:.1f} MB)")
    if stats.get("first_commit_s") is not None:
        parts.append(f"first commit after {stats['first_commit_s']:.1f} s")
    replica = os.environ.get("BAGUA_FT_REPLICA_INDEX", "0")
    return f"steps (replica {replica}'s view): " + ", ".join(parts)


def train_fault_tolerant(cfg: TrainingConfig, algorithm: Any, tensorboard: str | None = None,
                         features: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Train this replica until the quorum's epoch reaches ``cfg.epochs``; return its summary. ``tensorboard``:
    each replica's rank 0 writes its metrics to ``DIR/replica_i``; ``features``: the features to run (the data
    follows each step's quorum, so a feature's data loader is not read)."""
    runtime = current_runtime()
    device = resolve_device(cfg.device)
    train_x, train_y, test_x, test_y = (t.to(device) for t in load_digits(seed=cfg.seed))
    torch.manual_seed(cfg.seed)
    model = DigitsMLP(cfg.hidden).to(device)
    name = algorithm_config_of(algorithm).name
    steps_per_epoch = len(train_y) // cfg.batch_size  # of one replica alone (qadam's warmup is set from it)
    optimizer = make_optimizer(model, cfg, algorithm_class_of(name), steps_per_epoch)
    model = model.with_bagua([optimizer], algorithm, features=features or None)
    # a warm standby (bagua run --fault-tolerant --standby N) waits here, built and wrapped, until it replaces a
    # failed replica; then it knows which (BAGUA_FT_REPLICA_INDEX, read below). Nothing for a replica
    wait_for_activation()
    step_optimizer = getattr(optimizer, "fuse_step", optimizer.step)  # a fused optimizer steps on flat tensors
    sampler = QuorumSampler(len(train_y), cfg.batch_size, seed=cfg.seed)
    stats.reset()
    metrics = start_metrics(model, tensorboard, os.environ.get("BAGUA_FT_REPLICA_INDEX", "0"))
    progress = Progress(cfg.epochs, None, f"{name} (fault-tolerant)", shown=reports() and cfg.progress)
    started = time.perf_counter()
    loss_value, samples, epoch, steps = float("nan"), 0, 0, 0
    while sampler.epoch < cfg.epochs:
        idx = sampler.next_indices(model)
        if idx is None:
            continue
        if sampler.epoch != epoch:  # the quorum's epoch moved on
            progress.epoch_done(epoch, loss_value, f"{steps} steps")
            epoch, steps = sampler.epoch, 0
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_x[idx.to(device)]), train_y[idx.to(device)])
        loss.backward()
        step_optimizer()
        if runtime.decision:
            loss_value, samples = loss.item(), samples + len(idx)
            metrics.note_loss(loss_value)
        steps += 1
        progress.step(sampler.epoch, loss_value, replicas=runtime.group.num_nodes)
    progress.epoch_done(epoch, loss_value, f"{steps} steps")
    elapsed = time.perf_counter() - started
    progress.close()
    model.eval()
    with torch.no_grad():
        accuracy = (model(test_x).argmax(1) == test_y).float().mean().item()
    summary = {
        "algorithm": name, "auto": None, "world_size": runtime.group.world_size, "device": device.type,
        "epochs": cfg.epochs, "final_loss": loss_value, "test_accuracy": accuracy,
        "samples_per_s": samples / max(elapsed, 1e-9), "bytes_communicated_per_rank": stats.total_bytes(),
        "seconds": elapsed, "fault_tolerance": {**runtime.stats, "faults": list(runtime.faults)},
        **metrics_summary(metrics, elapsed, lambda value: value),  # this rank's: replicas come and go
    }
    model.bagua_shutdown()
    return summary
