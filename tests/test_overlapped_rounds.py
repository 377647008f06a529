"""diloco and sparseloco with ``overlap_steps`` and ``eager``: every step equal (1e-6) to the rounds written here
from docs/algorithms.md with plain torch.distributed (2 and 3 replicas; diloco in fp32 with its Nesterov outer
step, sparseloco at bits=32); the exchange runs on the courier thread and the training thread does not wait for
it during the overlap; a checkpoint taken while an eager round's exchange is in flight resumes exactly; the
options' errors."""

from __future__ import annotations

import re
import time

import pytest
import torch
import torch.distributed as dist

from bagua_core.runtime.exceptions import BaguaConfigError
from bagua_core.selection.config import resolve_algorithm
from tests.distributed import run_workers
from tests.test_diloco import _resume, _step
from tests.test_powersgd import Net, _params

DILOCO = {"outer_lr": 0.7, "outer_momentum": 0.9}
SPARSELOCO = {"outer_lr": 1.0, "error_decay": 0.95, "chunk_size": 4096, "topk": 64}


class Outer:
    """The outer step as the docs state it: diloco's SGD with Nesterov momentum, sparseloco's plain SGD."""

    def __init__(self, name: str, options: dict) -> None:
        self.name, self.o, self.buf = name, {**(DILOCO if name == "diloco" else SPARSELOCO), **options}, None

    def step(self, theta: torch.Tensor, g: torch.Tensor, buf: torch.Tensor | None) -> tuple[torch.Tensor,
                                                                                            torch.Tensor | None]:
        """(theta', buf') of one outer step from (theta, buf) with gradient g; nothing is changed in place."""
        lr = self.o["outer_lr"]
        if self.name == "sparseloco":
            return theta - lr * g, None
        mu = self.o["outer_momentum"]
        buf = g.clone() if buf is None else mu * buf + g
        return theta - lr * (g + mu * buf), buf


def _sparse_message(e: torch.Tensor, numels: list[int], o: dict) -> torch.Tensor:
    """Per tensor, per chunk of C, the k entries of largest |e|, exactly (bits=32); zeros elsewhere."""
    C, k = o["chunk_size"], o["topk"]
    sent, at = torch.zeros_like(e), 0
    for numel in numels:
        for begin in range(at, at + numel, C):
            chunk = e[begin : min(begin + C, at + numel)]
            top = torch.topk(chunk.abs(), min(k, chunk.numel())).indices
            sent[begin + top] = chunk[top]
        at += numel
    return sent


def _reference(rank: int, name: str, options: dict, steps: int) -> list[torch.Tensor]:
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    params = list(model.parameters())
    numels = [p.numel() for p in params]
    R, H, tau, eager = dist.get_world_size(), options["inner_steps"], options.get("overlap_steps", 0), options.get(
        "eager", False)
    outer = Outer(name, options)

    def local() -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in params]).float()

    def assign(flat: torch.Tensor) -> None:
        with torch.no_grad():
            for p, v in zip(params, torch.split(flat, numels)):
                p.copy_(v.view_as(p))

    theta, buf, e, others, pending, history = local().clone(), None, torch.zeros(sum(numels)), None, None, []
    for t in range(1, steps + 1):
        _step(model, optimizer, rank, t, average_grads=False)
        if pending is not None and t == pending[0]:  # the average landed: the true outer step, progress kept
            _, average, anchor, contribution = pending
            theta, buf = outer.step(theta, average, buf)
            assign((local() - anchor) + theta)
            if eager:
                others = average * R - contribution
            pending = None
        if t % H == 0:  # the round's boundary
            x_sent = local()
            delta = theta - x_sent
            if name == "diloco":
                contribution = delta
                total = delta.clone()
                dist.all_reduce(total)
            else:
                e = outer.o["error_decay"] * e + delta
                contribution = _sparse_message(e, numels, outer.o)
                e = e - contribution
                everyone = [torch.empty_like(contribution) for _ in range(R)]
                dist.all_gather(everyone, contribution)
                total = torch.zeros_like(contribution)
                for other in everyone:
                    total += other
            average = total / R
            anchor = x_sent
            if eager:  # continue from the proxy outer step, on copies of theta and the momentum
                proxy = delta if others is None else (delta + others) / R
                anchor, _ = outer.step(theta, proxy, buf)
                assign(anchor)
            if tau == 0:
                theta, buf = outer.step(theta, average, buf)
                assign(theta)
            else:
                pending = (t + tau, average, anchor, contribution)
        history.append(_params(model))
    return history


