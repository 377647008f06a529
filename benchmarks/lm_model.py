"""The language-model benchmark's model: a small decoder-only transformer over bytes (GPT-style).

Pre-norm blocks (causal multi-head attention, a 4x MLP with GELU), learned positions, a vocabulary of
the 256 byte values, an output head tied to the embedding. ``lm11m`` (384 wide, 6 blocks, 6 heads,
128 positions) has 10.8M parameters; ``lm-tiny`` is for smoke runs.

Example::

    >>> model = build_lm("lm11m", seed=0)
    >>> logits = model(torch.zeros(2, 128, dtype=torch.long))    # [2, 128, 256]
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LM_CONFIGS", "ByteLM", "build_lm", "lm_loss"]

LM_CONFIGS = {
    "lm11m": {"width": 384, "depth": 6, "heads": 6, "seq_len": 128},
    "lm-tiny": {"width": 32, "depth": 1, "heads": 2, "seq_len": 32},
}


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attention)
        return x + self.out(F.gelu(self.fc(self.norm2(x))))


class ByteLM(nn.Module):
    def __init__(self, width: int, depth: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.seq_len = seq_len
        self.embed = nn.Embedding(256, width)
        self.position = nn.Parameter(torch.zeros(seq_len, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.apply(self._init)
        for block in self.blocks:  # residual branches start small (GPT-2)
            torch.nn.init.normal_(block.proj.weight, std=0.02 / (2 * depth) ** 0.5)
            torch.nn.init.normal_(block.out.weight, std=0.02 / (2 * depth) ** 0.5)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(module.weight, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            torch.nn.init.zeros_(module.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            h = block(h)
        return self.norm(h) @ self.embed.weight.t()


def build_lm(name: str, seed: int = 0) -> ByteLM:
    torch.manual_seed(seed)
    return ByteLM(**LM_CONFIGS[name])


def lm_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-byte cross-entropy (nats per byte)."""
    return F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
