"""What a config may contain: plain JSON data, 64-bit integers, finite floats, bounded size and depth.

A config is stored as JSON (PostgreSQL refuses NaN and NUL in JSON) and sent back in every experiment
answer, so anything JSON cannot carry, and anything big enough to hurt, is refused here with the
dotted path of the offending value. The walk is iterative: a 10,000-deep config is refused, never a
RecursionError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from controlplane.config.errors import ConfigError

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_DEPTH = 64
# Values and keys: each costs Python objects to build and every walk over the config. A config of
# 1,000 hyperparameters (the master's default cap) with three fields each is about 8,000.
DEFAULT_MAX_NODES = 50_000
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INT32_MAX = 2**31 - 1
NODE_COST = 2  # bytes charged per value on top of its text: the punctuation around it in JSON


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_nodes: int = DEFAULT_MAX_NODES
    # Under the top-level `hyperparameters` (an experiment config's); None: not counted.
    max_hyperparameters: int | None = None


def _path(parent: str, key: Any) -> str:
    return f"{parent}.{key}" if parent else str(key)


def too_big(size: int, limits: Limits, what: str = "the config") -> ConfigError:
    return ConfigError("", f"{what} is about {size} bytes, over the {limits.max_bytes}-byte limit")


def too_deep(path: str, limits: Limits) -> ConfigError:
    return ConfigError(path, f"nested more than {limits.max_depth} levels deep")


def too_many_nodes(where: str, limits: Limits, what: str = "") -> ConfigError:
    return ConfigError(where, f"{what}more than {limits.max_nodes} values and keys, over the limit of "
                              f"{limits.max_nodes}")


def too_many_hyperparameters(limit: int, where: str = "") -> ConfigError:
    found = f" (stopped reading at {where})" if where else ""
    return ConfigError("hyperparameters", f"more than {limit} hyperparameters, over the limit of {limit}{found}")


def hyperparameter_count(raw: Any, stop_after: int | None = None, max_values: int | None = None) -> int:
    """Hyperparameters of a raw ``hyperparameters`` block: each leaf (a mapping with a ``type``
    key, or any other value), inside nested groups too; iterative, and done once past
    ``stop_after`` or after ``max_values`` values (empty groups), so a huge block costs no more
    than the limits."""
    count = seen = 0
    stack = [raw] if isinstance(raw, dict) else []
    while stack:
        for value in stack.pop().values():
            seen += 1
            if max_values is not None and seen > max_values:
                return count
            if isinstance(value, dict) and "type" not in value:
                stack.append(value)
                continue
            count += 1
            if stop_after is not None and count > stop_after:
                return count
    return count


def _scalar_size(value: Any, path: str) -> int:
    if value is None or isinstance(value, bool):
        return 4
    if isinstance(value, str):
        if "\x00" in value:
            raise ConfigError(path, "must not contain a NUL character")
        return len(value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ConfigError(path, "integer out of range (must fit in 64 bits)")
        return len(str(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ConfigError(path, f"must be a finite number, got {value} (JSON cannot carry NaN or infinity)")
        return len(repr(value))
    raise ConfigError(path, f"must be a string, number, boolean, null, list or mapping, got "
                            f"{type(value).__name__} (quote the value to make it a string)")


def check_plain(value: Any, limits: Limits | None = None) -> int:
    """Refuse anything JSON cannot carry; with ``limits``, also too big, too deep, with too many
    values and keys, or (``max_hyperparameters``) too many hyperparameters, each refused as soon as
    the walk passes it.

    Returns the estimated JSON size in bytes. Shared subtrees (YAML aliases) count every time
    they appear, as they would in the stored JSON."""
    if limits is not None and limits.max_hyperparameters is not None and isinstance(value, dict):
        limit = limits.max_hyperparameters
        if hyperparameter_count(value.get("hyperparameters"), limit, limits.max_nodes) > limit:
            raise too_many_hyperparameters(limit)
    size = nodes = 0
    stack: list[tuple[Any, str, int]] = [(value, "", 1)]
    while stack:
        node, path, depth = stack.pop()
        if limits is not None and depth > limits.max_depth:
            raise too_deep(path, limits)
        size += NODE_COST
        nodes += 1 + (len(node) if isinstance(node, dict) else 0)
        if limits is not None and nodes > limits.max_nodes:
            raise too_many_nodes(path or "config", limits)
        if isinstance(node, dict):
            for key, child in node.items():
                child_path = _path(path, key)
                if not isinstance(key, str):
                    raise ConfigError(child_path, f"keys must be strings, got {type(key).__name__} {key!r} "
                                                  "(quote the key)")
                size += _scalar_size(key, child_path)
                stack.append((child, child_path, depth + 1))
        elif isinstance(node, (list, tuple)):
            stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(node))
        else:
            size += _scalar_size(node, path or "config")
        if limits is not None and size > limits.max_bytes:
            raise too_big(size, limits)
    return size
