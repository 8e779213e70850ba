"""Block keys and the words for them, in one place.

Why per (zone, type) for capacity: EC2's InsufficientInstanceCapacity and GCE's stockouts are
about one type in one zone; blocking the whole zone would also stop types that have capacity
there. Quota is regional per type (and separate for spot on EC2), so it blocks the type.
"""

from __future__ import annotations

from collections.abc import Iterable

from controlplane.autoscaler.model import Blocked
from controlplane.common.timeutil import short_duration as duration


def zone_key(zone: str) -> str:
    return f"zone:{zone}"


def type_key(instance_type: str, spot: bool) -> str:
    return f"spot-type:{instance_type}" if spot else f"type:{instance_type}"


def capacity_key(zone: str, instance_type: str, spot: bool) -> str:
    return f"spot:{zone}:{instance_type}" if spot else f"zone:{zone}:{instance_type}"


def option_keys(zone: str, instance_type: str, spot: bool) -> tuple[str, str, str]:
    """Every key that rules out launching `instance_type` in `zone` (spot or on-demand)."""
    return zone_key(zone), type_key(instance_type, spot), capacity_key(zone, instance_type, spot)


def describe_key(key: str) -> str:
    """'spot:us-west-2a:g5.xlarge' -> 'spot g5.xlarge in zone us-west-2a', and so on."""
    kind, _, rest = key.partition(":")
    if kind == "type":
        return f"type {rest}"
    if kind == "spot-type":
        return f"spot type {rest}"
    zone, sep, itype = rest.partition(":")
    where = f"zone {zone}" if zone else "the default zone"
    if kind == "zone":
        return f"{itype} in {where}" if sep else where
    if kind == "spot":
        return f"spot {itype} in {where}"
    return key


def active(blocked: Iterable[Blocked], now: float) -> dict[str, Blocked]:
    """Blocks still in force, by key (the latest `until` wins when a key repeats)."""
    out: dict[str, Blocked] = {}
    for b in blocked:
        if b.until > now and (b.key not in out or b.until > out[b.key].until):
            out[b.key] = b
    return out


def until_text(until: float, now: float) -> str:
    """'until t=1300 (in 5m)': absolute on the caller's clock, plus the time left."""
    return f"until t={until:.0f} (in {duration(until - now)})"


def block_text(b: Blocked, now: float) -> str:
    return f"{describe_key(b.key)} blocked {until_text(b.until, now)} ({b.reason})"
