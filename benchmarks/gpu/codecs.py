"""Every registered codec's encode/decode and the fused low-precision-decentralized kernels on CUDA, in GB/s
against a device-to-device copy.

GB/s counts the fewest bytes each operation must move through device memory: encode reads the fp32 input
and writes the payload (``4 + bytes_per_element`` bytes a value), decode the reverse; ``lpd_difference``
reads x, w, left, right and writes z (20 bytes a value); ``lpd_update`` reads three one-chunk MinMaxUInt8
buffers, reads and writes left, right and w, and writes x (31 bytes a value); a copy reads and writes 4
bytes a value (8). The fused kernels are checked bit for bit against their torch composition
(``bagua_algorithms.low_precision_decentralized.kernels.reference``) before they are timed, and timed beside it. Times are
CUDA-event medians over interleaved rounds, after a warm-up.

    python -m benchmarks.gpu.codecs [--numel 67108864] [--chunks 8] [--codecs MinMaxUInt8 bf16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch

from bagua_algorithms.low_precision_decentralized import kernels as lpd
from bagua_algorithms.low_precision_decentralized.kernels import reference as lpd_reference
from bagua_codecs.minmax_kernels import compressed_size
from bagua_core.codecs import codec_names, get_codec
from bagua_core.runtime.native import cuda
from benchmarks.gpu.kernels import time_cases

__all__ = ["measure", "main"]


def _fused_cases(numel: int, gen: torch.Generator) -> dict[str, tuple[Callable[[], object], int]]:
    """The two passes of a low_precision_decentralized round, bagua's CUDA kernels and the torch
    composition, after checking that they agree bit for bit."""
    x, w, left, right = (torch.randn(numel, device="cuda", generator=gen) for _ in range(4))
    z, z_ref = torch.empty_like(x), torch.empty_like(x)
    lpd.lpd_difference(x, w, left, right, z)
    lpd_reference.lpd_diff(x, w, left, right, z_ref)
    codec = get_codec("MinMaxUInt8")
    bufs = [codec.encode(torch.randn(numel, device="cuda", generator=gen) * 1e-3) for _ in range(3)]
    state = [t.clone() for t in (w, left, right)]
    ref_state = [t.clone() for t in (w, left, right)]
    out_x, ref_x = torch.empty_like(x), torch.empty_like(x)
    lpd.lpd_update(bufs[0], bufs[1], bufs[2], state[0], state[1], state[2], out_x)
    lpd_reference.lpd_update(bufs[0], bufs[1], bufs[2], ref_state[0], ref_state[1], ref_state[2], ref_x, 0, numel)
    torch.cuda.synchronize()
    if not torch.equal(z, z_ref) or not all(torch.equal(a, b) for a, b in zip(state + [out_x], ref_state + [ref_x])):
        raise SystemExit("the fused CUDA kernels and their torch composition disagree: the comparison would be void")
    if bufs[0].numel() != compressed_size(numel, 1):
        raise SystemExit("MinMaxUInt8's one-chunk buffer is not the size the fused kernels read")
    return {
        "lpd_difference bagua": (lambda: lpd.lpd_difference(x, w, left, right, z), 20 * numel),
        "lpd_difference torch ops": (lambda: lpd_reference.lpd_diff(x, w, left, right, z_ref), 20 * numel),
        "lpd_update bagua": (lambda: lpd.lpd_update(bufs[0], bufs[1], bufs[2], *state, out_x), 31 * numel),
        "lpd_update torch ops": (lambda: lpd_reference.lpd_update(bufs[0], bufs[1], bufs[2], *ref_state, ref_x, 0,
                                                                   numel), 31 * numel),
    }


def measure(numel: int, codecs: list[str], chunks: int = 8, rounds: int = 11, repeats: int = 10) -> dict[str, dict[str, float]]:
    """name -> {"ms": median milliseconds, "GB/s": minimal bytes moved per second, "spread_ms": max - min}."""
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on a machine with a GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(numel, device="cuda", generator=gen)
    out = torch.empty_like(x)
    cases: dict[str, tuple[Callable[[], object], int]] = {"device copy": (lambda: out.copy_(x), 8 * numel)}
    for name in codecs:
        codec = get_codec(name)
        buf = codec.encode(x, chunks)
        moved = int(numel * (4 + codec.bytes_per_element))
        cases[f"{name} encode"] = (lambda codec=codec, buf=buf: codec.encode(x, chunks, out=buf), moved)
        cases[f"{name} decode"] = (lambda codec=codec, buf=buf: codec.decode(buf, chunks, out), moved)
    if cuda.available():
        cases.update(_fused_cases(numel, gen))
    for fn, _ in cases.values():
        fn()
    torch.cuda.synchronize()
    return time_cases(cases, rounds, repeats)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, nargs="+", default=[1 << 26])
    parser.add_argument("--codecs", nargs="+", default=None, help="default: every registered codec")
    parser.add_argument("--chunks", type=int, default=8, help="chunks of the codecs' encode/decode (a rank count)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run this on a machine with a GPU")
    codecs = args.codecs or codec_names()
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "native_cuda": cuda.available(),
              "sizes": {}}
    print(f"{report['device']}, torch {report['torch']}, bagua CUDA kernels: "
          f"{'loaded' if cuda.available() else 'unavailable: ' + cuda.unavailable_reason()}")
    print("| values | operation | ms | GB/s | vs copy GB/s | vs torch ops |\n| ---: | --- | ---: | ---: | ---: | ---: |")
    for numel in args.numel:
        rates = measure(numel, codecs, args.chunks)
        report["sizes"][numel] = rates
        copy = rates["device copy"]["GB/s"]
        for name, rate in rates.items():
            torch_ops = rates.get(name.replace(" bagua", " torch ops")) if name.endswith(" bagua") else None
            versus = f"{torch_ops['ms'] / rate['ms']:.1f}x" if torch_ops else ""
            print(f"| {numel} | {name} | {rate['ms']:.3f} | {rate['GB/s']:.0f} | {rate['GB/s'] / copy:.2f} | {versus} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=2)
    return report


if __name__ == "__main__":
    main()
