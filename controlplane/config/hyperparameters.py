"""Determined's hyperparameter kinds: const, int, double, log, categorical, and nested groups."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controlplane.config import fields as f
from controlplane.config.errors import ConfigError


@dataclass(frozen=True)
class Const:
    val: Any

    def to_dict(self) -> dict[str, Any]:
        return {"type": "const", "val": self.val}


@dataclass(frozen=True)
class IntRange:
    minval: int
    maxval: int
    count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({"type": "int", "minval": self.minval, "maxval": self.maxval, "count": self.count})


@dataclass(frozen=True)
class DoubleRange:
    minval: float
    maxval: float
    count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({"type": "double", "minval": self.minval, "maxval": self.maxval, "count": self.count})


@dataclass(frozen=True)
class LogRange:
    base: float
    minval: float
    maxval: float
    count: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({"type": "log", "base": self.base, "minval": self.minval, "maxval": self.maxval,
                           "count": self.count})


@dataclass(frozen=True)
class Categorical:
    vals: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "categorical", "vals": list(self.vals)}


Hparam = Const | IntRange | DoubleRange | LogRange | Categorical | dict[str, Any]


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _count(raw: dict[str, Any], path: str) -> int | None:
    if raw.get("count") is None:
        return None
    return f.integer(raw["count"], f.join(path, "count"), minimum=1)


def _range(raw: dict[str, Any], path: str, read: Callable[..., Any]) -> tuple[Any, ...]:
    lo = read(f.get(raw, "minval", path), f.join(path, "minval"))
    hi = read(f.get(raw, "maxval", path), f.join(path, "maxval"))
    if lo >= hi:
        raise ConfigError(f.join(path, "minval"), f"must be < maxval ({hi}), got {lo}")
    if not math.isfinite(float(hi) - float(lo)):
        raise ConfigError(path, f"the range {lo}..{hi} is too wide to sample (maxval - minval overflows)")
    return lo, hi


def _log_bounds(base: float, lo: float, hi: float, path: str) -> None:
    """Values are base**x: both ends must be finite numbers, or every trial would fail."""
    for key, exponent in (("minval", lo), ("maxval", hi)):
        try:
            value = float(base) ** float(exponent)
        except OverflowError:
            value = math.inf
        if not math.isfinite(value):
            raise ConfigError(f.join(path, key), f"{base}**{exponent} is not a finite number")


def parse_one(raw: Any, path: str) -> Hparam:
    if not isinstance(raw, dict):
        return Const(raw)  # shorthand: `lr: 0.1`
    if "type" not in raw:
        return {str(k): parse_one(v, f.join(path, str(k))) for k, v in raw.items()}  # nested group
    kind = raw["type"]
    keys = {"const": {"type", "val"}, "int": {"type", "minval", "maxval", "count"},
            "double": {"type", "minval", "maxval", "count"}, "log": {"type", "base", "minval", "maxval", "count"},
            "categorical": {"type", "vals"}}
    if not isinstance(kind, str) or kind not in keys:
        raise ConfigError(f.join(path, "type"),
                          f"must be one of const, int, double, log, categorical, got {kind!r}")
    f.no_unknown(raw, keys[kind], path)
    if kind == "const":
        if "val" not in raw:
            raise ConfigError(f.join(path, "val"), "required")
        return Const(raw["val"])
    if kind == "int":
        lo, hi = _range(raw, path, f.integer)
        return IntRange(lo, hi, _count(raw, path))
    if kind == "double":
        lo, hi = _range(raw, path, f.number)
        return DoubleRange(lo, hi, _count(raw, path))
    if kind == "log":
        base = f.number(raw.get("base", 10), f.join(path, "base"), positive=True)
        lo, hi = _range(raw, path, f.number)
        _log_bounds(base, lo, hi, path)
        return LogRange(base, lo, hi, _count(raw, path))
    vals = raw.get("vals")
    if not isinstance(vals, list) or not vals:
        raise ConfigError(f.join(path, "vals"), f"must be a non-empty list, got {vals!r}")
    return Categorical(tuple(vals))


def parse_hyperparameters(raw: Any) -> dict[str, Hparam]:
    raw = f.mapping(raw, "hyperparameters")
    return {str(k): parse_one(v, f.join("hyperparameters", str(k))) for k, v in raw.items()}


def to_dict(hps: dict[str, Hparam]) -> dict[str, Any]:
    return {k: (to_dict(v) if isinstance(v, dict) else v.to_dict()) for k, v in hps.items()}
