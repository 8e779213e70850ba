"""One planning tick for one pool: reap, scale down, scale up, each with its reason.

Order matters and is chosen so that bounds hold under every interleaving:
1. reap (stopped, never-registered, leaked): always, whatever min_instances says, since these
   instances bill without serving; replacements are launched by the min/demand rules below;
2. pack the unplaceable demand onto idle agents (most recently idle first, so the longest idle
   stay free to be let go), booting instances and unlisted launches, then onto new instances of
   the shapes whose launch options are open, the cheapest per used slot (packing.py);
3. scale down idle agents past `max_idle_agent_period_s`, longest idle first, never one the
   demand was packed onto and never below `min_instances`; an agent consolidation drained goes
   as soon as it is empty;
4. scale up to max(demand, min_instances) within `max_instances`, counting every listed
   non-terminated instance, including the ones being terminated this tick (they are billed and
   listed until the cloud says otherwise), plus launches not listed yet; then the per-tick cap,
   the backoff and the blocks decide whether and where;
5. with no demand waiting, consolidate: drain underused instances whose trials fit elsewhere
   (consolidation.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.autoscaler.consolidation import consolidate
from controlplane.autoscaler.inventory import Inventory, classify
from controlplane.autoscaler.keys import active, duration, until_text
from controlplane.autoscaler.model import (
    AgentView,
    Blocked,
    Decision,
    Demand,
    InstanceView,
    Launch,
    LaunchFailure,
    PendingLaunch,
    PoolScaling,
    Terminate,
)
from controlplane.autoscaler.packing import Option, Packing, pack
from controlplane.autoscaler.targets import Target, choose, shape_groups

Targets = dict[int, tuple[Target | None, str]]  # slots -> where the next launch of that shape goes, or why nowhere


def plan(cfg: PoolScaling, demand: Demand, instances: Sequence[InstanceView], agents: Sequence[AgentView],
         blocked: Sequence[Blocked], failures: LaunchFailure, now: float, *,
         in_flight: Sequence[PendingLaunch] = ()) -> Decision:
    """Decide this tick's launches and terminations. Pure: same inputs, same decision.

    `in_flight`: launches issued but possibly not listed by the cloud yet. After a launch that
    succeeded, the caller passes it here on every later call (including a replan in the same
    tick) until its instances are listed; after a failed one it calls `on_launch_error` and
    plans again, and the next open zone/type comes back at once.
    """
    d = Decision()
    inv = classify(cfg, instances, agents, in_flight, now)
    d.actions.extend(inv.reaped)
    d.explanation.extend(t.reason for t in inv.reaped)
    d.explanation.extend(inv.notes)

    drained = [a for a, inst in inv.idle if a.consolidating and inst is not None]
    idle = sorted((ai for ai in inv.idle if not ai[0].consolidating),
                  key=lambda ai: -(ai[0].idle_since or 0.0))  # most recently idle first
    bins = ([0 if a.draining else a.slots for a, _ in idle] + [cfg.slots_of(b.instance_type) for b in inv.booting]
            + [cfg.slots_of(t) for t in inv.unlisted_types])
    targets = _targets(cfg, blocked, now)
    packing = _pack(cfg, demand, bins, targets, d)

    idle_terminated = _scale_down(cfg, inv, idle, packing, now, d)
    idle_terminated |= _let_drained_go(drained, d)
    _enforce_max(cfg, inv, idle, packing, idle_terminated, d)
    _scale_up(cfg, demand, inv, packing, idle_terminated, targets, failures, now, d)
    if not any(g > 0 for g in demand.gangs) and not inv.booting and not inv.unlisted:
        kept = len(inv.healthy) - len(idle_terminated)
        _consolidate(cfg, agents, instances, kept, targets, failures, now, d)
    return d


def _consolidate(cfg: PoolScaling, agents: Sequence[AgentView], instances: Sequence[InstanceView], kept: int,
                 targets: Targets, failures: LaunchFailure, now: float, d: Decision) -> None:
    """Drain what consolidation chose; launch the cheap shapes its cheaper-shape drains wait for."""
    done = consolidate(cfg, agents, instances, kept, now, _options(cfg, targets, open_only=True))
    d.actions.extend(done.drains)
    d.explanation.extend(x.reason for x in done.drains)
    if not done.launches or failures.next_attempt_at > now:
        return
    why = "; ".join(done.launch_reasons)
    for itype, n in done.launches.items():
        target = targets[cfg.slots_of(itype)][0]
        if target is None or target.instance_type != itype:
            continue  # blocked since, or another type of that shape is first now: next tick decides again
        reason = f"launch {n} × {itype} ({'spot' if target.spot else 'on-demand'}) in " \
                 f"{f'zone {target.zone}' if target.zone else 'the default zone'}: {why}"
        d.actions.append(Launch(n, itype, target.zone, target.spot, reason))
        d.explanation.append(reason)


def _targets(cfg: PoolScaling, blocked: Sequence[Blocked], now: float) -> Targets:
    live = active(blocked, now)
    return {slots: choose(cfg, live, now, types) for slots, types in shape_groups(cfg).items()}


def _options(cfg: PoolScaling, targets: Targets, open_only: bool) -> list[Option]:
    out = []
    for slots, (target, _) in targets.items():
        if target is None and open_only:
            continue
        itype = target.instance_type if target is not None else shape_groups(cfg)[slots][0]
        out.append(Option(itype, slots, cfg.price_of(itype, target.spot if target else cfg.spot)))
    return out


def _pack(cfg: PoolScaling, demand: Demand, bins: list[int], targets: Targets, d: Decision) -> Packing:
    """Pack onto the shapes that can be launched now; a gang only a blocked shape holds is packed
    onto that shape (so the blocks are named when it is not launched), never called unfittable."""
    every = pack(demand.gangs, bins, _options(cfg, targets, open_only=False), best_fit=cfg.mixed)
    _explain_unfittable(cfg, every, d)
    open_options = _options(cfg, targets, open_only=True)
    if not open_options or len(open_options) == len(targets):
        return every
    packing = pack(demand.gangs, bins, open_options, best_fit=cfg.mixed)
    stuck = {n: c - every.unfittable.get(n, 0) for n, c in packing.unfittable.items()}
    if any(c > 0 for c in stuck.values()):  # only a blocked shape holds them: launch that (it names its block)
        return every
    return packing


def _explain_unfittable(cfg: PoolScaling, packing: Packing, d: Decision) -> None:
    sizes = sorted({s.slots for s in cfg.shapes})
    for n, count in sorted(packing.unfittable.items()):
        if len(sizes) == 1:
            S = sizes[0]
            rule = f"instances have {S} slots, so a gang must be at most {S} or a multiple of {S}"
        else:
            rule = (f"its shapes have {', '.join(map(str, sizes))} slots, so a gang must be at most {sizes[-1]} "
                    "or a multiple of one of them")
        d.explanation.append(
            f"{count} pending gang{'s' if count > 1 else ''} of {n} slots can never fit pool {cfg.pool!r}: "
            f"{rule}; not scaling for it (the submit check should refuse it)")


def _let_drained_go(drained: list[AgentView], d: Decision) -> set[str]:
    """An agent consolidation drained is terminated as soon as its last trial has left."""
    done = set()
    for a in drained:
        reason = f"agent {a.agent_id} drained by consolidation and now empty; terminating"
        d.actions.append(Terminate(a.agent_id, reason))
        d.explanation.append(reason)
        done.add(a.agent_id)
    return done


def _scale_down(cfg: PoolScaling, inv: Inventory, idle: list[tuple[AgentView, InstanceView | None]],
                packing: Packing, now: float, d: Decision) -> set[str]:
    period = cfg.max_idle_agent_period_s
    expired = [(i, a, inst) for i, (a, inst) in enumerate(idle)
               if inst is not None and a.idle_since is not None and now - a.idle_since >= period]
    expired.sort(key=lambda x: x[1].idle_since or 0.0)  # longest idle first
    spare = len(inv.healthy) - cfg.min_instances
    done: set[str] = set()
    for i, a, _ in expired:
        idle_for = duration(now - (a.idle_since or now))
        if packing.used[i]:
            d.explanation.append(f"idle agent {a.agent_id} kept: pending demand needs its {a.slots} slots")
        elif spare <= 0:
            d.explanation.append(f"idle agent {a.agent_id} kept: min_instances {cfg.min_instances}")
        else:
            spare -= 1
            done.add(a.agent_id)
            reason = (f"agent {a.agent_id} idle for {idle_for} (max_idle_agent_period "
                      f"{duration(period)}); terminating")
            d.actions.append(Terminate(a.agent_id, reason))
            d.explanation.append(reason)
    return done


def _enforce_max(cfg: PoolScaling, inv: Inventory, idle: list[tuple[AgentView, InstanceView | None]],
                 packing: Packing, idle_terminated: set[str], d: Decision) -> None:
    """Over max_instances (max lowered, or instances adopted): let idle then booting ones go."""
    kept = len(inv.healthy) - len(idle_terminated) + inv.unlisted
    over = kept - cfg.max_instances
    if over <= 0:
        return
    # idle is most recently idle first, so reversed is longest idle first; demand-needed ones stay
    victims = [a.agent_id for i, (a, inst) in reversed(list(enumerate(idle)))
               if inst is not None and a.agent_id not in idle_terminated and not packing.used[i]]
    victims += [b.instance_id for b in sorted(inv.booting, key=lambda b: -b.launched_at)]  # newest first
    for iid in victims[:over]:
        reason = f"instance {iid} terminated: {kept} instances exceed max_instances {cfg.max_instances}"
        d.actions.append(Terminate(iid, reason))
        d.explanation.append(reason)
        idle_terminated.add(iid)
    if over > len(victims):
        d.explanation.append(f"{kept} instances exceed max_instances {cfg.max_instances}; the rest are busy "
                             "and are left to finish their work")


def _scale_up(cfg: PoolScaling, demand: Demand, inv: Inventory, packing: Packing, idle_terminated: set[str],
              targets: Targets, failures: LaunchFailure, now: float, d: Decision) -> None:
    kept = len(inv.healthy) - len(idle_terminated) + inv.unlisted
    to_min = max(0, cfg.min_instances - kept)
    need = packing.new_instances
    want = max(need, to_min)
    if want == 0:
        d.explanation.append(_why_no_demand(demand, inv, packing))
        return
    why = _why_launch(cfg, demand, inv, packing, need, to_min)
    total = inv.existing + inv.unlisted
    room = max(0, cfg.max_instances - total)
    if room == 0:
        d.explanation.append(f"not launching: max_instances {cfg.max_instances} reached ({total} instances exist "
                             f"or are launching); {why}")
        return
    count = min(want, room, cfg.launch_limit)
    if count < want:
        limit = ("max_launch_per_tick " + str(cfg.launch_limit) if cfg.launch_limit < min(want, room)
                 else f"max_instances {cfg.max_instances} ({total} exist or are launching)")
        d.explanation.append(f"launching {count} of the {want} wanted: capped by {limit}")
    if failures.next_attempt_at > now:
        d.explanation.append(
            f"not launching: backing off after {failures.consecutive_failures} launch error"
            f"{'s' if failures.consecutive_failures != 1 else ''} {until_text(failures.next_attempt_at, now)}; "
            f"last error: {failures.last_error}; {why}")
        return
    wanted = dict(packing.new_by_type)
    if to_min > need:  # min_instances: the cheapest open shape (the first shape when every one is blocked)
        first = min(_options(cfg, targets, open_only=True) or _options(cfg, targets, open_only=False),
                    key=lambda o: (o.usd_per_hour, o.slots))
        wanted[first.instance_type] = wanted.get(first.instance_type, 0) + to_min - need
    for itype, n in wanted.items():
        n = min(n, count)
        count -= n
        if n <= 0:
            continue
        target, blocked_why = targets[cfg.slots_of(itype)]
        if target is None:
            d.explanation.append(f"{blocked_why}; {why}")
            continue
        kind = "spot" if target.spot else "on-demand"
        where = f"zone {target.zone}" if target.zone else "the default zone"
        reason = f"launch {n} × {target.instance_type} ({kind}) in {where}: {why}"
        if target.note:
            reason += f"; {target.note}"
        d.actions.append(Launch(n, target.instance_type, target.zone, target.spot, reason))
        d.explanation.append(reason)


def _why_launch(cfg: PoolScaling, demand: Demand, inv: Inventory, packing: Packing, need: int, to_min: int) -> str:
    parts = []
    if need:
        gangs = [g for g in demand.gangs if g > 0 and g not in packing.unfittable]
        parts.append(f"{len(gangs)} pending gang{'s' if len(gangs) != 1 else ''} ({sum(gangs)} slots) need "
                     f"{need} new instance{'s' if need != 1 else ''}{_absorbed(inv, packing)}")
    if to_min and to_min >= need:
        parts.append(f"min_instances {cfg.min_instances} needs {to_min} more")
    return "; ".join(parts)


def _absorbed(inv: Inventory, packing: Packing) -> str:
    if not packing.placed_on_existing:
        return ""
    return (f" beyond the spare capacity already there ({len(inv.idle)} idle agents, {len(inv.booting)} booting "
            f"instances, {inv.unlisted} launches not listed yet)")


def _why_no_demand(demand: Demand, inv: Inventory, packing: Packing) -> str:
    gangs = [g for g in demand.gangs if g > 0]
    if not gangs:
        return "not scaling up: no pending demand that needs new instances"
    if packing.unfittable and not packing.placed_on_existing:
        return "not scaling up: the only pending gangs can never fit this pool"
    return (f"not scaling up: {len(gangs)} pending gang{'s' if len(gangs) != 1 else ''} fit on capacity already "
            f"there or coming ({len(inv.idle)} idle agents, {len(inv.booting)} booting instances, "
            f"{inv.unlisted} launches not listed yet)")
