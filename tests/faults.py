"""Fault injection on two ranks: one training run per cell of the fault matrix (tests/test_fault_matrix.py).

A cell trains a small model for ``STEPS`` steps with one algorithm (or the decentralized data-parallel
wrapper) under ``torch.amp.GradScaler("cpu")``, and rank 1 injects one fault at step ``FAULT_STEP``:

- ``kill``: SIGKILL itself;
- ``exception``: its next collective (any ``torch.distributed`` call, on whichever thread the
  algorithm communicates) raises ``RuntimeError("injected fault")``;
- ``nonfinite``: its loss is multiplied by inf (an overflow);
- ``hang``: its main thread sleeps for an hour (the cell runs with a short ``BAGUA_COMM_TIMEOUT_S``);
- ``algorithm``, ``option``, ``environment``: it wraps with another algorithm (the wrapper: rank 1
  uses ``with_bagua``), another value of one option, or another ``BAGUA_DEFAULT_BUCKET_SIZE`` (the
  wrapper: another ``LOCAL_WORLD_SIZE``, which the script passes on as ``local_world_size``).

Each rank returns what it saw (its error, when it ended, its final weights and loss scale); rank 1
writes the time of the fault to ``fault_at`` in the cell's directory before injecting it.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from tests.models import SmallNet, batch

__all__ = ["ALGORITHMS", "DISAGREEMENTS", "FAULTS", "FAULT_STEP", "HANG_TIMEOUT_S", "STEPS", "WRAPPER",
           "disagree_in_turn", "train_cell"]

STEPS, FAULT_STEP, HANG_TIMEOUT_S = 6, 3, 4
WRAPPER = "DecentralizedDataParallel"
FAULTS = ["kill", "exception", "nonfinite", "hang", "algorithm", "option", "environment"]
DISAGREEMENTS = ["algorithm", "option", "environment"]
"""The faults raised at wrap time, before the first collective: :func:`disagree_in_turn` runs them all in one job."""
ENVIRONMENT = {"BAGUA_DEFAULT_BUCKET_SIZE": "4096", "LOCAL_WORLD_SIZE": "1"}
"""Rank 1's environment in an ``environment`` cell."""
OPTIONS: dict[str, dict] = {  # the interesting phase of each algorithm falls inside the few steps
    "qadam": {"hierarchical": False},
    "async": {"sync_interval_ms": 20, "warmup_steps": 1},
    "decentralized": {"hierarchical": False},
    "low_precision_decentralized": {"hierarchical": False},
    "local_sgd": {"sync_every": 2},
    "powersgd": {"start_iter": 1},
    "diloco": {"inner_steps": 2},
    "sparseloco": {"inner_steps": 2, "chunk_size": 64, "topk": 8},
}
NO_SCALER = {"decentralized_dp"}  # it steps its optimizers inside backward: GradScaler cannot unscale first
_COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_single",
                "all_to_all_single", "reduce_scatter_tensor", "reduce_scatter_single", "isend", "irecv", "send", "recv",
                "barrier", "all_gather_object")


def installed_algorithms() -> list[str]:
    from bagua_core.plugins import algorithm_registry

    return sorted(algorithm_registry.names())


ALGORITHMS = installed_algorithms() + [WRAPPER]


def _other_algorithm(name: str) -> str:
    return "bytegrad" if name == "gradient_allreduce" else "gradient_allreduce"


def _changed_option(name: str, options: dict) -> dict:
    """The same options with the first boolean (else integer) option of the algorithm changed to a value its config
    accepts (sparseloco's ``eager`` alone is refused: it needs ``overlap_steps``)."""
    from bagua_core.plugins import algorithm_registry

    declared = algorithm_registry.get(name)
    values = declared.Config(**options).model_dump(exclude={"name"})
    for kind in (bool, int):
        for key, value in values.items():
            if type(value) is kind:
                changed = {**options, key: (not value) if kind is bool else value + 1}
                try:
                    declared.Config(**changed)
                except ValueError:
                    continue
                return changed
    raise AssertionError(f"algorithm {name!r} has no boolean or integer option to change")


