"""``bagua run`` and ``bagua train``: launch workers through ``torch.distributed.run`` (torchrun), so
multi-node rendezvous and elastic options (``--nnodes=MIN:MAX``, ``--max-restarts``) pass through."""

from __future__ import annotations

import argparse
import os

from bagua_core.cli.jobs import find_job
from bagua_core.config import algorithm_config_of

__all__ = ["run_command", "train_command", "extract_config"]


def extract_config(argv: list[str]) -> tuple[str | None, list[str]]:
    """Take ``--config FILE`` out of the launcher options (those before the script or ``-m module``)."""
    for i, token in enumerate(argv):
        if token.endswith(".py") or token in ("-m", "--module", "--"):
            break
        if token == "--config":
            if i + 1 >= len(argv):
                raise ValueError("--config needs a file name")
            return argv[i + 1], argv[:i] + argv[i + 2 :]
        if token.startswith("--config="):
            return token.split("=", 1)[1], argv[:i] + argv[i + 1 :]
    return None, argv


def _launch(torchrun_args: list[str]) -> int:
    from torch.distributed import run as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        torchrun.main(torchrun_args)
    except SystemExit as exc:  # torchrun exits on argument errors
        return int(exc.code or 0)
    except Exception as exc:  # ChildFailedError: the workers' tracebacks were printed above
        first = getattr(exc, "get_first_failure", None)
        if first is None:
            print(f"bagua: workers failed: {type(exc).__name__}", flush=True)
            return 1
        rank, failure = first()  # each worker's uncaught exception is in its error file (bagua_core.failure)
        message = failure.message.get("message", failure.message) if isinstance(failure.message, dict) else failure.message
        print(f"bagua: workers failed; first failure: rank {rank} (exit code {failure.exitcode}): {message}", flush=True)
        return 1
    return 0


def run_command(argv: list[str]) -> int:
    """``bagua run [--config FILE] [--fault-tolerant ...] <torchrun options> script.py [script args]``.

    The config file is validated here, before any worker starts, and handed to the workers in
    ``BAGUA_CONFIG_FILE`` (``with_bagua(optimizers)`` with no algorithm reads it)."""
    config, rest = extract_config(argv)
    if config is not None:
        algorithm_config_of(config)  # fail now, naming the file and field
        os.environ["BAGUA_CONFIG_FILE"] = os.path.abspath(config)
    from bagua_core.cli.fault_tolerant import run_fault_tolerant, split_fault_tolerant_args

    fault_tolerant, rest = split_fault_tolerant_args(rest)
    if fault_tolerant is not None:  # one torchrun per replica (docs/fault_tolerance.md)
        return run_fault_tolerant(fault_tolerant, rest)
    return _launch(rest)


def train_command(argv: list[str]) -> int:
    """``bagua train [--nproc N] [--algorithm NAME | --config FILE] [training options]``: the main job
    (the ``bagua.jobs`` entry point ``train``, see ``bagua_core.cli.jobs``). With ``--fault-tolerant
    [--replicas K ...]``: K replicas of N ranks (default 1) on torchft (``docs/fault_tolerance.md``)."""
    parser = argparse.ArgumentParser(prog="bagua train", add_help=False)
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("-h", "--help", action="store_true")
    known, worker_args = parser.parse_known_args(argv)
    from bagua_core.cli.fault_tolerant import parse_fault_tolerant_options

    fault_tolerant, worker_args = parse_fault_tolerant_options(worker_args)
    job_module, job = find_job("train")
    if known.help:
        print("usage: bagua train [--nproc N] [--fault-tolerant [--replicas K] ...] [worker options]\n\n--nproc N  "
              "local worker processes (default 2; with --fault-tolerant: ranks per replica, default 1)\n")
        job.parse_args(["--help"])
        return 0
    if known.nproc is not None and known.nproc < 1:
        raise ValueError(f"--nproc must be a positive integer, got {known.nproc}")
    cfg, algorithm, _ = job.parse_args(worker_args)  # validate options and config before starting workers
    algorithm_config_of(algorithm)
    if fault_tolerant is not None:  # --replicas replicas of --nproc ranks each (default 1)
        from bagua_core.cli.fault_tolerant import run_fault_tolerant

        return run_fault_tolerant(fault_tolerant, [f"--nproc_per_node={known.nproc or 1}", "-m", job_module,
                                                   *worker_args])
    return _launch(["--standalone", f"--nproc_per_node={known.nproc or 2}", "-m", job_module, *worker_args])
