"""A cache that forgets its oldest entry once full: for facts that never change (an allocation's
trial, a job's parsed spec) looked up on hot paths of a master that runs for months."""

from __future__ import annotations

from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V | None:
        return self._items.get(key)

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` (the oldest entry goes first when full); returns it."""
        self._items.pop(key, None)
        while len(self._items) >= self.max_entries:
            del self._items[next(iter(self._items))]
        self._items[key] = value
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
