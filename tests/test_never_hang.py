"""Bad input on one rank raises on every rank instead of leaving the others in a collective."""

from __future__ import annotations

import torch

import bagua_core as bagua
from bagua_core.runtime.exceptions import BaguaConfigError, BaguaError, RankMismatchError
from tests.distributed import run_workers


def _bad_option_on_one_rank(rank: int) -> list[str]:
    messages = []
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    algorithm = {"name": "gradient_allreduce", "hierarchical": "yes please" if rank == 1 else False}
    try:
        model.with_bagua([optimizer], algorithm)
    except (BaguaConfigError, BaguaError) as exc:
        messages.append(f"{type(exc).__name__}: {exc}")
    other = torch.nn.Linear(4, 3 if rank == 2 else 2)
    try:
        other.with_bagua([torch.optim.SGD(other.parameters(), lr=0.1)], "gradient_allreduce")
    except RankMismatchError as exc:
        messages.append(str(exc))
    bagua.barrier()
    return messages


def test_bad_input_raises_on_every_rank() -> None:
    results = run_workers(_bad_option_on_one_rank, 3, timeout=90)
    for rank, messages in enumerate(results):
        assert len(messages) == 2, (rank, messages)
        if rank == 1:
            assert messages[0].startswith("BaguaConfigError") and "hierarchical" in messages[0]
        else:
            assert "failed on rank 1" in messages[0] and "hierarchical" in messages[0]
        assert "the model differs between" in messages[1] and "weight" in messages[1]
