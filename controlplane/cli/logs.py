"""Printing a trial's log stream the way `det trial logs` does.

The master streams NDJSON `{"result": {..., "message": "...\\n"}}` lines (chunked) from
`GET /api/v1/trials/{id}/logs`; each `message` is printed as is, flushed at once so `-f`
is live. `--tail N` asks for the newest N (ORDER_BY_DESC, reversed here); with `-f` it then
follows, skipping lines already shown.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from controlplane.cli.errors import CliError
from controlplane.cli.session import Session


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the trial ends")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--head", type=_count, metavar="N", help="only the first N lines")
    group.add_argument("--tail", type=_count, metavar="N", help="only the last N lines")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of lines, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of lines, got {text!r}")
    return value


def rank_id(text: str) -> int:
    """A worker's rank for ``--rank``: a whole number the master accepts (0..2^31-1)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a worker rank (0, 1, ...), got {text!r}") from None
    if not 0 <= value <= 2**31 - 1:
        raise argparse.ArgumentTypeError(f"a rank is between 0 and 2147483647, got {text!r}")
    return value


def _text(entry: dict[str, Any]) -> str:
    text = entry.get("message")
    if not isinstance(text, str) or text == "":
        log_text = entry.get("log")
        text = log_text if isinstance(log_text, str) else ""
    return text if text.endswith("\n") else text + "\n"


def _order(entry: dict[str, Any]) -> int | None:
    try:
        return int(entry.get("id"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def print_trial_logs(session: Session, trial_id: int, *, follow: bool = False, head: int | None = None,
                     tail: int | None = None, ranks: list[int] | None = None, out: TextIO | None = None) -> None:
    """``ranks``: only the lines of these workers (the master's ``rankIds`` filter)."""
    out = out or sys.stdout
    path = f"/api/v1/trials/{trial_id}/logs"
    only: dict[str, object] = {"rankIds": list(ranks)} if ranks else {}
    if head is not None and tail is not None:
        raise CliError("--head and --tail cannot be used together")
    last_shown: int | None = None
    if tail is not None:
        if tail == 0 and not follow:
            return
        entries = list(session.stream_ndjson(path, {"follow": "false", "limit": tail,
                                                    "orderBy": "ORDER_BY_DESC", **only})) if tail else []
        entries.reverse()
        for entry in entries:
            out.write(_text(entry))
            order = _order(entry)
            if order is not None:
                last_shown = order if last_shown is None else max(last_shown, order)
        out.flush()
        if not follow:
            return
        if tail == 0:
            last_shown = None  # follow only new lines: skip everything present now (the newest line's id)
            for entry in session.stream_ndjson(path, {"follow": "false", "limit": 1, "orderBy": "ORDER_BY_DESC",
                                                      **only}):
                last_shown = _order(entry)
    params: dict[str, object] = {"follow": "true" if follow else "false", **only}
    if head is not None:
        if head == 0:
            return
        params["limit"] = head
    for entry in session.stream_ndjson(path, params):
        order = _order(entry)
        if last_shown is not None and order is not None and order <= last_shown:
            continue
        out.write(_text(entry))
        if follow:
            out.flush()
    out.flush()
