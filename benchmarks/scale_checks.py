"""What each method's measured step should be, from its message pattern, checked on a scaling run.

``benchmarks.scale`` appends these lines to ``results/scale.md``; ``python -m benchmarks.scale_checks
results/scale.json`` prints them for any saved run. Per method and host count, one layout (ranks per
host) at a time:

- the step over its bytes' time: the bytes one host's link sent per step (its ``tx_bytes`` counter;
  veth counts one TCP/IP header per offloaded super-packet, the shaper one per 1514-byte frame, so the
  counter is the payload and the link carries ``cost_model.TCP_OVER_ETHERNET`` of its rate in it);
- the step over torch DDP's at the same layout;
- the growth of the step from the smallest to the largest host count.

Then the expectations that the message patterns set, each with its threshold and whether the run meets
it: a method whose bytes do not grow with n (shift_one; the low-precision ring past two neighbours) stays
flat (within 10%) and within 15% of its bytes' time, shift_one's step is at most DDP's on the fewest hosts,
gradient_allreduce (DDP's ring) is within 10% of DDP, and bytegrad is at most its bytes' share of DDP's
step plus the compute: both with one rank's compute alone and with the compute as the ranks get it on
the shared cores (the measured slowdown), since on a CPU machine all ranks' compute shares its cores.
Every figure is from the rows, the link's rate too (each row's ``link``, ``tbf 100mbit, ...``).

Last, with ``cores`` (the emulated hosts share one machine's cores), the points whose step is set by the
CPU rather than the link: the ranks' CPU per step (every thread, as the rows measured it) over the cores,
against the step. Where the two agree (within :data:`CPU_BOUND`), a cost model can predict the step no
closer than it predicts the CPU a rank spends per step.

Example::

    >>> lines = scale_checks.report(rows, rate_bps=100e6, compute_s=0.0162, contention={8: 4.53})
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from benchmarks.cost_model import TCP_OVER_ETHERNET, rate_bps

__all__ = ["bytes_time_s", "link_rate_bps", "cpu_bound", "report", "main"]

FLAT = 1.10
"""A step whose bytes do not grow with n grows by at most this much over the host counts."""
NEAR_BYTES = 1.15
"""A link-bound step takes at most this much more than its bytes' time."""
NEAR_DDP = 1.10
"""gradient_allreduce runs DDP's ring: at most this far from DDP's step, either way."""
CPU_BOUND = 1.20
"""A step at most this much longer than its ranks' CPU per step over the cores is set by the CPU."""


def link_rate_bps(rows: Sequence[Mapping]) -> float | None:
    """The rate of the shaped link the rows were measured on (their ``link``: ``tbf 100mbit, TCP cubic``);
    None where none names one (loopback). Rows of several rates raise: one report is of one link."""
    rates = {m.group(1) for row in rows if (m := re.match(r"tbf (\w+)", row.get("link", "")))}
    if len(rates) > 1:
        raise ValueError(f"the rows were measured on links of several rates ({', '.join(sorted(rates))}): check one at a time")
    return rate_bps(rates.pop()) if rates else None


def bytes_time_s(row: Mapping, rate_bps: float) -> float:
    """Seconds the bytes of one host's link per step take at ``rate_bps`` (payload on TCP over Ethernet)."""
    return row.get("host_tx_bytes_per_step", row["tx_bytes_per_step"]) * 8 / (rate_bps * TCP_OVER_ETHERNET)


def _table(rows: Sequence[Mapping]) -> dict[tuple[str, int], dict[int, Mapping]]:
    """``(method, ranks per host) -> {hosts: row}`` for the rows that measured a step."""
    table: dict[tuple[str, int], dict[int, Mapping]] = {}
    for row in rows:
        if "ms_per_step" in row:
            table.setdefault((row["method"], row["ranks_per_host"]), {})[row["hosts"]] = row
    return table


