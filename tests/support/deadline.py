"""The running test's own deadline (its pytest timeout), so that a wait inside the test ends first,
with its own message, instead of being cut off by pytest-timeout mid-wait.

tests/conftest.py starts the clock as each test starts; ``bounded(timeout)`` is what a helper
passes on as its timeout.
"""

from __future__ import annotations

import time

import pytest

# What a test needs after its last wait gives up: reading logs, the teardown's first steps.
MARGIN_S = 20.0
# A wait is never given less than this, even at the very end of a test (a teardown's `down`).
FLOOR_S = 30.0

_deadline: float | None = None


def start(item: pytest.Item) -> None:
    global _deadline
    marker = item.get_closest_marker("timeout")
    limit = marker.args[0] if marker is not None and marker.args else item.config.getini("timeout")
    _deadline = time.monotonic() + float(limit) if limit else None


def bounded(timeout: float) -> float:
    """``timeout``, or less where the test's own deadline comes sooner."""
    if _deadline is None:
        return timeout
    return max(FLOOR_S, min(timeout, _deadline - time.monotonic() - MARGIN_S))
