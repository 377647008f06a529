"""How the cost grows with the number of nodes: every method on 2, 4 and 8 emulated hosts (one rank per
host, and two so the hierarchical forms run a real intra-node step), then the cost model
(:mod:`benchmarks.cost_model`) fitted and checked against every measured point and projected to 16-128
GPU nodes.

    sudo python -m benchmarks.scale                          # make bench-scale: 100 Mbit/s, mlp5m
    python -m benchmarks.scale --loopback --hosts 2 --ranks-per-host 1 --methods ddp --steps 1   # no root

Why 100 Mbit/s and a 5.3M-parameter MLP: on this 2-core machine 16 ranks share two cores, so the link
must dominate the step for the emulated hosts to say anything about the network: a ring allreduce of
its 21 MB takes ~1.7 s at 100 Mbit/s on 2 hosts against ~0.1 s of compute per rank.

Writes ``results/scale.md`` (tables, the model's error on every point, the projection), ``scale.json``
and ``scale.png`` (step time and bytes per rank against the number of hosts). With
``BAGUA_BENCH_TIMELINE=<folder>``, every rank's step events and (on emulated hosts) every host's bytes sent,
sampled every 5 ms, go to that folder: ``python -m benchmarks.link_usage <folder> <method>`` shows how busy
each host's link was, step by step.
"""

from __future__ import annotations

import argparse
import json
import os
from contextlib import nullcontext
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import cost_model, cpu_contention, network_cpu, scale_checks
from benchmarks.e2e import run_network, warn_unless_native
from benchmarks.e2e_worker import codec_backend
from benchmarks.launch import NETNS_PREFIX, REPO_ROOT, netns_link, tcp_congestion_control
from benchmarks.link_usage import LinkSampler
from benchmarks.models import MODEL_LAYERS
from benchmarks.report import have_matplotlib

__all__ = ["DEFAULT_METHODS", "matrices", "COMPUTE_ALONE", "measure_compute", "settings_of", "model_report", "main"]

DEFAULT_METHODS = ("ddp", "gradient_allreduce", "bytegrad", "qadam", "decentralized", "decentralized_shift_one",
                   "low_precision_decentralized", "powersgd", "diloco", "async")
"""torch DDP and every built-in algorithm the e2e worker wraps with ``with_bagua`` (decentralized_dp has
its own wrapper and benchmark, ``benchmarks.decentralized_dp_step``)."""

# the projection: GPU nodes of 8 ranks, compute per step measured or derived as stated in the report
RESNET50 = {"name": "ResNet-50", "params": 25_557_032, "compute_s": 27.92e-3,
            "why": "H100, batch 64, fp32, measured (benchmarks/README.md, On a GPU)"}
GPT2_SMALL = {"name": "GPT-2 small", "params": 124_439_808, "compute_s": 6 * 124_439_808 * 8192 / (0.4 * 989e12),
              "matrices": tuple([(2304, 768), (768, 768), (3072, 768), (768, 3072)] * 12 + [(50257, 768)]),
              "why": "assumed: 6 x params x 8192 tokens per step at 40% of the H100's 989 TFLOP/s bf16"}


def matrices(model: str) -> tuple[tuple[int, int], ...]:
    """The (rows, cols) of each weight matrix of a benchmark MLP (powersgd compresses these)."""
    sizes = MODEL_LAYERS[model]
    return tuple((fan_out, fan_in) for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))


COMPUTE_ALONE = "a forward, backward and SGD step alone, no framework (benchmarks.cpu_contention)"
"""What ``compute_s`` is, as the results record it (older results: DDP's step at world size 1, framework and all)."""


