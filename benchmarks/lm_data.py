"""The language-model benchmark's corpus: the Python standard library's own source files, as bytes.

Every ``.py`` file under ``sysconfig.get_paths()["stdlib"]`` (site-packages excluded), in sorted order,
joined by blank lines. Files whose CRC-32 of the relative path is 0 mod 10 are held out for validation
(whole files, so no training window overlaps a validation one). Training batches are random windows
drawn by a generator seeded with ``(seed, rank)``: every method sees the same batches at the same step.

Example::

    >>> corpus = load_corpus()
    >>> x, y = corpus.batch(rank=0, step=0, batch_size=4, seq_len=128)   # int64 [4, 128], y = x shifted by one
"""

from __future__ import annotations

import platform
import sysconfig
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

__all__ = ["Corpus", "load_corpus"]


@dataclass
class Corpus:
    train: torch.Tensor
    validation: torch.Tensor
    files: int
    source: str
    seed: int = 0

    def batch(self, rank: int, step: int, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Training windows for ``rank`` at ``step``: inputs and next-byte targets."""
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + rank) * 1_000_003 + step)
        starts = torch.randint(0, self.train.numel() - seq_len - 1, (batch_size,), generator=g)
        windows = torch.stack([self.train[s : s + seq_len + 1] for s in starts.tolist()]).long()
        return windows[:, :-1], windows[:, 1:]

    def validation_windows(self, count: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``count`` fixed validation windows, evenly spaced over the held-out files."""
        stride = (self.validation.numel() - seq_len - 1) // count
        windows = torch.stack([self.validation[i * stride : i * stride + seq_len + 1] for i in range(count)]).long()
        return windows[:, :-1], windows[:, 1:]

    def describe(self) -> str:
        return (f"{self.files} .py files of the Python {platform.python_version()} standard library "
                f"({self.train.numel() / 1e6:.1f} MB training, {self.validation.numel() / 1e6:.1f} MB held out)")


def load_corpus(root: str | None = None, max_bytes: int | None = None, seed: int = 0) -> Corpus:
    """Read the corpus (``max_bytes`` caps the training split and stops reading early: smoke runs)."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in base.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts)
    train, validation, sizes = [], [], [0, 0]
    for path in files:
        if max_bytes and sizes[0] >= max_bytes and sizes[1] >= max_bytes // 10:
            break
        try:
            data = path.read_bytes()
        except OSError:
            continue
        held_out = zlib.crc32(str(path.relative_to(base)).encode()) % 10 == 0
        (validation if held_out else train).append(data + b"\n\n")
        sizes[held_out] += len(data) + 2
    if not train or not validation:
        raise RuntimeError(f"no Python sources found under {base}")
    train_bytes = b"".join(train)[:max_bytes] if max_bytes else b"".join(train)
    as_tensor = lambda data: torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy())
    return Corpus(as_tensor(train_bytes), as_tensor(b"".join(validation)), len(files), str(base), seed)
