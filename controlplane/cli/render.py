"""Text rendering shared by the commands: tables, sparklines, times, sizes.

Tables look like Determined's (tabulate "presto": ` a | b` rows under a `---+---` rule, numbers
right-aligned) so people and their scripts that grep `^\\s*<id>\\s` keep working.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

BARS = "▁▂▃▄▅▆▇█"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "))
    return str(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Aligned columns; a column whose non-empty cells are all numbers is right-aligned."""
    cells = [[_cell(v) for v in row] for row in rows]
    ncols = len(headers)
    for row in cells:
        if len(row) != ncols:
            raise ValueError(f"row has {len(row)} cells, expected {ncols}: {row!r}")
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [bool(filled) and all(_is_number(c) for c in filled)
               for filled in ([r[i] for r in cells if r[i]] for i in range(ncols))]

    def line(values: Sequence[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=False)]
        return (" " + " | ".join(parts)).rstrip()

    out = [line(list(headers)), "+".join("-" * (w + 2) for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def sparkline(values: Iterable[Any]) -> str:
    """One bar per finite value, scaled between the min (▁) and the max (█); others are skipped."""
    nums = [v for v in (_finite(x) for x in values) if v is not None]
    if not nums:
        return ""
    lo, hi = min(nums), max(nums)
    if hi == lo:
        return BARS[0] * len(nums)
    top = len(BARS) - 1
    return "".join(BARS[round((v - lo) / (hi - lo) * top)] for v in nums)


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def format_time(value: Any) -> str:
    """RFC3339 from the master -> 'YYYY-MM-DD HH:MM:SS+0000' (UTC); empty when absent."""
    parsed = parse_time(value)
    if parsed is None:
        return "" if value is None else str(value)
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S%z")


def format_state(value: Any) -> str:
    """'STATE_ACTIVE' -> 'ACTIVE' (Determined prints enum names without the prefix)."""
    text = "" if value is None else str(value)
    return text[len("STATE_"):] if text.startswith("STATE_") else text


def format_progress(value: Any) -> str:
    num = _finite(value)
    return "" if num is None else f"{num * 100:.1f}%"


def format_size(num_bytes: float) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def format_metric(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)


def dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=False)