def _build(rank: int, algorithm: str, fault: str) -> tuple[torch.nn.Module, Any, Any]:
    model = SmallNet(seed=0)
    scaler = None if algorithm in NO_SCALER else torch.amp.GradScaler("cpu", init_scale=2.0**10)
    if algorithm == WRAPPER and fault == "algorithm" and rank == 1:  # with_bagua where rank 0 uses the wrapper
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        return model.with_bagua([optimizer], "gradient_allreduce"), optimizer, scaler
    if algorithm == WRAPPER:
        from bagua_algorithms.decentralized_dp import DecentralizedDataParallel

        clip = 1.0 if fault == "option" and rank == 1 else 0.0
        local = int(os.environ["LOCAL_WORLD_SIZE"])  # a script passing its environment on
        wrapped = DecentralizedDataParallel(model, lambda named: torch.optim.SGD([p for _, p in named], lr=0.1),
                                            scaler=scaler, grad_clip_norm=clip, local_world_size=local)
        return wrapped, None, scaler
    if algorithm == "qadam":
        from bagua_algorithms.q_adam import QAdamOptimizer

        optimizer = QAdamOptimizer(model.parameters(), lr=0.01, warmup_steps=2)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    spec: dict = {"name": algorithm, **OPTIONS.get(algorithm, {})}
    if rank == 1 and fault == "algorithm":
        spec = {"name": _other_algorithm(algorithm)}
    elif rank == 1 and fault == "option":
        spec = {"name": algorithm, **_changed_option(algorithm, OPTIONS.get(algorithm, {}))}
    return model.with_bagua([optimizer], spec), optimizer, scaler


def _inject_collective_exception() -> None:
    def raising(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected fault")

    for name in _COLLECTIVES:
        setattr(dist, name, raising)


def _inject(fault: str, directory: str) -> None:
    with open(os.path.join(directory, "fault_at"), "w") as fh:
        fh.write(repr(time.time()))
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "exception":
        _inject_collective_exception()
    elif fault == "hang":
        time.sleep(3600)


def _step(rank: int, step: int, wrapped: torch.nn.Module, optimizer: Any, scaler: Any, overflow: bool) -> None:
    x, y = batch(rank, step)
    if optimizer is not None:
        optimizer.zero_grad()
    loss = F.cross_entropy(wrapped(x), y)
    if overflow:
        loss = loss * float("inf")
    (scaler.scale(loss) if scaler is not None else loss).backward()
    if optimizer is not None and scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    elif optimizer is not None:
        optimizer.step()


def train_cell(rank: int, algorithm: str, fault: str, directory: str) -> dict[str, Any]:
    """One cell on one rank (see the module doc); never raises: the outcome is returned."""
    result: dict[str, Any] = {"steps": 0, "error": None, "error_type": None, "at_wrap": False}
    try:
        wrapped, optimizer, scaler = _build(rank, algorithm, fault)
    except Exception as exc:
        result.update(error=str(exc), error_type=type(exc).__name__, at_wrap=True, ended_at=time.time())
        return result
    try:
        for step in range(STEPS):
            if rank == 1 and step == FAULT_STEP and fault in ("kill", "exception", "hang"):
                _inject(fault, directory)
            _step(rank, step, wrapped, optimizer, scaler, overflow=rank == 1 and step == FAULT_STEP and fault == "nonfinite")
            result["steps"] = step + 1
        capabilities = getattr(wrapped, "bagua_capabilities", None)  # (not on the decentralized_dp wrapper)
        if capabilities is not None and capabilities.background_work:
            wrapped.bagua_algorithm.abort(wrapped)  # async: every rank stops averaging
    except BaseException as exc:  # the outcome of the cell
        result.update(error=str(exc), error_type=type(exc).__name__)
    result["ended_at"] = time.time()
    result["params"] = torch.cat([p.detach().reshape(-1) for p in wrapped.parameters()])
    result["scale"] = float(scaler.get_scale()) if scaler is not None else None
    return result


def disagree_in_turn(rank: int, cells: list[tuple[str, str]], directory: str) -> None:
    """The ``algorithm``, ``option`` and ``environment`` cells of ``cells``, one after another in one job: each
    wraps a new model as :func:`train_cell` does (rank 1 with ``ENVIRONMENT`` set for an ``environment`` cell)
    and appends what it raised to ``rank<r>.jsonl`` in ``directory``, one JSON line per cell, so that the cells
    before a hang are reported. A cell that wraps without an error on both ranks records that and trains
    nothing. Each cell then checks with a barrier that both ranks are still in step."""
    import json

    with open(os.path.join(directory, f"rank{rank}.jsonl"), "a") as log:
        for algorithm, fault in cells:
            saved = dict(os.environ)
            if rank == 1 and fault == "environment":
                os.environ.update(ENVIRONMENT)
            result: dict[str, Any] = {"algorithm": algorithm, "fault": fault, "error": None, "error_type": None}
            try:
                wrapped, _, _ = _build(rank, algorithm, fault)
                capabilities = getattr(wrapped, "bagua_capabilities", None)
                if capabilities is not None and capabilities.background_work:
                    wrapped.bagua_algorithm.abort(wrapped)
            except Exception as exc:
                result.update(error=str(exc), error_type=type(exc).__name__)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            log.write(json.dumps(result) + "\n")
            log.flush()
            dist.barrier()
