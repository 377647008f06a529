"""How busy each emulated host's link is, step by step: what each host sent, sampled every few
milliseconds beside a timeline of the steps (``BAGUA_BENCH_TIMELINE``).

Host i's traffic to the others leaves through its veth, whose end in the root namespace
(``<prefix>v<i>``, ``benchmarks/netns/hosts.sh``) receives it: that end's ``rx_bytes`` is host i's
egress, the bytes its ``tbf`` let through (frames, headers included). ``benchmarks.scale`` samples
them into ``<timeline folder>/link.txt`` whenever ``BAGUA_BENCH_TIMELINE`` is set (same clock as the
ranks' events); the report cuts the samples at rank 0's step marks of a method.

Example::

    BAGUA_BENCH_TIMELINE=/tmp/tl python -m benchmarks.scale --hosts 8 --ranks-per-host 1 --methods bytegrad
    python -m benchmarks.link_usage /tmp/tl bytegrad                   # per step: MB sent, ms busy per host
    python -m benchmarks.link_usage /tmp/tl bytegrad --step 2 --bin-ms 25   # % of the link, 25 ms bins
"""

from __future__ import annotations

import argparse
import bisect
import glob
import threading
import time
from pathlib import Path

from benchmarks.cost_model import rate_bps

__all__ = ["LinkSampler", "load_samples", "per_step", "step_bins", "step_marks"]

BUSY = 0.5
"""A sampling interval counts as busy when the host sent at more than this share of the link rate."""


class LinkSampler:
    """A thread writing ``<ms> <interface>=<rx_bytes> ...`` lines (``time.perf_counter``, the clock of
    ``benchmarks.step_timeline``) every ``interval_s`` for the root-namespace ends of the hosts' veths
    whose names match ``<prefix>v<number>``, while it runs (``with LinkSampler(path, "bg"): ...``)."""

    def __init__(self, path: Path, prefix: str, interval_s: float = 0.005) -> None:
        self.path, self.prefix, self.interval_s = Path(path), prefix, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-sampler", daemon=True)

    def __enter__(self) -> LinkSampler:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        pattern = f"/sys/class/net/{self.prefix}v[0-9]*/statistics/rx_bytes"
        with self.path.open("w") as out:
            while not self._stop.wait(self.interval_s):
                values = []
                for counter in sorted(glob.glob(pattern)):
                    try:
                        values.append(f"{counter.split('/')[4]}={int(Path(counter).read_text())}")
                    except (OSError, ValueError):  # a host removed between the glob and the read
                        continue
                if values:
                    out.write(f"{1000 * time.perf_counter():.1f} {' '.join(values)}\n")


def load_samples(path: Path) -> list[tuple[float, dict[str, int]]]:
    """The sampler's lines: ``(ms, {interface: bytes})``, in time order."""
    samples = []
    for line in Path(path).read_text().splitlines():
        stamp, *counters = line.split()
        samples.append((float(stamp), {name: int(value) for name, value in (c.split("=") for c in counters)}))
    return samples


def step_marks(folder: Path, method: str) -> list[float]:
    """Rank 0's ``step`` events of ``method`` in a timeline folder (ms)."""
    lines = (Path(folder) / f"{method}-rank0.txt").read_text().splitlines()
    return [float(line.split()[0]) for line in lines if line.split()[2:] == ["step"]]


def _interfaces(samples: list[tuple[float, dict[str, int]]], begin: float, end: float) -> list[str]:
    inside = [counters for t, counters in samples if begin <= t <= end]
    names = set.intersection(*(set(c) for c in inside)) if inside else set()
    return sorted(names, key=lambda name: (len(name), name))


def per_step(samples: list[tuple[float, dict[str, int]]], marks: list[float],
             rate_bps: float) -> list[tuple[float, dict[str, tuple[float, float]]]]:
    """For every step between two marks: ``(ms, {interface: (bytes sent, ms busy)})``."""
    times = [t for t, _ in samples]
    rate = rate_bps / 8 / 1000  # bytes per ms
    out = []
    for begin, end in zip(marks, marks[1:]):
        i, j = bisect.bisect_left(times, begin), bisect.bisect_right(times, end)
        window = samples[i:j]
        usage = {}
        for name in _interfaces(samples, begin, end):
            sent = busy = 0.0
            for (t0, c0), (t1, c1) in zip(window, window[1:]):
                delta = c1[name] - c0[name]
                sent += delta
                if t1 > t0 and delta / (t1 - t0) > BUSY * rate:
                    busy += t1 - t0
            usage[name] = (sent, busy)
        out.append((end - begin, usage))
    return out


def step_bins(samples: list[tuple[float, dict[str, int]]], begin: float, end: float, bin_ms: float,
              rate_bps: float) -> list[tuple[float, list[float]]]:
    """``(ms from begin, [% of the link rate each interface sent at])`` in bins of ``bin_ms``."""
    times = [t for t, _ in samples]
    names = _interfaces(samples, begin, end)
    rate = rate_bps / 8 / 1000

    def at(t: float) -> list[float]:  # the counters, interpolated at t
        k = min(max(bisect.bisect_left(times, t), 1), len(times) - 1)
        (t0, c0), (t1, c1) = samples[k - 1], samples[k]
        share = (t - t0) / (t1 - t0) if t1 > t0 else 0.0
        return [c0[n] + share * (c1[n] - c0[n]) for n in names]

    out, t = [], begin
    while t < end:
        before, after = at(t), at(t + bin_ms)
        out.append((t - begin, [100 * (b - a) / bin_ms / rate for a, b in zip(before, after)]))
        t += bin_ms
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", help="a BAGUA_BENCH_TIMELINE folder holding link.txt")
    parser.add_argument("method")
    parser.add_argument("--rate", default="100mbit", help="the hosts' link rate")
    parser.add_argument("--step", type=int, help="one step (0: the first timed one) in bins instead")
    parser.add_argument("--bin-ms", type=float, default=25.0)
    args = parser.parse_args(argv)
    try:
        rate = rate_bps(args.rate)
    except ValueError as exc:
        parser.error(f"--rate: {exc}")
    folder = Path(args.folder)
    if not (folder / "link.txt").exists() or not (folder / f"{args.method}-rank0.txt").exists():
        raise SystemExit(f"{folder} needs link.txt and {args.method}-rank0.txt: run benchmarks.scale with "
                         f"BAGUA_BENCH_TIMELINE={folder} on emulated hosts (not --loopback)")
    samples, marks = load_samples(folder / "link.txt"), step_marks(folder, args.method)
    if args.step is None:
        for k, (ms, usage) in enumerate(per_step(samples, marks, rate)):
            hosts = "  ".join(f"{name}: {sent / 1e6:4.1f} MB, busy {busy:4.0f}" for name, (sent, busy) in usage.items())
            print(f"step {k} ({ms:.0f} ms)  {hosts}")
        return
    if not 0 <= args.step < len(marks) - 1:
        raise SystemExit(f"--step must be 0..{len(marks) - 2} ({len(marks) - 1} steps with an end mark)")
    begin, end = marks[args.step], marks[args.step + 1]
    print("ms from the step's start, then % of the link each host sent at:",
          " ".join(_interfaces(samples, begin, end)))
    for offset, shares in step_bins(samples, begin, end, args.bin_ms, rate):
        print(f"{offset:6.0f} " + " ".join(f"{share:5.0f}" for share in shares))


if __name__ == "__main__":
    main()
