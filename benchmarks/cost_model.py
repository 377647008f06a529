"""A cost model of one training step for every method: what its message pattern costs on a link.

Each method is described by its message pattern (:func:`pattern`): the phases it runs per step, and for
each phase the bytes one host's link sends (the emulated hosts shape egress only, as a NIC does), the
rounds that follow one another (each pays the one-way latency), the messages a rank sends (each pays a
per-message overhead: all of a round's messages are in flight together), the values a rank
encodes and decodes, and whether the phase runs while forward/backward compute (decentralized's weights
travel during the step) or after it. A step then costs

    T = (C_eff + codec + max(0, comm - overlap)) / (1 - background)
    comm = sum over phases of bytes / (B * e) + rounds * d + messages * o

with ``C_eff`` the compute time of one rank (``compute_s``) times the slowdown of a rank's CPU work when
every rank runs at once (the ranks of every emulated host share this machine's cores): ``contention``, measured
(``benchmarks.cpu_contention``), else ``max(1, ranks / cores)``; 1 on real nodes (a core or GPU per rank).
``codec`` = ``gamma`` seconds per value a rank processes beside its compute (encoded or decoded by a codec,
multiplied by powersgd's low-rank factors, or copied through loopback by a hierarchical form's reduce and
broadcast inside a host; 0 on a GPU), ``d`` the one-way delay, ``B`` the link rate and ``e`` the share of
its bytes that are payload (TCP over Ethernet at an MTU of 1500 carries 1448 bytes of payload in a
1514-byte frame, and the emulated link's shaper counts frames: ``e`` = 0.956). ``background`` is the
share of the cores taken by work that runs beside the step rather than in it (async's averaging
thread: its messages' overhead, its values and the CPU the machine spends moving its bytes,
``cpu_per_byte_s`` per byte sent or received, once per averaging; the averagings start a sync interval
apart, or back to back when one takes longer than that). Only ``o`` (per-message overhead, CPU time of a rank) and ``gamma`` are fitted (:func:`fit`, a grid search minimising the root mean square
of the relative errors over the measured points); everything else is the setting or measured (the CPU
time of one rank's step alone, its slowdown with k ranks at once, the CPU per byte between hosts).

Example::

    >>> s = Setting(hosts=8, ranks_per_host=1, params=5_261_834, link_bps=100e6, compute_s=0.08)
    >>> round(predict("ddp", s, Fit()) * 1000)             # ms per step
    3027
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from collections.abc import Iterable, Sequence

__all__ = ["GPU_MESSAGE_OVERHEAD_S", "rate_bps", "Setting", "Fit", "Phase", "METHODS", "pattern", "predict", "fit", "relative_errors", "project"]

FP32 = 4
CODEC_BYTES = 1.0 + 8 / 65536
"""Bytes per value after MinMaxUInt8 (one byte, plus an 8-byte min/max header per chunk)."""
SEGMENT_VALUES = 512 * 1024
"""The pipelined exchange sends a chunk in segments of this many values: one message each."""
BUCKET_BYTES = 10 * 1024 * 1024
"""bagua's default bucket size; gradient_allreduce and decentralized send a bucket in pieces of it."""
DDP_BUCKET_BYTES = 25 * 1024 * 1024
TCP_OVER_ETHERNET = 1448 / 1514
"""Payload per byte on an Ethernet link at MTU 1500 (TCP with timestamps: 66 bytes of headers per 1448)."""
ASYNC_INTERVAL_S = 0.1
"""async's ``sync_interval_ms`` in the benchmarks (``benchmarks.methods.BENCH_OPTIONS``)."""



def rate_bps(rate: str) -> float:
    """A link rate as tc writes it (``100mbit``, ``1gbit``, ``500kbit``) in bits per second."""
    for unit, factor in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(unit):
            try:
                return float(rate[: -len(unit)]) * factor
            except ValueError:
                break
    raise ValueError(f"a rate must look like 100mbit or 1gbit, got {rate!r}")

