"""Token lookups, remembered briefly.

Every API call authenticates, and training code reports metrics many times a second; a
database round trip per call would dominate a small report. Logout, the end of a user's
sessions and the end of an allocation drop their entries at once, so a revoked token never
outlives its revocation.

A dropped key is also fenced for a while: a lookup that read the database just before the
revocation committed may not put the stale answer back (``put`` ignores fenced keys), so the
next request reads the database again and sees the revocation.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from controlplane.master.principals import AuthedUser, TaskPrincipal

V = TypeVar("V")


def token_hash(token: str) -> str:
    """What a token is stored and looked up as: never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


class _TTLCache(Generic[V]):
    def __init__(self, ttl_s: float, max_entries: int = 10_000, fence_s: float = 30.0) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.fence_s = fence_s
        self._items: dict[str, tuple[float, V]] = {}
        self._fenced: dict[str, float] = {}
        self._fenced_values: list[tuple[float, Callable[[V], bool]]] = []

    def get(self, key: str) -> V | None:
        hit = self._items.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: str, value: V) -> None:
        now = time.monotonic()
        until = self._fenced.get(key)
        if until is not None:
            if until > now:
                return
            del self._fenced[key]
        if self._fenced_values:
            self._fenced_values = [(t, p) for t, p in self._fenced_values if t > now]
            if any(p(value) for _, p in self._fenced_values):
                return
        if len(self._items) >= self.max_entries:
            self._items.clear()
        self._items[key] = (now + self.ttl_s, value)

    def drop(self, key: str) -> None:
        self._items.pop(key, None)
        now = time.monotonic()
        if len(self._fenced) >= self.max_entries:
            self._fenced = {k: t for k, t in self._fenced.items() if t > now}
        self._fenced[key] = now + self.fence_s

    def drop_where(self, predicate: Callable[[V], bool]) -> int:
        """Drop every entry whose value matches (e.g. all sessions of one user), and for a while
        cache no new value that matches: those lookups go to the database."""
        doomed = [k for k, (_, v) in self._items.items() if predicate(v)]
        for key in doomed:
            self.drop(key)
        self._fenced_values.append((time.monotonic() + self.fence_s, predicate))
        return len(doomed)

    def clear(self) -> None:
        self._items.clear()
        self._fenced.clear()
        self._fenced_values.clear()


class TokenCaches:
    """One master's token lookups (``RuntimeCore.tokens``): each app its own, so two masters in
    one process (the tests') never answer from each other's."""

    def __init__(self) -> None:
        self.users: _TTLCache[AuthedUser] = _TTLCache(ttl_s=5.0)
        # A task token is dropped when its allocation ends (orchestration/lifecycle.py, the one path
        # that ends one), and every write re-checks its run inside its transaction
        # (services/fencing.py), so the entry can live long: a hundred trials reporting each second
        # then cost no token lookups.
        self.tasks: _TTLCache[TaskPrincipal] = _TTLCache(ttl_s=60.0)

    def forget_user(self, user_id: int) -> None:
        """Drop a user's cached sessions, so a change of role or activity counts at once."""
        self.users.drop_where(lambda u: u.id == user_id)
