"""One rank of the end-to-end benchmark: for each method, trains a fresh model for warmup + timed steps.

Started by :mod:`benchmarks.e2e` on every emulated host (``ip netns exec bgh<i> ...``) with the
torchrun variables set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GROUP_RANK = host index so bagua
sees one node per host). Wire bytes are the ``tx_bytes`` counter of ``--iface`` before and after the
timed steps. After each method, rank 0 appends its row as one JSON line to ``--out`` (so a method
that crashes the job leaves the rows before it).

Before each method, every rank at once runs ``--probe-steps`` steps of the same model with no framework
(forward, backward, SGD; :func:`probe_compute`): the compute as the ranks get it at that moment, in these
processes, sharing the cores with every other rank. The row keeps the slowest rank's wall time per step
(``probe_ms_per_step``) and the mean CPU time (``probe_cpu_ms_per_step``): ``benchmarks.scale`` reports how
far they move over a run (on a shared machine the same loop took 11 to 22 ms a step from one process to the
next, and 12.6 to 25.4 ms from one method to the next of one run), which bounds how closely any cost model can
predict a step that is mostly compute. The row also keeps the CPU per step of every thread of the ranks
(``cpu_ms_per_step``) and of the training thread alone (``main_cpu_ms_per_step``: forward, backward, the
optimizer and the hooks that run on it), over the timed steps.

    python -m benchmarks.e2e_worker --methods ddp,bytegrad --model mlp21m --iface eth0 --out rows.jsonl
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import resource
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from benchmarks import step_timeline
from benchmarks.methods import UNTIMED_WARMUP, finish, prepare
from benchmarks.models import build_model, parameter_count, synthetic_batch

__all__ = ["run", "main", "read_counter", "probe_compute", "codec_backend", "summarize", "hang_watchdog"]


def read_counter(iface: str, name: str = "tx_bytes") -> int:
    """A byte counter of ``iface`` in this process's network namespace (0 if unreadable)."""
    try:
        return int(Path(f"/sys/class/net/{iface}/statistics/{name}").read_text())
    except OSError:
        return 0


TIMELINE = os.environ.get("BAGUA_BENCH_TIMELINE")
"""A folder: every rank writes the events of its timed steps there (``benchmarks.step_timeline``),
``<method>-rank<r>.txt``: ``<ms> <thread> <what>`` per line, the machine's monotonic clock (every rank on one
machine shares it, so the ranks' lines can be merged)."""


def _mark(what: str) -> None:
    if TIMELINE:
        step_timeline.record(what)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    _mark("forward end")
    loss.backward()
    _mark("backward end")
    optimizer.step()
    _mark("optimizer step end")
    return float(loss.detach())


