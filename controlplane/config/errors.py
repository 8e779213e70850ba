"""One error type for every configuration mistake: the field's dotted path and the rule broken."""

from __future__ import annotations


class ConfigError(ValueError):
    def __init__(self, path: str, rule: str) -> None:
        self.path = path
        self.rule = rule
        super().__init__(f"{path}: {rule}" if path else rule)
