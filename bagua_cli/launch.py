"""``bagua run`` and ``bagua train``: launch workers through ``torch.distributed.run`` (torchrun), so
multi-node rendezvous and elastic options (``--nnodes=MIN:MAX``, ``--max-restarts``) pass through."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import logging
import os
import sys
from importlib import metadata
from typing import Any

from bagua_cli import worker_logs
from bagua_cli.arguments import parser_flags, short_usage_errors
from bagua_cli.jobs import find_job, job_config_tables
from bagua_cli.replica_watch import replica_index, report_final_failure, watch_replica
from bagua_core.selection.config import algorithm_config_of, validate_config_file

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


def extract_verbose(argv: list[str]) -> tuple[bool, list[str]]:
    """Take ``--verbose`` out of the launcher options (those before the script or ``-m module``)."""
    for i, token in enumerate(argv):
        if token.endswith(".py") or token in ("-m", "--module", "--"):
            break
        if token == "--verbose":
            return True, argv[:i] + argv[i + 1 :]
    return False, argv


def quiet_launcher_logs() -> None:
    """torch's launcher logs each failed worker at ERROR level, before bagua's own summary of the failure;
    unless ``BAGUA_VERBOSE`` asks for them, only its critical messages are shown."""
    from bagua_core.runtime import env

    if env.verbose():
        return
    prefix = "torch.distributed.elastic"
    for name in [prefix, *(n for n in logging.root.manager.loggerDict if n.startswith(prefix + "."))]:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _with_stderr_capture(torchrun_args: list[str]) -> list[str]:
    """Select bagua's LogsSpecs (each worker's stderr forwarded and its tail kept, ``worker_logs``) unless
    the user chose torchrun's own log handling, or this install does not register it (reinstall bagua)."""
    from torch.distributed import run as torchrun

    try:
        parsed = torchrun.parse_args(torchrun_args)
    except SystemExit:  # torchrun reports the argument error itself when it parses them again
        return torchrun_args
    if parsed.redirects != "0" or parsed.tee != "0" or parsed.logs_specs is not None:
        return torchrun_args
    registered = metadata.entry_points(group="torchrun.logs_specs").select(name=worker_logs.ENTRY_POINT_NAME)
    if not registered:
        return torchrun_args
    return [f"--logs-specs={worker_logs.ENTRY_POINT_NAME}", *torchrun_args]


def _failure_report(rank: int, failure: Any) -> tuple[list[str], str]:
    """bagua's last lines for the failed worker to report, and its cause in one line. A failure that bagua's
    failure handling recorded was shown above, once, by the rank that printed its traceback: the line names
    that rank and the error's type, not its message again. Else the error at the end of its stderr (it died
    before: an import error, a bad argument), else what torchrun knows."""
    message = failure.message.get("message", failure.message) if isinstance(failure.message, dict) else failure.message
    lines: list[str] = []
    shown_here = _shown_by(failure) == rank
    if shown_here:
        kind = str(message).split(":", 1)[0]
        message = f"{kind} (its traceback is above; bagua run --verbose shows every rank's)"
    # a signal (exit code < 0) is its own cause: the stderr's last line would be whatever came before it
    elif failure.exitcode > 0 and not os.path.isfile(failure.error_file or ""):
        error, context = worker_logs.last_error(worker_logs.stderr_tail(failure.local_rank))
        if error:
            told = context[:1] == ["Traceback (most recent call last):"] or worker_logs.is_exit_timeout(context[:1])
            message = error if told else f"{error} (its stderr's last line)"
            if len(context) > 1:
                lines = [f"bagua: rank {rank}'s stderr ended with:", *(f"  {line}" for line in context)]
    # a rank that printed its failure and waited for the others' lines may be stopped by torchrun (SIGTERM)
    status = "stopped by the launcher after it failed" if shown_here and failure.exitcode < 0 else \
        f"exit code {failure.exitcode}"
    cause = f"rank {rank} ({status}): {message}"
    replica = replica_index()
    who = f"replica {replica} failed: " if replica is not None else "workers failed; first failure: "
    return [*lines, f"bagua: {who}{cause}"], cause


def _shown_by(failure: Any) -> int | None:
    """The rank whose traceback shows ``failure`` (recorded by bagua's failure handling), or None."""
    info = failure.message.get("extraInfo", {}) if isinstance(failure.message, dict) else {}
    shown = info.get("bagua_shown_by") if isinstance(info, dict) else None
    return shown if isinstance(shown, int) else None


def _first_of_its_kind(exc: Any, rank: int, failure: Any) -> tuple[int, Any]:
    """The failure to report: the one of the rank that showed the first failure's traceback (a rank that
    stopped because another failed names that one), else the lowest rank that failed with the same message
    as the first failure (every rank raised the same error: the one that shows its traceback, the lowest)."""
    failures = getattr(exc, "failures", {})
    shown = _shown_by(failure)
    if shown is not None and shown in failures:
        return shown, failures[shown]
    same = [r for r, f in failures.items() if f.message == failure.message]
    lowest = min(same, default=rank)
    return (lowest, failures[lowest]) if lowest != rank else (rank, failure)


