"""Non-finite values travel as in torch DDP: through every compressed exchange an inf/NaN reaches every
rank, so ``torch.amp.GradScaler("cpu")`` skips the same step on every rank, lowers its scale the same
way, and the weights stay finite and identical; qadam stays Adam (warmup) and its momentum exact to
the compression (after warmup) under a scaler. ``BAGUA_NONFINITE=raise`` is the opt-in for debugging."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bagua_algorithms.bytegrad.compressed import compressed_allreduce_on
from bagua_core.runtime.process_group import get_default_group
from tests.distributed import run_workers, run_workers_outcomes
from tests.models import SmallNet, batch

OVERFLOW_STEP, STEPS = 3, 5


def _exchange(rank: int, dtype: torch.dtype) -> list[torch.Tensor]:
    comm = get_default_group().get_global_communicator()
    values = torch.randn(1000, generator=torch.Generator().manual_seed(rank)).to(dtype)
    if rank == 1:
        values[10] = float("inf")  # chunk 0 of 2
    compressed_allreduce_on(values, comm)
    return [values]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])  # pipelined and plain exchanges
def test_a_chunk_with_inf_arrives_as_nan_on_every_rank(dtype: torch.dtype) -> None:
    results = [r[0] for r in run_workers(_exchange, 2, dtype)]
    assert torch.equal(results[0].isnan(), results[1].isnan())  # every rank ends with the same values
    assert torch.equal(results[0].nan_to_num(), results[1].nan_to_num())
    for values in results:
        assert values[:500].isnan().all()  # the chunk holding the inf
        assert values[500:].isfinite().all()  # the other chunk is unaffected


def _gather(tensor: torch.Tensor) -> list[torch.Tensor]:
    out = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(out, tensor.contiguous())
    return out


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _overflow_on_rank_1(rank: int, algorithm: dict, warmup: int) -> dict:
    from bagua_algorithms.q_adam import QAdamOptimizer

    model = SmallNet(seed=rank)
    if algorithm["name"] == "qadam":
        optimizer = QAdamOptimizer(model.parameters(), lr=0.01, warmup_steps=warmup, weight_decay=0.01)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model = model.with_bagua([optimizer], algorithm)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    out: dict = {"skipped_unchanged": None}
    for step in range(STEPS):
        x, y = batch(rank, step)
        before = _flat(model).clone()
        momentum = [s["exp_avg"].clone() for s in optimizer.state.values() if "exp_avg" in s]
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if rank == 1 and step == OVERFLOW_STEP:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        if step == OVERFLOW_STEP:
            after = [s["exp_avg"] for s in optimizer.state.values() if "exp_avg" in s]
            out["skipped_unchanged"] = torch.equal(_flat(model), before) and all(
                torch.equal(a, b) for a, b in zip(after, momentum))
            out["scale_after_overflow"] = scaler.get_scale()
    weights = _flat(model)
    out["finite"] = bool(weights.isfinite().all())
    out["identical"] = all(torch.equal(weights, w) for w in _gather(weights))
    out["scale"] = scaler.get_scale()
    out["trained"] = not torch.equal(weights, _gather(_flat(SmallNet(seed=0)))[0])
    return out


@pytest.mark.parametrize(
    "algorithm,warmup,local_size,identical",
    [
        ({"name": "gradient_allreduce"}, 0, 2, True),
        ({"name": "bytegrad", "hierarchical": False}, 0, 2, True),
        ({"name": "bytegrad", "hierarchical": True}, 0, 1, True),  # two nodes: compressed among leaders
        ({"name": "qadam", "hierarchical": False}, 10, 2, True),  # the overflow in warmup (full precision)
        ({"name": "qadam", "hierarchical": False}, 2, 2, True),  # the overflow after warmup (compressed momentum)
        ({"name": "low_precision_decentralized", "hierarchical": False}, 0, 2, False),  # exchange after the step
        ({"name": "async", "warmup_steps": 10}, 0, 2, True),  # async's warmup allreduces the gradients
    ],
    ids=["gradient_allreduce", "bytegrad", "bytegrad-hierarchical", "qadam-warmup", "qadam-momentum",
         "low_precision_decentralized", "async-warmup"],
)
def test_grad_scaler_skips_the_same_step_on_every_rank(algorithm: dict, warmup: int, local_size: int,
                                                         identical: bool) -> None:
    for out in run_workers(_overflow_on_rank_1, 2, algorithm, warmup, local_size=local_size):
        assert out["skipped_unchanged"], out  # the step (and qadam's momentum update) was skipped everywhere
        assert out["scale_after_overflow"] == 2.0**11 and out["scale"] == 2.0**11  # lowered once, everywhere
        assert out["finite"] and out["trained"]
        assert out["identical"] == identical


def _qadam_under_scaler(rank: int) -> None:
    """Warmup: bit-identical to the run without a scaler (a power-of-two scale is exact). After warmup:
    the momentum after each step is within two quantisation steps of the exact mean of the local
    momenta (weight decay included), as without a scaler."""
    from bagua_algorithms.q_adam import QAdamOptimizer

    n, wd, b1 = dist.get_world_size(), 0.1, 0.9
    runs = []
    for use_scaler in (False, True):
        model = SmallNet(seed=rank)
        optimizer = QAdamOptimizer(model.parameters(), lr=0.01, warmup_steps=3, weight_decay=wd)
        model = model.with_bagua([optimizer], {"name": "qadam", "hierarchical": False})
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10) if use_scaler else None
        params, trajectory = list(model.parameters()), []
        for t in range(6):
            x, y = batch(rank, t)
            m_prev = [optimizer.state[p]["exp_avg"].clone() for p in params]
            p_prev = [p.detach().clone() for p in params]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            if scaler is None:
                loss.backward()
                optimizer.step()
            else:
                scaler.scale(loss).backward()
                grads = [p.grad.clone() / scaler.get_scale() for p in params]  # what the momentum update used
                scaler.step(optimizer)
                scaler.update()
                if t >= 3:
                    local = torch.cat([m0.lerp(g + wd * w, 1 - b1).reshape(-1) for g, m0, w in zip(grads, m_prev, p_prev)])
                    everyone = _gather(local)
                    step = max(float(e.max() - e.min()) for e in everyone) / 255
                    actual = torch.cat([optimizer.state[p]["exp_avg"].reshape(-1) for p in params])
                    error = (actual - sum(everyone) / n).abs().max().item()
                    assert error <= 2 * step + 1e-6, (t, error, step)
            trajectory.append(_flat(model).clone())
        runs.append(trajectory)
        model.bagua_shutdown()
    for t in range(3):
        assert torch.equal(runs[0][t], runs[1][t]), f"warmup step {t} differs under the scaler"


def test_qadam_under_grad_scaler_is_qadam() -> None:
    run_workers(_qadam_under_scaler, 2)


def _raise_policy(rank: int) -> dict:
    model = SmallNet(seed=rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], {"name": "bytegrad", "hierarchical": False})
    try:
        for step in range(3):
            x, y = batch(rank, step)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            (loss * float("inf") if rank == 1 and step == 1 else loss).backward()
            optimizer.step()
    except Exception as exc:
        return {"type": type(exc).__name__, "error": str(exc)}
    return {"type": None}


def test_nonfinite_raise_is_opt_in_and_named_on_every_rank() -> None:
    outcomes = run_workers_outcomes(_raise_policy, 2, env={"BAGUA_NONFINITE": "raise", "BAGUA_COMM_TIMEOUT_S": "30"})
    mine, theirs = outcomes[1].value, outcomes[0].value
    assert mine["type"] == "NonFiniteError", mine
    assert theirs["type"] == "PeerFailureError" and "rank 1 failed first" in theirs["error"], theirs
    assert "NonFiniteError" in theirs["error"]
