"""Checkpoints of models sharded with FSDP2 (``torch.distributed.checkpoint``, 2 emulated nodes x 2 ranks).

Saved at step 3 and resumed by fresh processes, 3 more steps give the same bits as 6 steps without a
stop, for algorithms with state per shard (error feedback, the outer optimizer and fragments in flight,
replicas' own weights, qadam's frozen variance); a checkpoint of gradient_allreduce loads on another
layout (resharded by DCP) with the same whole model and optimizer state; one with state per shard is
refused there, naming the layout; a replicated checkpoint is not loaded into a sharded model.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.distributed import run_workers
from tests.test_powersgd import Net, _batch
from tests.test_sharded_algorithms import PER_NODE, _fully_shard, _full, _optimizer

STEPS, SAVE_AT = 6, 3


def _build(spec: dict, per_node: int = PER_NODE):
    import bagua_core as bagua

    model = _fully_shard(Net(), bagua.node_mesh("cpu"))
    optimizer = _optimizer(spec, model.parameters()) if spec["name"] != "gradient_allreduce" else \
        torch.optim.AdamW(model.parameters(), lr=0.01)
    return model, optimizer


def _steps(model, optimizer, rank: int, first: int, last: int) -> None:
    for t in range(first, last + 1):
        x, y = _batch(rank, t)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()


def _run(rank: int, spec: dict, directory: str | None, phase: str) -> list[torch.Tensor]:
    """``whole``: 6 steps; ``save``: 3 steps and a checkpoint; ``resume``: load, then steps 4-6. Returns the
    node model, this rank's optimizer state and the algorithm's state, flat."""
    from bagua_core import load_checkpoint, save_checkpoint

    model, optimizer = _build(spec)
    if phase == "resume":
        assert load_checkpoint(directory, model, optimizer) == SAVE_AT
    model = model.with_bagua([optimizer], {k: v for k, v in spec.items() if k not in ("warmup", "lr")})
    first, last = {"whole": (1, STEPS), "save": (1, SAVE_AT), "resume": (SAVE_AT + 1, STEPS)}[phase]
    _steps(model, optimizer, rank, first, last)
    if phase == "save":
        model.eval()
        with torch.no_grad():  # an evaluation first: FSDP2 leaves its root's parameters unsharded after it
            model(_batch(rank, 0)[0])
        model.train()
        save_checkpoint(SAVE_AT, directory, model, optimizer)
    out = [_full(model)]
    for state in optimizer.state.values():
        out += [(v.to_local() if hasattr(v, "to_local") else v).reshape(-1).float() for v in state.values()
                if isinstance(v, torch.Tensor)]
    model.bagua_shutdown()
    return out


CASES = {
    "powersgd": {"name": "powersgd", "matrix_approximation_rank": 2, "start_iter": 1, "min_compression_rate": 1},
    "diloco-streaming+codec": {"name": "diloco", "streaming": True, "inner_steps": 4, "fragments": 2,
                               "compression": "MinMaxUInt4"},
    "decentralized": {"name": "decentralized"},
    "qadam": {"name": "qadam", "warmup": 2, "lr": 0.002},
    "low_precision_decentralized": {"name": "low_precision_decentralized"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_on_the_same_layout_is_bit_identical(case: str, tmp_path) -> None:
    spec = CASES[case]
    whole = run_workers(_run, 2 * PER_NODE, spec, None, "whole", local_size=PER_NODE, timeout=240)
    run_workers(_run, 2 * PER_NODE, spec, str(tmp_path), "save", local_size=PER_NODE, timeout=240)
    resumed = run_workers(_run, 2 * PER_NODE, spec, str(tmp_path), "resume", local_size=PER_NODE, timeout=240)
    for rank, (a, b) in enumerate(zip(whole, resumed)):
        assert len(a) == len(b), f"rank {rank}: {len(a)} tensors without a stop, {len(b)} after resuming"
        for i, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), f"rank {rank}, tensor {i}: differs by up to {(x - y).abs().max().item():.3g}"


def _saved_whole(rank: int, directory: str) -> list[torch.Tensor]:
    from bagua_core import save_checkpoint

    spec = {"name": "gradient_allreduce"}
    model, optimizer = _build(spec)
    model = model.with_bagua([optimizer], spec)
    _steps(model, optimizer, rank, 1, SAVE_AT)
    save_checkpoint(SAVE_AT, directory, model, optimizer)
    out = [_full(model)] + [v.full_tensor().reshape(-1) for s in optimizer.state.values() for v in s.values()
                            if hasattr(v, "full_tensor")]
    model.bagua_shutdown()
    return out


def _loaded_whole(rank: int, directory: str, name: str) -> list[torch.Tensor] | str:
    from bagua_core import load_checkpoint

    model, optimizer = _build({"name": name})
    try:
        load_checkpoint(directory, model, optimizer)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    model = model.with_bagua([optimizer], name)
    out = [_full(model)] + [v.full_tensor().reshape(-1) for s in optimizer.state.values() for v in s.values()
                            if hasattr(v, "full_tensor")]
    model.bagua_shutdown()
    return out


def test_gradient_allreduce_checkpoint_loads_resharded_on_another_layout(tmp_path) -> None:
    saved = run_workers(_saved_whole, 2 * PER_NODE, str(tmp_path), local_size=PER_NODE, timeout=240)[0]
    for world, local in ((4, 4), (2, 1)):  # one node of 4 ranks; two nodes of one rank
        loaded = run_workers(_loaded_whole, world, str(tmp_path), "gradient_allreduce", local_size=local, timeout=240)
        for rank, tensors in enumerate(loaded):
            assert not isinstance(tensors, str), tensors
            assert len(tensors) == len(saved)
            for i, (x, y) in enumerate(zip(saved, tensors)):
                assert torch.equal(x, y), f"{world} ranks x {local}: rank {rank}, tensor {i} differs"


def _save_decentralized(rank: int, directory: str) -> None:
    _run(rank, CASES["decentralized"], directory, "save")


def test_state_per_shard_on_another_layout_is_refused_with_the_layout(tmp_path) -> None:
    run_workers(_save_decentralized, 2 * PER_NODE, str(tmp_path), local_size=PER_NODE, timeout=240)
    for message in run_workers(_loaded_whole, 4, str(tmp_path), "decentralized", local_size=4, timeout=240):
        assert isinstance(message, str) and "BaguaError" in message, message
        assert "2 node(s) x 2 rank(s)" in message and "'decentralized'" in message, message


def _replicated_into_sharded(rank: int, directory: str, phase: str) -> str:
    from bagua_core import load_checkpoint, save_checkpoint

    if phase == "save":
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        save_checkpoint(1, directory, model.with_bagua([optimizer], "gradient_allreduce"), optimizer)
        return ""
    model, optimizer = _build({"name": "gradient_allreduce"})
    try:
        load_checkpoint(directory, model, optimizer)
    except Exception as exc:
        return str(exc)
    return "loaded"


def test_a_replicated_checkpoint_is_not_loaded_into_a_sharded_model(tmp_path) -> None:
    run_workers(_replicated_into_sharded, 2 * PER_NODE, str(tmp_path), "save", local_size=PER_NODE)
    for message in run_workers(_replicated_into_sharded, 2 * PER_NODE, str(tmp_path), "load", local_size=PER_NODE):
        assert "saved from a replicated model and this one is sharded" in message, message
