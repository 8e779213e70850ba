"""Folding a launch's outcome back into the blocks and the backoff.

Capacity and quota errors say something about one option (a zone/type, a type), so they block
that option for `launch_cooldown_s` and leave the backoff alone: the reconciler calls `plan()`
again in the same tick and the next option is tried at once. Other errors (transient, invalid
config, fatal) say nothing about which option would work, so they back off exponentially
(10 s doubling, capped at 10 min) instead of retrying every tick forever (determined#1802).
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.autoscaler.keys import capacity_key, type_key
from controlplane.autoscaler.model import Blocked, ErrorKind, LaunchFailure, PoolScaling

BACKOFF_BASE_S = 10.0
BACKOFF_CAP_S = 600.0

_KIND_WORDS: dict[str, str] = {
    "no_capacity": "no capacity",
    "quota": "quota",
    "transient": "transient error",
    "invalid_config": "invalid config",
    "fatal": "fatal error",
}


def backoff_delay(consecutive_failures: int) -> float:
    """Seconds to wait after the n-th consecutive failure: 10, 20, 40, ... capped at 600."""
    if consecutive_failures <= 0:
        return 0.0
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2.0 ** min(consecutive_failures - 1, 30))


def on_launch_error(
    cfg: PoolScaling,
    error_kind: ErrorKind,
    zone: str,
    instance_type: str,
    spot: bool,
    message: str,
    blocked: Sequence[Blocked],
    failures: LaunchFailure,
    now: float,
) -> tuple[list[Blocked], LaunchFailure]:
    """The new block list (expired blocks dropped) and failure history after a failed launch."""
    kept = [b for b in blocked if b.until > now]
    words = _KIND_WORDS.get(error_kind, error_kind)
    if error_kind in ("no_capacity", "quota"):
        key = capacity_key(zone, instance_type, spot) if error_kind == "no_capacity" else type_key(instance_type, spot)
        kept = [b for b in kept if b.key != key]
        kept.append(Blocked(key, now + cfg.launch_cooldown_s, f"{words}: {message}"))
        return kept, failures
    n = failures.consecutive_failures + 1
    return kept, LaunchFailure(n, f"{words}: {message}", now + backoff_delay(n))


def on_launch_success(failures: LaunchFailure) -> LaunchFailure:
    """A launch went through: the error streak is over."""
    return LaunchFailure() if failures.consecutive_failures or failures.next_attempt_at else failures
