"""Each worker's output, forwarded in whole lines, and the last lines of its stderr: so that the lines of
different ranks never run together, and ``bagua run`` can say why a worker died before bagua's failure
handling could record it (an import error, a bad argument; a missing script is refused before any worker
starts, `launch.check_script`).

torchrun's agent records a worker's error in its error file only when the worker itself writes one
(``@record``, or ``bagua_core.runtime.failure`` once ``init_process_group`` ran); otherwise it knows only the exit
code. ``TailingLogsSpecs`` (the ``torchrun.logs_specs`` entry point ``bagua``, which ``bagua run`` selects
when no ``--redirects``/``--tee``/``--logs-specs`` is given) keeps torchrun's layout but makes each
worker's stdout and stderr a pipe (a FIFO where torchrun would write ``stdout.log``/``stderr.log``). A
thread per stream copies the bytes to this process's stdout or stderr as they arrive, a line at a time:
whole lines (up to a ``\\n`` or a ``\\r``, so progress bars keep their ``\\r``) go out in one write, and a
partial line only once it has waited ``PARTIAL_LINE_S`` (a prompt, a progress bar being drawn); the other
workers' output then waits, up to ``UNFINISHED_LINE_HOLD_S``, for that line to end. The
stderr threads keep the last 64 KiB; :func:`stderr_tail` gives them to the launcher when a worker failed.
Under ``bagua run --fault-tolerant`` each line starts with its replica (``[replica 1] ``, from
``BAGUA_FT_REPLICA_INDEX``; a warm standby's once it is activated), since every replica's ranks count from 0.

Example::

    $ bagua run --nproc_per_node=2 broken.py
    bagua: workers failed; first failure: rank 0 (exit code 1): ModuleNotFoundError: No module named 'nope'
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, LogsDest, Std

from bagua_features.fault_tolerance import standby

__all__ = ["TailingLogsSpecs", "stderr_tail", "captured_ranks", "last_error", "recorded_errors", "drain",
           "on_attempt", "is_exit_timeout", "ENTRY_POINT_NAME"]

ENTRY_POINT_NAME = "bagua"
TAIL_BYTES = 64 * 1024
PARTIAL_LINE_S = 0.1
"""How long a line without its end waits for the rest before it is written as it is."""
_IDLE_POLL_S = 0.05
"""How often an idle pump looks whether it is asked to finish (:func:`drain`)."""
_ATOMIC_BYTES = 4096
"""A write of at most this many bytes to a pipe is never split by another process's (POSIX PIPE_BUF)."""
_LINE_END = re.compile(rb"(?<=[\r\n])")
UNFINISHED_LINE_HOLD_S = 2.0
"""How long another worker's output waits for a line written without its end (after ``PARTIAL_LINE_S``) to end:
on a loaded machine the end of a line can come later than ``PARTIAL_LINE_S``, and must still follow its text."""
_EXIT_TIMEOUT_DUMP = re.compile(r"^Timeout \((\d+:\d\d:\d\d(?:\.\d+)?)\)!$")
"""The first line of the stacks faulthandler dumps for a rank that did not exit in time (``Timeout (0:01:00)!``)."""
_write_lock = threading.Condition()  # one pump writes at a time: a line of one rank is never cut by another's
_unfinished: dict[str, Any] = {}
"""Per stream (``stdout``, ``stderr``): the pump whose last write left a line unfinished there, if any."""


