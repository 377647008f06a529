"""The fault-injection matrix: every installed algorithm (and the decentralized data-parallel wrapper)
x {kill -9, an exception, an overflow, a hung rank, a different algorithm, option, environment} on two
ranks (see tests/faults.py). No cell may end in a hang or a silent divergence: a disagreement is
raised on every rank before the first step, naming what differs; any other fault ends every rank
within 10 s (a hang: BAGUA_COMM_TIMEOUT_S + 10 s) with an error naming the rank and the cause; an
overflow under GradScaler is skipped consistently. One test per cell, so a regression names its cell.
"""

from __future__ import annotations

import os

import pytest
import torch

from tests.distributed import run_workers_outcomes
from tests.faults import ALGORITHMS, FAULTS, HANG_TIMEOUT_S, NO_SCALER, STEPS, train_cell

BOUND_S = 10.0
IDENTICAL_ON_ALL_RANKS = {"gradient_allreduce", "bytegrad", "qadam", "local_sgd"}
"""Algorithms whose ranks end bit-identical: after an overflow on one rank, the same weights and scale."""
SAME_SKIPS = IDENTICAL_ON_ALL_RANKS | {"low_precision_decentralized"}
"""Algorithms whose GradScaler skips the same steps on every rank (they communicate gradients or
momenta, or communicate after the optimizer step)."""


def _run(tmp_path, algorithm: str, fault: str) -> tuple[list, float | None]:
    env = {"BAGUA_COMM_TIMEOUT_S": str(HANG_TIMEOUT_S if fault == "hang" else 30)}
    rank_env = {1: {"BAGUA_DEFAULT_BUCKET_SIZE": "4096", "LOCAL_WORLD_SIZE": "1"}} if fault == "environment" else {}
    outcomes = run_workers_outcomes(train_cell, 2, algorithm, fault, str(tmp_path), timeout=60, env=env,
                                    rank_env=rank_env)
    marker = tmp_path / "fault_at"
    return outcomes, float(marker.read_text()) if marker.exists() else None


def _ended(outcome, rank: int) -> dict:
    assert outcome.status == "ok", f"rank {rank} did not end with an outcome: {outcome.status} {outcome.value}"
    return outcome.value


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", FAULTS)
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
    if fault in ("algorithm", "option", "environment"):
        for result in results:
            assert result["at_wrap"] and result["error_type"] == "RankMismatchError", result
            assert "differs: rank 0" in result["error"], result["error"]
        assert results[0]["error"].split("\n")[1:] == results[1]["error"].split("\n")[1:]  # the same differences
        return
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
