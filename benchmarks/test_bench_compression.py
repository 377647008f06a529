"""MinMaxUInt8 compress + decompress throughput: native kernels, torch formula, memcpy.

Everything runs on one core (torch and the native kernels single-threaded), on the same fp32 data;
GB/s counts the fp32 input bytes (``4 * numel``) per second of compress + decompress (for memcpy:
per second of one copy). Goals (issue 3): native >= 5x the torch formula, >= 0.3 of memcpy.

    python -m pytest benchmarks/test_bench_compression.py      # pytest-benchmark tables
    python benchmarks/test_bench_compression.py                # side-by-side summary in one run

``BAGUA_BENCH_NUMEL`` sets the tensor size (default 2**22 elements, 16 MiB).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator

import pytest
import torch

from bagua_codecs.minmax_kernels import compressed_size, fallback

try:
    from bagua_codecs.minmax_kernels import cpu as native_cpu
except ImportError:  # not built: the native rows are skipped
    native_cpu = None

__all__ = ["main", "measure", "roundtrips"]

NUMEL = int(os.environ.get("BAGUA_BENCH_NUMEL", str(1 << 22)))


def roundtrips(numel: int) -> dict[str, Callable[[], object]]:
    """name -> a zero-argument function doing one compress + decompress (or one memcpy)."""
    x = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    out = torch.empty_like(x)
    buf = torch.empty(compressed_size(numel, 1), dtype=torch.uint8)
    cases: dict[str, Callable[[], object]] = {}
    if native_cpu is not None:
        cases["native"] = lambda: native_cpu.decompress(
            native_cpu.compress(x, 1, "raise", buf), 1, out, False
        )
    cases["torch_formula"] = lambda: fallback.decompress(fallback.compress(x, 1, "raise", buf), 1, out, False)
    cases["memcpy"] = lambda: out.copy_(x)
    return cases


class _SingleThread:
    def __enter__(self) -> None:
        self.torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)
        if native_cpu is not None:
            self.native_threads = native_cpu.get_threads()
            native_cpu.set_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.torch_threads)
        if native_cpu is not None:
            native_cpu.set_threads(self.native_threads)


def measure(numel: int = NUMEL, rounds: int = 10) -> dict[str, float]:
    """GB/s of each case (best of ``rounds``, interleaved so all see the same machine state)."""
    cases = roundtrips(numel)
    best = dict.fromkeys(cases, float("inf"))
    with _SingleThread():
        for fn in cases.values():
            fn()  # warm up: page faults, lazy init
        for _ in range(rounds):
            for name, fn in cases.items():
                start = time.perf_counter()
                fn()
                best[name] = min(best[name], time.perf_counter() - start)
    return {name: 4 * numel / seconds / 1e9 for name, seconds in best.items()}


@pytest.fixture
def single_thread() -> Iterator[None]:
    with _SingleThread():
        yield


@pytest.mark.parametrize("case", ["native", "torch_formula", "memcpy"])
def test_roundtrip_throughput(benchmark, single_thread, case: str) -> None:
    cases = roundtrips(NUMEL)
    if case not in cases:
        pytest.skip("bagua_core._native_cpu is not built")
    benchmark.extra_info["numel"] = NUMEL
    benchmark.pedantic(cases[case], rounds=20, warmup_rounds=2)
    benchmark.extra_info["GB/s"] = 4 * NUMEL / benchmark.stats.stats.min / 1e9


def main() -> None:
    """Prints the side-by-side summary and the two goal ratios."""
    rates = measure()
    for name, rate in rates.items():
        print(f"{name:>14}: {rate:7.2f} GB/s")
    if "native" in rates:
        print(f"native / torch_formula = {rates['native'] / rates['torch_formula']:.1f}x (goal >= 5)")
        print(f"native / memcpy        = {rates['native'] / rates['memcpy']:.2f} (goal >= 0.3)")


if __name__ == "__main__":
    main()
