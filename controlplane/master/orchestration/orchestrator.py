"""The reconciler: applies searcher actions and scheduler plans, reacts to agent events.

Every change runs under one lock and one DB transaction, so two events never interleave
half-way. Messages to agents are sent only after the transaction that justifies them commits
(a crash in between leaves an ASSIGNED allocation the next tick or the agent's reconnect
settles). The loop ticks on demand (``wake()``) and at least every half second.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import timedelta

from sqlalchemy import and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware, short_duration, utcnow
from controlplane.config.experiment import preemption_timeout_s
from controlplane.master.agent_hub import AgentConnection
from controlplane.master.background import BackgroundLoop
from controlplane.master.db.batches import in_batches
from controlplane.master.db.models import Agent, Allocation, Experiment, TaskLog, Trial, User
from controlplane.master.orchestration import (
    gang,
    lifecycle,
    live_index,
    orphans,
    pai_jobs,
    progress,
    rendezvous,
    searcher_runtime,
    snapshot,
    spread_network,
    trial_exits,
)
from controlplane.master.orchestration.dispatch import environment_on, gang_start_messages, start_message
from controlplane.master.orchestration.transitions import move
from controlplane.master.orchestration.waiting import WaitingReasons
from controlplane.master.runtime_core import RuntimeCore
from controlplane.scheduler import planner
from controlplane.searchers.base import Action as SearcherAction
from controlplane.searchers.base import Create, Searcher, Shutdown, Stop
from controlplane.state import allocation as A
from controlplane.state import experiment as E
from controlplane.state import trial as T
from controlplane.wire import agent_protocol as wire

log = logging.getLogger("controlplane.orchestrator")

TICK_S = 0.5
# After a master restart, agents may be in their longest reconnect backoff (the agent caps it
# at 10 s): their reconnect window starts this much later.
RESTART_GRACE_S = 10.0
# While the database is unavailable the tick is retried with a growing wait, at most this.
OUTAGE_BACKOFF_MAX_S = 5.0
# A task killed for ignoring its preemption that is still running this much later is killed again.
KILL_RESEND_S = 30.0


def _refuse_unless(exp: Experiment, to_state: str, verb: str, rule: str) -> None:
    """A user's pause/activate of an experiment in a state that does not allow it: 409 naming the state.
    An ended experiment is never paused or activated (only continued or deleted)."""
    if E.EXPERIMENT.is_terminal(exp.state) or not E.EXPERIMENT.allowed(exp.state, to_state):
        from controlplane.master.errors import Conflict

        raise Conflict(f"state: experiment {exp.id} is {exp.state} and cannot be {verb}; only {rule}")


class Orchestrator:
    def __init__(self, rt: RuntimeCore, on_unplaced: Callable[[], None] = lambda: None) -> None:
        self.rt = rt
        # new work no agent can take: the autoscaler plans now (wired by app.build_runtime)
        self.on_unplaced = on_unplaced
        self.lock = asyncio.Lock()
        # Ticks every TICK_S or when woken; while the database is unreachable, up to OUTAGE_BACKOFF_MAX_S apart.
        self._loop = BackgroundLoop("orchestrator tick", self.tick, log=log, interval_s=TICK_S, health=rt.db_health,
                                    backoff_max_s=OUTAGE_BACKOFF_MAX_S)
        self._outgoing: list[tuple[str, wire.MasterMessage]] = []
        self._wakeups: list[object] = []  # notifier keys, woken once the transaction has committed
        self._logged: list[int] = []  # trials the transaction wrote log lines of (their followers read them)
        self._committed: list[Callable[[], None]] = []  # bookkeeping true only once the transaction commits
        self._unplaced: set[str] = set()  # pending allocations the last pass could not place
        self.waiting = WaitingReasons()  # why each pending request waits, as the last pass saw it
        self.live = live_index.LiveIndex()  # which allocations may be live on each agent

    # ---- loop -------------------------------------------------------------------------------

    async def start(self) -> None:
        async with self.rt.sessions.begin() as session:
            # After a master restart no agent is connected yet: each gets the reconnect window
            # (and is listed, disconnected, until it ends).
            now = self.rt.hub.clock() + RESTART_GRACE_S
            for agent in (await session.scalars(select(Agent).where(Agent.connected.is_(True)))).all():
                agent.connected = False
                self.rt.hub.away_since.setdefault(agent.id, now)
            for agent_id in await self.live.rebuild(session):
                self.rt.hub.away_since.setdefault(agent_id, now)
        self._loop.start()

    async def stop(self) -> None:
        self.rt.hub.close_inboxes()
        await self._loop.stop()

    def wake(self) -> None:
        self._loop.wake()

    async def tick(self) -> None:
        async with self.transaction() as session:
            await self._reap_lost_agents(session)
            await self._reap_orphans(session)
            await self._enforce_preemption_timeouts(session)
            await pai_jobs.reap_idle(self, session)
            await self._schedule(session)

    # ---- transactions and outgoing messages -------------------------------------------------

    def send_after_commit(self, agent_id: str, msg: wire.MasterMessage) -> None:
        self._outgoing.append((agent_id, msg))

    def _notify_after_commit(self, key: object) -> None:
        # A long-poll woken before the commit reads the old row, then waits again for a wake-up
        # that has already happened: a trial would miss its preemption for a whole poll (60 s).
        self._wakeups.append(key)

    def after_commit(self, step: Callable[[], None]) -> None:
        """Memory that must follow the database (a connection's orphans checked): changed only if
        the transaction commits, so a rolled-back tick leaves it to be done again."""
        self._committed.append(step)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncSession]:
        """The lock and one write transaction; what it queued for agents, long-polls and log
        followers goes out, and its ``after_commit`` steps run, only once it has committed.
        ``async with`` on the lock: a cancellation anywhere inside (waiting for the database's write
        turn included) releases it."""
        async with self.lock:
            self._outgoing, self._wakeups, self._logged, self._committed = [], [], [], []
            try:
                async with self.rt.sessions.begin() as session:
                    yield session
                self.rt.db_health.succeeded()  # committed: the database is back if it was gone
                for step in self._committed:
                    step()
                for agent_id, msg in self._outgoing:
                    self.rt.hub.send(agent_id, msg)
                for key in self._wakeups:
                    self.rt.notifier.notify(key)
                for trial_id in self._logged:
                    self.rt.streams.logged(trial_id)
                    self.rt.notifier.notify(("trial-logs", trial_id))
            finally:
                self._outgoing, self._wakeups, self._logged, self._committed = [], [], [], []

    # ---- experiments ------------------------------------------------------------------------

    async def begin_experiment(self, session: AsyncSession, exp: Experiment) -> None:
        """Called inside the create transaction: the searcher's first trials are created with it."""
        searcher = searcher_runtime.load(exp)
        await self._apply_actions(session, exp, searcher, searcher.initial_actions())

    async def pause(self, exp_id: int) -> None:
        async with self.transaction() as session:
            exp = await self._experiment(session, exp_id)
            if exp.state == E.PAUSED:
                return
            _refuse_unless(exp, E.PAUSED, "paused", "an active experiment can be paused")
            move(session, exp, E.PAUSED, "paused by a user")
            for trial in await self._open_trials(session, exp.id):
                await self._pause_trial(session, trial)
        self.wake()

    async def activate(self, exp_id: int) -> None:
        async with self.transaction() as session:
            exp = await self._experiment(session, exp_id)
            if exp.state == E.ACTIVE:
                return
            _refuse_unless(exp, E.ACTIVE, "activated", "a paused experiment can be activated")
            move(session, exp, E.ACTIVE, "activated by a user")
            if not searcher_runtime.started(exp):
                await self.begin_experiment(session, exp)
            for trial in await self._open_trials(session, exp.id):
                if trial.state != T.PAUSED:
                    continue
                alloc = await lifecycle.live_allocation(session, trial.id)
                if alloc is None:
                    move(session, trial, T.QUEUED, "experiment activated")
                    lifecycle.queue_allocation(session, exp, trial, "resumed after pause")
                else:
                    # Its process still winds down from the pause (checkpoint, then exit): the trial
                    # is active again, as Determined shows it, not PAUSED until that process ends;
                    # the preemption asked for stands, and its exit requeues it from its checkpoint.
                    started = alloc.state == A.RUNNING
                    move(session, trial, T.RUNNING if started else T.QUEUED,
                         "experiment activated; its process is still stopping after the pause"
                         if started else "experiment activated")
        self.wake()

    async def kill(self, exp_id: int) -> None:
        async with self.transaction() as session:
            exp = await self._experiment(session, exp_id)
            if E.EXPERIMENT.is_terminal(exp.state) or exp.state == E.STOPPING_KILLED:
                return
            move(session, exp, E.STOPPING_KILLED, "killed by a user")
            for trial in await self._open_trials(session, exp.id):
                await self._kill_trial(session, trial, "killed by a user")
            await self._maybe_finish(session, exp)
        self.wake()

    async def cancel(self, exp_id: int) -> None:
        """``det e cancel``, as Determined does it: the experiment stops gracefully (STOPPING_CANCELED,
        then CANCELED). A trial that never ran is canceled now; a running one is preempted as a
        pause does (it checkpoints at its next boundary and exits), then ends CANCELED. An experiment
        already ending (or ended) is left to end as it does."""
        async with self.transaction() as session:
            exp = await self._experiment(session, exp_id)
            if exp.state not in (E.ACTIVE, E.PAUSED):
                return
            move(session, exp, E.STOPPING_CANCELED, "canceled by a user")
            for trial in await self._open_trials(session, exp.id):
                await self._cancel_trial(session, trial, "its experiment was canceled by a user")
            await self._maybe_finish(session, exp)
        self.wake()

    # ---- agent events -----------------------------------------------------------------------

    async def agent_registered(self, conn: AgentConnection, reg: wire.Register) -> wire.Registered:
        kill: list[str] = []
        async with self.transaction() as session:
            now = utcnow()
            agent = await session.get(Agent, reg.agent_id)
            if agent is None:
                agent = Agent(id=reg.agent_id, registered_at=now)
                session.add(agent)
            agent.registered_at = now  # Determined's registeredTime: this connection's, not the first
            agent.resource_pool = reg.pool
            agent.slots = [{"id": s.id, "type": s.type, "brand": s.brand, "uuid": s.uuid} for s in reg.slots]
            agent.addresses = list(reg.addresses)
            agent.version = reg.version
            agent.connected = True
            agent.last_seen = now
            for alloc_id in reg.running:
                alloc = await session.get(Allocation, alloc_id)
                if alloc is None or alloc.state == A.TERMINATED or reg.agent_id not in gang.agents_of(alloc):
                    kill.append(alloc_id)
                else:
                    gang.mark_started(alloc, reg.agent_id)
                    if alloc.state == A.ASSIGNED:
                        await self._mark_started(session, alloc, "running on the agent (seen at reconnect)")
            self._attach(conn)
        log.info("agent %s registered: pool %s, %d slot(s), %d running", reg.agent_id, reg.pool,
                 len(reg.slots), len(reg.running))
        self.wake()
        return wire.Registered(cluster_id=self.rt.cluster_id, kill=kill,
                               reconnect_wait_s=self.rt.settings.agent_reconnect_wait_s)

    def _attach(self, conn: AgentConnection) -> None:
        old = self.rt.hub.attach(conn)
        if old is not None and old is not conn:
            old.outbox.put_nowait(None)  # stop the stale writer

    def agent_attached(self, conn: AgentConnection, reg: wire.Register) -> wire.Registered:
        """A registration answered from memory while the database is unavailable: the agent keeps
        its tasks and hears from this master; ``agent_registered`` records it (and says what to
        kill) once the database is back."""
        self._attach(conn)
        log.info("agent %s reconnected while the database is unavailable: %d running, recorded later",
                 reg.agent_id, len(reg.running))
        return wire.Registered(cluster_id=self.rt.cluster_id, kill=[],
                               reconnect_wait_s=self.rt.settings.agent_reconnect_wait_s)

    async def agent_disconnected(self, conn: AgentConnection) -> None:
        if self.agent_detached(conn):
            await self.agent_disconnect_recorded(conn)

    def agent_detached(self, conn: AgentConnection) -> bool:
        """The connection ended; False when a newer one of the agent replaced it. Its window starts now."""
        if not self.rt.hub.detach(conn):
            return False
        log.warning("agent %s disconnected; it has %.0fs to come back", conn.agent_id,
                    self.rt.settings.agent_reconnect_wait_s)
        return True

    async def agent_disconnect_recorded(self, conn: AgentConnection) -> None:
        async with self.transaction() as session:
            agent = await session.get(Agent, conn.agent_id)
            if agent is not None and conn.agent_id not in self.rt.hub.connections:
                agent.connected = False
                agent.last_seen = utcnow()

    async def task_started(self, agent_id: str, msg: wire.TaskStarted) -> None:
        async with self.transaction() as session:
            alloc = await session.get(Allocation, msg.allocation_id)
            if alloc is None or alloc.state == A.TERMINATED or not gang.mark_started(alloc, agent_id):
                return
            if alloc.state == A.ASSIGNED:
                await self._mark_started(session, alloc, f"process {msg.pid} started on {agent_id}")

    async def task_exited(self, agent_id: str, msg: wire.TaskExited) -> None:
        async with self.transaction() as session:
            alloc = await session.get(Allocation, msg.allocation_id)
            if (alloc is None or alloc.state == A.TERMINATED
                    or not gang.mark_exited(alloc, agent_id, msg.exit_code, msg.reason, msg.setup_failed)):
                return  # a repeat (sent again after a reconnect) or a stale allocation
            if not gang.all_exited(alloc):
                if msg.exit_code != 0:  # one rank failed: the gang stops together
                    why = f" ({msg.reason})" if msg.reason else ""
                    self.kill_allocation(alloc, f"rank on {agent_id} exited {msg.exit_code}{why}")
                return
            await self._allocation_ended(session, alloc, gang.gang_exit_code(alloc),
                                         gang.gang_exit_reason(alloc) or msg.reason, agent_lost=False,
                                         setup_failed=gang.gang_setup_failed(alloc))
        self.wake()

    async def agent_interrupted(self, agent_id: str, reason: str) -> None:
        """Spot/preemptible notice: no new work here, and every trial on it checkpoints now."""
        async with self.transaction() as session:
            agent = await session.get(Agent, agent_id)
            if agent is not None:
                agent.draining = True
            for alloc in await self._live_allocations_on(session, agent_id):
                self.request_preemption(alloc, f"{agent_id}: {reason}")
        log.warning("agent %s is being taken back by its cloud (%s): preempting its trials", agent_id, reason)
        self.wake()

    async def drain_agent(self, agent_id: str, preempt: Mapping[str, str],
                          record: Callable[[AsyncSession, list[Allocation]], None]) -> list[Allocation]:
        """Consolidation empties ``agent_id``: it takes no new work, and each named allocation
        (id -> reason) checkpoints and exits the way pause does, then is re-queued from its
        checkpoint (a preemption, never a failure). ``record`` writes why in the same transaction
        (rows and the trials' log lines), given the allocations preempted. The caller's picture may
        be stale, so nothing happens (an empty list) unless every live allocation on the agent is
        named and is a trial running there alone that is RUNNING or QUEUED (anything else: new work
        placed since, a trial being stopped or paused)."""
        async with self.transaction() as session:
            live = await self._live_allocations_on(session, agent_id)
            moved: list[Allocation] = []
            for alloc in live:
                trial = await session.get(Trial, alloc.trial_id) if alloc.trial_id is not None else None
                if (alloc.id not in preempt or trial is None or trial.state not in (T.RUNNING, T.QUEUED)
                        or set(gang.agents_of(alloc)) != {agent_id}):
                    return []
                moved.append(alloc)
            agent = await session.get(Agent, agent_id)
            if not moved or agent is None:
                return []
            agent.draining = True
            record(session, moved)
            for alloc in moved:
                self.request_preemption(alloc, preempt[alloc.id])
                if alloc.trial_id is not None:  # record wrote its log line: followers read it after the commit
                    self._logged.append(alloc.trial_id)
        log.info("agent %s drained by consolidation: preempting %s", agent_id, ", ".join(a.id for a in moved))
        self.wake()
        return moved

    async def instance_gone(self, agent_id: str, reason: str) -> None:
        """The cloud says the agent's machine no longer exists: nothing can reconnect, so its
        work is re-queued now instead of after `agent_reconnect_wait`."""
        if agent_id in self.rt.hub.connections:
            return  # still talking to us: the listing lags; the agent's own exit will tell
        async with self.transaction() as session:
            self.rt.hub.away_since.pop(agent_id, None)
            allocs = await self._live_allocations_on(session, agent_id)
            for alloc in allocs:
                await self._allocation_lost(session, alloc, f"agent {agent_id} lost: {reason}")
        if allocs:
            log.warning("instance %s is gone (%s): re-queued %d allocation(s)", agent_id, reason, len(allocs))
            self.wake()

    async def validation_reported(self, trial_id: int, metric: float, steps_completed: int) -> None:
        async with self.transaction() as session:
            trial = await session.get(Trial, trial_id)
            if trial is None:
                return
            exp = await session.get(Experiment, trial.experiment_id)
            assert exp is not None  # a trial's experiment row outlives it (foreign key)
            if E.EXPERIMENT.is_terminal(exp.state) or exp.state in (E.STOPPING_KILLED, E.STOPPING_CANCELED):
                return  # stopping: the searcher creates and stops no more trials
            searcher = searcher_runtime.load(exp)
            await self._apply_actions(session, exp, searcher,
                                      searcher.on_validation(trial.request_id, metric, steps_completed))

    # ---- internals --------------------------------------------------------------------------

    async def _experiment(self, session: AsyncSession, exp_id: int) -> Experiment:
        exp = await session.get(Experiment, exp_id, with_for_update=not self._sqlite)
        if exp is None:
            from controlplane.master.errors import NotFound

            raise NotFound(f"experiment {exp_id} not found")
        return exp

    @property
    def _sqlite(self) -> bool:
        return self.rt.engine.dialect.name == "sqlite"

    async def _open_trials(self, session: AsyncSession, exp_id: int) -> list[Trial]:
        terminal = tuple(T.TRIAL.terminal)
        return list((await session.scalars(
            select(Trial).where(Trial.experiment_id == exp_id, Trial.state.not_in(terminal)).order_by(Trial.id)
        )).all())

    async def _mark_started(self, session: AsyncSession, alloc: Allocation, reason: str) -> None:
        move(session, alloc, A.RUNNING, reason)
        alloc.started_at = utcnow()
        trial = await session.get(Trial, alloc.trial_id) if alloc.trial_id is not None else None
        if trial is not None and trial.state == T.QUEUED:
            move(session, trial, T.RUNNING, "its allocation started")

    async def _apply_actions(self, session: AsyncSession, exp: Experiment, searcher: Searcher,
                             actions: Iterable[SearcherAction]) -> None:
        shutdown = failure = cancel = None
        for action in actions:
            if isinstance(action, Create):
                await lifecycle.create_trial(session, exp, action)
            elif isinstance(action, Stop):
                trial = await session.scalar(select(Trial).where(
                    Trial.experiment_id == exp.id, Trial.request_id == action.request_id))
                if trial is not None and not T.TRIAL.is_terminal(trial.state):
                    await self._stop_trial(session, trial)
            elif isinstance(action, Shutdown):
                shutdown, failure, cancel = True, action.failure, action.cancel
        searcher_runtime.save(exp, searcher, shutdown=shutdown, failure=failure, cancel=cancel)
        exp.progress = await progress.of_searcher(session, exp, searcher)

    async def _pause_trial(self, session: AsyncSession, trial: Trial) -> None:
        alloc = await lifecycle.live_allocation(session, trial.id)
        if trial.state == T.QUEUED:
            move(session, trial, T.PAUSED, "experiment paused")
            if alloc is not None and alloc.state == A.PENDING:
                lifecycle.end_allocation(session, self.rt.tokens, alloc, "experiment paused before it was placed")
            elif alloc is not None:
                self.request_preemption(alloc, "experiment paused")
        elif trial.state == T.RUNNING:
            move(session, trial, T.PAUSED, "experiment paused")
            if alloc is not None:
                self.request_preemption(alloc, "experiment paused")

    async def _stop_trial(self, session: AsyncSession, trial: Trial) -> None:
        alloc = await lifecycle.live_allocation(session, trial.id)
        if trial.state == T.QUEUED and alloc is not None and alloc.state == A.ASSIGNED:
            # Placed, and its process already reported (the searcher stops a trial on its own
            # validation) before the agent's TaskStarted was handled: it runs, so stop it as running.
            await self._mark_started(session, alloc, "its process reported before its start was seen")
        if trial.state in (T.QUEUED, T.PAUSED) and (alloc is None or alloc.state == A.PENDING):
            if alloc is not None:
                lifecycle.end_allocation(session, self.rt.tokens, alloc, "stopped by the searcher before it ran")
            lifecycle.finish_trial(session, trial, T.CANCELED, "stopped by the searcher before it ran")
        elif trial.state == T.RUNNING:
            move(session, trial, T.STOPPING_COMPLETED, "stopped early by the searcher")
            if alloc is not None:
                self.request_preemption(alloc, "stopped early by the searcher")

    async def _cancel_trial(self, session: AsyncSession, trial: Trial, reason: str) -> None:
        alloc = await lifecycle.live_allocation(session, trial.id)
        if alloc is None or alloc.state == A.PENDING:
            if trial.state in (T.QUEUED, T.PAUSED):  # it never ran, or its paused process is gone
                if alloc is not None:
                    lifecycle.end_allocation(session, self.rt.tokens, alloc, reason)
                lifecycle.finish_trial(session, trial, T.CANCELED, reason)
            return
        if trial.state in (T.QUEUED, T.RUNNING, T.PAUSED):
            move(session, trial, T.STOPPING_CANCELED, reason)
            self.request_preemption(alloc, reason)
        # STOPPING_COMPLETED: the searcher stopped it already (it ends COMPLETED at its boundary);
        # STOPPING_KILLED: its process is being killed.

    async def _kill_trial(self, session: AsyncSession, trial: Trial, reason: str) -> None:
        alloc = await lifecycle.live_allocation(session, trial.id)
        if alloc is None or alloc.state == A.PENDING:
            if alloc is not None:
                lifecycle.end_allocation(session, self.rt.tokens, alloc, reason)
            lifecycle.finish_trial(session, trial, T.CANCELED, reason)
            return
        move(session, trial, T.STOPPING_KILLED, reason)
        self.kill_allocation(alloc, reason)

    def kill_allocation(self, alloc: Allocation, reason: str) -> None:
        for agent_id in gang.live_agents(alloc):
            self.send_after_commit(agent_id, wire.KillTask(alloc.id, self.rt.settings.kill_grace_s))
        log.info("killing %s: %s", alloc.id, reason)

    def request_preemption(self, alloc: Allocation, reason: str) -> None:
        """Its task is asked to checkpoint and exit; it is killed if it has not exited by the
        deadline: now + its experiment's `preemption_timeout`, else its pool's, else the master's."""
        if not alloc.preempt_requested:
            now = utcnow()
            timeout = self.rt.settings.preemption_timeout_for(alloc.resource_pool, alloc.preemption_timeout_s)
            alloc.preempt_requested = True
            alloc.preempt_requested_at = now
            alloc.preempt_deadline = now + timedelta(seconds=timeout)
            alloc.preempt_reason = reason
            log.info("preempting %s: %s (killed if it has not exited within %s)", alloc.id, reason,
                     short_duration(timeout))
        self._notify_after_commit(("preempt", alloc.id))

    async def _allocation_ended(self, session: AsyncSession, alloc: Allocation, exit_code: int | None,
                                reason: str, *, agent_lost: bool, setup_failed: bool = False) -> None:
        lifecycle.end_allocation(session, self.rt.tokens, alloc, reason or ("agent lost" if agent_lost else "exited"),
                                 exit_code)
        self.after_commit(functools.partial(self.live.drop, (alloc.id,), self.live.adds))
        self._notify_after_commit(("preempt", alloc.id))
        if alloc.pai_job_id is not None:
            await pai_jobs.task_ended(self, session, alloc)
            return
        trial = await session.get(Trial, alloc.trial_id)
        if trial is None:
            return
        exp = await session.get(Experiment, trial.experiment_id)
        assert exp is not None  # a trial's experiment row outlives it (foreign key)
        end = trial_exits.AllocationEnd(exit_code, reason, alloc.agent_id, agent_lost=agent_lost,
                                        setup_failed=setup_failed, preempt_acked=bool(alloc.preempt_acked),
                                        killed_for_preemption=bool(alloc.killed_for_preemption))
        decision = trial_exits.decide(trial.state, exp.state == E.ACTIVE, end, trial.restarts,
                                      int(exp.config.get("max_restarts", 5)))
        outcome: str | None = None
        if isinstance(decision, trial_exits.Finish):
            if decision.ran and trial.state == T.QUEUED:
                move(session, trial, T.RUNNING, "its allocation ran")
            lifecycle.finish_trial(session, trial, decision.state, decision.why)
            outcome = decision.outcome
        elif isinstance(decision, trial_exits.Requeue):
            if decision.restart:
                trial.restarts += 1
            if trial.state != T.QUEUED:
                move(session, trial, T.QUEUED, decision.why)
            lifecycle.queue_allocation(session, exp, trial, decision.queue_reason)
        if (outcome is not None and exp.state not in (E.STOPPING_KILLED, E.STOPPING_CANCELED)
                and not E.EXPERIMENT.is_terminal(exp.state)):
            searcher = searcher_runtime.load(exp)
            await self._apply_actions(session, exp, searcher, searcher.on_trial_exited(trial.request_id, outcome))
        await self._maybe_finish(session, exp)

    async def _maybe_finish(self, session: AsyncSession, exp: Experiment) -> None:
        if E.EXPERIMENT.is_terminal(exp.state):
            return
        if await self._open_trials(session, exp.id):
            if exp.state == E.ACTIVE and searcher_runtime.is_shut_down(exp):
                move(session, exp, E.STOPPING_COMPLETED, "the searcher is done; the last trials are finishing")
            return
        if exp.state == E.STOPPING_KILLED or (exp.state == E.PAUSED and not searcher_runtime.started(exp)):
            final, why = E.CANCELED, "every trial has stopped after a kill"
        elif exp.state == E.STOPPING_CANCELED:
            final, why = E.CANCELED, "every trial has checkpointed and stopped after a cancel"
        elif exp.state == E.STOPPING_ERROR:
            final, why = E.ERROR, "every trial has stopped"
        elif searcher_runtime.is_shut_down(exp) and exp.state in (E.ACTIVE, E.STOPPING_COMPLETED):
            if searcher_runtime.shut_down_with_failure(exp):
                final, why = E.ERROR, "no trial completed"
            elif searcher_runtime.shut_down_canceled(exp):
                final, why = E.CANCELED, "every trial was canceled by a user"
            else:
                final, why = E.COMPLETED, "the searcher is done and every trial has finished"
        else:
            return
        move(session, exp, final, why)
        exp.end_time = utcnow()
        if final == E.COMPLETED:
            exp.progress = 1.0

    async def _reap_lost_agents(self, session: AsyncSession) -> None:
        wait = self.rt.settings.agent_reconnect_wait_s
        lost = self.rt.hub.lost(wait)
        exiting = self.rt.hub.pending_exits() if lost else set()  # their exits wait in an inbox: they ended
        for agent_id in lost:
            del self.rt.hub.away_since[agent_id]
            allocs = [a for a in await self._live_allocations_on(session, agent_id) if a.id not in exiting]
            if allocs:
                log.warning("agent %s stayed away past %.0fs: re-queueing %d allocation(s)",
                            agent_id, wait, len(allocs))
            for alloc in allocs:
                await self._allocation_lost(session, alloc, f"agent {agent_id} lost")

    async def _reap_orphans(self, session: AsyncSession) -> None:
        """Allocations an agent should run but did not list when it re-registered (orphans.py):
        each registration is checked once, the agents due read in one query."""
        # Both clocks read together: a wall time taken later (after the awaits below, which wait
        # for the database under load) would move the registration later and make work assigned
        # just after it look like work the agent forgot.
        now, wall_now = time.monotonic(), utcnow()
        due = orphans.due(self.rt.hub.connections.values(), now)
        if not due:
            return
        exiting = self.rt.hub.pending_exits()  # reported exits the database has not taken yet
        agents = {c.agent_id for c in due}
        ids = self.live.ids_on(agents)
        ranks = await orphans.live_ranks(session, agents, ids) if ids else {}
        for conn in due:
            registered_wall = wall_now - timedelta(seconds=now - conn.registered_at)
            lost, settled = orphans.forgotten(conn, ranks.get(conn.agent_id, ()), registered_wall, exiting)
            for alloc_id in lost:
                alloc = await session.get(Allocation, alloc_id)
                if alloc is not None and alloc.state in orphans.LIVE:  # not a gang lost with another agent
                    await self._allocation_lost(session, alloc, f"agent {conn.agent_id} restarted without it")
            if settled:
                self.after_commit(functools.partial(orphans.mark_checked, conn))

    async def _live_allocations_on(self, session: AsyncSession, agent_id: str) -> list[Allocation]:
        """Read by the ids the live index names for the agent; those no longer live are dropped
        from it once this transaction commits."""
        ids, seen_at = self.live.ids_on((agent_id,)), self.live.adds
        allocs: list[Allocation] = []
        for batch in in_batches(ids):
            allocs += (await session.scalars(select(Allocation).where(
                Allocation.id.in_(batch), Allocation.state.in_(live_index.LIVE)))).all()
        gone = set(ids) - {a.id for a in allocs}
        if gone:
            self.after_commit(functools.partial(self.live.drop, gone, seen_at))
        return [a for a in allocs if agent_id in gang.agents_of(a)]

    async def _allocation_lost(self, session: AsyncSession, alloc: Allocation, reason: str) -> None:
        """An agent of the gang is gone: stop the other ranks and re-queue without a restart."""
        self.kill_allocation(alloc, reason)
        await self._allocation_ended(session, alloc, None, reason, agent_lost=True)

    async def _enforce_preemption_timeouts(self, session: AsyncSession) -> None:
        """Kills what has not exited by its preemption deadline, and says so in the trial's logs."""
        now = utcnow()
        master_timeout = self.rt.settings.preemption_timeout_s
        allocs = (await session.scalars(select(Allocation).where(
            Allocation.preempt_requested.is_(True), Allocation.state.in_((A.ASSIGNED, A.RUNNING)),
            or_(Allocation.preempt_deadline < now,
                # asked before deadlines were stored (an older master): the master's timeout
                and_(Allocation.preempt_deadline.is_(None),
                     Allocation.preempt_requested_at < now - timedelta(seconds=master_timeout)))))).all()
        for alloc in allocs:
            first = not alloc.killed_for_preemption
            asked, deadline = aware(alloc.preempt_requested_at), aware(alloc.preempt_deadline)
            timeout = (deadline - asked).total_seconds() if deadline is not None and asked is not None \
                else master_timeout
            alloc.preempt_deadline = now + timedelta(seconds=KILL_RESEND_S)  # not again every tick
            alloc.killed_for_preemption = True
            self.kill_allocation(alloc, "preemption timeout")
            if not first:
                continue
            why = alloc.preempt_reason or "preempted"
            log.warning("allocation %s did not exit within %s of its preemption (%s): killing it", alloc.id,
                        short_duration(timeout), why)
            if alloc.trial_id is not None:
                session.add(TaskLog(
                    task_id=alloc.task_id, trial_id=alloc.trial_id, allocation_id=alloc.id,
                    agent_id=alloc.agent_id or "", stdtype="stdout", level="LOG_LEVEL_WARNING", source="master",
                    timestamp=now, log=f"[master] killed: it did not checkpoint and exit within the preemption "
                                       f"timeout ({short_duration(timeout)}) after it was asked to ({why})\n"))
                self._logged.append(alloc.trial_id)

    def _wake_autoscaler_for_new_demand(self, unplaced: set[str]) -> None:
        """Work that could not be placed and was not there at the last pass: the autoscaler
        plans now rather than at its next tick, so a launch waits on nothing but the boot."""
        fresh = unplaced - self._unplaced
        self._unplaced = unplaced
        if fresh:
            self.on_unplaced()

    async def _schedule(self, session: AsyncSession) -> None:
        snap = await snapshot.take(session, self.rt)
        if not snap.pending:
            self.waiting.clear()
            return
        plan = planner.plan(snap.pools, snap.pending, snap.running, snap.agents, time.time())
        reasons = dict(plan.waiting)
        self._wake_autoscaler_for_new_demand(snap.pending_ids - {p.allocation_id for p in plan.placements})
        acted = await snapshot.rows(session, {p.allocation_id for p in plan.preemptions} | {
            p.allocation_id for p in plan.placements if p.allocation_id not in snap.pending_groups})
        for preemption in plan.preemptions:
            alloc = acted.get(preemption.allocation_id)
            if alloc is not None and alloc.state in live_index.LIVE:
                self.request_preemption(alloc, preemption.reason)
        addresses = {c.agent_id: c.address for c in self.rt.hub.connections.values()}
        endpoints = {c.agent_id: c.overlay_endpoint for c in self.rt.hub.connections.values()}
        used_ports = snap.used_ports() if plan.placements else {}
        for placement in plan.placements:
            if placement.allocation_id in snap.pending_groups:
                job, tasks = snap.pending_groups[placement.allocation_id]
                why = await pai_jobs.place(self, session, job, tasks, placement.resources, addresses, used_ports,
                                           endpoints)
                if why is not None:
                    reasons[placement.allocation_id] = why
                continue
            alloc = acted[placement.allocation_id]
            trial = await session.get(Trial, alloc.trial_id)
            assert trial is not None  # a pending allocation's trial and experiment rows exist (foreign keys)
            exp = await session.get(Experiment, trial.experiment_id)
            assert exp is not None
            alloc.preemption_timeout_s = preemption_timeout_s(exp.config)  # its own, when it has one
            owner = await session.scalar(select(User.username).where(User.id == exp.owner_id))
            latest = await lifecycle.latest_checkpoint(session, trial)
            gang.assign(alloc, placement.resources)
            self.live.placed(alloc)
            alloc.assigned_at = utcnow()
            token = lifecycle.mint_token(alloc)
            where = ", ".join(f"{agent} slots {list(slots)}" for agent, slots in placement.resources)
            move(session, alloc, A.ASSIGNED, f"placed on {where}")
            agents = [agent for agent, _ in placement.resources]
            rendezvous.assign(alloc, [addresses.get(agent, rendezvous.DEFAULT_ADDRESS) for agent in agents], used_ports)
            network = rendezvous.join_network(alloc, spread_network.plan(agents, endpoints))
            base = functools.partial(start_message, exp, trial, alloc, owner or "determined", self.rt.cluster_id,
                                     latest, token, self.rt.settings.kill_grace_s)
            environment_of = functools.partial(environment_on, snapshot.experiment_image(exp), self.rt.hub.connections)
            for agent_id, msg in gang_start_messages(base, alloc, network, environment_of):
                self.send_after_commit(agent_id, msg)
        self.waiting.update(reasons, {r.allocation_id: r.job_id for r in snap.pending})
