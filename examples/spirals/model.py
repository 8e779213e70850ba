"""Two interleaved spirals and a small MLP: a real classification task that trains in seconds."""

from __future__ import annotations

import math

import torch
from torch import nn


def spirals(n: int, seed: int, noise: float = 0.2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(n, generator=g) * 3 * math.pi + 0.5
    label = torch.randint(0, 2, (n,), generator=g)
    sign = label.float() * 2 - 1
    x = torch.stack([sign * t * torch.cos(t), sign * t * torch.sin(t)], dim=1) / 5
    x += noise * torch.randn(n, 2, generator=g) / 5
    return x, label


def mlp(hidden: int, layers: int, dropout: float) -> nn.Module:
    mods: list[nn.Module] = []
    width = 2
    for _ in range(layers):
        mods += [nn.Linear(width, hidden), nn.Tanh(), nn.Dropout(dropout)]
        width = hidden
    mods.append(nn.Linear(width, 2))
    return nn.Sequential(*mods)
