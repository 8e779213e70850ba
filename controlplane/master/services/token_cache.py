"""Token lookups, remembered briefly.

Every API call authenticates, and training code reports metrics many times a second; a
database round trip per call would dominate a small report. Logout and the end of an
allocation drop their entries at once, so a revoked token never outlives its revocation.
"""

from __future__ import annotations

import time


class _TTLCache:
    def __init__(self, ttl_s: float, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._items: dict[str, tuple[float, object]] = {}

    def get(self, key: str) -> object | None:
        hit = self._items.get(key)
        if hit is None or hit[0] < time.monotonic():
            return None
        return hit[1]

    def put(self, key: str, value: object) -> None:
        if len(self._items) >= self.max_entries:
            self._items.clear()
        self._items[key] = (time.monotonic() + self.ttl_s, value)

    def drop(self, key: str) -> None:
        self._items.pop(key, None)

    def clear(self) -> None:
        self._items.clear()


USER_TOKENS = _TTLCache(ttl_s=5.0)
TASK_TOKENS = _TTLCache(ttl_s=2.0)
