"""Small deterministic models and data shared by the tests."""

from __future__ import annotations

import torch


class SmallNet(torch.nn.Module):
    def __init__(self, d_in: int = 8, hidden: int = 16, d_out: int = 4, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.fc1 = torch.nn.Linear(d_in, hidden)
        self.fc2 = torch.nn.Linear(hidden, hidden)
        self.head = torch.nn.Linear(hidden, d_out)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def batch(rank: int, step: int, size: int = 6, d_in: int = 8, d_out: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    """Data that differs per rank and step, reproducible anywhere."""
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(size, d_in, generator=gen), torch.randint(0, d_out, (size,), generator=gen)
