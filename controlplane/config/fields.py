"""Typed field readers: each names the dotted path and the rule when a value is wrong."""

from __future__ import annotations

import math
from typing import Any

from controlplane.config.errors import ConfigError, raise_all
from controlplane.config.limits import INT64_MAX, INT64_MIN

MISSING: Any = object()


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def mapping(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"must be a mapping, got {type(value).__name__}")
    return value


def no_unknown(raw: dict[str, Any], allowed: set[str], path: str) -> None:
    """Every unknown key at once (``searcher.max_lenght`` and ``searcher.metrc`` in one answer)."""
    raise_all([ConfigError(join(path, str(key)), "unknown field") for key in raw if key not in allowed])


def get(raw: dict[str, Any], key: str, path: str, default: Any = MISSING) -> Any:
    if key not in raw or raw[key] is None:
        if default is MISSING:
            raise ConfigError(join(path, key), "required")
        return default
    return raw[key]


def integer(value: Any, path: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"must be an integer, got {value!r}")
    if not INT64_MIN <= value <= INT64_MAX:
        raise ConfigError(path, "integer out of range (must fit in 64 bits)")
    if minimum is not None and value < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(path, f"must be <= {maximum}, got {value}")
    return value


def number(value: Any, path: str, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(path, f"must be a number, got {value!r}")
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        raise ConfigError(path, "integer out of range (must fit in 64 bits)")
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(path, f"must be a finite number, got {value}")
    if positive and value <= 0:
        raise ConfigError(path, f"must be > 0, got {value}")
    return value


def string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a string, got {value!r}")
    return value


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false, got {value!r}")
    return value


def length(value: Any, path: str) -> dict[str, int]:
    """Determined's lengths: an int (batches) or {batches|records|epochs: n}."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"batches": integer(value, path, minimum=0)}
    raw = mapping(value, path)
    if len(raw) != 1 or next(iter(raw)) not in ("batches", "records", "epochs"):
        raise ConfigError(path, f"must be an integer or one of {{batches|records|epochs: n}}, got {value!r}")
    unit, n = next(iter(raw.items()))
    return {unit: integer(n, join(path, unit), minimum=0)}


def duration(value: Any, field_name: str) -> float:
    """'30s', '10m', '1h' or a number of seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
        for suffix in ("ms", "s", "m", "h"):
            if value.endswith(suffix):
                try:
                    return float(value[: -len(suffix)]) * units[suffix]
                except ValueError:
                    break
    raise ConfigError(field_name, f"must be a duration like '30s' or '10m', got {value!r}")
