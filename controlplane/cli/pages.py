"""Following a listing that pages with a cursor (trial metrics, workloads): every row, a page at a time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from controlplane.cli.session import Session

PAGE = 10_000  # the master's largest page


def cursor_paged(session: Session, path: str, key: str, params: dict[str, Any] | None = None,
                 page_size: int = PAGE) -> Iterator[dict]:
    """Yields the rows of every page, following ``nextCursor`` until the master sends none."""
    cursor: str | None = None
    while True:
        query = {**(params or {}), "limit": page_size, **({"cursor": cursor} if cursor else {})}
        body = session.get(path, query)
        rows = body.get(key) or []
        yield from (r for r in rows if isinstance(r, dict))
        cursor = body.get("nextCursor")
        if not rows or not isinstance(cursor, str) or not cursor:
            return
