"""The benchmark models and their synthetic data.

``mlp21m`` is the model of the issue's goals (1024-4096-4096-10, 21M parameters, 84 MB of fp32
gradients per step); ``tiny`` (32-32-10) has almost no compute or communication, so its step time
is the framework's own overhead.

Example::

    >>> model = build_model("tiny")
    >>> x, y = synthetic_batch("tiny", batch_size=4, seed=0)
    >>> model(x).shape
    torch.Size([4, 10])
"""

from __future__ import annotations

import torch

__all__ = ["MODEL_LAYERS", "build_model", "synthetic_batch", "parameter_count"]

MODEL_LAYERS: dict[str, tuple[int, ...]] = {
    "mlp21m": (1024, 4096, 4096, 10),
    "mlp2m": (256, 1024, 1024, 10),
    # the scaling benchmark's model: 5.3M parameters (21 MB of fp32), ~1.7 s per ring allreduce at 100 Mbit/s
    "mlp5m": (1024, 2048, 1536, 10),
    # sparseloco's round-cost benchmark: 10.5M parameters
    "mlp10m": (1024, 2048, 4096, 10),
    "tiny": (32, 32, 10),
}


def build_model(name: str, seed: int = 0) -> torch.nn.Module:
    """An MLP with ReLU between the layers of ``MODEL_LAYERS[name]``, initialised from ``seed``."""
    if name not in MODEL_LAYERS:
        raise ValueError(f"model must be one of {sorted(MODEL_LAYERS)}, got {name!r}")
    torch.manual_seed(seed)
    sizes = MODEL_LAYERS[name]
    layers: list[torch.nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        if i:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(fan_in, fan_out))
    return torch.nn.Sequential(*layers)


def synthetic_batch(name: str, batch_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A random batch (inputs, int64 labels) for model ``name``; different ``seed`` per rank."""
    sizes = MODEL_LAYERS[name]
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch_size, sizes[0], generator=generator)
    y = torch.randint(0, sizes[-1], (batch_size,), generator=generator)
    return x, y


def parameter_count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
