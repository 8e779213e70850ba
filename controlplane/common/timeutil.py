"""Timestamps: always timezone-aware UTC; RFC3339 on the wire. Durations for people."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


def utcnow() -> datetime:
    return datetime.now(UTC)


def iso(dt: datetime | None) -> str | None:
    if dt is None:
        return None
    if dt.tzinfo is None:  # SQLite returns naive datetimes for timezone-aware columns
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@overload
def aware(dt: datetime) -> datetime: ...


@overload
def aware(dt: None) -> None: ...


def aware(dt: datetime | None) -> datetime | None:
    if dt is not None and dt.tzinfo is None:
        return dt.replace(tzinfo=UTC)
    return dt


def epoch(dt: datetime | None, default: float) -> float:
    """Seconds since the epoch (a naive datetime read as UTC); ``default`` for None (e.g. "now")."""
    moment = aware(dt)
    return moment.timestamp() if moment is not None else default


def short_duration(seconds: float) -> str:
    """A short human duration, as a config spells it: 45s, 10m, 1h5m."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s}s" if s else f"{m}m"
    h, m = divmod(m, 60)
    return f"{h}h{m}m" if m else f"{h}h"
