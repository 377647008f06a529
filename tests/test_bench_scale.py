"""The scaling benchmark and its cost model: the model's message patterns grow with n as each algorithm's
communication does, the fit recovers constants planted in synthetic points, and the harness runs several
ranks per host on loopback and writes its table, JSON and the model's check (never timed; no root)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import cost_model, cpu_contention
from benchmarks.cost_model import Fit, Setting, pattern, predict
from benchmarks.e2e_worker import codec_backend

MB5 = 5_261_834


def setting(n: int, k: int = 1, **kw) -> Setting:
    base = dict(hosts=n, ranks_per_host=k, params=MB5, link_bps=100e6, compute_s=0.05)
    return Setting(**{**base, **kw})


def host_bytes(method: str, s: Setting) -> float:
    return sum(p.host_bytes / p.every for p in pattern(method, s))


def test_ring_bytes_grow_as_two_n_minus_one_over_n() -> None:
    model = MB5 * 4
    for n in (2, 4, 8):
        assert host_bytes("ddp", setting(n)) == pytest.approx(2 * (n - 1) / n * model)
    # two ranks per host in one flat ring: one ring edge per host crosses the link
    assert host_bytes("gradient_allreduce", setting(4, 2)) == pytest.approx(2 * 7 / 8 * model)


def test_compressed_and_decentralized_patterns() -> None:
    model = MB5 * 4
    # bytegrad: the ring's bytes over four (one byte per value), whatever the ranks per host (leaders only)
    assert host_bytes("bytegrad", setting(8)) / host_bytes("ddp", setting(8)) == pytest.approx(0.25, rel=1e-3)
    assert host_bytes("bytegrad", setting(8, 2)) == host_bytes("bytegrad", setting(8, 1))
    # shift_one: one model to one peer whatever n; the low-precision ring: one neighbour at n=2, two after
    assert {host_bytes("decentralized_shift_one", setting(n)) for n in (2, 4, 8)} == {model}
    lpd = [host_bytes("low_precision_decentralized", setting(n)) for n in (2, 4, 8)]
    assert lpd[1] == pytest.approx(2 * lpd[0]) and lpd[2] == pytest.approx(lpd[1])  # + the 4-byte agreement
    # diloco: the ring's bytes once every 4 steps
    assert host_bytes("diloco", setting(4)) == pytest.approx(host_bytes("ddp", setting(4)) / 4)
    with pytest.raises(ValueError, match="no message pattern for method 'nope'"):
        pattern("nope", setting(2))


def test_powersgd_sends_low_rank_factors() -> None:
    mats = ((2048, 1024), (1536, 2048), (10, 1536))
    s = setting(4, matrices=mats)
    factors = sum(r + c for r, c in mats)
    vectors = MB5 - sum(r * c for r, c in mats)
    assert host_bytes("powersgd", s) == pytest.approx(2 * 3 / 4 * (factors + vectors) * 4)


def test_overlap_hides_weight_exchange_behind_compute_and_cores_are_shared() -> None:
    slow = setting(2, compute_s=5.0)  # compute longer than the exchange: shift_one's step is the compute alone
    assert predict("decentralized_shift_one", slow, Fit()) == pytest.approx(5.0)
    # the low-precision ring's neighbours' messages travel during the next forward and backward
    assert predict("low_precision_decentralized", slow, Fit()) == pytest.approx(5.0)
    assert predict("ddp", slow, Fit()) > 5.0 + 1.0
    shared = setting(4, 2, cores=2)  # 8 ranks on 2 cores: compute takes 4 times as long
    assert predict("async", shared, Fit()) == pytest.approx(4 * 0.05)
    # unless the slowdown was measured (benchmarks.cpu_contention): then that, for compute and codecs alike
    measured = replace(shared, contention=5.5)
    assert predict("async", measured, Fit()) == pytest.approx(5.5 * 0.05)
    assert predict("bytegrad", replace(measured, compute_s=0.0), Fit(gamma_s=1e-9)) > \
        predict("bytegrad", replace(shared, compute_s=0.0), Fit(gamma_s=1e-9))
    assert replace(setting(2), contention=0.9).share == 1.0  # never faster than alone


def test_hierarchical_weights_wait_for_the_reduce_inside_the_host_on_shared_cores() -> None:
    # two ranks per host, a GPU each: the weights travel while the step computes, as with one per host
    for method in ("decentralized_shift_one", "low_precision_decentralized", "decentralized"):
        assert predict(method, setting(2, 2, compute_s=50.0), Fit()) == pytest.approx(50.0 * 1), method
        # sharing the cores, the exchange waits for the intra-host reduce, which runs beside the compute:
        # compute and exchange add up
        shared = setting(2, 2, compute_s=1.0, cores=2)
        exchange = predict(method, setting(2, 2, compute_s=0.0, cores=2), Fit())
        assert exchange > 0.1 and predict(method, shared, Fit()) == pytest.approx(2 * 1.0 + exchange), method
        # one rank per host on shared cores: no reduce to wait for, the exchange hides behind the compute
        assert predict(method, setting(2, 1, compute_s=50.0, cores=1), Fit()) == pytest.approx(2 * 50.0), method


def test_payload_share_of_the_wire_and_work_beside_the_step() -> None:
    # the link carries headers too: the bytes take 1/e as long (ddp's step is its bytes here)
    plain, framed = setting(4, compute_s=0.0), setting(4, compute_s=0.0, wire_efficiency=cost_model.TCP_OVER_ETHERNET)
    assert predict("ddp", framed, Fit()) == pytest.approx(predict("ddp", plain, Fit()) / cost_model.TCP_OVER_ETHERNET)
    # async waits for none of its averaging, but its CPU (messages, values) shares the cores: the more
    # ranks per core and the shorter its round, the slower the step; without cost it is the compute alone
    constants = Fit(overhead_s=1e-3, gamma_s=1e-9)
    alone, shared = predict("async", setting(8, cores=8), constants), predict("async", setting(8, 2, cores=2), constants)
    assert 0.05 < alone < shared and shared > 8 * 0.05
    assert predict("async", setting(8, 2, cores=2, link_bps=10e9), constants) > shared  # rounds come more often
    # a round is due sync_interval_ms after the last one started: one that outlasts it (1.7 s of bytes on
    # 100 Mbit/s against 0.1 s) is followed at once, and one shorter than it waits for the rest of it
    slow = setting(2, cores=2, compute_s=0.0)
    (round_,) = pattern("async", slow)
    comm = round_.host_bytes / (slow.link_bps / 8) + round_.messages * 1e-3
    assert comm > 10 * cost_model.ASYNC_INTERVAL_S
    cpu = (round_.messages * 1e-3 + 1e-9 * round_.codec_values) * slow.share
    assert predict("async", slow, constants) == pytest.approx(0.0)  # no compute: nothing to slow down
    busy = replace(slow, compute_s=0.05)
    assert predict("async", busy, constants) == pytest.approx(0.05 / (1 - cpu / comm))
    fast = replace(busy, link_bps=100e9)
    assert predict("async", fast, constants) == pytest.approx(0.05 / (1 - cpu / cost_model.ASYNC_INTERVAL_S))
    # diloco's outer step processes the model on the CPU once every 4 steps
    assert predict("diloco", setting(4), Fit(gamma_s=1e-9)) > predict("diloco", setting(4), Fit())


def test_fit_recovers_planted_constants() -> None:
    truth = Fit(overhead_s=10 ** (13 / 8) * 1e-5, gamma_s=10 ** (8 / 8) * 1e-10)  # on the search grid
    points = [(m, setting(n, k, cores=2), predict(m, setting(n, k, cores=2), truth))
              for m in ("ddp", "bytegrad", "low_precision_decentralized", "decentralized_shift_one")
              for n in (2, 4, 8) for k in (1, 2)]
    found = cost_model.fit(points)
    assert max(abs(e) for e in cost_model.relative_errors(points, found)) < 1e-9
    assert found == truth


def test_projection_has_every_method_and_ddp_is_one() -> None:
    rows = cost_model.project(["ddp", "bytegrad"], (16, 128), (10e9,), 25_557_032, 0.028, ())
    assert len(rows) == 4
    assert all(r["speedup_vs_ddp"] == 1.0 for r in rows if r["method"] == "ddp")
    assert all(r["speedup_vs_ddp"] > 1.0 for r in rows if r["method"] == "bytegrad")


@pytest.mark.timeout(600)  # (each stage's own deadline is --timeout: room for 4 ranks importing torch on a loaded machine)
def test_scale_harness_runs_two_ranks_per_host_and_writes_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import scale

    monkeypatch.setenv("BAGUA_BENCH_TIMELINE", str(tmp_path / "timeline"))

    rows = scale.main(["--loopback", "--hosts", "2", "--ranks-per-host", "2", "--methods",
                       "ddp,decentralized_shift_one", "--model", "tiny", "--warmup", "1", "--steps", "1",
                       "--timeout", "240", "--contention-window", "0.2", "--contention-repeats", "1",
                       "--probe-steps", "3", "--results", str(tmp_path)])
    assert [(r["method"], r["hosts"], r["ranks_per_host"], r["world_size"]) for r in rows] == [
        ("ddp", 2, 2, 4), ("decentralized_shift_one", 2, 2, 4)]
    for row in rows:
        assert "error" not in row, row.get("log")
        assert row["ms_per_step"] > 0 and row["tx_bytes_per_step"] > 0
        # the compute as the ranks got it just before the method
        assert row["probe_ms_per_step"] > 0 and row["probe_cpu_ms_per_step"] > 0
        # the training thread's CPU is part of every thread's
        assert 0 < row["main_cpu_ms_per_step"] <= row["cpu_ms_per_step"]
        # whose codec kernels the ranks ran: the Python fallback costs the codec methods 2-3x their CPU
        assert row["codec_backend"] == codec_backend()
    saved = json.loads((tmp_path / "scale.json").read_text())
    assert len(saved["model"]["errors"]) == 2 and saved["model"]["compute_s"] > 0 and "ResNet-50" in saved["model"]["projection"]
    # the 4 ranks' slowdown sharing this machine was measured and went into the model, with the compute of
    # the loop it is a ratio of
    assert list(saved["model"]["contention"]) == ["4"] and saved["model"]["contention"]["4"] > 0
    assert saved["model"]["compute_measured"] == scale.COMPUTE_ALONE
    # fitted again from the saved rows: the compute kept, or measured again when asked
    scale.main(["--loopback", "--refit", str(tmp_path / "scale.json"), "--model", "tiny", "--results", str(tmp_path / "same")])
    same = json.loads((tmp_path / "same" / "scale.json").read_text())["model"]
    assert same["compute_s"] == saved["model"]["compute_s"] and same["compute_measured"] == scale.COMPUTE_ALONE
    scale.main(["--loopback", "--refit", str(tmp_path / "scale.json"), "--model", "tiny", "--measure-contention",
                "--contention-window", "0.2", "--contention-repeats", "1", "--results", str(tmp_path / "again")])
    again = json.loads((tmp_path / "again" / "scale.json").read_text())["model"]
    assert again["compute_measured"].endswith("for this fit") and again["compute_s"] > 0
    assert list(again["contention"]) == ["4"]
    text = (tmp_path / "scale.md").read_text()
    probed = sorted(r["probe_cpu_ms_per_step"] for r in rows)
    assert f"took {probed[0]:.1f} to {probed[-1]:.1f} ms of CPU per step over this run's 2 methods" in text
    assert ("codecs: native kernels;" if codec_backend() == "native" else "codecs: python fallback: ") in text
    with pytest.raises(SystemExit):  # a negative probe is an error naming the option, not no probe
        scale.main(["--loopback", "--probe-steps", "-1", "--results", str(tmp_path / "never")])
    assert "| ddp | 2 x 2 |" in text and "The cost model against every measured point" in text
    # the timeline shows the hierarchical form's steps inside the host, on the leader and the other rank
    for rank in range(4):
        names = (tmp_path / "timeline" / f"decentralized_shift_one-rank{rank}.txt").read_text()
        assert "reduce inside the host end" in names and "broadcast inside the host start" in names, (rank, names)


def test_the_cpu_of_moving_bytes_slows_only_work_beside_the_step() -> None:
    """The emulated hosts' network stack runs on the ranks' cores: async's averaging, beside the step, pays
    it in the step; a method whose step waits on the link pays it while waiting."""
    plain = setting(8, 2, cores=2, compute_s=0.02)
    costly = replace(plain, cpu_per_byte_s=2e-9)
    constants = Fit(overhead_s=1e-3, gamma_s=1e-9)
    assert predict("async", costly, constants) > predict("async", plain, constants) * 1.01
    for method in ("ddp", "bytegrad", "decentralized_shift_one", "low_precision_decentralized"):
        assert predict(method, costly, constants) == predict(method, plain, constants), method


def test_the_compute_comes_from_the_loop_the_slowdowns_are_ratios_of() -> None:
    """One process's CPU per step alone, from the same processes as the slowdowns: what the cost model
    multiplies by them."""
    got = cpu_contention.measure_steps("tiny", batch_size=8, ranks=(1, 2), window_s=0.3, repeats=1)
    assert set(got.factors) == {1, 2} and got.factors[1] == 1.0
    assert 0 < got.alone_cpu_s < 0.1  # seconds: a step of the tiny model takes well under a millisecond


def test_timeline_of_every_rank_on_one_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BAGUA_BENCH_TIMELINE``: every rank writes its timed steps' events (the low-precision ring's phases,
    the overflow agreement) on the machine's monotonic clock, so the ranks' files can be merged."""
    from benchmarks import scale

    monkeypatch.setenv("BAGUA_BENCH_TIMELINE", str(tmp_path / "timeline"))
    rows = scale.main(["--loopback", "--hosts", "2", "--ranks-per-host", "1", "--methods",
                       "low_precision_decentralized", "--model", "tiny", "--warmup", "1", "--steps", "2",
                       "--timeout", "90", "--contention-window", "0", "--results", str(tmp_path)])
    assert "error" not in rows[0], rows[0].get("log")
    events = {}
    for rank in (0, 1):
        lines = (tmp_path / "timeline" / f"low_precision_decentralized-rank{rank}.txt").read_text().splitlines()
        events[rank] = [(float(line.split()[0]), line.split(maxsplit=2)[2]) for line in lines]
        names = [what for _, what in events[rank]]
        assert names.count("step") == 2 and names.count("overflow agreement end") == 2, names
        assert "ring round start" in names and "ring difference end" in names and "optimizer step end" in names
        times = [t for t, _ in events[rank]]
        assert times == sorted(times)
    # one clock: the two ranks' first timed steps start within a second of each other (after a barrier)
    assert abs(events[0][0][0] - events[1][0][0]) < 1000


