"""sparseloco's message codec kernel by kernel: the native kernels (C, ``bagua_algorithms.sparseloco.kernels``)
against the torch path they replace, side by side in one run, on the fragment of a benchmark model's parameters
(``benchmarks/lm_model.py``; lm11m: 76 tensors, 10.8M values, one fragment as sparseloco's round has it).

    python -m benchmarks.sparseloco_codec [--model lm11m] [--repeats 15] [--bits 2] [--chunk-size 4096]
                                          [--topk 64] [--threads 1] [--markdown FILE] [--json FILE]

Per row it reports the CPU time (``time.process_time``: every thread of the process) and the wall time of one
call, median and min-max over ``repeats``; the two paths alternate call by call (which goes first alternates
too), so the machine's noise hits both alike, and the inputs a call changes are restored, untimed, before each.
Rows: the kernels (the accumulator's update ``e = beta e + delta`` with the per-chunk top-k; quantise + pack; the
index field's encoding and decoding; the decoding and averaging of 2 messages), then whole calls of
``ChunkTopK`` (``encode``, ``decode`` of one message, ``encode_residual``: the round's sender side with the error
feedback) and a round's codec work (``encode`` + ``decode_average`` of 2). ``--threads`` sets torch's threads
and the native kernels' (``BAGUA_NATIVE_THREADS``). A benchmark, never a timed test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["Row", "fragment_numels", "main", "markdown"]


@dataclass
class Row:
    """One row: a kernel or a call, its two paths' times in ms (each a list over repeats)."""

    name: str
    torch_cpu: list[float]
    native_cpu: list[float]
    torch_wall: list[float]
    native_wall: list[float]

    def summary(self) -> dict:
        def stats(values: list[float]) -> dict:
            return {"median": statistics.median(values), "min": min(values), "max": max(values)}

        return {"name": self.name, "torch_cpu_ms": stats(self.torch_cpu), "native_cpu_ms": stats(self.native_cpu),
                "torch_wall_ms": stats(self.torch_wall), "native_wall_ms": stats(self.native_wall),
                "cpu_speedup": statistics.median(self.torch_cpu) / statistics.median(self.native_cpu)}


def fragment_numels(model: str) -> list[int]:
    """The numels of the model's parameters in registration order (sparseloco's one fragment)."""
    from benchmarks.lm_model import build_lm

    return [p.numel() for p in build_lm(model, seed=0).parameters()]


