"""Following a listing a page at a time: with a cursor (trial metrics, workloads), or after the last line
id read (the logs of OpenPAI jobs, commands, shells, notebooks and TensorBoards)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

from controlplane.cli.errors import CliError
from controlplane.cli.session import Session

PAGE = 10_000  # the master's largest page


def cursor_paged(session: Session, path: str, key: str, params: dict[str, Any] | None = None,
                 page_size: int = PAGE) -> Iterator[dict[str, Any]]:
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


LOG_PAGE = 1000


def drain_lines(session: Session, path: str, params: dict[str, Any], after: int,
                write: Callable[[dict[str, Any]], None], page_size: int = LOG_PAGE) -> int:
    """Every line after line id ``after`` (``{"logs": [...], "nextAfter": id}`` pages), each given to
    ``write``, until a short page; the last id read."""
    while True:
        page = session.get(path, {**params, "after": after, "limit": page_size})
        lines = page.get("logs") if isinstance(page, dict) else None
        if not isinstance(lines, list):
            raise CliError(f"the master answered {path} without its logs")
        for line in lines:
            if isinstance(line, dict):
                write(line)
        sys.stdout.flush()
        next_after = page.get("nextAfter")
        if not isinstance(next_after, int) or isinstance(next_after, bool) or next_after < after \
                or (lines and next_after == after):
            raise CliError(f"the master answered {path} without a usable nextAfter: {next_after!r}")
        after = next_after
        if len(lines) < page_size:
            return after
