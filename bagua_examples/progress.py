"""The main job's progress on rank 0: a bar on a terminal, a few lines elsewhere.

Example::

    >>> progress = Progress(epochs=10, total_steps=440, desc="bytegrad x2", shown=rank == 0)
    >>> progress.step(epoch, loss); progress.epoch_done(epoch, loss, "44 steps"); progress.close()
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import tqdm

__all__ = ["Progress", "progress_mode"]


def progress_mode() -> str:
    """``bar`` (a progress bar redrawn in place) on a terminal, ``lines`` (a few lines of progress) elsewhere: a file,
    a CI log. ``BAGUA_PROGRESS`` (``bar`` or ``lines``) decides; ``bagua train`` sets it from its own terminal (the
    workers' output is a pipe), a job started otherwise looks at its standard error."""
    mode = os.environ.get("BAGUA_PROGRESS", "").strip().lower()
    if mode in ("bar", "lines"):
        return mode
    return "bar" if sys.stderr.isatty() else "lines"


class Progress:
    """Rank 0's progress: tqdm's bar on a terminal, else a line after some epochs (at most about five, and the
    last), so a log holds a few lines rather than one line of carriage-return updates."""

    def __init__(self, epochs: int, total_steps: int | None, desc: str, shown: bool) -> None:
        self.epochs, self.started = epochs, time.perf_counter()
        self.bar = tqdm.tqdm(total=total_steps, disable=not shown or progress_mode() != "bar", desc=desc, unit="step")
        self.lines = shown and self.bar.disable
        self.every = max(1, epochs // 5)

    def step(self, epoch: int, loss: float, **shown: Any) -> None:
        """One step trained in ``epoch`` (from 0) with ``loss``; ``shown``: more to show on the bar."""
        self.bar.update(1)
        self.bar.set_postfix(epoch=epoch + 1, loss=f"{loss:.4f}", **shown)

    def epoch_done(self, epoch: int, loss: float, done: str) -> None:
        """``epoch`` (from 0) ended at ``loss``, having done ``done`` (``"44 steps"``): a line, some epochs."""
        if self.lines and ((epoch + 1) % self.every == 0 or epoch + 1 == self.epochs):
            print(f"epoch {epoch + 1}/{self.epochs}: loss {loss:.4f}, {done}, {time.perf_counter() - self.started:.1f} s",
                  flush=True)

    def close(self) -> None:
        self.bar.close()
