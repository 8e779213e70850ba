"""How per-batch validation metrics become one number: ``Reducer.AVG`` (the default), SUM, MAX, MIN
over every batch of every worker."""

from __future__ import annotations

import enum
import math
import numbers
from typing import Any

import numpy as np
import torch


class Reducer(enum.Enum):
    AVG = 1
    SUM = 2
    MAX = 3
    MIN = 4


def to_scalar(value: Any) -> Any:
    """A tensor or array metric as a Python number (its mean when it has several elements)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return value.item() if value.numel() == 1 else value.float().mean().item()
    if isinstance(value, np.ndarray):
        return value.item() if value.size == 1 else float(value.mean())
    if isinstance(value, np.generic):
        return value.item()
    return value


def reduce_values(values: list[Any], reducer: Reducer) -> Any:
    nums = [v for v in values if isinstance(v, numbers.Real) and not isinstance(v, bool)]
    if not nums:
        return values[-1] if values else None
    if reducer == Reducer.SUM:
        return float(sum(nums))
    if reducer == Reducer.MAX:
        return float(max(nums))
    if reducer == Reducer.MIN:
        return float(min(nums))
    return float(math.fsum(nums) / len(nums))


def reduce_batches(batches: list[dict[str, Any]], reducers: Reducer | dict[str, Reducer]) -> dict[str, Any]:
    """One value per metric name over ``batches`` (a list of {name: value})."""
    keys: list[str] = []
    for b in batches:
        keys.extend(k for k in b if k not in keys)
    out = {}
    for key in keys:
        reducer = reducers.get(key, Reducer.AVG) if isinstance(reducers, dict) else reducers
        out[key] = reduce_values([b[key] for b in batches if key in b], reducer)
    return out