def _fallback_report(exc: BaseException) -> list[str]:
    """bagua's last lines when torchrun raised something other than its ``ChildFailedError`` (it could not
    read a worker's error file, say): the error at the end of each local worker's stderr that has one."""
    lines = [f"bagua: workers failed; torchrun could not report them ({type(exc).__name__}: {exc})"]
    for local_rank in sorted(worker_logs.captured_ranks()):
        error, _ = worker_logs.last_error(worker_logs.stderr_tail(local_rank, wait_s=0.5))
        if error:
            lines.append(f"bagua: local rank {local_rank}'s stderr ended with: {error}")
    return lines


def _launch(torchrun_args: list[str]) -> int:
    from torch.distributed import run as torchrun

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    quiet_launcher_logs()
    watch_replica()  # a replica of bagua run --fault-tolerant reports its failures and restarts
    try:
        torchrun.main(_with_stderr_capture(torchrun_args))
    except SystemExit as exc:  # torchrun exits on argument errors
        return int(exc.code or 0)
    except Exception as exc:  # ChildFailedError: the workers' tracebacks were printed above
        worker_logs.drain()  # the workers' output first, then ours
        sys.stderr.flush()
        first = getattr(exc, "get_first_failure", None)
        if first is None:  # torchrun itself failed collecting the workers' results
            lines = _fallback_report(exc)
            report_final_failure(lines[0].removeprefix("bagua: "))
        else:
            lines, cause = _failure_report(*_first_of_its_kind(exc, *first()))
            report_final_failure(cause)
        print("\n".join(lines), flush=True)
        return 1
    worker_logs.drain()  # the workers' last lines reach our stdout before this process exits
    return 0


def _asks_for_help(launcher_args: list[str]) -> bool:
    """``-h``/``--help`` among the launcher's options (before the script, whose own --help is its own)."""
    for token in launcher_args:
        if token in ("-h", "--help"):
            return True
        if token.endswith(".py") or token in ("-m", "--module", "--", "--no-python", "--no_python"):
            return False
    return False


def _print_run_help() -> None:
    from torch.distributed import run as torchrun

    from bagua_cli.fault_tolerant import add_fault_tolerant_arguments

    parser = torchrun.get_args_parser()
    parser.prog = "bagua run"
    parser.description = ("Start workers through torch.distributed.run (torchrun): every torchrun option below "
                          "passes through; the options in the groups 'bagua' and 'bagua: fault-tolerant mode' are "
                          "bagua's own.")
    ours = parser.add_argument_group("bagua")
    ours.add_argument("--config", metavar="FILE",
                      help="bagua config file (.toml/.yaml/.yml/.json): validated before any worker starts, then "
                           "handed to the workers in BAGUA_CONFIG_FILE (with_bagua(optimizers) with no algorithm "
                           "uses it)")
    ours.add_argument("--verbose", action="store_true",
                      help="every rank's traceback, and the logs of torch's launcher and torchft at their own level "
                           "(default: warnings only); sets BAGUA_VERBOSE=1 for the workers")
    add_fault_tolerant_arguments(parser.add_argument_group("bagua: fault-tolerant mode (docs/fault_tolerance.md)"))
    parser.print_help()


RUN_FLAGS = ("--config", "--verbose", "--help")
"""``bagua run``'s own flags, beside torchrun's and the fault-tolerant ones (guesses for a misspelt flag)."""


def check_launch_args(torchrun_args: list[str]) -> None:
    """Raise ``ValueError`` for what would fail on every worker, said once before any worker starts: a
    misspelt launcher flag (with a guess), a script that is not a file. A module (``-m``) or a program
    (``--no-python``) is left to the workers."""
    from torch.distributed import run as torchrun

    from bagua_cli.fault_tolerant import _FLAGS as FAULT_TOLERANT_FLAGS

    parser = torchrun.get_args_parser()
    parser.prog = "bagua run"
    with short_usage_errors("bagua run", [*parser_flags(parser), *RUN_FLAGS, *FAULT_TOLERANT_FLAGS]):
        parsed = parser.parse_args(torchrun_args)
    script = parsed.training_script
    if parsed.module or parsed.no_python or os.path.isfile(script):
        return
    where = f" (in {os.getcwd()})" if not os.path.isabs(script) else ""
    what = "is a directory, not a script" if os.path.isdir(script) else "was not found"
    raise ValueError(f"{script}{where} {what}: no worker was started")


def run_command(argv: list[str]) -> int:
    """``bagua run [--config FILE] [--fault-tolerant ...] <torchrun options> script.py [script args]``.

    The config file is validated here, before any worker starts, and handed to the workers in
    ``BAGUA_CONFIG_FILE`` (``with_bagua(optimizers)`` with no algorithm reads it)."""
    config, rest = extract_config(argv)
    verbose, rest = extract_verbose(rest)
    if verbose:
        os.environ["BAGUA_VERBOSE"] = "1"  # the workers inherit it
    if _asks_for_help(rest):
        _print_run_help()
        return 0
    if config is not None:
        validate_config_file(config, job_config_tables())  # fail now, naming the file, the table and the field
        os.environ["BAGUA_CONFIG_FILE"] = os.path.abspath(config)
    from bagua_cli.fault_tolerant import run_fault_tolerant, split_fault_tolerant_args

    fault_tolerant, rest = split_fault_tolerant_args(rest)
    check_launch_args(rest)
    if fault_tolerant is not None:  # one torchrun per replica (docs/fault_tolerance.md)
        return run_fault_tolerant(fault_tolerant, rest)
    return _launch(rest)


