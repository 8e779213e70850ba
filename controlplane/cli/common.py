"""Helpers every command group shares: the session for the parsed globals, paging, printing.

Kept apart from main.py so command modules do not import the parser (and the parser does not
import requests-heavy modules before it needs them).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterator
from typing import Any

from controlplane.cli import master_url
from controlplane.cli.errors import CliError
from controlplane.cli.session import Session
from controlplane.config.stored import searcher_of

TERMINAL_EXPERIMENT_STATES = {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED"}
NONFINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def session_for(args: argparse.Namespace) -> Session:
    """One Session per command run, for the master and user given by the global flags."""
    existing = getattr(args, "_session", None)
    if existing is not None:
        return existing
    session = Session(master_url.resolve(getattr(args, "master", None)), getattr(args, "user", None))
    args._session = session
    return session


def paged(session: Session, path: str, key: str, params: dict[str, Any] | None = None,
          page_size: int = 200) -> Iterator[dict[str, Any]]:
    """Follow Determined-style `pagination` (offset = endIndex until endIndex >= total)."""
    offset = 0
    while True:
        body = session.get(path, {**(params or {}), "offset": offset, "limit": page_size})
        items = body.get(key) or []
        yield from items
        page = body.get("pagination") or {}
        end, total = page.get("endIndex"), page.get("total")
        if not items or not isinstance(end, int) or not isinstance(total, int) or end >= total or end <= offset:
            return
        offset = end


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2) + "\n")


def positive_id(text: str) -> int:
    """argparse type for experiment/trial ids, so `det e describe abc` is a usage error."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a numeric id, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive id, got {text!r}")
    return value


def metric_value(value: Any) -> Any:
    """The master sends non-finite floats as "NaN"/"Infinity"/"-Infinity" strings."""
    if isinstance(value, str) and value in NONFINITE:
        return NONFINITE[value]
    return value


def avg_metrics(report: dict[str, Any]) -> dict[str, Any]:
    """A metrics row's values: `metrics` may be the values or {"avgMetrics": values}."""
    inner = report.get("metrics") or {}
    if isinstance(inner, dict) and isinstance(inner.get("avgMetrics"), dict):
        inner = inner["avgMetrics"]
    return inner if isinstance(inner, dict) else {}


def searcher_metric(config: Any) -> tuple[str, bool]:
    searcher = searcher_of(config)
    return searcher.metric, searcher.smaller_is_better


def parse_priority(text: Any, what: str = "priority") -> int:
    """A scheduling priority as the CLI accepts it: an integer from 1 (highest) to 99."""
    try:
        value = int(str(text).strip())
    except ValueError:
        value = None
    if value is None or not 1 <= value <= 99:
        raise CliError(f"{what} must be an integer from 1 to 99, got {text!r}")
    return value


def parse_weight(text: Any, what: str = "weight") -> float:
    """A fair-share weight: a finite number > 0."""
    try:
        value = float(str(text).strip())
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value <= 0:
        raise CliError(f"{what} must be a number > 0, got {text!r}")
    return value


def format_number(value: Any) -> str:
    """2.0 -> '2', 0.5 -> '0.5' (weights are floats on the wire)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "" if value is None else str(value)
