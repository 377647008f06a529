"""``CachedDataset``: a map-style dataset whose samples are cached in a store after the first read.

Example::

    >>> dataset = CachedDataset(SlowDataset(), backend="redis", dataset_name="train",
    ...                         capacity_per_node=4 << 30)
    >>> x = dataset[3]          # slow the first time, from the cache afterwards (on every rank of the node)
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset

from bagua_contrib.cached_dataset.cache_loader import CacheLoader

__all__ = ["CachedDataset"]


class CachedDataset(Dataset):
    """Wraps ``dataset``; its :class:`CacheLoader` is ``cache_loader``. Samples must be made of tensors,
    numpy arrays, numbers, str, bytes and tuples/lists/dicts of them."""

    def __init__(self, dataset: Dataset, backend: str = "redis", dataset_name: str = "",
                 writer_buffer_size: int = 20, **kwargs: Any) -> None:
        super().__init__()
        self.dataset = dataset
        self.cache_loader = CacheLoader(backend, dataset_name, writer_buffer_size, **kwargs)

    def __getitem__(self, item: Any) -> Any:
        return self.cache_loader.get(item, self.dataset.__getitem__)

    def __len__(self) -> int:
        return len(self.dataset)