def measure_compute(args: argparse.Namespace, ranks: set[int] = frozenset()) -> tuple[float, dict[int, float]]:
    """Seconds of CPU per step of one rank alone, and the slowdown of that step when ``k`` ranks share this
    machine, for every ``k`` in ``ranks`` (``benchmarks.cpu_contention``; none with ``--contention-window 0``:
    the model then divides the cores evenly). Both from the same processes, running the model's forward,
    backward and SGD step with no framework: the slowdowns are ratios of that loop, so they apply to it.
    (DDP's step at world size 1, which this once was, also holds DDP's own work on its buckets, which a
    method such as async never does.) CPU time, not wall time, so that other work on a shared machine
    does not inflate it."""
    measured = sorted(set(ranks) | {1}) if args.contention_window > 0 else [1]
    got = cpu_contention.measure_steps(args.model, args.batch_size, measured, args.contention_window or 1.0,
                                       max(1, args.contention_repeats), timeout_s=args.timeout)
    contention = {k: f for k, f in got.factors.items() if k in ranks} if args.contention_window > 0 else {}
    return got.alone_cpu_s, contention


def measure_network_cpu(args: argparse.Namespace) -> float:
    """CPU seconds per byte moved between two emulated hosts at the run's rate (``benchmarks.network_cpu``);
    0 on loopback (not measured: the tests' tiny models move few bytes)."""
    if args.loopback:
        return 0.0
    with netns_link(2, args.rate, "0ms") as hosts:
        return network_cpu.measure(hosts)


def settings_of(row: dict, args: argparse.Namespace, compute_s: float, cores: int,
                contention: dict[int, float] | None = None, cpu_per_byte_s: float = 0.0) -> cost_model.Setting:
    """The cost model's setting of a measured row: ``compute_s`` slowed by the ``contention`` measured for its
    number of ranks. (Not the row's own probe: on a shared machine the compute moves between the probe and
    the method's steps by as much as between any two measurements; see :func:`probe_spread`.)"""
    # the emulated hosts' shaper counts Ethernet frames at MTU 1500; loopback has no link to speak of
    efficiency = 1.0 if getattr(args, "loopback", False) else cost_model.TCP_OVER_ETHERNET
    slowdown = (contention or {}).get(row["hosts"] * row["ranks_per_host"])
    return cost_model.Setting(hosts=row["hosts"], ranks_per_host=row["ranks_per_host"], params=row["params"],
                              link_bps=cost_model.rate_bps(args.rate), compute_s=compute_s,
                              delay_s=_seconds(args.delay), cores=cores, matrices=matrices(args.model),
                              wire_efficiency=efficiency, contention=slowdown,
                              cpu_per_byte_s=cpu_per_byte_s,
                              window=(row["warmup"], row["steps"]) if "warmup" in row and "steps" in row else None)