def _check(name: str, figures: Sequence[float], limit: float, fmt: str = "{:.2f}x", within: bool = False) -> str:
    """A row of the expectations: every figure at most ``limit`` (``within``: no further than it from 1)."""
    holds = all(abs(f - 1) <= limit - 1 for f in figures) if within else all(f <= limit for f in figures)
    bound = f"within {limit - 1:.0%} of 1" if within else "at most " + fmt.format(limit)
    return f"| {name} | {', '.join(fmt.format(f) for f in figures)} | {bound} | {'holds' if holds else '**misses**'} |"


def _link_bound(name: str, by_n: Mapping[int, Mapping], flat_from: int, k: int, rate_bps: float) -> list[str]:
    """A method whose bytes stop growing at ``flat_from`` hosts: flat from there on, and near its bytes' time."""
    flat = sorted(n for n in by_n if n >= flat_from)
    rows = []
    if len(flat) > 1:
        rows.append(_check(f"{name} flat, {flat[0]} to {flat[-1]} hosts ({k}/host)",
                           [by_n[flat[-1]]["ms_per_step"] / by_n[flat[0]]["ms_per_step"]], FLAT))
    if by_n:
        rows.append(_check(f"{name} over its bytes' time ({k}/host)",
                           [by_n[n]["ms_per_step"] / 1e3 / bytes_time_s(by_n[n], rate_bps) for n in sorted(by_n)], NEAR_BYTES))
    return rows


