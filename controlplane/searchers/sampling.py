"""Hyperparameter values from their definitions: a random sample, the center, a grid axis."""

from __future__ import annotations

import itertools
import random
from typing import Any

from controlplane.config.errors import ConfigError
from controlplane.config.hyperparameters import Categorical, Const, DoubleRange, Hparam, IntRange, LogRange


def sample(hps: dict[str, Hparam], rng: random.Random) -> dict:
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


def center(hps: dict[str, Hparam]) -> dict:
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


def _axis(hp: Hparam, path: str) -> list:
    if isinstance(hp, Const):
        return [hp.val]
    if isinstance(hp, Categorical):
        return list(hp.vals)
    if hp.count is None:
        raise ConfigError(f"hyperparameters.{path}.count", "required by the grid searcher")
    n = hp.count
    if isinstance(hp, IntRange):
        if n == 1:
            return [round((hp.minval + hp.maxval) / 2)]
        span = hp.maxval - hp.minval
        return sorted({hp.minval + round(i * span / (n - 1)) for i in range(n)})
    points = [hp.minval + i * (hp.maxval - hp.minval) / (n - 1) for i in range(n)] if n > 1 else \
        [(hp.minval + hp.maxval) / 2]
    return [hp.base ** p for p in points] if isinstance(hp, LogRange) else points


def _flatten(hps: dict[str, Hparam], prefix: str = "") -> list[tuple[str, Hparam]]:
    out = []
    for key in sorted(hps):
        hp = hps[key]
        path = f"{prefix}{key}"
        out.extend(_flatten(hp, path + ".") if isinstance(hp, dict) else [(path, hp)])
    return out


def grid(hps: dict[str, Hparam]) -> list[dict]:
    """Every combination, nested groups rebuilt as nested dicts."""
    flat = _flatten(hps)
    axes = [_axis(hp, path) for path, hp in flat]
    points = []
    for combo in itertools.product(*axes):
        point: dict[str, Any] = {}
        for (path, _), value in zip(flat, combo):
            node = point
            *parents, leaf = path.split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        points.append(point)
    return points
