"""Where one training step's time goes, per method: a breakdown measured inside the ranks.

Each rank trains like the e2e benchmark (same model, batch, optimizer), but times every phase of the
timed steps itself, after the wrap and the warmup steps (so the wrap's broadcast is not counted):

* ``forward``, ``backward`` (including bagua's end-of-backward wait, also shown on its own as
  ``wait@backward``), ``optimizer`` (``optimizer.step()`` with the post-step hooks: the exchange of
  ``low_precision_decentralized`` runs there) and ``zero_grad``, on the training thread;
* per thread (``main`` = the training thread, ``comm`` = the communication thread, where buckets run
  while backward goes on): ``ops`` (time inside bucket operations), the compression kernels of
  ``bagua_codecs.minmax_kernels`` and low_precision_decentralized's fused steps (``k:<name>``), waits for point-to-point messages (``wait:p2p``) and for
  collectives (``wait:<collective>``), ``other`` = ops minus kernels minus waits (Python, copies,
  the optimizer's momentum update of qadam, and time spent runnable but without a core or the GIL),
  and ``ops cpu``, the CPU time the thread got inside bucket operations (``ops`` minus ``ops cpu`` is
  waiting: for messages, for a core, for the GIL).

Printed per method (rank 0), milliseconds per step. Times on different threads overlap: the comm
thread works while the main thread computes backward.

    sudo python -m benchmarks.profile_step --methods ddp,bytegrad,qadam --network 1gbit --steps 10

``--timeline`` also prints every event of each method's last timed step (``benchmarks.step_timeline``):
when forward and backward end, and when each bucket's operations and each exchange round start and end.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

__all__ = ["instrument", "main", "profile_method"]

TIMERS: dict[str, float] = collections.defaultdict(float)
P2P = ("isend", "irecv")
COLLECTIVES = ("all_reduce", "all_to_all_single", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor",
               "broadcast", "reduce", "send", "recv")


def _thread() -> str:
    return "main" if threading.current_thread() is threading.main_thread() else "comm"


def _add(name: str, seconds: float) -> None:
    TIMERS[f"{_thread()}:{name}"] += seconds


def _timed(name: str, fn, cpu: bool = False):  # noqa: ANN001, ANN202
    """``fn`` with its wall time added to ``name`` (and, with ``cpu``, the thread's CPU time to ``name cpu``)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started, cpu_started = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _add(name, time.perf_counter() - started)
            if cpu:
                _add(f"{name} cpu", time.thread_time() - cpu_started)

    return wrapper


class _TimedWork:
    """A ``torch.distributed`` work whose ``wait`` is timed."""

    def __init__(self, work, name: str) -> None:  # noqa: ANN001
        self._work, self._name = work, name

    def wait(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started = time.perf_counter()
        try:
            return self._work.wait(*args, **kwargs)
        finally:
            _add(self._name, time.perf_counter() - started)

    def __getattr__(self, item: str):  # noqa: ANN204
        return getattr(self._work, item)


def _timed_async(name: str, fn):  # noqa: ANN001, ANN202
    """A collective: blocking calls are timed whole, the works of async ones when waited for."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started = time.perf_counter()
        work = fn(*args, **kwargs)
        if work is None:
            _add(name, time.perf_counter() - started)
            return None
        return _TimedWork(work, name)

    return wrapper


def instrument() -> None:
    """Put timers around the collectives, every compression kernel of ``bagua_codecs.minmax_kernels``,
    low_precision_decentralized's two fused steps, bucket operations and bagua's end-of-backward wait."""
    import bagua_codecs.minmax_kernels as minmax
    from bagua_algorithms.low_precision_decentralized import kernels as lpd
    from bagua_core.lifecycle.bucket import BaguaBucket
    from bagua_core.module import hooks

    for name in P2P:
        setattr(dist, name, _timed_async("wait:p2p", getattr(dist, name)))
    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _timed_async(f"wait:{name}", getattr(dist, name)))
    for name in minmax.__all__:
        value = getattr(minmax, name)
        if callable(value) and ("minmax" in name or name.startswith(("quantise", "decompress"))) \
                and not isinstance(value, type):
            setattr(minmax, name, _timed(f"k:{name}", value))
    for name in ("difference", "update"):  # what the op calls, under the names of the fused kernels
        setattr(lpd, name, _timed(f"k:lpd_{name}", getattr(lpd, name)))
    BaguaBucket.execute_ops = _timed("ops", BaguaBucket.execute_ops, cpu=True)
    BaguaBucket.complete_deferred = _timed("ops", BaguaBucket.complete_deferred, cpu=True)
    hooks._post_backward = _timed("wait@backward", hooks._post_backward)


def profile_method(method: str, model_name: str, steps: int, warmup: int = 3) -> dict[str, float]:
    """Train ``method`` on this rank and return the timers of the timed steps, ms per step (and mark
    the phases in ``benchmarks.step_timeline``)."""
    from benchmarks.methods import finish, prepare
    from benchmarks.models import build_model, synthetic_batch
    from benchmarks.step_timeline import record

    model, optimizer = prepare(method, build_model(model_name, seed=0), 0.01)
    x, y = synthetic_batch(model_name, 32, seed=1 + dist.get_rank())
    phases = collections.defaultdict(float)
    for step in range(warmup + steps):
        if step == warmup:
            dist.barrier()
            TIMERS.clear()
            phases.clear()
            started = time.perf_counter()
        record("step")
        t0 = time.perf_counter()
        optimizer.zero_grad()
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        t2 = time.perf_counter()
        record("forward end")
        loss.backward()
        t3 = time.perf_counter()
        record("backward end")
        optimizer.step()
        t4 = time.perf_counter()
        record("optimizer step end")
        for name, seconds in (("zero_grad", t1 - t0), ("forward", t2 - t1), ("backward", t3 - t2),
                              ("optimizer", t4 - t3)):
            phases[name] += seconds
    phases["step"] = time.perf_counter() - started
    finish(method, model)
    result = {name: 1000 * seconds / steps for name, seconds in phases.items()}
    result.update({name: 1000 * seconds / steps for name, seconds in TIMERS.items()})
    for thread in ("main", "comm"):
        spent = sum(v for k, v in result.items() if k.startswith(f"{thread}:") and k != f"{thread}:ops"
                    and not k.endswith(("wait@backward", " cpu")))
        if f"{thread}:ops" in result:
            result[f"{thread}:other"] = result[f"{thread}:ops"] - spent
    return result


def _ms(value: float) -> str:
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def format_row(method: str, timers: dict[str, float]) -> str:
    """One line: the step's phases, then each thread's parts, largest first."""
    head = ", ".join(f"{k} {_ms(timers[k])}" for k in ("forward", "backward", "optimizer", "zero_grad") if k in timers)
    wait = timers.get("main:wait@backward", 0.0)
    parts = []
    for thread in ("main", "comm"):
        items = sorted(((k.split(":", 1)[1], v) for k, v in timers.items()
                        if k.startswith(f"{thread}:") and not k.endswith("wait@backward")), key=lambda kv: -kv[1])
        if items:
            parts.append(f"[{thread}] " + ", ".join(f"{k} {_ms(v)}" for k, v in items if v >= 0.05))
    return f"{method}: step {_ms(timers['step'])} ms ({head}; wait@backward {_ms(wait)}) " + " ".join(parts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="ddp,gradient_allreduce,bytegrad")
    parser.add_argument("--model", default="mlp21m")
    parser.add_argument("--network", default="1gbit", help="loopback, or a netns link rate (optionally +DELAY: 1gbit+5ms)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--timeline", action="store_true",
                        help="also print the events of each method's last step (bucket operations, exchange rounds)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.worker:
        from benchmarks.launch import launch, netns_link

        forwarded = ["--worker", "--methods", args.methods, "--model", args.model, "--steps", str(args.steps)]
        forwarded += ["--timeline"] if args.timeline else []
        if args.network == "loopback":
            launch("benchmarks.profile_step", forwarded, 2, hosts=None, timeout=900, echo=True)
        else:
            rate, _, delay = args.network.partition("+")
            with netns_link(2, rate, delay or "0ms") as hosts:
                launch("benchmarks.profile_step", forwarded, 2, hosts=hosts, timeout=900, echo=True)
        return
    import bagua_core as bagua

    from benchmarks import step_timeline

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    instrument()
    if args.timeline:
        step_timeline.install()
    bagua.init_process_group()
    try:
        for method in args.methods.split(","):
            timers = profile_method(method, args.model, args.steps)
            if dist.get_rank() == 0:
                print(format_row(method, timers), flush=True)
                if args.timeline:
                    print(step_timeline.format_step(step_timeline.last_step()), flush=True)
            step_timeline.EVENTS.clear()
    finally:
        bagua.destroy_process_group()


if __name__ == "__main__":
    main()