def test_a_phase_every_kth_step_counts_the_runs_in_the_timed_window() -> None:
    """diloco exchanges after steps 4, 8, ...: 2 warmup + 6 timed steps hold two exchanges (1/3 per step),
    2 + 4 hold one (1/4): the model predicts the window that was measured."""
    constants = Fit(overhead_s=1e-3)
    plain = predict("diloco", setting(2), constants)
    six = predict("diloco", replace(setting(2), window=(2, 6)), constants)
    four = predict("diloco", replace(setting(2), window=(2, 4)), constants)
    assert four == pytest.approx(plain)
    compute = setting(2).compute_s
    assert six - compute == pytest.approx((plain - compute) * 4 / 3)
    assert predict("ddp", replace(setting(2), window=(2, 6)), constants) == predict("ddp", setting(2), constants)


def test_the_overflow_agreement_is_gloos_ring_here_and_a_tree_on_projected_gpu_nodes() -> None:
    """The low-precision ring's one-value allreduce: 2(N-1) messages on gloo (the measured hosts), 2 log2(N)
    rounds with NCCL (the projection), so 1024 GPUs do not pay a ring's 2046 latencies for four bytes."""
    gloo = setting(8, 2)
    nccl = replace(gloo, backend="nccl")
    assert pattern("low_precision_decentralized", gloo)[-1].messages == 2 * 15
    assert pattern("low_precision_decentralized", nccl)[-1].messages == 2 * 4
    assert pattern("low_precision_decentralized", replace(setting(128, 8), backend="nccl"))[-1].rounds == 20


