"""Hyperparameter values from their definitions: a random sample, the center, a grid axis."""

from __future__ import annotations

import random
from typing import Any

from controlplane.config.grid_axes import axis_length, flatten
from controlplane.config.hyperparameters import Categorical, Const, DoubleRange, Hparam, IntRange, LogRange


def sample(hps: dict[str, Hparam], rng: random.Random) -> dict[str, Any]:
    """Keys in sorted order, so a seed gives the same values whatever the YAML's key order."""
    out: dict[str, Any] = {}
    for key in sorted(hps):
        hp = hps[key]
        if isinstance(hp, dict):
            out[key] = sample(hp, rng)
        elif isinstance(hp, Const):
            out[key] = hp.val
        elif isinstance(hp, IntRange):
            out[key] = rng.randint(hp.minval, hp.maxval)
        elif isinstance(hp, DoubleRange):
            out[key] = rng.uniform(hp.minval, hp.maxval)
        elif isinstance(hp, LogRange):
            out[key] = hp.base ** rng.uniform(hp.minval, hp.maxval)
        else:
            out[key] = hp.vals[rng.randrange(len(hp.vals))]
    return out


def center(hps: dict[str, Hparam]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in sorted(hps):
        hp = hps[key]
        if isinstance(hp, dict):
            out[key] = center(hp)
        elif isinstance(hp, Const):
            out[key] = hp.val
        elif isinstance(hp, IntRange):
            out[key] = round((hp.minval + hp.maxval) / 2)
        elif isinstance(hp, DoubleRange):
            out[key] = (hp.minval + hp.maxval) / 2
        elif isinstance(hp, LogRange):
            out[key] = hp.base ** ((hp.minval + hp.maxval) / 2)
        else:
            out[key] = hp.vals[0]
    return out


def _axis(hp: Hparam, path: str) -> list[Any]:
    if isinstance(hp, Const):
        return [hp.val]
    if isinstance(hp, Categorical):
        return list(hp.vals)
    if isinstance(hp, dict):
        raise TypeError(f"{path} is a group, not an axis")
    n = axis_length(hp, path)
    if isinstance(hp, IntRange):
        if n == 1:
            return [round((hp.minval + hp.maxval) / 2)]
        span = hp.maxval - hp.minval
        return [hp.minval + round(i * span / (n - 1)) for i in range(n)]  # distinct: the step is >= 1
    points = [hp.minval + i * (hp.maxval - hp.minval) / (n - 1) for i in range(n)] if n > 1 else \
        [(hp.minval + hp.maxval) / 2]
    return [hp.base ** p for p in points] if isinstance(hp, LogRange) else points


class Grid:
    """The grid's points by index, in `itertools.product` order (the last axis varies fastest)."""

    def __init__(self, hps: dict[str, Hparam]) -> None:
        self.flat = flatten(hps)
        self.axes = [_axis(hp, path) for path, hp in self.flat]
        self.size = 1
        for axis in self.axes:
            self.size *= len(axis)

    def __len__(self) -> int:
        return self.size

    def point(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.size:
            raise IndexError(index)
        values = []
        for axis in reversed(self.axes):
            index, digit = divmod(index, len(axis))
            values.append(axis[digit])
        point: dict[str, Any] = {}
        for (path, _), value in zip(self.flat, reversed(values), strict=False):
            node = point
            *parents, leaf = path.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return point


def grid(hps: dict[str, Hparam]) -> list[dict[str, Any]]:
    """Every combination, nested groups rebuilt as nested dicts (small grids and tests only)."""
    g = Grid(hps)
    return [g.point(i) for i in range(len(g))]