def _train_launcher_parser() -> argparse.ArgumentParser:
    """``bagua train``'s own options (the launcher's), for its help and for guesses at a misspelt flag."""
    from bagua_cli.fault_tolerant import add_fault_tolerant_arguments, add_restart_argument

    launcher = argparse.ArgumentParser(
        prog="bagua train", usage="bagua train [--nproc N] [--verbose] [--fault-tolerant [--replicas K] "
                                  "[--max-restarts M] ...] [worker options]", add_help=False,
        description="Start the main job on local workers; the worker options (below the launcher's) go to "
                    "every worker.")
    ours = launcher.add_argument_group("launcher")
    ours.add_argument("-h", "--help", action="store_true", help="show this help and exit")
    ours.add_argument("--nproc", metavar="N", help="local worker processes (default: 2; with --fault-tolerant: "
                                                   "ranks per replica, default: 1)")
    ours.add_argument("--verbose", action="store_true", help="every rank's traceback and the third-party logs "
                                                             "(BAGUA_VERBOSE=1)")
    group = launcher.add_argument_group("fault-tolerant mode (docs/fault_tolerance.md)")
    add_fault_tolerant_arguments(group)
    add_restart_argument(group)
    return launcher


def _print_train_help(launcher: argparse.ArgumentParser, job: Any, prog: dict[str, str]) -> None:
    """The launcher's help, then the job's options without a second usage line."""
    launcher.print_help()
    job_help = io.StringIO()
    with contextlib.redirect_stdout(job_help):
        try:
            job.parse_args(["--help"], **prog)
        except SystemExit:  # argparse exits after printing the help
            pass
    text = job_help.getvalue()
    if text.startswith("usage:"):  # the block up to the first blank line
        text = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    print("\nworker options (the main job's):")
    print(text.rstrip())


def train_command(argv: list[str]) -> int:
    """``bagua train [--nproc N] [--algorithm NAME | --config FILE] [training options]``: the main job
    (the ``bagua.jobs`` entry point ``train``, see ``bagua_cli.jobs``). With ``--fault-tolerant
    [--replicas K ...]``: K replicas of N ranks (default 1) on torchft (``docs/fault_tolerance.md``)."""
    from bagua_cli.fault_tolerant import parse_fault_tolerant_options

    launcher = _train_launcher_parser()
    parser = argparse.ArgumentParser(prog="bagua train", add_help=False)
    parser.add_argument("--nproc", type=int, default=None)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    with short_usage_errors("bagua train", parser_flags(launcher)):
        known, worker_args = parser.parse_known_args(argv)
        fault_tolerant, worker_args = parse_fault_tolerant_options(worker_args)
    if known.verbose:
        os.environ["BAGUA_VERBOSE"] = "1"  # the workers inherit it
    restarts = ("--max-restarts", "--max_restarts")
    if fault_tolerant is None and any(t.split("=")[0] in restarts for t in worker_args):
        raise ValueError("--max-restarts restarts a failed replica of a fault-tolerant job: add --fault-tolerant "
                         "(the fail-fast main job keeps no checkpoint, a restart would train from the start)")
    # the workers' output is a pipe: they draw a progress bar only where this command's own output is a terminal
    os.environ.setdefault("BAGUA_PROGRESS", "bar" if sys.stderr.isatty() else "lines")
    job_module, job = find_job("train")
    # the job's usage line says `bagua train` (a job written before the prog= keyword gets its own name)
    prog = {"prog": "bagua train [--nproc N]"} if "prog" in inspect.signature(job.parse_args).parameters else {}
    if known.help:
        _print_train_help(launcher, job, prog)
        return 0
    if known.nproc is not None and known.nproc < 1:
        raise ValueError(f"--nproc must be a positive integer, got {known.nproc}")
    with short_usage_errors("bagua train", parser_flags(launcher)):  # a misspelt flag: one line, a guess
        cfg, algorithm, _ = job.parse_args(worker_args, **prog)  # options and config checked before any worker
    algorithm_config_of(algorithm)
    if fault_tolerant is not None:  # --replicas replicas of --nproc ranks each (default 1)
        from bagua_cli.fault_tolerant import run_fault_tolerant

        return run_fault_tolerant(fault_tolerant, [f"--nproc_per_node={known.nproc or 1}",
                                                   f"--max-restarts={fault_tolerant.max_restarts}", "-m", job_module,
                                                   *worker_args])
    return _launch(["--standalone", f"--nproc_per_node={known.nproc or 2}", "-m", job_module, *worker_args])
