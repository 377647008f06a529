"""Where one training step's time goes, per method: a breakdown measured inside the ranks.

Wraps (in each worker process) torch.distributed's collectives, the MinMaxUInt8 kernels of
``bagua_core.native`` and the end-of-backward wait with timers, then trains like the e2e benchmark.
Printed per method (rank 0, ms per step): the step, the time the training thread spends waiting for
communication at the end of backward, and the time spent in collectives and in compression kernels
(on whichever thread runs them).

    sudo python -m benchmarks.profile_step --methods ddp,gradient_allreduce,bytegrad --network 1gbit
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import time

import torch
import torch.distributed as dist

__all__ = ["instrument", "main"]

TIMERS: dict[str, float] = collections.defaultdict(float)
COLLECTIVES = ("all_reduce", "all_to_all_single", "all_gather_into_tensor", "all_gather", "reduce_scatter_tensor",
               "broadcast", "reduce", "send", "recv", "isend", "irecv")
KERNELS = (
    "compress_minmax_uint8",
    "compress_minmax_uint8_headers",
    "quantise_minmax_uint8",
    "decompress_minmax_uint8",
    "decompress_average_minmax_uint8",
)


def _timed(name: str, fn):  # noqa: ANN001, ANN202
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMERS[name] += time.perf_counter() - started

    return wrapper


def instrument() -> None:
    """Put timers around the collectives, the compression kernels and bagua's end-of-backward wait."""
    import bagua_core.native as native
    from bagua_core.module import hooks

    for name in COLLECTIVES:
        if hasattr(dist, name):
            setattr(dist, name, _timed(f"collective:{name}", getattr(dist, name)))
    for name in KERNELS:
        setattr(native, name, _timed(f"kernel:{name}", getattr(native, name)))
    hooks._post_backward = _timed("bagua:wait_at_end_of_backward", hooks._post_backward)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="ddp,gradient_allreduce,bytegrad")
    parser.add_argument("--model", default="mlp21m")
    parser.add_argument("--network", default="1gbit", help="loopback, or a netns link rate")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.worker:
        from benchmarks.launch import launch, netns_link

        forwarded = ["--worker", "--methods", args.methods, "--model", args.model, "--steps", str(args.steps)]
        if args.network == "loopback":
            launch("benchmarks.profile_step", forwarded, 2, hosts=None, timeout=900, echo=True)
        else:
            with netns_link(2, args.network, "0ms") as hosts:
                launch("benchmarks.profile_step", forwarded, 2, hosts=hosts, timeout=900, echo=True)
        return
    import bagua_core as bagua
    from benchmarks.e2e_worker import run

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    instrument()
    bagua.init_process_group()
    try:
        for method in args.methods.split(","):
            run(method, args.model, 32, 3, 1, "lo", 0.01)  # warm up (not counted)
            TIMERS.clear()
            result = run(method, args.model, 32, 0, args.steps, "lo", 0.01)
            if dist.get_rank() == 0:
                per_step = 1000 / args.steps
                parts = ", ".join(f"{k} {v * per_step:.0f}" for k, v in sorted(TIMERS.items(), key=lambda kv: -kv[1]))
                print(f"{method}: step {result['elapsed_s'] * per_step:.0f} ms; {parts}", flush=True)
    finally:
        bagua.destroy_process_group()


if __name__ == "__main__":
    main()
