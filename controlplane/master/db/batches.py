"""Ids in batches for ``WHERE id IN (...)``: a query per batch stays under SQLite's and asyncpg's
bound-parameter limits however many ids a pass names."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from typing import Any, TypeVar

IDS_PER_QUERY = 500

T = TypeVar("T", bound=Any)


def in_batches(ids: Collection[T]) -> Iterator[list[T]]:
    """``ids`` sorted, ``IDS_PER_QUERY`` at a time."""
    wanted = sorted(ids)
    for i in range(0, len(wanted), IDS_PER_QUERY):
        yield wanted[i:i + IDS_PER_QUERY]
