"""The digits data set shipped with bagua (1797 8x8 images, 10 classes) and a small MLP for it.

Example::

    >>> from bagua_examples.digits import DigitsMLP, load_digits
    >>> train_x, train_y, test_x, test_y = load_digits()
    >>> train_x.shape, test_x.shape
    (torch.Size([1438, 64]), torch.Size([359, 64]))
    >>> DigitsMLP()(test_x[:2]).shape
    torch.Size([2, 10])
"""

from __future__ import annotations

import gzip
from importlib import resources

import numpy as np
import torch

__all__ = ["load_digits", "DigitsMLP", "TEST_FRACTION"]

TEST_FRACTION = 0.2


def load_digits(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Train and test split (80/20, fixed by ``seed``) as float32 features in [0, 1] and int64 labels."""
    with resources.files("bagua_examples").joinpath("data/digits.csv.gz").open("rb") as raw:
        table = np.loadtxt(gzip.open(raw, "rt"), delimiter=",", dtype=np.float32)
    features = torch.from_numpy(table[:, :64] / 16.0)
    labels = torch.from_numpy(table[:, 64].astype(np.int64))
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    n_test = int(round(len(labels) * TEST_FRACTION))
    test, train = order[:n_test], order[n_test:]
    return features[train], labels[train], features[test], labels[test]


class DigitsMLP(torch.nn.Module):
    """64 -> hidden -> hidden -> 10 with ReLU."""

    def __init__(self, hidden: int = 128) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(
            torch.nn.Linear(64, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, hidden),
            torch.nn.ReLU(),
            torch.nn.Linear(hidden, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)