class _Pump(threading.Thread):
    """Copies one worker stream (a FIFO) to ours in whole lines, keeping its tail."""

    def __init__(self, path: str, local_rank: int, stream: str, prefix: bytes | None) -> None:
        super().__init__(name=f"bagua-{stream}-{local_rank}", daemon=True)  # daemon: a worker that never
        self.path = path  # starts leaves it blocked in open(), which must not keep the launcher alive
        self.stream = stream
        self.prefix = prefix
        self.at_line_start = True
        self.tail = bytearray()
        self.lock = threading.Lock()
        self.draining = threading.Event()
        """Set by :func:`drain`: the worker has exited, so an empty pipe is its end (torchrun's agent holds the
        pipe's write end open until it closes the workers' handles, later: no end of file comes before)."""

    def run(self) -> None:
        with open(self.path, "rb", buffering=0) as fifo:
            os.unlink(self.path)  # both ends are open: no FIFO is left behind in a --log-dir
            fd = fifo.fileno()
            pending = b""
            while True:
                if not select.select([fd], [], [], PARTIAL_LINE_S if pending else _IDLE_POLL_S)[0]:
                    if pending:
                        self._emit(pending)  # the rest of the line is not coming soon
                        pending = b""
                    elif self.draining.is_set():  # the worker has exited: what it wrote has been read
                        break
                    continue
                chunk = os.read(fd, TAIL_BYTES)
                if not chunk:
                    break
                pending += chunk
                cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
                if cut:
                    self._emit(pending[:cut])
                    pending = pending[cut:]
                if len(pending) >= TAIL_BYTES:  # one very long line: out in pieces
                    self._emit(pending)
                    pending = b""
            if pending:
                self._emit(pending)
        with _write_lock:  # a worker that ended mid-line holds nobody up
            if _unfinished.get(self.stream) is self:
                _unfinished[self.stream] = None
                _write_lock.notify_all()

    def _prefixed(self, data: bytes) -> bytes:
        if self.prefix is None:  # a warm standby's: its replica once it is activated, nothing while it waits
            index = standby.replica_index()
            if index is None:
                return data
            self.prefix = f"[replica {index}] ".encode()
        if not self.prefix:
            return data
        out = []
        for piece in _LINE_END.split(data):
            if piece and self.at_line_start and piece not in (b"\n", b"\r", b"\r\n"):
                out.append(self.prefix)
            if piece:
                out.append(piece)
                self.at_line_start = piece.endswith((b"\n", b"\r"))
        return b"".join(out)

    def _emit(self, data: bytes) -> None:
        text = self._prefixed(data)
        with _write_lock:
            deadline = time.monotonic() + UNFINISHED_LINE_HOLD_S
            while _unfinished.get(self.stream) not in (None, self) and time.monotonic() < deadline:
                _write_lock.wait(deadline - time.monotonic())
            if text:
                _unfinished[self.stream] = None if text.endswith((b"\n", b"\r")) else self
                _write_lock.notify_all()
            target = sys.stdout if self.stream == "stdout" else sys.stderr
            try:
                for piece in _whole_line_pieces(text):
                    binary = getattr(target, "buffer", None)
                    if binary is not None:
                        binary.write(piece)
                        binary.flush()
                    else:  # a text-only stream (a test's capture)
                        target.write(piece.decode(errors="replace"))
                        target.flush()
            except (OSError, ValueError):  # our stream is gone: keep draining, so the worker never blocks
                pass
        with self.lock:
            self.tail += data
            del self.tail[:-TAIL_BYTES]


def _whole_line_pieces(data: bytes) -> list[bytes]:
    """``data`` cut at line ends into pieces of at most ``_ATOMIC_BYTES`` where it can be (a longer line
    is one piece): each piece is one write."""
    pieces: list[bytes] = []
    current = b""
    for line in _LINE_END.split(data):
        if current and len(current) + len(line) > _ATOMIC_BYTES:
            pieces.append(current)
            current = b""
        current += line
    if current:
        pieces.append(current)
    return pieces


_latest: dict[int, _Pump] = {}  # the current attempt's stderr pumps by local rank (a restart replaces them)
_pumps: list[_Pump] = []  # every pump of the current attempt, stdout's too
_error_files: dict[int, str] = {}  # the current attempt's error files by local rank
_attempt_listeners: list[Callable[[int, int], None]] = []