def test_link_usage_cuts_the_samples_at_the_step_marks(tmp_path: Path) -> None:
    """What each host sent, sampled beside the timeline: per step the bytes and the time the link ran at
    more than half its rate; in bins, the share of the rate."""
    from benchmarks import link_usage

    rate = 100e6  # 12 500 bytes per ms
    # host 1 sends at the full rate for the whole first step, host 2 only in its second half; both idle after
    lines, sent = [], {"bgv1": 0, "bgv2": 0}
    for ms in range(0, 201, 10):
        if ms > 0 and ms <= 100:
            sent["bgv1"] += 125_000
            sent["bgv2"] += 125_000 if ms > 50 else 0
        lines.append(f"{1000.0 + ms} bgv1={sent['bgv1']} bgv2={sent['bgv2']}")
    (tmp_path / "link.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "bytegrad-rank0.txt").write_text("1000.0 main step\n1050.0 main forward end\n1100.0 main step\n"
                                                  "1200.0 main step\n")
    samples, marks = link_usage.load_samples(tmp_path / "link.txt"), link_usage.step_marks(tmp_path, "bytegrad")
    assert marks == [1000.0, 1100.0, 1200.0]
    (ms0, first), (ms1, second) = link_usage.per_step(samples, marks, rate)
    assert ms0 == ms1 == 100.0
    assert first == {"bgv1": (1_250_000, 100.0), "bgv2": (625_000, 50.0)}
    assert second == {"bgv1": (0, 0.0), "bgv2": (0, 0.0)}
    bins = link_usage.step_bins(samples, 1000.0, 1100.0, 50.0, rate)
    assert [(offset, [round(x) for x in shares]) for offset, shares in bins] == [(0.0, [100, 0]), (50.0, [100, 100])]
    with link_usage.LinkSampler(tmp_path / "sampled.txt", "nohost"):  # no such interfaces: nothing written
        pass
    assert (tmp_path / "sampled.txt").read_text() == ""


