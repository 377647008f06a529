"""The chunks of a fragment and the deterministic per-chunk top-k of sparseloco.

A fragment is a flat fp32 tensor holding its parameter tensors one after the other (``numels``, in order).
Each tensor is cut into consecutive chunks of ``chunk_size`` elements (its last chunk may be shorter; chunks
never span two tensors), and a chunk of ``m`` elements sends ``k' = min(topk, m)`` entries. The layout is a
function of ``numels``, ``chunk_size`` and ``topk`` alone, so every replica holding the same tensors (or, on
a sharded model, the same local shards) computes the same one and its messages have the same size.

Selection (:meth:`ChunkLayout.select`): per chunk, the ``k'`` entries of largest ``|x|``; a NaN counts as
``+inf``; among entries whose ``|x|`` ties with the ``k'``-th largest value, those of lowest index within the
chunk are taken. The ``k'``-th largest value is unique (``torch.topk``'s values, not its indices, which are
not stable across devices), so the rule gives the same entries on every device. The selected entries come
back chunk by chunk, each chunk's in ascending index. Nothing here is communicated. The native selection
(``kernels/native/sparseloco_select.c``, :func:`bagua_algorithms.sparseloco.kernels.cpu.select`) applies the
same rule to the magnitudes' bits and gives the same entries.

Example::

    >>> layout = ChunkLayout([5000, 10], chunk_size=4096, topk=64)
    >>> layout.chunk_count, layout.entry_count          # chunks of 4096, 904 and 10 elements
    (3, 138)
    >>> columns, top = layout.select(x)                  # each entry's index in its chunk; per chunk |x| sorted
    >>> x[layout.entry_base + columns]                   # the selected values
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["ChunkLayout"]


class ChunkLayout:
    """Where the chunks of a fragment of tensors of ``numels`` elements lie and how many entries each sends."""

    def __init__(self, numels: Sequence[int], chunk_size: int, topk: int, device: torch.device | str = "cpu") -> None:
        self.numels, self.chunk_size, self.topk = [int(n) for n in numels], chunk_size, topk
        self.numel = sum(self.numels)
        lengths: list[int] = []
        starts: list[int] = []  # each chunk's first element in the fragment
        self._places: list[tuple[int, int, int]] = []  # (offset in the fragment, first row, numel) per tensor
        offset = 0
        for numel in self.numels:
            if numel:
                self._places.append((offset, len(lengths), numel))
            for begin in range(0, numel, chunk_size):
                lengths.append(min(chunk_size, numel - begin))
                starts.append(offset + begin)
            offset += numel
        self.chunk_count = len(lengths)
        self.chunk_lengths = lengths
        self.chunk_starts = starts
        """Each chunk's first element in the fragment."""
        self.entries_per_chunk = [min(topk, m) for m in lengths]
        self.entry_count = sum(self.entries_per_chunk)
        self.uniform = all(k == min(topk, chunk_size) for k in self.entries_per_chunk)
        self.dense = all(m == chunk_size for m in lengths)
        """Every tensor a whole number of chunks: the fragment itself is the ``[chunks, chunk_size]`` matrix."""
        k_row = torch.tensor(self.entries_per_chunk, dtype=torch.long)
        self.entry_chunk = torch.repeat_interleave(torch.arange(self.chunk_count), k_row).to(device)
        """The chunk of each entry of a message (entries chunk by chunk)."""
        self.entry_base = torch.repeat_interleave(torch.tensor(starts, dtype=torch.long), k_row).to(device)
        """The fragment index of each entry's chunk start: entry ``i`` is element ``entry_base[i] + column[i]``."""
        self.entry_last = torch.repeat_interleave(torch.tensor(lengths, dtype=torch.long) - 1, k_row).to(device)
        """The last index within each entry's chunk."""
        self._k_row = k_row.to(device)

    def magnitudes(self, x: torch.Tensor) -> torch.Tensor:
        """``|x|`` as a ``[chunks, chunk_size]`` matrix, NaN as ``+inf`` and -1 past a short chunk's end."""
        if self.dense:
            return x.abs().nan_to_num_(nan=float("inf"), posinf=float("inf")).view(self.chunk_count, self.chunk_size)
        padded = torch.full((self.chunk_count * self.chunk_size,), -1.0, dtype=torch.float32, device=x.device)
        places = [padded[row * self.chunk_size : row * self.chunk_size + numel] for _, row, numel in self._places]
        torch._foreach_copy_(places, [x[offset : offset + numel] for offset, _, numel in self._places])
        torch._foreach_abs_(places)
        return padded.nan_to_num_(nan=float("inf"), posinf=float("inf")).view(self.chunk_count, self.chunk_size)

    def select(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(columns, top)``: each selected entry's index within its chunk (int64, chunk by chunk, ascending in
        a chunk; the fragment index is ``entry_base + columns``), and per chunk its largest ``|x|`` values in
        descending order (``[chunks, min(topk, chunk_size)]``; column ``k' - 1`` is the chunk's smallest sent)."""
        if self.chunk_count == 0:
            empty = torch.empty(0, dtype=torch.long, device=x.device)
            return empty, torch.empty(0, min(self.topk, self.chunk_size), device=x.device)
        magnitude = self.magnitudes(x)
        top = torch.topk(magnitude, min(self.topk, self.chunk_size), dim=1, sorted=True).values
        threshold = self.smallest_sent(top)
        # every entry >= the k'-th largest, chunk by chunk; more than k' in a chunk only where entries tie with it
        found = (magnitude >= threshold.unsqueeze(1)).nonzero()
        rows, columns = found[:, 0], found[:, 1]
        if columns.numel() != self.entry_count:  # keep the ties of lowest index: a pass over the found entries only
            tied = magnitude[rows, columns] == threshold[rows]
            need = self._k_row - (top > threshold.unsqueeze(1)).sum(1)  # how many ties each chunk takes
            rank = tied.cumsum(0)  # among the ties found so far, then made relative to the chunk's first
            first = torch.searchsorted(rows, torch.arange(self.chunk_count, device=rows.device))
            before = torch.cat([rank.new_zeros(1), rank])[first]
            keep = ~tied | (rank - before[rows] <= need[rows])
            columns = columns[keep]
        if columns.numel() != self.entry_count:  # (cannot happen: NaN is +inf above)
            raise RuntimeError(f"sparseloco selected {columns.numel()} entries, the layout holds {self.entry_count}")
        return columns, top

    def smallest_sent(self, top: torch.Tensor) -> torch.Tensor:
        """Per chunk, the smallest ``|x|`` it sends (column ``k' - 1`` of :meth:`select`'s ``top``)."""
        return top[:, -1] if self.uniform else top.gather(1, (self._k_row - 1).unsqueeze(1)).squeeze(1)
