"""A bounded pass over a YAML document's events, before anything is built from it.

``check_events`` reads the parser's event stream (libyaml's C parser where PyYAML was built with
it, else PyYAML's own) and stops at the first limit crossed: nesting depth, size and node count with
every alias expanded (a few hundred bytes of ``&a [*b, *b, ...]`` can stand for gigabytes), an alias
inside its own anchor, and, with ``Limits.max_hyperparameters``, the hyperparameters under the
top-level ``hyperparameters`` key. A refusal costs the events read up to the limit, not the whole
document: a 60,000-hyperparameter config stops at its 1,001st.

Hyperparameters are counted as ``limits.hyperparameter_count`` counts a loaded config: a mapping with
a ``type`` key is one, another mapping a group whose leaves count. Each entry of ``hyperparameters``
is counted when it ends (a nested group whole, since a ``type`` key may come last), so the count is
exact and the pass stops at the first entry past the limit; a single group holding too many is
read to its end, which the node cap bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import AliasEvent, CollectionEndEvent, CollectionStartEvent, MappingStartEvent, ScalarEvent

from controlplane.config.errors import ConfigError
from controlplane.config.limits import NODE_COST, Limits, too_big, too_deep, too_many_hyperparameters, too_many_nodes

# libyaml's parser (C) when PyYAML was built with it: the pass then costs little Python per event.
LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass
class _Node:
    """What a node stands for with its aliases expanded; an anchor's is kept for its aliases."""

    size: int = NODE_COST
    nodes: int = 1
    depth: int = 1
    leaves: int = 1  # as a member of a hyperparameter group: 1, or a group's leaves


@dataclass
class _Open:
    """A mapping or list being read."""

    mapping: bool
    anchor: str | None
    hyperparameters: bool  # the top-level `hyperparameters` mapping: its entries are counted
    size: int = NODE_COST
    nodes: int = 1
    depth: int = 1
    leaves: int = 0
    key_next: bool = True  # a mapping's next child is a key
    key: Any = None  # a mapping's last key, while its value is read
    has_type: bool = False

    def done(self) -> _Node:
        leaves = (1 if self.has_type else self.leaves) if self.mapping else 1
        return _Node(self.size, self.nodes, self.depth, leaves)


class _Pass:
    def __init__(self, limits: Limits, source: str) -> None:
        self.limits, self.source = limits, source
        self.stack: list[_Open] = []
        self.anchors: dict[str, _Node] = {}
        self.size = self.nodes = self.aliases = 0
        self.hyperparameters = 0  # under `hyperparameters`: its entries read so far

    def where(self, event: Any) -> str:
        mark = getattr(event, "start_mark", None) or getattr(event, "problem_mark", None)
        return f"{self.source}: line {mark.line + 1}" if mark is not None else self.source

    def charge(self, size: int, nodes: int, event: Any) -> None:
        self.size += size
        self.nodes += nodes
        if self.size > self.limits.max_bytes:
            raise too_big(self.size, self.limits,
                          "the config, with its YAML aliases expanded," if self.aliases else "the config")
        if self.nodes > self.limits.max_nodes:
            raise too_many_nodes(self.where(event), self.limits,
                                 "with its YAML aliases expanded, " if self.aliases else "")

    def count(self, leaves: int, event: Any) -> None:
        self.hyperparameters += leaves
        limit = self.limits.max_hyperparameters
        if limit is not None and self.hyperparameters > limit:
            raise too_many_hyperparameters(limit, self.where(event))

    def child(self, node: _Node, key: Any, event: Any) -> None:
        """A finished node goes to its parent."""
        if not self.stack:
            return
        parent = self.stack[-1]
        parent.size += node.size
        parent.nodes += node.nodes
        parent.depth = max(parent.depth, node.depth + 1)
        if parent.mapping and parent.key_next:
            parent.key = key
            parent.has_type = parent.has_type or key == "type"
        else:
            parent.leaves += node.leaves
            if parent.hyperparameters:
                self.count(node.leaves, event)
        if parent.mapping:
            parent.key_next = not parent.key_next

    def check_depth(self, depth: int, event: Any) -> None:
        if len(self.stack) + depth > self.limits.max_depth:
            raise too_deep(self.where(event), self.limits)

    def on_event(self, event: Any) -> None:
        if isinstance(event, ScalarEvent):
            self.check_depth(1, event)
            self.charge(NODE_COST + len(event.value), 1, event)
            node = _Node(size=NODE_COST + len(event.value))
            if event.anchor is not None:
                self.anchors[event.anchor] = node
            self.child(node, event.value, event)
        elif isinstance(event, CollectionStartEvent):
            self.check_depth(1, event)
            self.charge(NODE_COST, 1, event)
            top = self.stack[0] if len(self.stack) == 1 else None
            hyperparameters = (isinstance(event, MappingStartEvent) and top is not None and top.mapping
                               and not top.key_next and top.key == "hyperparameters")
            self.stack.append(_Open(isinstance(event, MappingStartEvent), event.anchor, hyperparameters))
        elif isinstance(event, CollectionEndEvent):
            frame = self.stack.pop()
            node = frame.done()
            if frame.anchor is not None:
                self.anchors[frame.anchor] = node
            self.child(node, None, event)
        elif isinstance(event, AliasEvent):
            self.alias(event)

    def alias(self, event: AliasEvent) -> None:
        self.aliases += 1
        if any(f.anchor == event.anchor for f in self.stack):
            raise ConfigError("", f"{self.where(event)}: a YAML alias refers to a mapping or list that contains it")
        node = self.anchors.get(event.anchor or "")
        if node is None:
            return  # an undefined alias: the loader reports it, with its line
        self.check_depth(node.depth, event)
        self.charge(node.size, node.nodes, event)
        self.child(node, None, event)


def check_events(text: str, limits: Limits, source: str = "config") -> None:
    """Raise ConfigError at the first limit the document crosses, having read no further.
    YAML syntax errors are left to the loader, which reports them with their line."""
    walk = _Pass(limits, source)
    try:
        for event in yaml.parse(text, Loader=LOADER):
            walk.on_event(event)
    except yaml.MarkedYAMLError as e:
        if "maximum nesting depth" in str(e.problem):  # libyaml's own cap (1,000), met while scanning ahead
            raise too_deep(walk.where(e), limits) from e
    except yaml.YAMLError:
        return