def _row(method: str, hosts: int, ms: float, host_bytes: float, k: int = 1) -> dict:
    return {"method": method, "hosts": hosts, "ranks_per_host": k, "ms_per_step": ms,
            "tx_bytes_per_step": host_bytes / k, "host_tx_bytes_per_step": host_bytes}


def test_checks_compare_every_step_with_its_bytes_and_ddp() -> None:
    from benchmarks import scale_checks

    rate = 100e6
    second = rate * cost_model.TCP_OVER_ETHERNET / 8  # the payload bytes one second of the link carries
    rows = [_row("ddp", 2, 1000, second), _row("ddp", 8, 1750, 1.75 * second),
            _row("gradient_allreduce", 2, 1050, second), _row("gradient_allreduce", 8, 1950, 1.75 * second),
            _row("decentralized_shift_one", 2, 990, 0.9 * second), _row("decentralized_shift_one", 8, 1200, 0.9 * second),
            # bytegrad: a quarter of DDP's bytes; its bound is 250 / 437.5 ms plus the compute (20 ms alone, 4x at 8 ranks)
            _row("bytegrad", 2, 260, 0.25 * second), _row("bytegrad", 8, 500, 0.4375 * second)]
    assert scale_checks.bytes_time_s(rows[0], rate) == pytest.approx(1.0)
    lines = scale_checks.report(rows, rate, compute_s=0.02, contention={2: 1.0, 8: 4.0}, model_errors=[0.05, -0.2])
    table = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ") and "expectation" not in line}
    assert "| 1000 / 1750 | 1.00 / 1.00 | 1.000 / 1.000 | 1.75x |" in table["ddp"]
    assert "1.10 / 1.33" in table["decentralized_shift_one"]  # 990 ms over 900, 1200 over 900
    checks = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ") and "x |" in line}
    assert checks["shift_one flat, 2 to 8 hosts (1/host)"].endswith("**misses** |")  # 1.21x
    assert checks["shift_one over DDP on 2 hosts (1/host)"].endswith("holds |")  # 0.99x
    assert "1.050x, 1.114x" in checks["gradient_allreduce over DDP (1/host)"]
    assert checks["gradient_allreduce over DDP (1/host)"].endswith("**misses** |")  # 1.114 is past 10%
    alone = checks["bytegrad over its bytes' share of DDP's step + one rank's compute alone (1/host)"]
    assert "0.96x, 1.09x" in alone and alone.endswith("**misses** |")  # 260 / 270, 500 / 457.5
    shared = checks["bytegrad over the same with the compute as the ranks get it (1/host)"]
    assert "0.96x, 0.97x" in shared and shared.endswith("holds |")  # 500 / 517.5
    assert any("20.0% | at most 15.0% | **misses**" in line for line in lines)
    assert scale_checks.report([{"method": "ddp", "hosts": 2, "ranks_per_host": 1, "error": "hung"}], rate) == []
    # the rate comes from the rows' own link; loopback rows name none; one report is of one link
    assert scale_checks.link_rate_bps([{"link": "tbf 1gbit, 5ms one-way delay"}, {"link": "tbf 1gbit, TCP cubic"}]) == 1e9
    assert scale_checks.link_rate_bps([{"method": "ddp"}]) is None
    with pytest.raises(ValueError, match="100mbit, 1gbit"):
        scale_checks.link_rate_bps([{"link": "tbf 1gbit"}, {"link": "tbf 100mbit"}])
    with pytest.raises(ValueError, match="100mbit or 1gbit, got 'fast'"):
        cost_model.rate_bps("fast")


