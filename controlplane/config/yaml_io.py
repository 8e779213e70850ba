"""YAML in, plain dicts out; syntax errors carry the line, overrides use dotted paths.

The loader is bounded: the text's size is capped, then one pass over its events
(``yaml_events.check_events``) refuses, at the first limit crossed, too deep a nesting, too many
values, too many hyperparameters, or aliases expanding past the size cap (a few hundred bytes of
``&a [*b, *b, ...]`` can stand for gigabytes), before anything is built; the result must be plain
JSON data (see ``limits.check_plain``). Both the pass and the load use libyaml's C parser where
PyYAML has it (``yaml_events.LOADER``).
"""

from __future__ import annotations

from typing import Any

import yaml

from controlplane.config.errors import ConfigError
from controlplane.config.limits import Limits, check_plain
from controlplane.config.yaml_events import LOADER, check_events


def _load(text: str, limits: Limits, source: str) -> Any:
    """The one YAML document in ``text``, its limits checked before it is built."""
    check_events(text, limits, source)
    try:
        loader = LOADER(text)
    except yaml.YAMLError as e:  # the reader refuses non-printable characters before any parsing
        raise ConfigError("", f"{source}: {e}") from e
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_yaml(text: str, source: str = "config", limits: Limits | None = None) -> dict[str, Any]:
    limits = limits or Limits()
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise ConfigError("", f"{source}: {len(text.encode('utf-8', 'surrogatepass'))} bytes, over the "
                              f"{limits.max_bytes}-byte limit")
    try:
        data = _load(text, limits, source)
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
    check_plain(data, limits)
    return data


def load_value(raw: str, key: str, limits: Limits | None = None) -> Any:
    """One YAML value (an override's right-hand side), bounded like a whole config."""
    limits = limits or Limits()
    try:
        value = _load(raw, limits, f"--config {key}")
    except yaml.YAMLError as e:
        raise ConfigError(key, f"cannot read the value {raw!r}: {e}") from e
    check_plain(value, limits)
    return value


def apply_overrides(cfg: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`--config searcher.max_trials=4`: the value is read as a YAML scalar."""
    out = _deep_copy(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError("", f"--config {item!r}: expected key.path=value")
        value = load_value(raw, key) if raw else ""
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
    """Iterative, so a deep input cannot exhaust the stack (inputs are bounded before this)."""
    if not isinstance(value, (dict, list)):
        return value
    root: Any = {} if isinstance(value, dict) else []
    stack = [(value, root)]
    while stack:
        src, dst = stack.pop()
        items = src.items() if isinstance(src, dict) else enumerate(src)
        for k, v in items:
            copy = {} if isinstance(v, dict) else [] if isinstance(v, list) else v
            if isinstance(dst, dict):
                dst[k] = copy
            else:
                dst.append(copy)
            if copy is not v:
                stack.append((v, copy))
    return root