def _time(fn: Callable[[], object]) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    fn()
    return (time.process_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3


def _side_by_side(name: str, torch_fn: Callable[[], object], native_fn: Callable[[], object], repeats: int,
                  reset: Callable[[], object] = lambda: None) -> Row:
    row = Row(name, [], [], [], [])
    reset()
    torch_fn(), native_fn()  # warm up (allocator, page faults of the first call)
    gc.collect()
    gc.disable()  # (no collection inside a timed call)
    try:
        _repeat(row, torch_fn, native_fn, repeats, reset)
    finally:
        gc.enable()
    print(f"{name}: torch {statistics.median(row.torch_cpu):.1f} ms, native "
          f"{statistics.median(row.native_cpu):.1f} ms of CPU", flush=True)
    return row


def _repeat(row: Row, torch_fn: Callable[[], object], native_fn: Callable[[], object], repeats: int,
            reset: Callable[[], object]) -> None:
    for r in range(repeats):
        order = [("torch", torch_fn), ("native", native_fn)]
        for side, fn in order if r % 2 == 0 else order[::-1]:
            reset()
            cpu, wall = _time(fn)
            getattr(row, f"{side}_cpu").append(cpu)
            getattr(row, f"{side}_wall").append(wall)


def run(numels: list[int], chunk_size: int, topk: int, bits: int, repeats: int, seed: int = 0) -> tuple[list[Row], dict]:
    """Every row on one fragment; and what was measured (the fragment's size, its message's bytes)."""
    from bagua_algorithms.sparseloco.codec import ChunkTopK, _two_bytes
    from bagua_algorithms.sparseloco.kernels import cpu
    from bagua_algorithms.sparseloco.quantiser import pack, quantise

    native_codec = ChunkTopK(numels, chunk_size, topk, bits)
    torch_codec = ChunkTopK(numels, chunk_size, topk, bits, native=False)
    layout, kernels = native_codec.layout, cpu.CpuLayout(native_codec.layout)
    g = torch.Generator().manual_seed(seed)
    e0 = torch.randn(layout.numel, generator=g)
    delta = torch.randn(layout.numel, generator=g) * 0.1
    other = torch.randn(layout.numel, generator=g)
    beta = 0.95
    e = e0.clone()

    def reset() -> None:
        e.copy_(e0)

    columns, top = layout.select(e0)
    values = e0[layout.entry_base + columns]
    largest = top[:, 0].clone(memory_format=torch.contiguous_format)
    smallest = layout.smallest_sent(top).clone(memory_format=torch.contiguous_format)
    field = torch_codec._index  # the torch index field of this layout
    encoded_field = field.encode(columns)
    messages = torch.cat([torch_codec.encode(e0), torch_codec.encode(other)])
    message = messages[: native_codec.nbytes]
    out = torch.empty(layout.numel)

    def torch_quantise() -> None:
        hi, q, codes = quantise(values, layout.entry_chunk, largest, smallest, bits)
        torch.cat([hi.view(torch.uint8), _two_bytes(q)]), pack(codes, bits)

    rows = [
        _side_by_side("top-k + accumulator update (e = 0.95 e + delta, per-chunk top-k)",
                      lambda: (e.mul_(beta).add_(delta), layout.select(e)), lambda: cpu.select(kernels, e, delta, beta),
                      repeats, reset),
    ]
    if bits != 32:
        rows.append(_side_by_side("quantise + pack", torch_quantise,
                                  lambda: cpu.quantise(kernels, values, largest, smallest, bits), repeats))
    rows += [
        _side_by_side("index field: encode", lambda: field.encode(columns),
                      lambda: cpu.index_encode(kernels, columns, field.nbytes), repeats),
        _side_by_side("index field: decode", lambda: field.decode(encoded_field),
                      lambda: cpu.index_decode(kernels, encoded_field), repeats),
        _side_by_side("decode + average of 2 messages", lambda: torch_codec.decode_average(messages, 2, out),
                      lambda: native_codec.decode_average(messages, 2, out), repeats),
        _side_by_side("ChunkTopK.encode", lambda: torch_codec.encode(e0), lambda: native_codec.encode(e0), repeats),
        _side_by_side("ChunkTopK.decode (1 message)", lambda: torch_codec.decode(message, 1, out),
                      lambda: native_codec.decode(message, 1, out), repeats),
        _side_by_side("ChunkTopK.encode_residual (update, message, feedback)",
                      lambda: torch_codec.encode_residual(e, delta, beta),
                      lambda: native_codec.encode_residual(e, delta, beta), repeats, reset),
        _side_by_side("a round: encode + decode_average of 2",
                      lambda: (torch_codec.encode(e0), torch_codec.decode_average(messages, 2, out)),
                      lambda: (native_codec.encode(e0), native_codec.decode_average(messages, 2, out)), repeats),
        _side_by_side("a round with the feedback: encode_residual + decode_average of 2",
                      lambda: (torch_codec.encode_residual(e, delta, beta),
                               torch_codec.decode_average(messages, 2, out)),
                      lambda: (native_codec.encode_residual(e, delta, beta),
                               native_codec.decode_average(messages, 2, out)), repeats, reset),
    ]
    facts = {"tensors": len(numels), "values": layout.numel, "chunks": layout.chunk_count,
             "entries": layout.entry_count, "message_bytes": native_codec.nbytes}
    return rows, facts


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def markdown(rows: list[Row], header: str) -> str:
    """The rows as a markdown table under ``header``: median (min-max) ms."""
    def cell(values: list[float]) -> str:
        return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"

    lines = [header, "", "| kernel / call | torch CPU ms | native CPU ms | CPU speedup | torch wall ms | native wall ms |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        speedup = statistics.median(row.torch_cpu) / statistics.median(row.native_cpu)
        lines.append(f"| {row.name} | {cell(row.torch_cpu)} | {cell(row.native_cpu)} | {speedup:.1f}x | "
                     f"{cell(row.torch_wall)} | {cell(row.native_wall)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="lm11m", help="a model of benchmarks/lm_model.py (its parameters' shapes)")
    parser.add_argument("--numels", help="instead of --model: the fragment's tensors' numels, comma separated")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--bits", type=int, default=2, choices=[2, 4, 8, 32])
    parser.add_argument("--chunk-size", type=int, default=4096)
    parser.add_argument("--topk", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch's threads and BAGUA_NATIVE_THREADS")
    parser.add_argument("--markdown", help="also write the table (and how it was measured) to this file")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    given = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(given)
    from bagua_core.kernels import native_backend, set_threads

    if native_backend() != "native":
        raise SystemExit("the native kernels are not built (or BAGUA_NATIVE=python): build them with "
                         "`python setup.py build_ext --inplace` or `pip install -e .`")
    torch.set_num_threads(args.threads)
    set_threads(args.threads)
    numels = [int(n) for n in args.numels.split(",")] if args.numels else fragment_numels(args.model)
    what = f"numels {args.numels}" if args.numels else args.model
    load = os.getloadavg()[0]
    rows, facts = run(numels, args.chunk_size, args.topk, args.bits, args.repeats)
    header = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()} ({_cpu_name()}, "
              f"{os.cpu_count()} cores; load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the "
              f"end), torch {torch.__version__}, {args.threads} thread(s); {what}: "
              f"{facts['tensors']} tensors, {facts['values']:,} values, {facts['chunks']} chunks of "
              f"{args.chunk_size}, topk {args.topk}, bits {args.bits}: {facts['entries']:,} entries, "
              f"{facts['message_bytes']:,}-byte messages; {args.repeats} repeats (median, min-max); "
              f"`{' '.join(['python -m benchmarks.sparseloco_codec', *given])}`.")
    table = markdown(rows, header)
    print("\n" + table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    summaries = [row.summary() for row in rows]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"facts": facts, "header": header, "rows": summaries}, f, indent=1)
    return summaries


if __name__ == "__main__":
    main()
