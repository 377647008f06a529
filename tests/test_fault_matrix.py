"""The fault-injection matrix: every installed algorithm (and the decentralized data-parallel wrapper)
x {kill -9, an exception, an overflow, a hung rank, a different algorithm, option, environment} on two
ranks (see tests/faults.py). No cell may end in a hang or a silent divergence: a disagreement is
raised on every rank before the first step, naming what differs; any other fault ends every rank
within 10 s (a hang: BAGUA_COMM_TIMEOUT_S + 10 s) with an error naming the rank and the cause; an
overflow under GradScaler is skipped consistently. One test per cell, so a regression names its cell.

The disagreement cells are checks made at wrap time, before the first collective: one job of two ranks runs
them all in turn (``test_disagreement``, one test per cell reading that job's record), where a job per cell spent
about 3 s of CPU starting its two ranks. The other faults end their job, so each has a job of its own.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.distributed import run_workers_outcomes
from tests.faults import (ALGORITHMS, DISAGREEMENTS, ENVIRONMENT, FAULTS, HANG_TIMEOUT_S, NO_SCALER, STEPS,
                          disagree_in_turn, train_cell)

BOUND_S = 10.0
IDENTICAL_ON_ALL_RANKS = {"gradient_allreduce", "bytegrad", "qadam", "local_sgd"}
"""Algorithms whose ranks end bit-identical: after an overflow on one rank, the same weights and scale."""
SAME_SKIPS = IDENTICAL_ON_ALL_RANKS | {"low_precision_decentralized"}
"""Algorithms whose GradScaler skips the same steps on every rank (they communicate gradients or
momenta, or communicate after the optimizer step)."""


def _run(tmp_path, algorithm: str, fault: str) -> tuple[list, float | None]:
    env = {"BAGUA_COMM_TIMEOUT_S": str(HANG_TIMEOUT_S if fault == "hang" else 30)}
    rank_env = {1: ENVIRONMENT} if fault == "environment" else {}
    outcomes = run_workers_outcomes(train_cell, 2, algorithm, fault, str(tmp_path), timeout=60, env=env,
                                    rank_env=rank_env)
    marker = tmp_path / "fault_at"
    return outcomes, float(marker.read_text()) if marker.exists() else None


def _ended(outcome, rank: int) -> dict:
    assert outcome.status == "ok", f"rank {rank} did not end with an outcome: {outcome.status} {outcome.value}"
    return outcome.value


@pytest.fixture(scope="module")
def disagreements(tmp_path_factory) -> tuple[list, list[dict[tuple[str, str], dict]]]:
    """Every disagreement cell, in one job of two ranks (:func:`tests.faults.disagree_in_turn`): how each rank
    ended, and what it recorded per cell."""
    directory = tmp_path_factory.mktemp("disagreements")
    cells = [(algorithm, fault) for algorithm in ALGORITHMS for fault in DISAGREEMENTS]
    outcomes = run_workers_outcomes(disagree_in_turn, 2, cells, str(directory), timeout=240,
                                    env={"BAGUA_COMM_TIMEOUT_S": "30"})
    recorded = []
    for rank in range(2):
        path = directory / f"rank{rank}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        recorded.append({(r["algorithm"], r["fault"]): r for r in map(json.loads, lines)})
    return outcomes, recorded


@pytest.mark.xdist_group("disagreements")  # one job for all of them, on one worker (--dist loadgroup)
@pytest.mark.timeout(300)
@pytest.mark.parametrize("fault", DISAGREEMENTS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_disagreement(disagreements, algorithm: str, fault: str) -> None:
    """Rank 1 wraps with another algorithm, another value of one option or another environment: both ranks
    raise a RankMismatchError at wrap time, before the first collective, listing the same differences."""
    outcomes, recorded = disagreements
    results = [recorded[rank].get((algorithm, fault)) for rank in range(2)]
    for rank, result in enumerate(results):
        assert result is not None, (f"rank {rank} did not reach this cell: it ended {outcomes[rank].status} "
                                    f"after {len(recorded[rank])} cells: {outcomes[rank].value}")
        assert result["error_type"] == "RankMismatchError", (rank, result)
        assert "differs: rank 0" in result["error"], result["error"]
    assert results[0]["error"].split("\n")[1:] == results[1]["error"].split("\n")[1:]  # the same differences


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", [f for f in FAULTS if f not in DISAGREEMENTS])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_cell(tmp_path, algorithm: str, fault: str) -> None:
    outcomes, fault_at = _run(tmp_path, algorithm, fault)
    if fault == "kill":
        assert outcomes[1].status == "exited" and outcomes[1].exitcode == -9, outcomes[1]
        healthy = _ended(outcomes[0], 0)
        assert healthy["error_type"] in ("CommunicationError", "PeerFailureError"), healthy
        assert "rank 1" in healthy["error"] and "exited" in healthy["error"], healthy["error"]
        assert healthy["ended_at"] - fault_at <= BOUND_S
        return
    results = [_ended(o, r) for r, o in enumerate(outcomes)]
    seen = {r: {k: v for k, v in result.items() if k != "params"} for r, result in enumerate(results)}
    if fault == "exception":
        assert "injected fault" in results[1]["error"], seen
        assert results[0]["error_type"] == "PeerFailureError", seen
        assert "rank 1 failed first" in results[0]["error"] and "injected fault" in results[0]["error"], seen
        assert max(r["ended_at"] for r in results) - fault_at <= BOUND_S, (seen, fault_at)
        return
    if fault == "hang":
        assert results[0]["error_type"] == "CommunicationTimeoutError", seen
        assert results[1]["error_type"] == "PeerFailureError", seen
        assert "rank 0 failed first" in results[1]["error"] and "BAGUA_COMM_TIMEOUT_S" in results[1]["error"], seen
        assert max(r["ended_at"] for r in results) - fault_at <= HANG_TIMEOUT_S + BOUND_S, (seen, fault_at)
        return
    assert fault == "nonfinite"
    for result in results:
        assert result["error"] is None and result["steps"] == STEPS, seen
    finite = [bool(torch.isfinite(r["params"]).all()) for r in results]
    if algorithm in NO_SCALER:  # no GradScaler: the NaN reaches every rank, as an allreduce carries it
        assert finite == [False, False]
        return
    assert finite == [True, True]
    if algorithm in SAME_SKIPS:
        assert results[0]["scale"] == results[1]["scale"] == 2.0**9, seen  # one skip, on every rank
    if algorithm in IDENTICAL_ON_ALL_RANKS:
        assert torch.equal(results[0]["params"], results[1]["params"])


def test_every_installed_algorithm_has_a_column() -> None:
    from bagua_core.plugins import algorithm_registry

    assert set(algorithm_registry.names()) <= set(ALGORITHMS) and os.path.exists(__file__)
