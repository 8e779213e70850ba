"""A transition table with a reason on every edge; an illegal transition is a bug."""

from __future__ import annotations

from collections.abc import Mapping


class IllegalTransition(RuntimeError):
    def __init__(self, machine: str, from_state: str, to_state: str) -> None:
        super().__init__(f"{machine}: illegal transition {from_state} -> {to_state}")
        self.machine = machine
        self.from_state = from_state
        self.to_state = to_state


class StateMachine:
    def __init__(self, name: str, edges: Mapping[str, Mapping[str, str]], terminal: set[str],
                 reopened_to: set[str] | None = None) -> None:
        """``edges[from][to]`` is a one-line comment on why that edge exists. A terminal state is one
        the system never leaves on its own; only a user's request leaves it (Determined's continue
        and delete), and only towards a state of ``reopened_to``."""
        self.name = name
        self.edges = edges
        self.terminal = frozenset(terminal)
        self.reopened_to = frozenset(reopened_to or ())

    def check(self, from_state: str, to_state: str) -> None:
        if to_state not in self.edges.get(from_state, {}):
            raise IllegalTransition(self.name, from_state, to_state)

    def allowed(self, from_state: str, to_state: str) -> bool:
        return to_state in self.edges.get(from_state, {})

    def is_terminal(self, state: str) -> bool:
        return state in self.terminal
