"""Every built-in algorithm trained the same way on any device, for comparisons across devices.

``ALGORITHMS`` maps a case name to the algorithm spec and what its results promise across devices:
``"exact"`` (bit-identical: the gradients, averages and compressed bytes do not depend on the device),
``"close"`` (the same arithmetic, but fused device kernels may round a last bit differently) or
``"consistent"`` (timing-dependent, like the asynchronous averaging: only finite and equal on every rank).

``train_all(rank, device_kind)`` runs inside a worker of ``tests.distributed.run_workers``: every case
in turn, on a model whose gradients are exact on any device (``ExactNet``: the loss is linear in the
weights, the data are multiples of 1/8, SGD's learning rate is a power of two), and returns each case's
final weights as CPU tensors (or the traceback of its failure). ``train_all_amp`` trains a small MLP
under ``torch.autocast`` with a ``GradScaler`` instead.
"""

from __future__ import annotations

import traceback
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import bagua_core as bagua
from bagua_core.plugins import algorithm_registry

__all__ = ["ALGORITHMS", "ExactNet", "cases_for", "check_amp_results", "train_all", "train_all_amp"]

ALGORITHMS: dict[str, tuple[dict[str, Any], str]] = {
    "gradient_allreduce": ({"name": "gradient_allreduce"}, "exact"),
    "gradient_allreduce_hierarchical": ({"name": "gradient_allreduce", "hierarchical": True}, "exact"),
    "bytegrad": ({"name": "bytegrad", "hierarchical": False}, "exact"),
    "decentralized": ({"name": "decentralized", "hierarchical": False}, "exact"),
    "decentralized_shift_one": (
        {"name": "decentralized", "hierarchical": False, "peer_selection_mode": "shift_one"}, "exact"),
    "low_precision_decentralized": ({"name": "low_precision_decentralized", "hierarchical": False}, "close"),
    "qadam": ({"name": "qadam", "hierarchical": False}, "close"),
    "decentralized_dp": ({"name": "decentralized_dp", "topology": "complete"}, "close"),
    "local_sgd": ({"name": "local_sgd", "sync_every": 2}, "close"),
    "sparseloco": ({"name": "sparseloco", "inner_steps": 2, "chunk_size": 64, "topk": 8}, "close"),
    "async": ({"name": "async", "sync_interval_ms": 5}, "consistent"),
}
STEPS = 4
LR = 2.0**-4
SHAPES = ((33, 17), (257,), (8, 8, 3), (5,))


def cases_for(world_size: int) -> list[str]:
    """The cases that run with ``world_size`` ranks and whose algorithm is installed."""
    installed = set(algorithm_registry.names())
    cases = []
    for case, (spec, _) in ALGORITHMS.items():
        if spec["name"] not in installed:
            continue
        if case == "decentralized_shift_one" and world_size % 2:
            continue  # pairs need an even number of ranks
        cases.append(case)
    return cases


class ExactNet(torch.nn.Module):
    """loss = sum_i <w_i, x_i>: the gradient of w_i is x_i exactly, on every device."""

    def __init__(self) -> None:
        super().__init__()
        self.weights = torch.nn.ParameterList(
            torch.nn.Parameter(torch.arange(torch.Size(shape).numel(), dtype=torch.float32).reshape(shape) / 64 - 1)
            for shape in SHAPES
        )

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        return sum((w * x).sum() for w, x in zip(self.weights, xs))


def _data(rank: int, step: int, device: torch.device) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return [(torch.randint(-8, 9, shape, generator=gen).float() / 8).to(device) for shape in SHAPES]


def _optimizer(spec: dict[str, Any], params: Any, lr: float) -> torch.optim.Optimizer:
    if spec["name"] == "qadam":
        from bagua_algorithms.q_adam import QAdamOptimizer

        # v is frozen after warmup: a coordinate whose warmup gradients were 0 would divide by eps alone
        return QAdamOptimizer(params, lr=lr / 16, warmup_steps=2, eps=1e-3)
    return torch.optim.SGD(params, lr=lr)


