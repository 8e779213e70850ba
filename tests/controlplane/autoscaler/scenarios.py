"""Builders for autoscaler planner scenarios: a fake `now`, terse instances and agents."""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.autoscaler.model import (
    AgentView,
    Blocked,
    Decision,
    Demand,
    InstanceView,
    LaunchFailure,
    PendingLaunch,
    PoolScaling,
)
from controlplane.autoscaler.planner import plan

NOW = 100_000.0
MIN = 60.0


def pool(**kw: object) -> PoolScaling:
    base: dict[str, object] = dict(pool="gpu", instance_types=("g5.xlarge",), zones=("us-west-2a", "us-west-2b"),
                                   slots_per_instance=4, min_instances=0, max_instances=8,
                                   max_idle_agent_period_s=10 * MIN, max_agent_starting_period_s=10 * MIN)
    base.update(kw)
    return PoolScaling(**base)  # type: ignore[arg-type]


def inst(iid: str, state: str = "running", age: float = 30 * MIN, known: bool = True, zone: str = "us-west-2a",
         req: str = "", seen_ago: float | None = None) -> InstanceView:
    return InstanceView(iid, state, NOW - age, zone, "g5.xlarge", False, req, known,  # type: ignore[arg-type]
                        None if seen_ago is None else NOW - seen_ago)


def idle(aid: str, for_s: float, slots: int = 4) -> AgentView:
    return AgentView(aid, NOW - for_s, slots)


def busy(aid: str, slots: int = 4) -> AgentView:
    return AgentView(aid, None, slots)


def run(cfg: PoolScaling, gangs: Sequence[int] = (), instances: Sequence[InstanceView] = (),
        agents: Sequence[AgentView] = (), blocked: Sequence[Blocked] = (),
        failures: LaunchFailure = LaunchFailure(), now: float = NOW,
        in_flight: Sequence[PendingLaunch] = ()) -> Decision:
    return plan(cfg, Demand(tuple(gangs)), instances, agents, blocked, failures, now, in_flight=in_flight)


def launched(d: Decision) -> int:
    return sum(launch.count for launch in d.launches)


def terminated(d: Decision) -> list[str]:
    return [t.instance_id for t in d.terminations]


def said(d: Decision, *words: str) -> bool:
    """Some explanation sentence contains every one of `words`."""
    return any(all(w in e for w in words) for e in d.explanation)