class TailingLogsSpecs(DefaultLogsSpecs):
    """torchrun's :class:`DefaultLogsSpecs` with every worker's stdout and stderr forwarded in whole lines
    through a pipe, the stderr's tail kept (:func:`stderr_tail`). ``redirects`` and ``tee`` are ignored:
    the launcher selects this class only when neither is given. The ranks left out by
    ``--local-ranks-filter`` write their log files instead, unforwarded."""

    def __init__(self, log_dir: str | None = None, redirects: Any = Std.NONE, tee: Any = Std.NONE,
                 local_ranks_filter: set[int] | None = None) -> None:
        if log_dir is None:
            log_dir = tempfile.mkdtemp(prefix="bagua_workers_")
            atexit.register(shutil.rmtree, log_dir, True)
        super().__init__(log_dir=log_dir, redirects=Std.ALL, tee=Std.NONE, local_ranks_filter=local_ranks_filter)
        self._forwarded = local_ranks_filter
        replica = os.environ.get("BAGUA_FT_REPLICA_INDEX")
        self._prefix = None if standby.is_standby() else f"[replica {replica}] ".encode() if replica else b""

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        dest = super().reify(envs)
        _latest.clear()
        _pumps.clear()
        _error_files.clear()
        for local_rank in envs:
            if self._forwarded and local_rank not in self._forwarded:
                continue
            for stream, paths in (("stdout", dest.stdouts), ("stderr", dest.stderrs)):
                path = paths.get(local_rank, os.devnull)
                if not path or path == os.devnull:
                    continue
                os.mkfifo(path)
                pump = _Pump(path, local_rank, stream, self._prefix)
                pump.start()
                _pumps.append(pump)
                if stream == "stderr":
                    _latest[local_rank] = pump
        _error_files.update({r: path for r, path in dest.error_files.items() if path and path != os.devnull})
        first = next(iter(envs.values()), {})
        restart, max_restarts = (int(first.get(k, 0)) for k in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS"))
        for listener in list(_attempt_listeners):
            listener(restart, max_restarts)
        return dest


def on_attempt(listener: Callable[[int, int], None]) -> None:
    """Call ``listener(restart_count, max_restarts)`` whenever torchrun starts the workers (0 the first time)."""
    _attempt_listeners.append(listener)


def captured_ranks() -> list[int]:
    """The local ranks of the latest attempt whose stderr is captured here."""
    return list(_latest)


def drain(timeout_s: float = 5.0) -> None:
    """Wait (up to ``timeout_s``) until the latest attempt's output has been forwarded: call it once the
    workers have exited, before this process prints after them or exits."""
    deadline = time.monotonic() + timeout_s
    for pump in list(_pumps):
        pump.draining.set()
    for pump in list(_pumps):
        pump.join(max(0.0, deadline - time.monotonic()))


atexit.register(drain, 2.0)  # also under plain `torchrun --logs-specs bagua`, which never calls drain itself


def stderr_tail(local_rank: int, wait_s: float = 2.0) -> str:
    """The last bytes local rank ``local_rank`` of the latest attempt wrote to stderr ('' if unknown).
    Waits up to ``wait_s`` for the rest of its output (call it once the worker has exited)."""
    pump = _latest.get(local_rank)
    if pump is None:
        return ""
    pump.draining.set()
    pump.join(wait_s)
    with pump.lock:
        return bytes(pump.tail).decode(errors="replace")


def recorded_errors() -> dict[int, str]:
    """The errors the latest attempt's workers recorded in their error files (torchelastic's format, which
    bagua's failure handling writes), by local rank: a worker that was killed records none."""
    found = {}
    for local_rank, path in _error_files.items():
        try:
            with open(path) as fh:
                message = json.load(fh).get("message", {})
        except (OSError, ValueError):
            continue
        found[local_rank] = str(message.get("message", message) if isinstance(message, dict) else message)
    return found


def is_exit_timeout(lines: list[str]) -> bool:
    """Whether ``lines`` start with the stacks dumped by a rank that did not exit in time."""
    return bool(lines) and _EXIT_TIMEOUT_DUMP.match(lines[0]) is not None


def last_error(stderr: str, max_lines: int = 12) -> tuple[str, list[str]]:
    """(the error line, the lines that lead to it) from the end of a worker's stderr: the exception of the
    last Python traceback, with its last frames; after it, the stacks a rank that did not exit in time dumped
    (``bagua_core.runtime.exit_watch``): that it hung, and their first lines; else the last non-empty line."""
    lines = [line.rstrip() for line in stderr.replace("\r", "\n").splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
    dumps = [i for i, line in enumerate(lines) if _EXIT_TIMEOUT_DUMP.match(line)]
    if dumps and (not starts or dumps[-1] > starts[-1]):  # it hung on its way out (runtime/exit_watch.py)
        block = lines[dumps[-1]:]
        waited = _EXIT_TIMEOUT_DUMP.match(block[0]).group(1)
        error = (f"did not exit: still shutting down after {waited} (BAGUA_EXIT_TIMEOUT_S), so it dumped its "
                 f"threads' stacks (above) and exited")
        return error, block[:max_lines] if len(block) <= max_lines else [*block[: max_lines - 1], "  ..."]
    if starts:
        block = lines[starts[-1]:]
        for i, line in enumerate(block[1:], 1):
            if line and not line.startswith(" "):  # the first unindented line after the frames: the exception
                block = block[: i + 1]
                break
        shown = block[-max_lines:] if len(block) <= max_lines else [block[0], "  ...", *block[-(max_lines - 2):]]
        return block[-1], shown
    nonempty = [line for line in lines if line.strip()]
    return (nonempty[-1] if nonempty else ""), nonempty[-max_lines:]