def test_the_points_set_by_the_cpu_are_those_near_their_ranks_cpu_over_the_cores() -> None:
    from benchmarks import scale_checks

    rows = [dict(_row("async", 8, 82, 1e5), cpu_ms_per_step=20.0),  # 8 x 20 / 2 = 80: set by the CPU
            dict(_row("ddp", 8, 3200, 3e7), cpu_ms_per_step=30.0),  # 120 of CPU over the cores: the link sets it
            dict(_row("async", 1, 12, 1e5), cpu_ms_per_step=10.0),  # one rank uses one of the cores
            {"method": "ddp", "hosts": 2, "ranks_per_host": 1, "error": "hung"}]
    lines = scale_checks.cpu_bound(rows, cores=2)
    table = [line for line in lines if line.startswith("| async") or line.startswith("| ddp")]
    assert table == ["| async | 8 x 1 | 82 | 20.0 | 80 | 1.02 |", "| async | 1 x 1 | 12 | 10.0 | 10 | 1.20 |"]
    assert scale_checks.cpu_bound(rows[1:2], cores=2) == []
    # the report carries them only when it knows the cores
    rate = 100e6
    assert not any("set by the CPU" in line for line in scale_checks.report(rows, rate))
    assert any("set by the CPU" in line for line in scale_checks.report(rows, rate, cores=2))
