"""YAML in, plain dicts out; syntax errors carry the line, overrides use dotted paths."""

from __future__ import annotations

from typing import Any

import yaml

from controlplane.config.errors import ConfigError


def load_yaml(text: str, source: str = "config") -> dict:
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"{source}: YAML syntax error{where}: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise ConfigError("", f"{source}: YAML syntax error: {e}") from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("", f"{source}: the top level must be a mapping, got {type(data).__name__}")
    return data


def apply_overrides(cfg: dict, overrides: list[str]) -> dict:
    """`--config searcher.max_trials=4`: the value is read as a YAML scalar."""
    out = _deep_copy(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError("", f"--config {item!r}: expected key.path=value")
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError as e:
            raise ConfigError(key, f"cannot read the value {raw!r}: {e}") from e
        node = out
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(".".join(parts[: i + 1]), f"is not a mapping, cannot set {key}")
            node = child
        node[parts[-1]] = value
    return out


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value
