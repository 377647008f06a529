"""The metrics of a wrapped module (``model.bagua_metrics``, ``bagua_features/metrics/``): per step the training
thread's seconds in bagua's hooks, the bytes handed to collectives and the loss, per round the compression ratio,
checked against what the run counted and read back from the TensorBoard event file rank 0 wrote."""

from __future__ import annotations

import math
import pathlib

import pytest
import torch

from tests.distributed import run_workers

pytestmark = pytest.mark.timeout(300)

STEPS = 6


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _train(rank: int, algorithm, log_dir: str | None) -> dict:
    model = _model()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model = model.with_bagua([optimizer], algorithm)
    metrics = model.bagua_metrics(log_dir=log_dir)
    losses = []
    generator = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = model(torch.randn(4, 8, generator=generator)).pow(2).mean()
        loss.backward()
        optimizer.step()
        metrics.note_loss(loss)  # after the step: still this step's
        losses.append(loss.item())
    metrics.close()
    model.bagua_shutdown()
    return {"steps": list(metrics.steps), "rounds": list(metrics.rounds), "totals": metrics.totals(),
            "losses": losses, "param_bytes": param_bytes}


def _scalars(log_dir: pathlib.Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_gradient_allreduce_steps_and_rounds_match_the_event_file(tmp_path: pathlib.Path) -> None:
    pytest.importorskip("tensorboard")
    results = run_workers(_train, 2, "gradient_allreduce", str(tmp_path / "tb"), timeout=240)
    rank0 = results[0]
    steps, rounds = rank0["steps"], rank0["rounds"]
    assert [s.step for s in steps] == list(range(1, STEPS + 1))
    # the gradients of every parameter, handed once to an allreduce per step
    assert all(s.bytes == rank0["param_bytes"] for s in steps), (steps, rank0["param_bytes"])
    assert all(s.exposed_comm_s > 0 for s in steps)
    assert [s.loss for s in steps] == pytest.approx(rank0["losses"])
    assert len(rounds) == STEPS and all(r.compression_ratio == pytest.approx(1.0) for r in rounds)
    assert all(r.fault_tolerance is None for r in rounds)
    assert rank0["totals"]["bytes"] == STEPS * rank0["param_bytes"]
    assert rank0["totals"]["exposed_comm_s"] == pytest.approx(sum(s.exposed_comm_s for s in steps))

    written = sorted(p.name for p in (tmp_path / "tb").iterdir())
    assert len(written) == 1, written  # rank 0 alone writes
    scalars = _scalars(tmp_path / "tb")
    assert set(scalars) == {"step/exposed_comm_s", "step/bytes", "step/loss", "round/compression_ratio",
                            "round/bytes"}
    assert scalars["step/bytes"] == [(s.step, float(s.bytes)) for s in steps]
    assert scalars["step/exposed_comm_s"] == [(s.step, pytest.approx(s.exposed_comm_s, rel=1e-6)) for s in steps]
    assert scalars["step/loss"] == [(s.step, pytest.approx(s.loss, rel=1e-6)) for s in steps]
    assert scalars["round/compression_ratio"] == [(r.step, pytest.approx(1.0)) for r in rounds]
    assert scalars["round/bytes"] == [(r.step, float(r.bytes)) for r in rounds]


@pytest.mark.parametrize("compression, ratio_at_least", [(None, 1.0), ("MinMaxUInt8", 3.0)])
def test_diloco_reports_its_rounds_and_their_compression(compression, ratio_at_least) -> None:
    algorithm = {"name": "diloco", "inner_steps": 2, "compression": compression}
    results = run_workers(_train, 2, algorithm, None, timeout=240)
    for result in results:
        steps, rounds = result["steps"], result["rounds"]
        # nothing is communicated during the inner steps; a round ends every second step
        assert [s.bytes > 0 for s in steps] == [False, True] * (STEPS // 2), steps
        assert [r.step for r in rounds] == [2, 4, 6]
        assert all(r.dense_bytes == result["param_bytes"] for r in rounds)
        assert [r.bytes for r in rounds] == [s.bytes for s in steps if s.bytes]
        for r in rounds:
            if compression is None:
                assert r.compression_ratio == pytest.approx(1.0)
            else:  # 8 bits an element and the headers, gathered from both ranks
                assert ratio_at_least < r.compression_ratio < 4.0, r
        assert result["totals"]["rounds"] == 3


def _sparseloco_ratio(rank: int) -> tuple[float, float]:
    result = _train(rank, {"name": "sparseloco", "inner_steps": 3, "chunk_size": 64, "topk": 4}, None)
    rounds = result["rounds"]
    assert [r.step for r in rounds] == [3, 6]
    return rounds[-1].compression_ratio, result["totals"]["compression_ratio"]


def test_sparseloco_round_compresses_by_much_more_than_a_codec() -> None:
    for ratio, overall in run_workers(_sparseloco_ratio, 2, timeout=240):
        assert ratio > 4.0 and overall == pytest.approx(ratio)


def _measures_nothing_unless_asked(rank: int) -> tuple[int, int]:
    import bagua_core.lifecycle.hook_time as hook_time
    from bagua_core.lifecycle.module_state import state_of

    calls = [0]
    real = hook_time.time.perf_counter

    def counting() -> float:
        calls[0] += 1
        return real()

    hook_time.time.perf_counter = counting
    try:
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        model = model.with_bagua([optimizer], "gradient_allreduce")
        for asked in (False, True):
            if asked:
                before = calls[0]
                model.bagua_metrics()
            optimizer.zero_grad()
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
        assert [f.name for f in state_of(model).features] == ["metrics"]
        return before, calls[0]
    finally:
        hook_time.time.perf_counter = real


def test_the_hooks_measure_nothing_until_metrics_are_asked_for() -> None:
    before, after = run_workers(_measures_nothing_unless_asked, 1, timeout=120)[0]
    assert before == 0 and after > 0


def test_a_missing_tensorboard_is_named_with_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from bagua_features.metrics import TensorBoardWriter, tensorboard
    from bagua_core.runtime.exceptions import BaguaConfigError

    monkeypatch.setattr(tensorboard.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(BaguaConfigError, match=r'pip install "bagua\[tensorboard\]"'):
        TensorBoardWriter("unused")


def test_records_reach_a_sink_with_the_loss_noted_after_the_step() -> None:
    from bagua_features.metrics import StepMetrics

    class Sink:
        def __init__(self) -> None:
            self.steps, self.rounds, self.closed = [], [], False

        def write_step(self, record) -> None:
            self.steps.append(record)

        def write_round(self, record) -> None:
            self.rounds.append(record)

        def flush(self) -> None:
            pass

        def close(self) -> None:
            self.closed = True

    class Impl:  # what the metrics feature hands the records
        @staticmethod
        def rounds_completed():
            return None

    metrics, sink = StepMetrics(history=2), Sink()
    metrics.sinks.append(sink)
    for step in (1, 2, 3):
        metrics.begin_step(step)
        metrics.end_step(step, 0.5, Impl, [])
        metrics.note_loss(torch.tensor([float(step), 3.0 * step]))
    assert [s.step for s in sink.steps] == [1, 2]  # the third reaches the sink at the next step, or flush
    metrics.close()
    assert [(s.step, s.loss, s.exposed_comm_s, s.bytes) for s in sink.steps] == [
        (1, 2.0, 0.5, 0), (2, 4.0, 0.5, 0), (3, 6.0, 0.5, 0)]
    assert sink.rounds == [] and sink.closed and len(metrics.steps) == 2  # history keeps the last two
    assert metrics.totals()["steps"] == 3 and math.isnan(metrics.totals()["compression_ratio"])
