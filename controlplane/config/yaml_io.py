"""YAML in, plain dicts out; syntax errors carry the line, overrides use dotted paths.

The loader is bounded: the text's size, the nesting depth (checked while composing, so deep
nesting never reaches Python's recursion limit) and the size the document expands to through
aliases (a few hundred bytes of ``&a [*b, *b, ...]`` can stand for gigabytes) are all capped, and
the result must be plain JSON data (see ``limits.check_plain``).
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, SequenceNode

from controlplane.config.errors import ConfigError
from controlplane.config.limits import NODE_COST, Limits, check_plain, too_big, too_deep


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that measures each node as it is composed: expanded size and depth."""

    def __init__(self, text: str, limits: Limits, source: str) -> None:
        super().__init__(text)
        self.limits = limits
        self.source = source
        self.depth = 0
        self.aliases = 0
        self.measure: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded bytes, expanded depth)

    def _where(self, mark: Any) -> str:
        return f"{self.source}: line {mark.line + 1}" if mark is not None else self.source

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            self.aliases += 1
            if id(node) not in self.measure:
                raise ConfigError("", f"{self._where(mark)}: a YAML alias refers to a mapping or list "
                                      "that contains it")
            if self.depth + self.measure[id(node)][1] > self.limits.max_depth:
                raise too_deep(self._where(mark), self.limits)
            return node
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise too_deep(self._where(self.peek_event().start_mark), self.limits)
        node = super().compose_node(parent, index)
        self.depth -= 1
        if node is None:  # pragma: no cover - the composer always returns a node here
            raise ConfigError("", f"{self.source}: empty YAML node")
        if isinstance(node, MappingNode):
            children = [c for pair in node.value for c in pair]
        elif isinstance(node, SequenceNode):
            children = node.value
        else:
            children = []
        size = NODE_COST + (len(node.value) if not children and isinstance(node.value, str) else 0)
        depth = 1
        for child in children:
            child_size, child_depth = self.measure[id(child)]
            size += child_size
            depth = max(depth, child_depth + 1)
        self.measure[id(node)] = (size, depth)
        if size > self.limits.max_bytes:
            what = "the config, with its YAML aliases expanded," if self.aliases else "the config"
            raise too_big(size, self.limits, what)
        return node


def load_yaml(text: str, source: str = "config", limits: Limits | None = None) -> dict[str, Any]:
    limits = limits or Limits()
    if len(text) > limits.max_bytes or len(text.encode("utf-8", "surrogatepass")) > limits.max_bytes:
        raise ConfigError("", f"{source}: {len(text.encode('utf-8', 'surrogatepass'))} bytes, over the "
                              f"{limits.max_bytes}-byte limit")
    try:
        loader = _BoundedLoader(text, limits, source)
    except yaml.YAMLError as e:  # the reader refuses non-printable characters before any parsing
        raise ConfigError("", f"{source}: {e}") from e
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"{source}: YAML syntax error{where}: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise ConfigError("", f"{source}: YAML syntax error: {e}") from e
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("", f"{source}: the top level must be a mapping, got {type(data).__name__}")
    check_plain(data, limits)
    return data


def load_value(raw: str, key: str, limits: Limits | None = None) -> Any:
    """One YAML value (an override's right-hand side), bounded like a whole config."""
    limits = limits or Limits()
    loader = _BoundedLoader(raw, limits, f"--config {key}")
    try:
        value = loader.get_single_data()
    except yaml.YAMLError as e:
        raise ConfigError(key, f"cannot read the value {raw!r}: {e}") from e
    finally:
        loader.dispose()
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