def probe_spread(rows: list[dict]) -> list[str]:
    """Markdown lines: how far the compute moved during the run, from the probes before each method (the
    same plain steps, every rank at once; ``benchmarks.e2e_worker.probe_compute``): its CPU per step, least,
    median and most. None when no row has a probe."""
    probed = sorted(r["probe_cpu_ms_per_step"] for r in rows if r.get("probe_cpu_ms_per_step"))
    if not probed:
        return []
    median = probed[len(probed) // 2]
    return ["", f"The compute as probed in the ranks before each method (the same plain forward, backward and SGD "
                f"steps, every rank at once) took {probed[0]:.1f} to {probed[-1]:.1f} ms of CPU per step over this "
                f"run's {len(probed)} methods (median {median:.1f}): a point whose step is mostly compute (async, "
                "powersgd) cannot be predicted closer than that spread from any one measurement of it."]


def _contention_of(text: str) -> dict[int, float]:
    """``"4=2.7,8=5.4"`` -> ``{4: 2.7, 8: 5.4}``."""
    try:
        return {int(k): float(f) for k, f in (item.split("=") for item in text.split(","))}
    except ValueError:
        sys.exit(f"benchmarks.scale: --contention takes ranks=factor pairs such as 4=2.7,8=5.4, got {text!r}")


def _seconds(delay: str) -> float:
    return float(delay[:-2]) / 1000 if delay.endswith("ms") else float(delay)


def model_report(rows: list[dict], args: argparse.Namespace, compute_s: float, cores: int,
                 contention: dict[int, float] | None = None, compute_of: str = COMPUTE_ALONE,
                 cpu_per_byte_s: float = 0.0) -> tuple[list[str], dict]:
    """Fit the cost model on the measured rows; markdown lines with every point's error and the projection.
    ``compute_of`` says what ``compute_s`` measured."""
    contention = contention or {}
    points = [(r["method"], settings_of(r, args, compute_s, cores, contention, cpu_per_byte_s), r["ms_per_step"] / 1000)
              for r in rows if "ms_per_step" in r and r["method"] in cost_model.METHODS]
    if not points:
        return ["", "No measured point to fit the cost model on."], {}
    fitted = cost_model.fit(points)
    errors = cost_model.relative_errors(points, fitted)
    lines = ["", "## The cost model against every measured point", "",
             f"Fitted: {fitted.overhead_s * 1e3:.3f} ms per message, {fitted.gamma_s * 1e9:.2f} ns per value encoded or "
             f"decoded, beside compute; one rank's compute takes {compute_s * 1e3:.1f} ms of CPU per step "
             f"({compute_of}), {cores} cores "
             f"are shared by the ranks" + (", whose steps run slower together by the factors measured ("
                                           + ", ".join(f"{k} ranks: {f:.2f}x" for k, f in sorted(contention.items()))
                                           + ")" if contention else " (evenly: ranks / cores)") + "; "
             f"moving a byte between two hosts takes {cpu_per_byte_s * 1e9:.2f} ns of their CPU. "
             f"Largest error {max(abs(e) for e in errors):.1%}, median {sorted(abs(e) for e in errors)[len(errors) // 2]:.1%}.",
             "", "| method | hosts x ranks | measured ms | predicted ms | error |", "| --- | --- | ---: | ---: | ---: |"]
    for (method, s, t), e in zip(points, errors):
        lines.append(f"| {method} | {s.hosts} x {s.ranks_per_host} | {t * 1e3:.0f} | "
                     f"{cost_model.predict(method, s, fitted) * 1e3:.0f} | {e:+.1%} |")
    projection = {}
    for spec in (RESNET50, GPT2_SMALL):
        methods = [m for m in cost_model.METHODS if m != "async" and (m != "powersgd" or spec.get("matrices"))]
        rows_p = cost_model.project(methods, (16, 32, 64, 128), (10e9, 25e9, 100e9), spec["params"],
                                    spec["compute_s"], spec.get("matrices", ()))
        projection[spec["name"]] = rows_p
        lines += ["", f"### Projection: {spec['name']} ({spec['params'] / 1e6:.1f}M parameters), "
                      f"{spec['compute_s'] * 1e3:.1f} ms compute per step ({spec['why']})", "",
                  "Nodes of 8 GPUs (hierarchical forms exchange among nodes), 25 us one-way latency, "
                  f"{cost_model.GPU_MESSAGE_OVERHEAD_S * 1e6:g} us per message (NCCL-like: the overhead fitted above is "
                  "gloo's on this shared CPU and is not carried over), codecs free on a GPU. Speed-up over DDP; "
                  "the fastest per column in bold.", "",
                  "| method | " + " | ".join(f"{n} @ {r / 1e9:g} Gb" for r in (10e9, 25e9, 100e9) for n in (16, 32, 64, 128)) + " |",
                  "| --- |" + " ---: |" * 12]
        best = {}
        for row in rows_p:
            key = (row["rate_bps"], row["hosts"])
            best[key] = max(best.get(key, 0.0), row["speedup_vs_ddp"])
        for method in methods:
            cells = []
            for rate in (10e9, 25e9, 100e9):
                for n in (16, 32, 64, 128):
                    row = next(r for r in rows_p if r["method"] == method and r["hosts"] == n and r["rate_bps"] == rate)
                    cell = f"{row['speedup_vs_ddp']:.2f}x"
                    cells.append(f"**{cell}**" if row["speedup_vs_ddp"] == best[(rate, n)] else cell)
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines += ["", "Assumptions: hierarchical algorithms average inside a node over NVLink at no cost; ring "
                  "allreduce among all ranks for DDP and gradient_allreduce; the low-precision ring's one-value overflow "
                  "agreement as NCCL's tree (2 log2 N rounds); decentralized and shift_one are "
                  "*weight* averaging (they change the optimisation: compare time to accuracy, not only steps); "
                  "async is left out (its averaging runs beside the step)."]
    lines += probe_spread(rows)
    rate = scale_checks.link_rate_bps(rows)  # the rows' own link (a refit's rows may be of another rate)
    if rate:  # not on loopback: no link, no bytes' time
        lines += scale_checks.report(rows, rate, compute_s, contention, errors, cores)
    return lines, {"fit": {"overhead_s": fitted.overhead_s, "gamma_s": fitted.gamma_s}, "errors": errors,
                   "projection": projection, "compute_s": compute_s, "compute_measured": compute_of, "cores": cores,
                   "cpu_per_byte_s": cpu_per_byte_s,
                   "contention": {str(k): f for k, f in sorted(contention.items())}}


def _markdown(rows: list[dict], header: str) -> list[str]:
    lines = [header, "", "| method | hosts x ranks/host | ms/step | MB sent/step/rank | MB/step/host link | CPU ms/step/rank |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in rows:
        where = f"{r['hosts']} x {r['ranks_per_host']}"
        if "ms_per_step" not in r:
            lines.append(f"| {r['method']} | {where} | failed: {r.get('error', '?')[:80]} | | | |")
            continue
        lines.append(f"| {r['method']} | {where} | {r['ms_per_step']:.0f} | {r['tx_bytes_per_step'] / 1e6:.2f} | "
                     f"{r.get('host_tx_bytes_per_step', r['tx_bytes_per_step']) / 1e6:.2f} | {r.get('cpu_ms_per_step', 0):.0f} |")
    return lines


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layouts = sorted({r["ranks_per_host"] for r in rows})
    fig, axes = plt.subplots(2, len(layouts), figsize=(6 * len(layouts), 8), squeeze=False)
    for col, k in enumerate(layouts):
        for method in dict.fromkeys(r["method"] for r in rows):
            good = sorted((r for r in rows if r["method"] == method and r["ranks_per_host"] == k and "ms_per_step" in r),
                          key=lambda r: r["hosts"])
            if good:
                hosts = [r["hosts"] for r in good]
                axes[0][col].plot(hosts, [r["ms_per_step"] for r in good], marker="o", label=method)
                axes[1][col].plot(hosts, [r["tx_bytes_per_step"] / 1e6 for r in good], marker="o", label=method)
        axes[0][col].set_title(f"{k} rank(s) per host: step time")
        axes[0][col].set_ylabel("ms per step")
        axes[1][col].set_title(f"{k} rank(s) per host: bytes sent per rank per step")
        axes[1][col].set_ylabel("MB")
        for ax in axes[:, col]:
            ax.set_xlabel("hosts")
            ax.set_xticks(sorted({r["hosts"] for r in rows}))
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)


def write(rows: list[dict], results: Path, header: str, model_lines: list[str], model: dict) -> list[Path]:
    results.mkdir(parents=True, exist_ok=True)
    md, js = results / "scale.md", results / "scale.json"
    md.write_text("\n".join(_markdown(rows, header) + model_lines) + "\n")
    js.write_text(json.dumps({"rows": rows, "model": model}, indent=1))
    written = [md, js]
    if have_matplotlib() and any("ms_per_step" in r for r in rows):
        _plot(rows, results / "scale.png")
        written.append(results / "scale.png")
    return written


def _refit(saved: Path, args: argparse.Namespace, cores: int) -> list[dict]:
    data = json.loads(saved.read_text())
    rows, old = data["rows"], data.get("model", {})
    compute_s, cores = old.get("compute_s"), old.get("cores", cores)
    if compute_s is None:
        sys.exit(f"benchmarks.scale: {saved} holds no compute_s (one rank's CPU per step); measure again")
    contention = {int(k): f for k, f in old.get("contention", {}).items()}
    compute_of = old.get("compute_measured", "DDP's step at world size 1, framework and all")
    cpu_per_byte_s = old.get("cpu_per_byte_s", 0.0)
    if args.measure_contention:  # an older run's rows: the compute and slowdowns measured now, on this machine
        compute_s, contention = measure_compute(args, {r["hosts"] * r["ranks_per_host"] for r in rows})
        compute_of = f"{COMPUTE_ALONE}, measured {time.strftime('%Y-%m-%d %H:%M')} for this fit"
        cpu_per_byte_s = measure_network_cpu(args)
    if args.network_cpu is not None:  # measured separately (python -m benchmarks.network_cpu)
        cpu_per_byte_s = args.network_cpu * 1e-9
    if args.contention:  # slowdowns measured separately (python -m benchmarks.cpu_contention)
        contention = _contention_of(args.contention)
    header_file = saved.with_suffix(".md")
    header = header_file.read_text().splitlines()[0] if header_file.exists() else ""
    window = re.search(r"(\d+) warmup \+ \d+ timed steps", header)  # rows of older runs lack their warmup
    for row in rows:
        if window and "warmup" not in row:
            row["warmup"] = int(window.group(1))
    model_lines, model = model_report(rows, args, compute_s, cores, contention, compute_of, cpu_per_byte_s)
    for path in write(rows, Path(args.results), header, model_lines, model):
        print("wrote", path)
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", default="2,4,8", help="comma list of host counts")
    parser.add_argument("--ranks-per-host", default="1,2", help="comma list")
    parser.add_argument("--rate", default="100mbit")
    parser.add_argument("--delay", default="0ms")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS))
    parser.add_argument("--model", default="mlp5m")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds per method before it is killed")
    parser.add_argument("--cores", type=int, default=0, help="cores the ranks share (default: this machine's)")
    parser.add_argument("--loopback", action="store_true", help="every rank on loopback (no root; no link)")
    parser.add_argument("--congestion-control", default="cubic",
                        help="TCP congestion control between the emulated hosts (cubic, Linux's own default; bbr, "
                             "reno; 'default': this machine's net.ipv4.tcp_congestion_control). Pinned: a host's "
                             "link carries several flows here, and bbr shares it unevenly between them")
    parser.add_argument("--results", default=str(REPO_ROOT / "results"))
    parser.add_argument("--refit", metavar="JSON", help="measure nothing: fit and project again from the rows "
                        "of an earlier run's scale.json (its header line is kept from scale.md beside it)")
    parser.add_argument("--contention-window", type=float, default=3.0,
                        help="seconds per measurement of how much slower a rank's step runs with k ranks at once "
                             "(benchmarks.cpu_contention); 0: not measured, the cores divided evenly")
    parser.add_argument("--contention-repeats", type=int, default=3)
    parser.add_argument("--probe-steps", type=int, default=10,
                        help="before each method, every rank runs this many plain steps of the model at once: "
                             "how far the compute moves during the run, reported beside the model (0: none)")
    parser.add_argument("--measure-contention", action="store_true",
                        help="with --refit: measure one rank's compute, the slowdowns and (on emulated hosts) the CPU "
                             "per byte between hosts now, on this machine (for rows saved without them, or with "
                             "DDP's step as the compute)")
    parser.add_argument("--network-cpu", metavar="NS", type=float,
                        help="with --refit: this CPU per byte moved between hosts, in ns (python -m benchmarks.network_cpu)")
    parser.add_argument("--contention", metavar="K=F,...",
                        help="with --refit: these slowdowns (ranks=factor, from python -m benchmarks.cpu_contention)")
    args = parser.parse_args(argv)
    cores = args.cores or os.cpu_count() or 1
    if args.congestion_control != "default" and not args.loopback:  # hosts.sh sets it on the hosts' route
        if not args.congestion_control.isidentifier():
            parser.error(f"--congestion-control must name one, such as cubic or bbr, got {args.congestion_control!r}")
        os.environ["BAGUA_NETNS_CC"] = args.congestion_control
    if args.refit:
        return _refit(Path(args.refit), args, cores)
    if args.probe_steps < 0:
        parser.error(f"--probe-steps must be 0 or more, got {args.probe_steps}")
    methods = args.methods.split(",")
    codecs = codec_backend()
    warn_unless_native(codecs, "benchmarks.scale")
    spec = {} if args.loopback else {"rate": args.rate, "delay": args.delay}
    layouts = [(int(n), int(k)) for k in args.ranks_per_host.split(",") for n in args.hosts.split(",")]
    try:
        compute_s, contention = measure_compute(args, {n * k for n, k in layouts})
    except RuntimeError as exc:
        sys.exit(f"benchmarks.scale: measuring one rank's compute failed: {exc}")
    print(f"compute of one rank alone: {compute_s * 1e3:.1f} ms of CPU per step", flush=True)
    try:
        cpu_per_byte_s = measure_network_cpu(args)
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:  # the hosts, or the transfer
        detail = getattr(exc, "stderr", None) or exc
        sys.exit(f"benchmarks.scale: measuring the CPU per byte between two emulated hosts failed (root and "
                 f"iproute2 needed; --loopback needs neither): {detail}")
    if cpu_per_byte_s:
        print(f"moving a byte between two hosts: {cpu_per_byte_s * 1e9:.2f} ns of CPU", flush=True)
    if contention:
        print("slowdown of a rank's step with k ranks at once: "
              + ", ".join(f"{k}: {f:.2f}x" for k, f in sorted(contention.items())), flush=True)
    rows: list[dict] = []
    hung: dict[str, str] = {}
    results = Path(args.results)
    timeline = os.environ.get("BAGUA_BENCH_TIMELINE")
    # beside the ranks' timelines, what every host sent, every 5 ms (benchmarks.link_usage reports it)
    with LinkSampler(Path(timeline) / "link.txt", NETNS_PREFIX) if timeline and not args.loopback else nullcontext():
        for n, k in layouts:
            run_args = argparse.Namespace(**{**vars(args), "world_size": n * k, "ranks_per_host": k})
            got = run_network(f"{n}x{k}", methods, run_args, hung, spec=spec)
            for row in got:
                row.update(hosts=n, ranks_per_host=k, warmup=args.warmup)
            rows += got
            write(rows, results, "(partial: the run is not finished)", [],
                  {"compute_s": compute_s, "compute_measured": COMPUTE_ALONE, "cores": cores, "cpu_per_byte_s": cpu_per_byte_s,
                   "contention": {str(r): f for r, f in contention.items()}})
    header = (f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.machine()} ({cores} cores shared by every rank), "
              f"{args.model}, batch {args.batch_size} per rank, link {'loopback' if args.loopback else args.rate} "
              f"(each host's egress{'' if args.loopback else ', TCP ' + tcp_congestion_control()}), {args.warmup} warmup + {args.steps} timed steps, "
              f"codecs: {'native kernels' if codecs == 'native' else codecs}; "
              f"`python -m benchmarks.scale {' '.join(sys.argv[1:] if argv is None else argv)}`.")
    model_lines, model = model_report(rows, args, compute_s, cores, contention, COMPUTE_ALONE, cpu_per_byte_s)
    for path in write(rows, results, header, model_lines, model):
        print("wrote", path)
    return rows


if __name__ == "__main__":
    main()
