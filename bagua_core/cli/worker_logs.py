"""Each worker's stderr, as it comes and its last lines: so ``bagua run`` can say why a worker died
before bagua's failure handling could record it (an import error, a missing script, a bad argument).

torchrun's agent records a worker's error in its error file only when the worker itself writes one
(``@record``, or ``bagua_core.runtime.failure`` once ``init_process_group`` ran); otherwise it knows only the exit
code. ``TailingLogsSpecs`` (the ``torchrun.logs_specs`` entry point ``bagua``, which ``bagua run`` selects
when no ``--redirects``/``--tee``/``--logs-specs`` is given) keeps torchrun's layout but makes each
worker's stderr a pipe (a FIFO where torchrun would write ``stderr.log``). A thread per worker copies
the bytes to this process's stderr as they arrive, unchanged (progress bars keep their ``\\r``), and
keeps the last 64 KiB; :func:`stderr_tail` gives them to the launcher when the worker failed.

Example::

    $ bagua run --nproc_per_node=2 broken.py
    bagua: workers failed; first failure: rank 0 (exit code 1): ModuleNotFoundError: No module named 'nope'
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from typing import Any

from torch.distributed.elastic.multiprocessing.api import DefaultLogsSpecs, LogsDest, Std

__all__ = ["TailingLogsSpecs", "stderr_tail", "captured_ranks", "last_error", "ENTRY_POINT_NAME"]

ENTRY_POINT_NAME = "bagua"
TAIL_BYTES = 64 * 1024


class _Pump(threading.Thread):
    """Copies one worker's stderr FIFO to our stderr, keeping its tail."""

    def __init__(self, path: str, local_rank: int) -> None:
        super().__init__(name=f"bagua-stderr-{local_rank}", daemon=True)  # daemon: a worker that never
        self.path = path  # starts leaves it blocked in open(), which must not keep the launcher alive
        self.tail = bytearray()
        self.lock = threading.Lock()

    def run(self) -> None:
        out = getattr(sys.stderr, "buffer", None)
        with open(self.path, "rb", buffering=0) as fifo:
            os.unlink(self.path)  # both ends are open: no FIFO is left behind in a --log-dir
            while chunk := fifo.read(TAIL_BYTES):
                try:
                    if out is not None:
                        out.write(chunk)
                    else:  # a text-only stream (a test's capture)
                        sys.stderr.write(chunk.decode(errors="replace"))
                    sys.stderr.flush()
                except (OSError, ValueError):  # our stderr is gone: keep draining, so the worker never blocks
                    pass
                with self.lock:
                    self.tail += chunk
                    del self.tail[:-TAIL_BYTES]


_latest: dict[int, _Pump] = {}  # the current attempt's pumps by local rank (a restart replaces them)


class TailingLogsSpecs(DefaultLogsSpecs):
    """torchrun's :class:`DefaultLogsSpecs` with every worker's stderr forwarded through a pipe whose
    tail is kept (:func:`stderr_tail`); stdout is left as it is. ``redirects`` and ``tee`` are ignored:
    the launcher selects this class only when neither is given."""

    def __init__(self, log_dir: str | None = None, redirects: Any = Std.NONE, tee: Any = Std.NONE,
                 local_ranks_filter: set[int] | None = None) -> None:
        if log_dir is None:
            log_dir = tempfile.mkdtemp(prefix="bagua_workers_")
            atexit.register(shutil.rmtree, log_dir, True)
        super().__init__(log_dir=log_dir, redirects=Std.ERR, tee=Std.NONE, local_ranks_filter=local_ranks_filter)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        dest = super().reify(envs)
        _latest.clear()
        for local_rank, path in dest.stderrs.items():
            if path == os.devnull:  # filtered out by --local-ranks-filter
                continue
            os.mkfifo(path)
            pump = _Pump(path, local_rank)
            pump.start()
            _latest[local_rank] = pump
        return dest


def captured_ranks() -> list[int]:
    """The local ranks of the latest attempt whose stderr is captured here."""
    return list(_latest)


def stderr_tail(local_rank: int, wait_s: float = 2.0) -> str:
    """The last bytes local rank ``local_rank`` of the latest attempt wrote to stderr ('' if unknown).
    Waits up to ``wait_s`` for the rest of its output (a failed worker's pipe closes when it exits)."""
    pump = _latest.get(local_rank)
    if pump is None:
        return ""
    pump.join(wait_s)
    with pump.lock:
        return bytes(pump.tail).decode(errors="replace")


def last_error(stderr: str, max_lines: int = 12) -> tuple[str, list[str]]:
    """(the error line, the lines that lead to it) from the end of a worker's stderr: the exception of the
    last Python traceback, with its last frames; without a traceback, the last non-empty line."""
    lines = [line.rstrip() for line in stderr.replace("\r", "\n").splitlines()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last):")]
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
