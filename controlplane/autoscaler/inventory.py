"""Sorting this tick's instances and agents into what the planner reasons about.

The cloud listing is the truth about what exists (and what is billed); agents are joined to
instances by id (agent id == instance id or name). An instance that is stopped or stopping, that
no agent joined within `max_agent_starting_period_s`, or that carries the cluster's tags without
a launch record (a leak) is reaped here, each with its reason. Launches the cloud does not list
yet (eventual consistency) still count, so nothing is launched twice and `max_instances` holds.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from controlplane.autoscaler.keys import duration
from controlplane.autoscaler.model import AgentView, InstanceView, PendingLaunch, PoolScaling, Terminate
from controlplane.state import instance as INSTANCE


@dataclass
class Inventory:
    existing: int = 0  # non-terminated listed instances (terminations issued this tick included)
    unlisted: int = 0  # in-flight launches the cloud does not list yet
    unlisted_types: list[str] = field(default_factory=list)  # their instance types, one per instance
    healthy: list[InstanceView] = field(default_factory=list)  # pending/running, kept this tick
    booting: list[InstanceView] = field(default_factory=list)  # healthy, no agent yet, in period
    idle: list[tuple[AgentView, InstanceView | None]] = field(default_factory=list)  # None: unmanaged
    reaped: list[Terminate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _in_flight(cfg: PoolScaling, instances: Sequence[InstanceView], in_flight: Sequence[PendingLaunch],
               now: float) -> tuple[list[str], set[str]]:
    listed = Counter(i.launch_request_id for i in instances if i.launch_request_id)
    live = [p for p in in_flight if now - p.requested_at < cfg.max_agent_starting_period_s]
    unlisted = [p.instance_type for p in live for _ in range(max(0, p.count - listed[p.launch_request_id]))]
    return unlisted, {p.launch_request_id for p in live if p.launch_request_id}


def classify(cfg: PoolScaling, instances: Sequence[InstanceView], agents: Sequence[AgentView],
             in_flight: Sequence[PendingLaunch], now: float) -> Inventory:
    inv = Inventory()
    inv.unlisted_types, live_requests = _in_flight(cfg, instances, in_flight, now)
    inv.unlisted = len(inv.unlisted_types)
    by_id = {a.agent_id: a for a in agents}
    listed_ids: set[str] = set()
    period = cfg.max_agent_starting_period_s
    for inst in instances:
        listed_ids.add(inst.instance_id)
        if inst.state == INSTANCE.TERMINATED:
            continue
        inv.existing += 1
        agent = by_id.get(inst.instance_id)
        iid = inst.instance_id
        if inst.state in (INSTANCE.STOPPING, INSTANCE.STOPPED):
            inv.reaped.append(Terminate(iid, f"instance {iid} is {inst.state}; terminating it so it stops "
                                             "holding disks and counting against max_instances"))
            continue
        known = inst.known or (inst.launch_request_id != "" and inst.launch_request_id in live_requests)
        if not known:
            if agent is not None and agent.idle_since is None:
                inv.notes.append(f"instance {iid} has no launch record but its agent is busy: kept "
                                 "(adopted) rather than killing running work")
            else:
                inv.reaped.append(Terminate(iid, f"instance {iid} is tagged for pool {cfg.pool!r} but has no "
                                                 "launch record (leaked); terminating"))
                continue
        if agent is None:
            seen = inst.last_agent_seen_at
            since = inst.launched_at if seen is None else max(inst.launched_at, seen)
            if now - since >= period:
                why = (f"never registered within {duration(period)} of launch" if seen is None
                       else f"agent gone for {duration(now - since)} (limit {duration(period)})")
                inv.reaped.append(Terminate(iid, f"instance {iid} {why}; terminating"))
                continue
            inv.booting.append(inst)
        elif agent.idle_since is not None:
            inv.idle.append((agent, inst))
        inv.healthy.append(inst)
    for a in agents:
        if a.agent_id not in listed_ids and a.idle_since is not None:
            inv.idle.append((a, None))  # a static agent, or one the listing lags behind: capacity only
    return inv
