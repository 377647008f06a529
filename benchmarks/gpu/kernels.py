"""MinMaxUInt8 on CUDA: bagua's kernels against the same formula in torch ops and a device copy.

GB/s counts the fewest bytes each operation must move through device memory: compress reads the fp32
input and writes the uint8 payload (5 bytes an element), decompress the reverse, a copy reads and
writes 4 bytes an element (8). Times are CUDA-event medians over interleaved rounds (all cases see
the same clocks), after a warm-up. Goals (issue 17): bagua >= 10x torch ops, >= 0.5 of the copy's GB/s.

    python -m benchmarks.gpu.kernels [--numel 67108864] [--chunks 8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable

import torch

from bagua_codecs.minmax_kernels import compressed_size, cuda, fallback
from bagua_core.runtime.native import cuda as cuda_library

__all__ = ["measure", "time_cases", "main"]


def _time_ms(fn: Callable[[], object], repeats: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / repeats


def measure(numel: int, chunks: int, rounds: int = 15, repeats: int = 10) -> dict[str, dict[str, float]]:
    """name -> {"ms": median milliseconds, "GB/s": minimal bytes moved per second}."""
    if not cuda_library.available():
        raise SystemExit(f"the bagua CUDA kernels are unavailable: {cuda_library.unavailable_reason()}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(numel, device="cuda", generator=gen)
    out = torch.empty_like(x)
    buf = torch.empty(compressed_size(numel, chunks), dtype=torch.uint8, device="cuda")
    ref = torch.empty_like(buf)
    cases: dict[str, tuple[Callable[[], object], int]] = {
        "compress bagua": (lambda: cuda.compress(x, chunks, "propagate", buf), 5 * numel),
        "compress torch ops": (lambda: fallback.compress(x, chunks, "propagate", ref), 5 * numel),
        "decompress bagua": (lambda: cuda.decompress(buf, chunks, out, False), 5 * numel),
        "decompress torch ops": (lambda: fallback.decompress(ref, chunks, out, False), 5 * numel),
        "device copy": (lambda: out.copy_(x), 8 * numel),
    }
    for fn, _ in cases.values():
        fn()
    cuda.compress(x, chunks, "propagate", buf)
    fallback.compress(x, chunks, "propagate", ref)
    torch.cuda.synchronize()
    if not torch.equal(buf, ref):
        raise SystemExit("bagua's CUDA kernel and the torch formula disagree: the comparison would be void")
    return time_cases(cases, rounds, repeats)


def time_cases(cases: dict[str, tuple[Callable[[], object], int]], rounds: int, repeats: int) -> dict[str, dict[str, float]]:
    """``name -> (fn, bytes moved)`` timed in interleaved rounds: name -> {"ms": median, "GB/s", "spread_ms"}."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (fn, _) in cases.items():
            times[name].append(_time_ms(fn, repeats))
    result = {}
    for name, (_, moved) in cases.items():
        ms = statistics.median(times[name])
        result[name] = {"ms": ms, "GB/s": moved / ms / 1e6, "spread_ms": max(times[name]) - min(times[name])}
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, nargs="+", default=[1 << 22, 1 << 26])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "sizes": {}}
    print(f"{report['device']}, torch {report['torch']}, {args.chunks} chunks")
    print("| elements | operation | ms | GB/s | vs torch ops | vs copy GB/s |\n| ---: | --- | ---: | ---: | ---: | ---: |")
    for numel in args.numel:
        rates = measure(numel, args.chunks)
        report["sizes"][numel] = rates
        copy = rates["device copy"]["GB/s"]
        for op in ("compress", "decompress"):
            ours, theirs = rates[f"{op} bagua"], rates[f"{op} torch ops"]
            print(f"| {numel} | {op} | {ours['ms']:.3f} | {ours['GB/s']:.0f} | {theirs['ms'] / ours['ms']:.1f}x | "
                  f"{ours['GB/s'] / copy:.2f} |")
            print(f"| {numel} | {op} (torch ops) | {theirs['ms']:.3f} | {theirs['GB/s']:.0f} | 1.0x | "
                  f"{theirs['GB/s'] / copy:.2f} |")
        print(f"| {numel} | device copy | {rates['device copy']['ms']:.3f} | {copy:.0f} | | 1.00 |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return report


if __name__ == "__main__":
    main()