def _device(device_kind: str) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if device_kind == "cuda" else torch.device("cpu")


def _finish(model: torch.nn.Module) -> list[torch.Tensor]:
    abort = getattr(model.bagua_algorithm, "abort", None)
    if abort is not None:
        abort(model)
    weights = [p.detach().cpu().clone() for p in model.parameters()]
    model.bagua_shutdown()
    return weights


def _train_exact(rank: int, device: torch.device, spec: dict[str, Any]) -> list[torch.Tensor]:
    model = ExactNet().to(device)
    optimizer = _optimizer(spec, model.parameters(), LR)
    model = model.with_bagua([optimizer], dict(spec))
    for step in range(STEPS):
        optimizer.zero_grad()
        model(_data(rank, step, device)).backward()
        optimizer.step()
    return _finish(model)


def train_all(rank: int, device_kind: str) -> dict[str, Any]:
    """Each case's final weights (CPU tensors) and the device the run used; a failing case gives its
    traceback instead of failing the others."""
    device = _device(device_kind)
    results: dict[str, Any] = {"device": str(device), "backend": str(torch.distributed.get_backend())}
    for case in cases_for(bagua.get_world_size()):
        try:
            results[case] = _train_exact(rank, device, ALGORITHMS[case][0])
        except Exception:
            results[case] = traceback.format_exc()
    return results


def _with_scaler(spec: dict[str, Any], scaler: torch.amp.GradScaler) -> Any:
    """The algorithm for a loop with a GradScaler: an algorithm that steps the optimizer inside backward
    takes the scaler itself (an object, so not through the dict)."""
    if spec["name"] != "decentralized_dp":
        return dict(spec)
    from bagua_algorithms.decentralized_dp.algorithm import DecentralizedDPAlgorithm

    return DecentralizedDPAlgorithm(**{k: v for k, v in spec.items() if k != "name"}, scaler=scaler)


def _train_amp(rank: int, device: torch.device, spec: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    optimizer = _optimizer(spec, model.parameters(), 0.05)
    scaler = torch.amp.GradScaler(device.type)
    model = model.with_bagua([optimizer], _with_scaler(spec, scaler))
    dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    losses = []
    for step in range(6):
        gen = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(8, 16, generator=gen).to(device), torch.randint(0, 4, (8,), generator=gen).to(device)
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(float(loss.detach()))
    return {"weights": _finish(model), "scale": scaler.get_scale(), "losses": losses}


def train_all_amp(rank: int, device_kind: str) -> dict[str, Any]:
    """Like :func:`train_all`, for mixed precision: autocast (fp16 on CUDA, bf16 on the CPU) and a
    GradScaler; each case gives its weights, the scaler's final scale and the losses."""
    device = _device(device_kind)
    results: dict[str, Any] = {"device": str(device)}
    for case in cases_for(bagua.get_world_size()):
        try:
            results[case] = _train_amp(rank, device, ALGORITHMS[case][0])
        except Exception:
            results[case] = traceback.format_exc()
    return results


def check_amp_results(case: str, results: list[dict[str, Any]]) -> None:
    """What :func:`train_all_amp` must give for ``case`` on every rank: no failure, finite weights, a
    scale above 1 and bounded losses, and the same loss scale everywhere."""
    for rank, result in enumerate(results):
        value = result[case]
        if isinstance(value, str):
            pytest.fail(f"{case} rank {rank} failed under AMP:\n{value}")
        assert all(torch.isfinite(w).all() for w in value["weights"]), f"{case} rank {rank}: weights not finite"
        assert value["scale"] > 1.0 and all(loss < 10 for loss in value["losses"]), (case, value)
    scales = {result[case]["scale"] for result in results}
    assert len(scales) == 1, f"{case}: the ranks' GradScalers disagree: {scales}"
