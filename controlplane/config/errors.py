"""One error type for every configuration mistake: the field's dotted path and the rule broken."""

from __future__ import annotations


class ConfigError(ValueError):
    def __init__(self, path: str, rule: str) -> None:
        self.path = path
        self.rule = rule
        super().__init__(f"{path}: {rule}" if path else rule)


class ConfigErrors(ConfigError):
    """Every mistake found in one block, each a ConfigError; caught as a ConfigError (its path and
    rule are the first mistake's, its message lists them all, one a line)."""

    def __init__(self, errors: list[ConfigError]) -> None:
        if not errors:
            raise ValueError("ConfigErrors needs at least one error")
        self.errors = tuple(errors)
        super().__init__(errors[0].path, errors[0].rule)
        self.args = ("\n".join(str(e) for e in errors),)

    def __str__(self) -> str:
        return str(self.args[0])


def raise_all(errors: list[ConfigError]) -> None:
    """Nothing when ``errors`` is empty; the one error, or all of them as ConfigErrors."""
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise ConfigErrors(errors)