def cpu_bound(rows: Sequence[Mapping], cores: int) -> list[str]:
    """Markdown lines: the points whose step is within :data:`CPU_BOUND` of their ranks' CPU per step over the
    cores they use (all ranks share the machine's ``cores``; fewer ranks use one each), each with that ratio;
    none where no row is."""
    bound = []
    for row in rows:
        if "ms_per_step" not in row or not row.get("cpu_ms_per_step"):
            continue
        ranks = row["hosts"] * row["ranks_per_host"]
        cpu = ranks * row["cpu_ms_per_step"] / min(cores, ranks)
        if row["ms_per_step"] <= CPU_BOUND * cpu:
            bound.append((row, cpu))
    if not bound:
        return []
    lines = ["", "## The points set by the CPU", "",
             f"The ranks' CPU per step (every thread of every rank) over the cores they use (the fewer of the {cores} "
             "cores and the ranks), against the step: "
             f"where the step is at most {CPU_BOUND:.2f}x that, the cores, not the link, set it, and a model predicts it "
             "no closer than it predicts the CPU a rank spends per step.", "",
             "| method | hosts x ranks | ms/step | CPU ms/step/rank | ranks x CPU / cores used | step over it |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row, cpu in bound:
        lines.append(f"| {row['method']} | {row['hosts']} x {row['ranks_per_host']} | {row['ms_per_step']:.0f} | "
                     f"{row['cpu_ms_per_step']:.1f} | {cpu:.0f} | {row['ms_per_step'] / cpu:.2f} |")
    return lines


def report(rows: Sequence[Mapping], rate_bps: float, compute_s: float | None = None,
           contention: Mapping[int, float] | None = None, model_errors: Sequence[float] = (),
           cores: int | None = None) -> list[str]:
    """Markdown lines: every method's step over its bytes' time and over DDP's, the expectations and, with
    ``cores``, the points set by the CPU (:func:`cpu_bound`)."""
    table = _table(rows)
    if not table:
        return []
    contention = contention or {}
    lines = ["", "## Each method against its message pattern", "",
             "Step over its bytes' time (one host's link, payload at "
             f"{TCP_OVER_ETHERNET:.3f} of {rate_bps / 1e6:g} Mbit/s) and over torch DDP's step, per host count; "
             "growth: the step on the most hosts over the step on the fewest.", "",
             "| method | ranks/host | hosts | ms/step | / bytes' time | / DDP | growth |", "| --- | --- | --- | --- | --- | --- | ---: |"]
    for (method, k), by_n in sorted(table.items(), key=lambda item: (item[0][1], item[0][0])):
        ns = sorted(by_n)
        ddp = table.get(("ddp", k), {})
        steps = " / ".join(f"{by_n[n]['ms_per_step']:.0f}" for n in ns)
        over_bytes = " / ".join(f"{by_n[n]['ms_per_step'] / 1e3 / bytes_time_s(by_n[n], rate_bps):.2f}" for n in ns)
        over_ddp = " / ".join(f"{by_n[n]['ms_per_step'] / ddp[n]['ms_per_step']:.3f}" if n in ddp else "-" for n in ns)
        growth = by_n[ns[-1]]["ms_per_step"] / by_n[ns[0]]["ms_per_step"]
        lines.append(f"| {method} | {k} | {' / '.join(map(str, ns))} | {steps} | {over_bytes} | {over_ddp} | {growth:.2f}x |")

    checks = []
    for k in sorted({k for _, k in table}):
        ddp = table.get(("ddp", k), {})
        shift = table.get(("decentralized_shift_one", k), {})
        checks += _link_bound("shift_one", shift, min(shift, default=0), k, rate_bps)
        if shift and min(shift) in ddp:
            first = min(shift)
            checks.append(_check(f"shift_one over DDP on {first} hosts ({k}/host)",
                                 [shift[first]["ms_per_step"] / ddp[first]["ms_per_step"]], 1.0, "{:.3f}x"))
        # the low-precision ring has two neighbours from 4 hosts on: its bytes stop growing there
        checks += _link_bound("low_precision_decentralized", table.get(("low_precision_decentralized", k), {}), 4, k,
                              rate_bps)
        allreduce = table.get(("gradient_allreduce", k), {})
        both = sorted(set(allreduce) & set(ddp))
        if both:
            checks.append(_check(f"gradient_allreduce over DDP ({k}/host)",
                                 [allreduce[n]["ms_per_step"] / ddp[n]["ms_per_step"] for n in both], NEAR_DDP, "{:.3f}x",
                                 within=True))
        bytegrad = table.get(("bytegrad", k), {})
        both = sorted(set(bytegrad) & set(ddp))
        if both and compute_s is not None:
            def bound(n: int, slowdown: float) -> float:
                share = bytegrad[n]["host_tx_bytes_per_step"] / ddp[n]["host_tx_bytes_per_step"]
                return share * ddp[n]["ms_per_step"] / 1e3 + compute_s * slowdown

            checks.append(_check(f"bytegrad over its bytes' share of DDP's step + one rank's compute alone ({k}/host)",
                                 [bytegrad[n]["ms_per_step"] / 1e3 / bound(n, 1.0) for n in both], 1.0))
            ranks = [n * k for n in both]
            if all(r in contention or r == 1 for r in ranks):
                checks.append(_check(f"bytegrad over the same with the compute as the ranks get it ({k}/host)",
                                     [bytegrad[n]["ms_per_step"] / 1e3 / bound(n, contention.get(n * k, 1.0))
                                      for n in both], 1.0))
    if model_errors:
        checks.append(_check("the cost model's largest error, every point", [max(abs(e) for e in model_errors)],
                             0.15, "{:.1%}"))
    if checks:
        lines += ["", "| expectation | measured, per host count | threshold | |", "| --- | --- | --- | --- |", *checks]
    return lines + (cpu_bound(rows, cores) if cores else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", help="a scaling run's scale.json (benchmarks.scale)")
    parser.add_argument("--rate", help="the link's rate (100mbit, 1gbit; default: the rows' own, their 'link')")
    args = parser.parse_args(argv)
    try:
        data = json.loads(Path(args.json).read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"benchmarks.scale_checks: cannot read {args.json}: {exc}")
    rows, model = data.get("rows", []), data.get("model", {})
    try:
        rate = rate_bps(args.rate) if args.rate else link_rate_bps(rows)
    except ValueError as exc:
        parser.error(str(exc))
    if rate is None:
        parser.error(f"no row of {args.json} names a shaped link (a loopback run has no bytes' time): give --rate")
    contention = {int(k): f for k, f in model.get("contention", {}).items()}
    print("\n".join(report(rows, rate, model.get("compute_s"), contention, model.get("errors", ()), model.get("cores"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