def probe_compute(model_name: str, batch_size: int, steps: int, lr: float = 0.01) -> tuple[float, float]:
    """Wall and CPU seconds per step of ``steps`` plain steps (forward, backward, SGD; no framework, a model
    of its own) on this rank, every rank of the job at once (collective: a barrier starts them together).
    ``(0.0, 0.0)`` when ``steps`` is 0."""
    if steps <= 0:
        return 0.0, 0.0
    rank = dist.get_rank()
    model = build_model(model_name, seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = synthetic_batch(model_name, batch_size, seed=1 + rank)
    for _ in range(2):  # allocations and caches settle
        _step(model, optimizer, x, y)
    dist.barrier()
    wall0, cpu0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        _step(model, optimizer, x, y)
    wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
    del model, optimizer
    gc.collect()
    return wall / steps, cpu / steps


def run(method: str, model_name: str, batch_size: int, warmup: int, steps: int, iface: str, lr: float,
        probe_steps: int = 0) -> dict:
    """Train and measure on this rank; returns this rank's numbers (collective over the default group).
    A method whose warmup is not left untimed (``auto``: its choosing counts) runs warmup + steps timed.
    ``probe_steps`` > 0: first the compute alone, as the ranks get it now (:func:`probe_compute`)."""
    import bagua_core as bagua

    if not UNTIMED_WARMUP.get(method, True):
        warmup, steps = 0, warmup + steps
    rank, world = dist.get_rank(), dist.get_world_size()
    probe_s, probe_cpu_s = probe_compute(model_name, batch_size, probe_steps, lr)
    model = build_model(model_name, seed=0)
    params = parameter_count(model)
    model, optimizer = prepare(method, model, lr)
    x, y = synthetic_batch(model_name, batch_size, seed=1 + rank)
    for _ in range(warmup):
        _step(model, optimizer, x, y)
    dist.barrier()
    if TIMELINE:
        del step_timeline.EVENTS[:]
    tx0, rx0 = read_counter(iface), read_counter(iface, "rx_bytes")
    times: list[float] = []
    loss = float("nan")
    cpu0, main_cpu0 = _cpu_seconds(), time.thread_time()
    started = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        _mark("step")
        loss = _step(model, optimizer, x, y)
        times.append(time.perf_counter() - t0)
    main_cpu = time.thread_time() - main_cpu0  # this thread: the step's compute and the hooks it runs
    _drain(method, model)  # what the last step left in flight counts too
    elapsed = time.perf_counter() - started
    if TIMELINE:
        _write_timeline(method, rank)
    cpu = _cpu_seconds() - cpu0
    tx, rx = read_counter(iface) - tx0, read_counter(iface, "rx_bytes") - rx0
    finish(method, model)
    del bagua  # imported for its side effects (with_bagua on every module)
    del model, optimizer
    gc.collect()
    return {"rank": rank, "world_size": world, "params": params, "elapsed_s": elapsed, "step_s": times,
            "tx_bytes": tx, "rx_bytes": rx, "loss": loss, "cpu_s": cpu, "main_cpu_s": main_cpu,
            "rss_bytes": _resident_bytes(),
            "probe_s": probe_s, "probe_cpu_s": probe_cpu_s, "codec_backend": codec_backend()}


def _write_timeline(method: str, rank: int) -> None:
    path = Path(TIMELINE) / f"{method}-rank{rank}.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    # milliseconds of the machine's monotonic clock, which every rank on it shares: ranks line up
    path.write_text("".join(f"{1000 * t:.1f} {thread} {what}\n" for t, thread, what in step_timeline.EVENTS))


def _drain(method: str, model: torch.nn.Module) -> None:
    """Complete the communication a step left in flight (low_precision_decentralized's neighbours'
    messages travel into the next step): unwrapping waits for it. Not for DDP, nor for background work
    (async's averaging is not part of any step)."""
    capabilities = getattr(model, "bagua_capabilities", None)
    if capabilities is not None and not capabilities.background_work:
        model.bagua_shutdown()


def codec_backend() -> str:
    """Whose codec kernels this process runs: ``native`` (``native/``, built by ``pip install -e .``), else
    ``python fallback: <why>`` (several times the CPU: a checkout whose extension was never built)."""
    from bagua_core.runtime import native  # imported with bagua, after the thread count is set

    return "native" if native.backend == "native" else f"python fallback: {native.native_unavailable_reason}"


def _resident_bytes() -> int:
    """This process's resident memory now (``/proc/self/statm``; 0 where there is none)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _cpu_seconds() -> float:
    """CPU time of this process so far, every thread (training, communication, gloo's), user + system."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def summarize(per_rank: list[dict], method: str, model_name: str, batch_size: int, iface: str) -> dict:
    """One row: the slowest rank sets the pace; bytes are the mean per rank per step (``tx_bytes_per_step``)
    and per host (``host_tx_bytes_per_step``: what one host's link carries)."""
    world = per_rank[0]["world_size"]
    steps = len(per_rank[0]["step_s"])
    seconds_per_step = max(r["elapsed_s"] for r in per_rank) / steps
    # every rank of a host reads the host's counter: the mean over ranks is the mean per host
    host_tx = sum(r["tx_bytes"] for r in per_rank) / world
    ranks_per_host = world if iface == "lo" else int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    tx = host_tx / ranks_per_host  # on loopback every rank shares one counter: the whole job's traffic
    row = {
        "method": method, "model": model_name, "params": per_rank[0]["params"], "world_size": world,
        "batch_size": batch_size, "steps": steps, "ms_per_step": 1000 * seconds_per_step,
        "samples_per_s": world * batch_size / seconds_per_step, "tx_bytes_per_step": tx / steps,
        "ranks_per_host": ranks_per_host if iface != "lo" else 1, "host_tx_bytes_per_step": host_tx / steps,
        "loss": sum(r["loss"] for r in per_rank) / world,
        "cpu_ms_per_step": 1000 * sum(r.get("cpu_s", 0.0) for r in per_rank) / world / steps,
        # the training thread's CPU alone: forward, backward, the optimizer and the hooks that run on it
        "main_cpu_ms_per_step": 1000 * sum(r.get("main_cpu_s", 0.0) for r in per_rank) / world / steps,
        "step_ms_rank0": [1000 * t for t in per_rank[0]["step_s"]],
        # what the largest rank holds once the method is unwrapped and collected (the job runs every
        # method in turn: a growth here is memory a method left behind)
        "rss_mb_after": max(r.get("rss_bytes", 0) for r in per_rank) / 2**20,
    }
    row["codec_backend"] = ",".join(sorted({r.get("codec_backend", "?") for r in per_rank}))
    if any(r.get("probe_s") for r in per_rank):  # the compute as the ranks got it (probe_compute)
        row["probe_ms_per_step"] = 1000 * max(r["probe_s"] for r in per_rank)
        row["probe_cpu_ms_per_step"] = 1000 * sum(r["probe_cpu_s"] for r in per_rank) / world
    return row


def hang_watchdog(method: str, seconds: float) -> threading.Timer:
    """Ends the process (exit code 3) if ``method`` has not finished after ``seconds``: a hang
    cannot be interrupted from Python, and the launcher then runs the remaining methods in a new job. It
    prints every thread's stack first."""

    def expire() -> None:
        print(f"{method}: no result after {seconds:.0f} s; the threads are at:", flush=True)
        faulthandler.dump_traceback(file=sys.stdout, all_threads=True)
        # last, so that the launcher's tail of the output (and its one-line summary) shows it
        print(f"{method}: HANG: no result after {seconds:.0f} s (the threads' stacks above)", flush=True)
        os._exit(3)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    return timer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", required=True, help="comma list of methods, run in this order")
    parser.add_argument("--model", default="mlp21m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--iface", default="eth0")
    parser.add_argument("--out", required=True)
    parser.add_argument("--probe-steps", type=int, default=0,
                        help="plain steps of the model (no framework) every rank runs at once before each method: "
                             "the compute as the ranks get it (0: none)")
    parser.add_argument("--method-timeout", type=float, default=120.0,
                        help="seconds before a method that hangs (PowerSGD on gloo can) ends the job")
    args = parser.parse_args(argv)
    if args.probe_steps < 0:
        parser.error(f"--probe-steps must be 0 or more, got {args.probe_steps}")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    import bagua_core as bagua

    if TIMELINE:
        step_timeline.install()
    bagua.init_process_group()
    try:
        for method in args.methods.split(","):
            watchdog = hang_watchdog(method, args.method_timeout)
            mine = run(method, args.model, args.batch_size, args.warmup, args.steps, args.iface, args.lr,
                       args.probe_steps)
            gathered: list = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine)
            if mine["rank"] == 0:
                row = summarize(gathered, method, args.model, args.batch_size, args.iface)
                with open(args.out, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
            watchdog.cancel()
    finally:
        bagua.destroy_process_group()


if __name__ == "__main__":
    main()