def _run_both(rank: int, name: str, options: dict, steps: int) -> None:
    reference = _reference(rank, name, options, steps)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    extra = {"bits": 32} if name == "sparseloco" else {}
    model = model.with_bagua([optimizer], {"name": name, **extra, **options})
    impl = model.bagua_algorithm
    for t in range(1, steps + 1):
        _step(model, optimizer, rank, t, average_grads=False)
        torch.testing.assert_close(_params(model), reference[t - 1], rtol=1e-6, atol=1e-6,
                                   msg=lambda m, t=t: f"step {t}: {m}")
        if options.get("overlap_steps", 0) and t % options["inner_steps"] == 0:
            assert impl.futures, f"step {t}: the round's exchange is not on the courier"
    assert impl.merged.rounds == (steps - options.get("overlap_steps", 0)) // options["inner_steps"]
    model.bagua_shutdown()


CASES = {  # Net's tensors: 1152, 48, 2304, 48, 1536, 32, 96, 16, 960, 5 elements
    "diloco, overlap 2": ("diloco", {"inner_steps": 4, "overlap_steps": 2}, 2),
    "diloco, eager, 3 replicas": ("diloco", {"inner_steps": 3, "overlap_steps": 1, "eager": True}, 3),
    "diloco, eager, overlap 3": ("diloco", {"inner_steps": 4, "overlap_steps": 3, "eager": True,
                                            "outer_momentum": 0.5}, 2),
    "sparseloco, overlap 2": ("sparseloco", {"inner_steps": 4, "overlap_steps": 2, "chunk_size": 100, "topk": 7,
                                             "error_decay": 0.9, "outer_lr": 0.8}, 2),
    "sparseloco, eager, 3 replicas": ("sparseloco", {"inner_steps": 3, "overlap_steps": 2, "eager": True}, 3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_step_equals_the_reference(case: str) -> None:
    name, options, replicas = CASES[case]
    run_workers(_run_both, replicas, name, options, 14)


def _slow_exchange_is_not_waited_for(rank: int) -> list[float]:
    """Rank 1's exchange leaves 1.5 s late (it sleeps on the courier before its part): rank 0's inner steps during
    the overlap do not wait; its merge, after the overlap, does."""
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model = model.with_bagua([optimizer], {"name": "diloco", "inner_steps": 2, "overlap_steps": 1})
    impl = model.bagua_algorithm
    if rank == 1:
        impl.courier.submit(lambda: time.sleep(1.5))
    durations = []
    for t in range(1, 5):
        began = time.perf_counter()
        _step(model, optimizer, rank, t, average_grads=False)
        durations.append(time.perf_counter() - began)
    model.bagua_shutdown()
    return durations


def test_the_training_thread_does_not_wait_during_the_overlap() -> None:
    rank0 = run_workers(_slow_exchange_is_not_waited_for, 2)[0]
    # step 2 sends (nothing waited), step 3 merges: it waits for rank 1's late part
    assert rank0[1] < 1.0 and rank0[2] > 0.5, rank0


@pytest.mark.parametrize("name", ["diloco", "sparseloco"])
def test_checkpoint_with_an_eager_exchange_in_flight_resumes_exactly(tmp_path, name: str) -> None:
    # in flight after step 7 (sent after 6), after an eager merge (at 5): the others' sum held too
    run_workers(_resume, 2, str(tmp_path), {"name": name, "inner_steps": 3, "overlap_steps": 2, "eager": True},
                ("pending", "others"))


@pytest.mark.parametrize("name, options, says", [
    ("diloco", {"inner_steps": 4, "overlap_steps": 4}, "overlap_steps (4) must be smaller than inner_steps (4)"),
    ("sparseloco", {"inner_steps": 4, "overlap_steps": 5}, "overlap_steps (5) must be smaller than inner_steps (4)"),
    ("diloco", {"eager": True}, "eager needs overlap_steps > 0"),
    ("sparseloco", {"eager": True}, "eager needs overlap_steps > 0"),
    ("diloco", {"streaming": True, "eager": True}, "eager is not available with streaming=true"),
])
def test_bad_options_say_what_to_do(name: str, options: dict, says: str) -> None:
    with pytest.raises(BaguaConfigError, match=re.escape(says)):
        resolve_algorithm({"name": name, **options})
