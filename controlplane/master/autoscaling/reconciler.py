"""One pool's reconciler: list instances by tag, plan, launch and terminate, record it all.

Each tick reads the cloud (the truth for what exists), the scheduler's pending gangs and the
agents, asks the pure planner what to do, and does it. A capacity or quota error blocks that
option and the planner is asked again in the same tick, so the next zone or type is tried at
once. Launches are recorded before the cloud is called and waited for from those rows, so a
restart forgets none (``launches.py``). Every decision and every reason not to scale is kept for
`det resource-pool describe`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.autoscaler import (
    AgentView,
    Blocked,
    Decision,
    Demand,
    InstanceView,
    LaunchFailure,
    PendingLaunch,
    PoolScaling,
    TaskView,
    on_launch_error,
    on_launch_success,
    plan,
)
from controlplane.autoscaler.keys import duration
from controlplane.autoscaler.model import ErrorKind
from controlplane.common.timeutil import utcnow
from controlplane.master.autoscaling import consolidation, launches
from controlplane.master.autoscaling.consolidation import DrainAgent
from controlplane.master.db.models import Instance, StateTransition
from controlplane.master.orchestration import gang
from controlplane.master.runtime_core import RuntimeCore
from controlplane.state import allocation as A
from controlplane.state import instance as INSTANCE
from controlplane.state.instance import InstanceState
from provisioners.base import LaunchRequest, Provisioner, ProvisionerError

log = logging.getLogger("controlplane.autoscaler")
MAX_REPLANS = 6  # failovers tried within one tick
ERROR_KINDS: dict[str, ErrorKind] = {"no_capacity": "no_capacity", "quota_exceeded": "quota", "transient": "transient",
               "invalid_config": "invalid_config", "fatal": "fatal"}


@dataclass
class PoolAutoscaler:
    rt: RuntimeCore
    scaling: PoolScaling
    provisioner: Provisioner
    provider: str
    boot_script: Callable[[str], str]  # pool -> the instance's user data / startup script
    # an instance that vanished: its agent's work is re-queued now (the orchestrator's instance_gone)
    on_instance_gone: Callable[[str, str], Awaitable[None]]
    drain_agent: DrainAgent | None = None  # consolidation drains through it (the orchestrator's drain_agent)
    blocked: list[Blocked] = field(default_factory=list)
    failures: LaunchFailure = field(default_factory=LaunchFailure)
    in_flight: list[PendingLaunch] = field(default_factory=list)  # this tick's: the requested rows, plus its own
    idle_since: dict[str, float] = field(default_factory=dict)
    agent_seen_at: dict[str, float] = field(default_factory=dict)  # last tick its agent was connected
    first_tick_at: float | None = None
    last_decision: Decision | None = None
    last_errors: list[str] = field(default_factory=list)
    last_tick_at: float = 0.0

    @property
    def pool(self) -> str:
        return self.scaling.pool

    async def tick(self, now: float | None = None) -> Decision:
        now = time.time() if now is None else now
        self.first_tick_at = now if self.first_tick_at is None else self.first_tick_at
        try:
            listed = await asyncio.to_thread(self.provisioner.list_instances, self.rt.cluster_id, self.pool)
        except ProvisionerError as e:  # without the cloud's truth nothing is decided this tick
            log.warning("pool %s: listing instances failed: %s", self.pool, e)
            self.last_errors, self.last_tick_at = [f"listing instances failed: {e}"], now
            return Decision(explanation=[f"not acting this tick: listing instances failed: {e}"])
        listed_ids = {i.instance_id for i in listed}
        async with self.rt.sessions.begin() as session:
            rows = {r.id: r for r in (await session.scalars(select(Instance).where(
                Instance.pool == self.pool, Instance.state != INSTANCE.TERMINATED))).all()}
            await launches.adopt(session, rows, listed)
            for row in rows.values():
                if row.registered_at is None and row.id in self.rt.hub.connections:
                    row.registered_at = utcnow()
                    self._move(session, row, row.state, f"agent {row.id} registered")
            for inst in listed:
                row = rows.get(inst.instance_id)
                if row is not None and row.state != inst.state:
                    self._move(session, row, inst.state, "seen in the cloud")
            vanished = self._record_vanished(session, rows, listed_ids, now)
            # from the database, not memory: a restarted master waits for what it asked for
            self.in_flight = launches.in_flight(list(rows.values()), listed,
                                                self.scaling.max_agent_starting_period_s, now)
        for iid, reason in vanished:  # before reading demand, so their re-queued work counts now
            self.idle_since.pop(iid, None)
            self.agent_seen_at.pop(iid, None)
            await self.on_instance_gone(iid, reason)
        # Demand and busy agents come from ONE statement: PostgreSQL (read committed) gives each
        # statement its own snapshot, so two queries could see an allocation both pending and,
        # placed by the orchestrator in between, busy on its agent: counted twice, it would make
        # the planner launch an instance nobody needs.
        # The same statement gives what consolidation needs of each trial (consolidation.py).
        conns = [c for c in self.rt.hub.connections.values() if c.pool == self.pool]
        async with self.rt.sessions() as session:
            live = await consolidation.live_allocations(session, self.pool)
            flags = await consolidation.agent_flags(session, [c.agent_id for c in conns])
        gangs = tuple(r.alloc.slots_needed for r in live if r.alloc.state == A.PENDING)
        used, tasks = consolidation.work_on_agents(live, now, time.time())
        busy = {agent_id for r in live if r.alloc.state != A.PENDING for agent_id in gang.agents_of(r.alloc)}
        agents = []
        for conn in conns:
            if conn.agent_id in busy:
                self.idle_since.pop(conn.agent_id, None)
            else:
                self.idle_since.setdefault(conn.agent_id, now)
            flag = flags.get(conn.agent_id) or consolidation.AgentFlags(False, False, frozenset())
            taken = used.get(conn.agent_id, set())
            free = sum(1 for s in conn.slots if s.id not in taken and str(s.id) not in flag.disabled_slots)
            agents.append(AgentView(conn.agent_id, self.idle_since.get(conn.agent_id), len(conn.slots), free=free,
                                    draining=flag.draining, consolidating=flag.consolidating,
                                    tasks=tuple(tasks.get(conn.agent_id, ()))))
            self.agent_seen_at[conn.agent_id] = now
        views = [InstanceView(i.instance_id, cast(InstanceState, i.state), i.launched_at, i.zone, i.instance_type,
                              i.spot, i.tags.get("det-launch-request", ""), known=i.instance_id in rows,
                              last_agent_seen_at=self._agent_seen(rows.get(i.instance_id)))
                 for i in listed]
        demand = Demand(tuple(g for g in gangs if g > 0))
        terminated: set[str] = set()
        errors: list[str] = []
        for _ in range(MAX_REPLANS):
            decision = plan(self.scaling, demand, views, agents, self.blocked, self.failures, now,
                            in_flight=self.in_flight)
            for t in decision.terminations:
                if t.instance_id not in terminated:
                    await self._terminate(t.instance_id, t.reason)
                    terminated.add(t.instance_id)
            views = [v for v in views if v.instance_id not in terminated]
            if not await self._launch_all(decision, now, errors):
                break  # nothing failed: the decision stands
        await self._drain_all(decision, tasks)
        self.last_decision, self.last_errors, self.last_tick_at = decision, errors, now
        return decision

    async def _drain_all(self, decision: Decision, tasks: dict[str, list[TaskView]]) -> None:
        """Consolidation's drains: each instance's trials checkpoint and move (consolidation.py)."""
        if not decision.drains:
            return
        if self.drain_agent is None:
            decision.explanation.append("not draining: no orchestrator is wired to this autoscaler")
            return
        moves_before = {t.task_id: t.moves for ts in tasks.values() for t in ts}
        for drain in decision.drains:
            moved = await consolidation.act(self.pool, drain, self.drain_agent,
                                            self.scaling.consolidation.max_moves_per_trial, moves_before)
            if moved:
                log.info("pool %s: draining %s, moving %s: %s", self.pool, drain.instance_id, ", ".join(moved),
                         drain.reason)
            else:
                decision.explanation.append(f"not draining {drain.instance_id} after all: its work changed since "
                                            "this tick read it")

    def _agent_seen(self, row: Instance | None) -> float | None:
        """When the instance's agent was last connected, so that a dropped connection gets
        `max_agent_starting_period` to come back instead of being taken for an agent that never
        came. After a master restart a registered instance counts as seen at the first tick."""
        if row is None:
            return None
        seen = self.agent_seen_at.get(row.id)
        if seen is None and row.registered_at is not None:
            seen = self.first_tick_at
        return seen

    def _record_vanished(self, session: AsyncSession, rows: dict[str, Instance], listed_ids: set[str],
                         now: float) -> list[tuple[str, str]]:
        """Rows the cloud no longer lists, other than launches it may not list yet, are gone:
        a spot reclaim, a console termination. Their bill stops now and the reason says why. A
        launch not listed within `max_agent_starting_period` is given up (launches.py)."""
        grace = self.scaling.max_agent_starting_period_s
        out = []
        for row in rows.values():
            if row.id in listed_ids:
                continue
            if row.state != INSTANCE.REQUESTED:
                reason = (f"instance {row.id} is gone from the cloud without the master terminating it "
                          "(spot reclaim, or terminated outside the master)")
            elif now - launches.requested_at(row, now) < grace:
                continue  # in flight: the cloud may not list it yet
            else:
                reason = (f"instance {row.id} of launch {row.launch_request_id} was never listed by the cloud "
                          f"within {duration(grace)} of the request; given up")
            launches.close(session, row, reason)
            if not launches.is_placeholder(row.id):  # a placeholder never had an agent
                out.append((row.id, reason))
            log.warning("pool %s: %s", self.pool, reason)
        return out

    async def _launch_all(self, decision: Decision, now: float, errors: list[str]) -> bool:
        """Returns True when a launch failed and the planner should be asked again. Each launch's
        rows are committed before the cloud is called (launches.py)."""
        for launch in decision.launches:
            req = LaunchRequest(request_id=uuid.uuid4().hex[:12], cluster_id=self.rt.cluster_id, pool=self.pool,
                                count=launch.count, instance_type=launch.instance_type, zone=launch.zone or None,
                                spot=launch.spot, user_data=self.boot_script(self.pool))
            price = self.scaling.price_of(launch.instance_type, launch.spot)
            async with self.rt.sessions.begin() as session:
                launches.record_request(session, req, self.provider, price, launch.reason, now)
            try:
                instances = await asyncio.to_thread(self.provisioner.launch, req)
            except ProvisionerError as e:
                kind = ERROR_KINDS.get(e.kind, "transient")
                log.warning("pool %s: launch of %d %s in %s failed: %s", self.pool, launch.count,
                            launch.instance_type, launch.zone or "the default zone", e)
                errors.append(str(e))
                async with self.rt.sessions.begin() as session:
                    await launches.record_failed(session, req.request_id)
                self.blocked, self.failures = on_launch_error(
                    self.scaling, kind, launch.zone, launch.instance_type, launch.spot, e.provider_message,
                    self.blocked, self.failures, now)
                return True
            self.failures = on_launch_success(self.failures)
            self.in_flight.append(PendingLaunch(req.request_id, launch.count, now, launch.instance_type,
                                                launch.zone, launch.spot))
            async with self.rt.sessions.begin() as session:
                await launches.record_launched(session, req, instances, self.provider, price, launch.reason)
            log.info("pool %s: launched %s (%s)", self.pool, ", ".join(i.instance_id for i in instances),
                     launch.reason)
        return False

    async def _terminate(self, instance_id: str, reason: str) -> None:
        try:
            await asyncio.to_thread(self.provisioner.terminate, [instance_id])
        except ProvisionerError as e:
            log.warning("pool %s: terminating %s failed: %s", self.pool, instance_id, e)
            return
        async with self.rt.sessions.begin() as session:
            row = await session.get(Instance, instance_id)
            if row is None:  # a leak: record it so the bill shows it
                row = Instance(id=instance_id, pool=self.pool, provider=self.provider, state=INSTANCE.RUNNING,
                               launched_at=utcnow(), reason="found by its tags, unknown to the master")
                session.add(row)
            launches.close(session, row, reason)
        self.idle_since.pop(instance_id, None)
        self.agent_seen_at.pop(instance_id, None)
        log.info("pool %s: terminated %s: %s", self.pool, instance_id, reason)

    @staticmethod
    def _move(session: AsyncSession, row: Instance, state: str, reason: str) -> None:
        session.add(StateTransition(entity="instance", entity_id=row.id, from_state=row.state, to_state=state,
                                    reason=reason, at=utcnow()))
        row.state = state
