"""Figures (not a test): what fault-tolerant mode's per-step copy costs streaming diloco, with the copy that
waits for the exchange in flight (before) and the one that keeps it in flight and records what was sent
(after, ``state_of(impl, wait=False)``).

Two ranks over gloo on this host, an MLP of ``--layers`` Linear(``--width``, ``--width``) layers, streaming
diloco with one fragment per layer pair synchronised every step (``inner_steps`` = fragments), each exchange
overlapped with the next inner step; every step starts with ``bagua_features.fault_tolerance.state.capture`` of
weights, optimizer, algorithm state and step, as the runtime does. Prints per mode the median step time, the
median copy time and what the copy spent waiting for the exchange.

    python -m tests.fault_tolerant_copy_cost [--width 1024 --layers 8 --steps 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def _measure(rank: int, width: int, layers: int, steps: int) -> dict:
    import torch

    from bagua_features.fault_tolerance import state as ft_state

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    fragments = layers  # every parameter pair of a layer dealt into its own fragment (weights + biases)
    model = model.with_bagua([optimizer], {"name": "diloco", "streaming": True, "inner_steps": fragments,
                                           "fragments": fragments, "overlap_steps": 1})
    impl = model.bagua_algorithm
    x = torch.randn(16, width)
    parts = ("weights", "optimizer", "algorithm_state", "step")
    result = {}
    for mode in ("no copy", "copy waits (before)", "copy keeps the exchange in flight (after)"):
        impl.fault_tolerant = mode.endswith("(after)")  # what state_dict's wait= follows
        step_s, copy_s, wait_s = [], [], []
        for step in range(steps + 4):
            started = time.perf_counter()
            if mode != "no copy":
                in_flight = [impl.exchanges[f] for f in impl.pending if f not in impl.landed]
                waited = 0.0
                if not impl.fault_tolerant:  # how long the exchanges take to land, inside the copy
                    t0 = time.perf_counter()
                    for exchange in in_flight:
                        if exchange._work is not None:
                            exchange._work.wait()
                    waited = time.perf_counter() - t0
                ft_state.capture(model, parts)
                copied = time.perf_counter() - started
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
            if step >= 4:
                step_s.append(time.perf_counter() - started)
                if mode != "no copy":
                    copy_s.append(copied)
                    wait_s.append(waited)
        result[mode] = {"step_ms": round(statistics.median(step_s) * 1e3, 2),
                        "copy_ms": round(statistics.median(copy_s) * 1e3, 2) if copy_s else 0.0,
                        "copy_waiting_ms": round(statistics.median(wait_s) * 1e3, 2) if wait_s else 0.0}
    result["params"] = sum(p.numel() for p in model.parameters())
    return result


def main() -> None:
    from tests.distributed import run_workers

    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()
    results = run_workers(_measure, 2, args.width, args.layers, args.steps, timeout=540)
    print(json.dumps({"rank0": results[0], "rank1": results[1]}, indent=1))


if __name__ == "__main__":
    main()
