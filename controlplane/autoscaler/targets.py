"""Choosing where the next launch goes: instance types × zones in order, skipping blocks.

Types are the outer loop because they are the admin's preference (price, speed); zones of one
type are interchangeable, so a capacity error in one zone moves to the next zone of the same
type before a costlier type is tried. With spot, every spot option is tried first; with
`spot_fallback_to_on_demand` the on-demand options follow only when every spot option is
blocked, and the launch's reason says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from controlplane.autoscaler.keys import block_text, option_keys
from controlplane.autoscaler.model import Blocked, PoolScaling


@dataclass(frozen=True)
class Target:
    instance_type: str
    zone: str
    spot: bool
    note: str  # why this option (failover, fallback); "" when it is the first choice


def _options(cfg: PoolScaling, spot: bool, types: tuple[str, ...]) -> list[tuple[str, str, bool]]:
    zones = cfg.zones or ("",)
    return [(t, z, spot) for t in types for z in zones]


def _first_open(options: list[tuple[str, str, bool]], active: dict[str, Blocked]
                ) -> tuple[tuple[str, str, bool] | None, list[Blocked]]:
    """The first option with no active block, and the blocks that ruled out those before it."""
    seen: dict[str, Blocked] = {}
    for t, z, spot in options:
        hits = [active[k] for k in option_keys(z, t, spot) if k in active]
        if not hits:
            return (t, z, spot), list(seen.values())
        for b in hits:
            seen.setdefault(b.key, b)
    return None, list(seen.values())


def choose(cfg: PoolScaling, active: dict[str, Blocked], now: float,
           types: tuple[str, ...] | None = None) -> tuple[Target | None, str]:
    """The launch target among `types` (default: every type of the pool, in order), or None and a
    sentence naming every block in the way."""
    types = cfg.instance_types if types is None else types
    first_spot = cfg.spot
    opt, skipped = _first_open(_options(cfg, first_spot, types), active)
    if opt is not None:
        note = "" if not skipped else "skipping " + "; ".join(block_text(b, now) for b in skipped)
        return Target(opt[0], opt[1], opt[2], note), ""
    if first_spot and cfg.spot_fallback_to_on_demand:
        od, od_skipped = _first_open(_options(cfg, False, types), active)
        spot_why = "; ".join(block_text(b, now) for b in skipped)
        if od is not None:
            note = f"falling back to on-demand: every spot option is blocked ({spot_why})"
            if od_skipped:
                note += "; skipping " + "; ".join(block_text(b, now) for b in od_skipped)
            return Target(od[0], od[1], od[2], note), ""
        skipped = skipped + [b for b in od_skipped if b not in skipped]
    what = ("spot and on-demand" if first_spot and cfg.spot_fallback_to_on_demand
            else ("spot" if first_spot else "on-demand"))
    return None, (f"not launching: every {what} zone/type option is blocked: "
                  + "; ".join(block_text(b, now) for b in skipped))


def shape_groups(cfg: PoolScaling) -> dict[int, tuple[str, ...]]:
    """The pool's types by slot count, smallest first: types of one slot count are alternatives
    for one agent shape, tried in the admin's order (failover), as a single-shape pool's are."""
    groups: dict[int, list[str]] = {}
    for s in cfg.shapes:
        groups.setdefault(s.slots, []).append(s.instance_type)
    return {slots: tuple(ts) for slots, ts in sorted(groups.items())}