@dataclass(frozen=True)
class Setting:
    """One run: ``hosts`` nodes of ``ranks_per_host`` ranks; a model of ``params`` fp32 values (with
    ``matrices``: the (rows, cols) of each weight matrix, for powersgd); a link of ``link_bps`` bits/s per
    host and direction with ``delay_s`` one-way; ``compute_s`` one rank's forward+backward+step alone;
    ``cores`` shared by every rank (None: a core, or GPU, per rank); ``wire_efficiency`` the payload per byte
    the link carries (:data:`TCP_OVER_ETHERNET` on the emulated hosts)."""

    hosts: int
    ranks_per_host: int
    params: int
    link_bps: float
    compute_s: float
    delay_s: float = 0.0
    cores: int | None = None
    matrices: tuple[tuple[int, int], ...] = ()
    wire_efficiency: float = 1.0
    backend: str = "gloo"
    """Whose collectives: ``gloo`` (the emulated hosts: a ring for every allreduce) or ``nccl`` (the projected GPU
    nodes: a tree, 2 log2(N) rounds, for a one-value allreduce)."""
    contention: float | None = None
    """How many times slower a rank's CPU work runs with every rank of this setting at once than alone, as
    measured (``benchmarks.cpu_contention``); None: ``max(1, ranks / cores)``, the cores divided evenly."""
    cpu_per_byte_s: float = 0.0
    """CPU seconds, on the cores the ranks compute on, per byte a rank sends or receives: the emulated hosts'
    network stack, measured (``benchmarks.network_cpu``). Counted only for work beside the step (a phase
    the step waits for spends it while waiting on the link); 0 on GPU nodes (a NIC's work)."""
    window: tuple[int, int] | None = None
    """``(warmup, timed)`` steps of a measurement: a phase run every k-th step (diloco's exchange) counts the
    times it ran in the timed steps (steps 1, 2, ... of which k, 2k, ... run it); None: 1/k of it per step."""

    def runs_per_step(self, every: int) -> float:
        """How many times per timed step a phase run every ``every``-th step runs."""
        if every == 1 or self.window is None:
            return 1 / every
        warmup, timed = self.window
        return ((warmup + timed) // every - warmup // every) / timed

    @property
    def share(self) -> float:
        """The slowdown of a rank's CPU work (compute, codecs) from sharing the cores with the other ranks."""
        if self.contention is not None:
            return max(1.0, self.contention)
        return max(1.0, self.ranks / self.cores) if self.cores else 1.0

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host

    @property
    def model_bytes(self) -> float:
        return self.params * FP32


@dataclass(frozen=True)
class Fit:
    """The fitted constants: ``overhead_s`` per message, ``gamma_s`` per value encoded or decoded."""

    overhead_s: float = 0.0
    gamma_s: float = 0.0


@dataclass(frozen=True)
class Phase:
    """Part of a step: ``host_bytes`` sent by one host's link, ``rounds`` one after another (latency),
    ``messages`` sent by a rank (overhead), ``codec_values`` processed on the CPU beside compute, ``overlaps``
    compute (runs while the step computes), ``every`` steps (1: every step); ``background_interval_s`` > 0:
    runs beside the step on a thread of its own, the runs starting that long apart, or back to back when a
    run takes longer (async's loop: the next round is due ``sync_interval_ms`` after this one started; the
    step waits for none of it, but its CPU shares the cores)."""

    host_bytes: float
    rounds: float
    messages: float
    codec_values: float = 0.0
    overlaps: bool = False
    every: int = 1
    background_interval_s: float = 0.0


def _pieces(nbytes: float, piece: float) -> int:
    return max(1, math.ceil(nbytes / piece))


def _ring(nbytes: float, ranks: int, ranks_per_host: int, piece: float = BUCKET_BYTES) -> Phase:
    """A ring allreduce of ``nbytes`` over ``ranks`` placed host by host: every rank sends 2(N-1)/N of the
    tensor to its successor; one ring edge per host crosses the link; 2(N-1) steps per piece."""
    if ranks == 1:
        return Phase(0.0, 0, 0)
    host_bytes = 2 * (ranks - 1) / ranks * nbytes if ranks > ranks_per_host else 0.0
    return Phase(host_bytes, 2 * (ranks - 1), 2 * (ranks - 1) * _pieces(nbytes, piece))


def _agreement(s: Setting) -> Phase:
    """A one-value allreduce over every rank (the low-precision ring's overflow agreement): gloo's ring, or
    NCCL's tree for so small a message."""
    if s.backend == "nccl" and s.ranks > 1:
        rounds = 2 * math.ceil(math.log2(s.ranks))
        return Phase(0.0, rounds, rounds)
    return _ring(FP32, s.ranks, s.ranks_per_host)


def _compressed_exchange(values: float, ranks: int) -> Phase:
    """bytegrad's exchange among ``ranks`` leaders (one per host): a compressed alltoall, then an allgather
    of the averaged chunk, each chunk in segments; a host sends its n-1 foreign chunks twice."""
    if ranks == 1:
        return Phase(0.0, 0, 0)
    chunk = values / ranks
    segments = _pieces(chunk, SEGMENT_VALUES)
    return Phase(2 * (ranks - 1) * chunk * CODEC_BYTES, 2, 2 * (ranks - 1) * segments,
                 codec_values=2 * values + 2 * chunk * ranks)


def _inside_host(values: float, ranks_per_host: int) -> Phase:
    """A hierarchical form's reduce to the host's leader and broadcast back, through loopback: no link
    bytes, but every value is sent, received and summed on the host's CPU."""
    return Phase(0.0, 2 if ranks_per_host > 1 else 0, 0, codec_values=3 * values if ranks_per_host > 1 else 0.0)


def _weights_overlap_compute(s: Setting) -> bool:
    """Whether a decentralized form's exchange of weights runs while the step computes. It starts at the
    forward pre-hook, on the communication thread; hierarchical with several ranks per host, it first
    waits for the reduce inside the host, and where the ranks share the cores (the emulated hosts) that
    reduce gets its share of a core only beside every rank's forward and backward, so the exchange
    starts about when the compute ends. With a core (or GPU) per rank, or one rank per host, it overlaps."""
    return s.ranks_per_host == 1 or s.share <= 1.0


def pattern(method: str, s: Setting) -> list[Phase]:
    """The message pattern of ``method`` (the benchmarks' options: see ``benchmarks.methods``)."""
    n, k, size = s.hosts, s.ranks_per_host, s.model_bytes
    inside = _inside_host(s.params, k)
    overlap = _weights_overlap_compute(s)
    if method in ("ddp", "gradient_allreduce"):  # flat ring over every rank, gradients after backward
        return [_ring(size, s.ranks, k, DDP_BUCKET_BYTES if method == "ddp" else BUCKET_BYTES)]
    if method in ("bytegrad", "qadam"):  # hierarchical: average inside the host, exchange among leaders
        return [inside, _compressed_exchange(s.params, n)]
    if method == "decentralized":  # "all": an allreduce of the weights among leaders, during the step
        return [inside, replace(_ring(size, n, 1), overlaps=overlap)]
    if method == "decentralized_shift_one":  # one peer host: send and receive the weights at once
        return [inside, Phase(size if n > 1 else 0.0, int(n > 1), 2 * int(n > 1) * _pieces(size, BUCKET_BYTES),
                              overlaps=overlap)]
    if method == "low_precision_decentralized":  # compressed difference to both ring neighbours
        # the neighbours' messages travel during the next step's forward and backward (overlapped)
        # and the overflow agreement at the end of backward: a one-value allreduce over every rank
        neighbours = 0 if n == 1 else 1 if n == 2 else 2
        return [inside, Phase(neighbours * s.params * CODEC_BYTES, int(neighbours > 0), 2 * neighbours,
                              codec_values=3 * s.params, overlaps=overlap), _agreement(s)]
    if method == "powersgd":  # P then Q (rank 1) of every matrix, vectors uncompressed, two rounds
        matrix_values = sum(r * c for r, c in s.matrices)
        p_values = sum(r for r, _ in s.matrices)
        q_values = sum(c for _, c in s.matrices)
        vectors = (s.params - matrix_values) * FP32
        # M += e, P = M Q, Q = M^T P, M' = P Q^T, e = M - M': five passes over every matrix (rank 1)
        return [replace(_ring(p_values * FP32 + vectors, s.ranks, k), codec_values=5 * matrix_values),
                _ring(q_values * FP32, s.ranks, k)]
    if method == "diloco":  # the pseudo-gradient averaged every inner_steps (4 in the benchmarks)
        # one allreduce of the whole fragment; values: the pseudo-gradient gathered and subtracted, copied,
        # reduced and divided, the outer Nesterov step (four passes), the result scattered (ten passes)
        return [replace(_ring(size, s.ranks, k, piece=size), codec_values=10 * s.params, every=4)]
    if method == "async":  # the weights averaged (one allreduce over every rank) beside the step
        # values: the snapshot copied, the reduction's sums, the update x += sum / n - snapshot (two passes)
        return [replace(_ring(size, s.ranks, k, piece=size), codec_values=4 * s.params,
                        background_interval_s=ASYNC_INTERVAL_S)]
    raise ValueError(f"no message pattern for method {method!r}; known: {', '.join(METHODS)}")


METHODS = ("ddp", "gradient_allreduce", "bytegrad", "qadam", "decentralized", "decentralized_shift_one",
           "low_precision_decentralized", "powersgd", "diloco", "async")


def predict(method: str, s: Setting, f: Fit) -> float:
    """Seconds per step of ``method`` in setting ``s`` with the fitted constants ``f``."""
    share = s.share
    compute = s.compute_s * share
    link_bytes_per_s = s.link_bps / 8 * s.wire_efficiency
    waited, overlapped, codec, background = 0.0, 0.0, 0.0, 0.0
    for phase in pattern(method, s):
        comm = phase.host_bytes / link_bytes_per_s + phase.rounds * s.delay_s + phase.messages * f.overhead_s
        if phase.background_interval_s:
            # the CPU of one run (its messages' overhead, its values, its bytes sent and received) on the
            # shared cores, per second
            moved = 2 * phase.host_bytes / s.ranks_per_host
            cpu = (phase.messages * f.overhead_s + f.gamma_s * phase.codec_values + s.cpu_per_byte_s * moved) * share
            background += cpu / max(comm, phase.background_interval_s)
            continue
        runs = s.runs_per_step(phase.every)
        codec += f.gamma_s * phase.codec_values * share * runs
        if phase.overlaps:
            overlapped += comm * runs
        else:
            waited += comm * runs
    # the background's CPU slows the step by the share of the cores it takes (capped: it yields the GIL)
    return (compute + codec + waited + max(0.0, overlapped - compute)) / (1.0 - min(background, 0.5))


def relative_errors(points: Iterable[tuple[str, Setting, float]], f: Fit) -> list[float]:
    """(predicted - measured) / measured of every ``(method, setting, measured_s)`` point."""
    return [(predict(m, s, f) - t) / t for m, s, t in points]


def fit(points: Sequence[tuple[str, Setting, float]]) -> Fit:
    """The per-message overhead and per-value CPU cost minimising the root mean square of the relative
    errors (a log grid: overhead 0 or 10 us .. 100 ms, gamma 0 or 0.1 ns .. 100 ns per value)."""
    overheads = [0.0] + [10 ** (e / 8) * 1e-5 for e in range(0, 33)]
    gammas = [0.0] + [10 ** (e / 8) * 1e-10 for e in range(0, 25)]
    best, best_error = Fit(), math.inf
    for o in overheads:
        for g in gammas:
            errors = relative_errors(points, Fit(o, g))
            error = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
            if error < best_error:
                best, best_error = Fit(o, g), error
    return best


GPU_MESSAGE_OVERHEAD_S = 5e-6
"""The per-message overhead assumed for GPU nodes (NCCL): the one fitted on the emulated hosts is gloo's
on a shared 2-core machine and does not carry over."""


def project(methods: Sequence[str], hosts: Sequence[int], rates_bps: Sequence[float], params: int,
            compute_s: float, matrices: tuple[tuple[int, int], ...], delay_s: float = 25e-6,
            ranks_per_host: int = 8, overhead_s: float = GPU_MESSAGE_OVERHEAD_S) -> list[dict]:
    """Predicted ms/step and speed-up over DDP for every (hosts, rate, method), GPU nodes of
    ``ranks_per_host`` GPUs (a GPU per rank: no sharing; codec work free on a GPU; ``overhead_s`` per
    message)."""
    rows = []
    gpu_fit = Fit(overhead_s=overhead_s, gamma_s=0.0)
    for rate in rates_bps:
        for n in hosts:
            s = Setting(n, ranks_per_host, params, rate, compute_s, delay_s, None, matrices, backend="nccl")
            ddp = predict("ddp", s, gpu_fit)
            for method in methods:
                t = predict(method, s, gpu_fit)
                rows.append({"hosts": n, "rate_bps": rate, "method": method, "ms_per_step": 1000 * t,
                             "speedup_vs_ddp": ddp / t})
    return rows
