"""What a sparseloco round costs a step, as a user meets it: 2 ranks over loopback train a 10M-parameter MLP
with ``sparseloco`` at ``inner_steps=1`` (a round every step: encode, the collective, decode and average, the
outer step) and at ``inner_steps`` past the run (the same steps, no round), side by side in one run.

    python -m benchmarks.sparseloco_round_cost [--model mlp10m] [--steps 12] [--repeats 5] [--batch-size 256]
                                               [--paths native,unfused,python]
                                               [--markdown FILE] [--json FILE]

Each repeat runs every arm in turn, each a job of its own (the codec's path is chosen per process), the order
rotating repeat by repeat so the machine's noise hits all alike: an arm wraps the model, warms up 2 steps and
times ``steps`` steps (wall clock, rank 0's median; both ranks meet at every round). The arms: a round every
step with the native codec (the C kernels), with the native codec and the round's fused forms refused
(``unfused``: the outer gradient written as a delta before the encoding, the dense average and SGD on it), or
with the torch path (``BAGUA_NATIVE=python``), and the step with no round. It reports each arm's step (median,
min-max over repeats) and its ratio to the step with no round.
Loopback moves a round's ~0.2 MB at once: what is left is the codec's CPU and the collective's latency. A benchmark, never a
timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "markdown"]

NO_ROUND_STEPS = 1_000_000
"""``inner_steps`` of the arm without rounds: none falls in the run."""


def _worker(model_name: str, steps: int, batch_size: int, arm: str, out: str) -> None:
    import torch
    import torch.nn.functional as F

    import bagua_core
    from bagua_core.kernels import native_backend
    from benchmarks.models import build_model

    torch.set_num_threads(1)
    bagua_core.init_process_group()
    rank = bagua_core.get_rank()
    generator = torch.Generator().manual_seed(rank)
    model = build_model(model_name)
    width = next(model.parameters()).shape[1]
    data = [(torch.randn(batch_size, width, generator=generator),
             torch.randint(0, 10, (batch_size,), generator=generator))
            for _ in range(4)]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inner_steps = 1 if arm.endswith("/rounds") else NO_ROUND_STEPS
    if arm.startswith("unfused/"):  # (this job's processes only)
        from bagua_algorithms.diloco import FragmentExchange

        FragmentExchange.takes_difference = False  # type: ignore[assignment,misc]
        FragmentExchange.averages_entries = False  # type: ignore[assignment,misc]
    model = model.with_bagua([optimizer], {"name": "sparseloco", "inner_steps": inner_steps})
    per_step = []
    for step in range(2 + steps):
        x, y = data[step % len(data)]
        started = time.perf_counter()
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        if step >= 2:
            per_step.append(time.perf_counter() - started)
    model.bagua_shutdown()
    if rank == 0:
        Path(out).write_text(json.dumps({"step_ms": statistics.median(per_step) * 1000, "backend": native_backend(),
                                         "parameters": sum(p.numel() for p in model.parameters())}))
    bagua_core.destroy_process_group()


def _run_arm(model: str, steps: int, batch_size: int, arm: str) -> dict:
    """One arm in a job of its own (the codec's path is chosen per process: ``BAGUA_NATIVE``)."""
    from benchmarks.launch import launch

    saved = os.environ.get("BAGUA_NATIVE")
    os.environ["BAGUA_NATIVE"] = "python" if arm.startswith("python/") else "auto"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "result.json")
            launch("benchmarks.sparseloco_round_cost", ["--model", model, "--steps", str(steps), "--batch-size",
                                                        str(batch_size), "--worker", out, "--arm", arm], 2, timeout=900)
            return json.loads(Path(out).read_text())
    finally:
        if saved is None:
            os.environ.pop("BAGUA_NATIVE", None)
        else:
            os.environ["BAGUA_NATIVE"] = saved


def markdown(result: dict) -> str:
    """The results as the markdown ``results/sparseloco_round_cost.md`` holds."""
    times, base = result["times_ms"], statistics.median(result["times_ms"]["none/none"])
    lines = [f"Measured {result['when']} on {result['machine']}, torch {result['torch']}, 1 thread a rank; "
             f"{result['model']} ({result['parameters']:,} parameters), batches of {result['batch_size']}, 2 ranks over "
             f"loopback (gloo), "
             f"{result['steps']} timed steps an arm, {result['repeats']} repeats (median, min-max); "
             f"`{result['command']}`.", "",
             "| arm | step ms | over the step without rounds |", "| --- | ---: | ---: |"]
    for arm, values in times.items():
        median = statistics.median(values)
        label = {"none/none": "no round (inner_steps past the run)",
                 "unfused/rounds": "a round every step, native codec, unfused round"}.get(
                     arm, f"a round every step, {arm.split('/')[0]} codec")
        lines.append(f"| {label} | {median:.1f} ({min(values):.1f}-{max(values):.1f}) | {median / base:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sparseloco_round_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="mlp10m")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256, help="samples a rank's step (256: a ~0.17 s step here)")
    parser.add_argument("--paths", default="native,unfused,python",
                        help="codec paths with rounds: native, unfused (native, the round's fused forms refused), python")
    parser.add_argument("--markdown", default="")
    parser.add_argument("--json", default="")
    parser.add_argument("--worker", default="", help=argparse.SUPPRESS)
    parser.add_argument("--arm", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.model, args.steps, args.batch_size, args.arm, args.worker)
        return {}
    import torch

    paths = [path for path in args.paths.split(",") if path]
    if unknown := sorted(set(paths) - {"native", "unfused", "python"}):
        parser.error(f"--paths: unknown codec path(s) {', '.join(unknown)}; the paths are native, unfused and python")
    arms = [f"{path}/rounds" for path in paths] + ["none/none"]
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    parameters = 0
    for repeat in range(args.repeats):
        shift = repeat % len(arms)
        for arm in arms[shift:] + arms[:shift]:
            measured = _run_arm(args.model, args.steps, args.batch_size, arm)
            if arm.split("/")[0] in ("native", "unfused") and measured["backend"] != "native":
                raise SystemExit("the native kernels are not built (pip install -e . builds them): no native arm")
            times[arm].append(measured["step_ms"])
            parameters = measured["parameters"]
            print(f"repeat {repeat + 1}/{args.repeats} {arm}: {measured['step_ms']:.1f} ms a step", flush=True)
    result = {"times_ms": times, "parameters": parameters}
    result.update(model=args.model, steps=args.steps, batch_size=args.batch_size, repeats=args.repeats, torch=torch.__version__,
                  when=time.strftime("%Y-%m-%d %H:%M"), machine=f"{platform.machine()}, {os.cpu_count()} cores",
                  command="python -m benchmarks.sparseloco_round_cost " + " ".join(argv or sys.argv[1:]))
    text = markdown(result)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
