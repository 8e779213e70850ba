"""Consolidation on the master: an underused instance is drained (its trials checkpoint and move
to other instances' free slots, each move stored with its reason and written to the trial's
logs), then terminated once empty; work that cannot resume elsewhere, or a trial moved enough
already, stays put; describe, the CLI and the cluster page show the moves and what they saved."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from controlplane.autoscaler import Consolidation
from controlplane.common.timeutil import utcnow
from controlplane.config.errors import ConfigError
from controlplane.master.autoscaling.consolidation import LiveRow, work_on_agents
from controlplane.master.autoscaling.service import scaling_of
from controlplane.master.db.models import Agent, Allocation, ConsolidationMove, Instance, TaskLog, Trial
from controlplane.master.pools import PoolConfig
from controlplane.scheduler.model import PoolPolicy
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.autoscaling.conftest import FakePool
from tests.controlplane.master.conftest import CONFIG, create_experiment
from tests.controlplane.master.test_trial_lifecycle import report_checkpoint
from tests.controlplane.master.test_users_api import bearer, login

ONE = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}
PROVIDER = {"slots_per_instance": 2, "max_instances": 3, "min_instances": 2, "max_idle_agent_period": "1h"}


def task_headers(token: str) -> dict:
    return {"Grpc-Metadata-x-allocation-token": f"Bearer {token}", "Authorization": ""}


async def set_draining(p: FakePool, agent_id: str, draining: bool) -> None:
    async with p.rt.sessions.begin() as s:
        await s.execute(update(Agent).where(Agent.id == agent_id).values(draining=draining))


async def two_half_used_instances(p: FakePool) -> tuple[str, str, dict[str, wire.StartTask]]:
    """Two 2-slot instances, each running one 1-slot trial that has run for 4 h (past the
    3 h `min_runtime`); min_instances
    back at 0 so one of them may go. Returns (instance a, instance b, each one's StartTask)."""
    await p.tick()
    a, b = p.live()
    starts = {}
    for iid, other in ((a, b), (b, a)):
        agent = await p.boot(iid)
        if other in p.agents:
            await set_draining(p, other, True)  # so the next trial lands here
        await create_experiment(p.api, ONE)
        start = await agent.next_message()
        assert isinstance(start, wire.StartTask)
        await agent.start(start)
        starts[iid] = start
    await set_draining(p, a, False)
    async with p.rt.sessions.begin() as s:
        await s.execute(update(Allocation).values(started_at=utcnow() - timedelta(hours=4)))
    p.scaler.scaling = dataclasses.replace(p.scaler.scaling, min_instances=0)
    return a, b, starts


async def watch_preemption(p: FakePool, start: wire.StartTask) -> bool:
    """What the harness and core API do from the start: poll the preemption signal."""
    r = await p.api.get(f"/api/v1/allocations/{start.allocation_id}/signals/preemption",
                        params={"timeout_seconds": 0}, headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text
    return r.json()["preempt"]


@pytest.mark.both_databases  # the task views' correlated subqueries and the saving's sum are per dialect
async def test_a_half_used_instance_is_drained_its_trial_moved_and_the_instance_terminated(fake_pool):
    p = await fake_pool(**PROVIDER)
    a, b, starts = await two_half_used_instances(p)
    for start in starts.values():
        assert await watch_preemption(p, start) is False
    decision = await p.tick(1)
    [drain] = decision.drains
    assert drain.instance_id == a and [(m.task_id, m.to_agent) for m in drain.moves] == [(starts[a].allocation_id, b)]
    moved = starts[a]
    async with p.rt.sessions() as s:
        assert (await s.get(Agent, a)).draining and not (await s.get(Agent, b)).draining
        [row] = (await s.scalars(select(ConsolidationMove))).all()
        alloc = await s.get(Allocation, moved.allocation_id)
        trial = await s.get(Trial, alloc.trial_id)
        logs = (await s.scalars(select(TaskLog).where(TaskLog.trial_id == trial.id))).all()
        assert not (await s.get(Allocation, starts[b].allocation_id)).preempt_requested
    assert (row.instance_id, row.allocation_id, row.to_agent, row.trial_id) == (a, moved.allocation_id, b, trial.id)
    assert row.reason == drain.reason and row.reason.startswith(f"consolidating: agent {a} uses 1 of 2 slots")
    assert alloc.preempt_requested
    assert await watch_preemption(p, moved) is True  # the trial is told, exactly as pause tells it
    [line] = [log.log for log in logs if log.source == "master"]
    assert f"moving this trial off agent {a} (move 1 of at most 2)" in line and drain.reason in line
    r = await p.api.get(f"/api/v1/trials/{trial.id}/logs")
    assert f"off agent {a}" in r.text
    # nothing new lands on the draining instance, and the next tick drains nothing more
    assert (await p.tick(1)).drains == [] and p.live() == [a, b]
    c = (await p.describe())["consolidation"]
    assert (c["moveCount"], c["savedUsd"]) == (1, 0.0)  # nothing saved until the instance is gone

    # The trial checkpoints, acknowledges and exits: re-queued from its checkpoint onto b, no restart.
    ckpt = await report_checkpoint(p.api, moved, 100)
    r = await p.api.post(f"/api/v1/allocations/{moved.allocation_id}/signals/ack_preemption",
                         headers=task_headers(moved.session_token), json={})
    assert r.status_code == 200, r.text
    await p.agents[a].exit(moved.allocation_id, 0)
    again = await p.agents[b].next_message()
    assert isinstance(again, wire.StartTask) and again.task_id == moved.task_id
    assert again.env.get("DET_LATEST_CHECKPOINT") == ckpt
    async with p.rt.sessions() as s:
        trial = await s.get(Trial, trial.id)
    assert trial.restarts == 0 and trial.state in ("RUNNING", "QUEUED")

    decision = await p.tick(1)  # a is empty: terminated at once, not after max_idle_agent_period (1 h)
    assert [t.instance_id for t in decision.terminations] == [a] and p.live() == [b]
    async with p.rt.sessions() as s:
        inst = await s.get(Instance, a)
    assert inst.state == "terminated" and "drained by consolidation" in inst.reason

    info = await p.describe()
    c = info["consolidation"]
    assert (c["enabled"], c["maxMovesPerTrial"], c["moveCostS"], c["moveCount"]) == (True, 2, 120.0, 1)
    assert [(m["trialId"], m["fromInstance"], m["toAgent"], m["reason"]) for m in c["moves"]] == [
        (trial.id, a, b, drain.reason)]
    assert drain.usd_per_hour == 3.6 and drain.expected_saving_usd > 0  # t1 at $3.60/h, 4 h of work ahead
    assert c["savedUsd"] == pytest.approx(drain.expected_saving_usd)  # a terminated: its expected saving counts
    html = (await p.api.get("/cluster")).text
    assert "Consolidation: on, at most 2 moves per trial, move cost 2m 00s" in html
    assert f"1 move, estimated ${drain.expected_saving_usd:,.2f} saved" in html
    assert f'<li data-trial="{trial.id}">' in html and drain.reason.replace("'", "&#39;") in html


async def move_off(p: FakePool, start: wire.StartTask, frm: str, to: str) -> None:
    """The drained trial checkpoints, acknowledges, exits ``frm``, and starts again on ``to``."""
    await report_checkpoint(p.api, start, 100)
    r = await p.api.post(f"/api/v1/allocations/{start.allocation_id}/signals/ack_preemption",
                         headers=task_headers(start.session_token), json={})
    assert r.status_code == 200, r.text
    await p.agents[frm].exit(start.allocation_id, 0)
    again = await p.agents[to].next_message()
    assert isinstance(again, wire.StartTask) and again.task_id == start.task_id


@pytest.mark.both_databases  # the EXISTS over the drain's open moves, in the select list
async def test_an_admin_drain_after_an_ended_consolidation_drain_is_not_taken_for_consolidation(fake_pool):
    """Consolidation drains a; the admin enables it again (`det agent enable`); later the admin
    drains it (`det agent disable --drain`): once empty it stays, as any admin-drained agent, not
    terminated "drained by consolidation" (that is only for consolidation's drain in progress)."""
    p = await fake_pool(**PROVIDER)
    a, b, starts = await two_half_used_instances(p)
    for start in starts.values():
        await watch_preemption(p, start)
    [drain] = (await p.tick(1)).drains
    assert drain.instance_id == a
    await move_off(p, starts[a], a, b)
    admin = bearer(await login(p.api, "admin"))
    r = await p.api.post(f"/api/v1/agents/{a}/enable", headers=admin)
    assert r.status_code == 200 and r.json()["agent"]["draining"] is False, r.text
    assert (await p.tick(1)).terminations == [] and p.live() == [a, b]  # idle for 1 s of its 1 h
    r = await p.api.post(f"/api/v1/agents/{a}/disable", json={"drain": True}, headers=admin)
    assert r.status_code == 200 and r.json()["agent"]["draining"] is True, r.text
    decision = await p.tick(1)
    assert decision.terminations == [] and p.live() == [a, b], decision.explanation
    async with p.rt.sessions() as s:
        assert (await s.get(Instance, a)).state != "terminated"


async def test_work_that_cannot_resume_elsewhere_or_was_moved_enough_stays(fake_pool):
    p = await fake_pool(**PROVIDER)
    a, b, starts = await two_half_used_instances(p)
    # Neither declared it honours preemption nor checkpointed on one: not movable.
    decision = await p.tick(1)
    assert decision.drains == []
    # Both watch now, but each trial was already moved twice (the default limit).
    for start in starts.values():
        await watch_preemption(p, start)
    async with p.rt.sessions.begin() as s:
        for start in starts.values():
            alloc = await s.get(Allocation, start.allocation_id)
            for _ in range(2):
                s.add(ConsolidationMove(pool="gpu", drain_id="old", instance_id="i-gone", trial_id=alloc.trial_id,
                                        allocation_id="x", to_agent=a, reason="earlier", usd_per_hour=1.0,
                                        expected_saving_usd=1.0, created_at=utcnow()))
    assert (await p.tick(1)).drains == []
    async with p.rt.sessions() as s:
        assert not any(a.preempt_requested for a in (await s.scalars(select(Allocation))).all())
        assert not any(ag.draining for ag in (await s.scalars(select(Agent))).all())
    # Consolidation switched off: nothing, whatever the trials.
    p.scaler.scaling = dataclasses.replace(p.scaler.scaling, consolidation=Consolidation(enabled=False))
    assert (await p.tick(1)).drains == []
    assert (await p.describe())["consolidation"]["enabled"] is False


@pytest.mark.both_databases  # an EXISTS in the select list: a boolean on PostgreSQL, 0/1 on SQLite
async def test_a_trial_that_checkpointed_on_a_preemption_before_is_movable(fake_pool):
    """The other half of the rule: no poll this run, but an earlier run acknowledged a preemption
    and the trial has a checkpoint."""
    p = await fake_pool(**PROVIDER)
    a, b, starts = await two_half_used_instances(p)
    async with p.rt.sessions.begin() as s:
        alloc = await s.get(Allocation, starts[a].allocation_id)
        s.add(Allocation(id=f"{alloc.task_id}.0", task_id=alloc.task_id, trial_id=alloc.trial_id, state="TERMINATED",
                         resource_pool="gpu", token_hash="earlier-run", preempt_requested=True, preempt_acked=True,
                         exit_code=0, created_at=utcnow() - timedelta(hours=3)))
        (await s.get(Trial, alloc.trial_id)).latest_checkpoint = "c0ffee"
    [drain] = (await p.tick(1)).drains
    assert drain.instance_id == a and [m.task_id for m in drain.moves] == [starts[a].allocation_id]


async def test_a_drain_whose_picture_changed_is_not_carried_out(fake_pool):
    """The orchestrator re-checks in its transaction: work on the agent that the planner did not
    see (placed since) cancels the drain; the next tick decides again."""
    p = await fake_pool(**PROVIDER)
    a, b, starts = await two_half_used_instances(p)
    moved: list = []
    drained = await p.rt.orchestrator.drain_agent(a, {"someone-else": "why"}, lambda s, allocs: moved.extend(allocs))
    assert drained == [] and moved == []
    async with p.rt.sessions() as s:
        assert not (await s.get(Agent, a)).draining
        assert not (await s.get(Allocation, starts[a].allocation_id)).preempt_requested


def pool_with(consolidation) -> PoolConfig:
    return PoolConfig(name="gpu", description="", policy=PoolPolicy("gpu"),
                      provider={"type": "fake", "instance_type": "t1", "consolidation": consolidation})


def test_the_consolidation_block_is_parsed_and_bad_values_name_their_field():
    assert scaling_of(pool_with(None)).consolidation == Consolidation()
    c = scaling_of(pool_with({"enabled": False, "max_moves_per_trial": 1, "move_cost": "5m",
                              "min_runtime": "30m"})).consolidation
    assert c == Consolidation(enabled=False, max_moves_per_trial=1, move_cost_s=300.0, min_runtime_s=1800.0)
    path = "resource_pools[gpu].provider.consolidation"
    for bad, field in (({"enabled": "yes"}, f"{path}.enabled"), ({"max_moves_per_trial": -1},
                                                                  f"{path}.max_moves_per_trial"),
                       ({"move_cost": "soon"}, f"{path}.move_cost"), ({"move_cost": -5}, f"{path}.move_cost"),
                       ({"moves": 2}, f"{path}.moves"), ("on", path)):
        with pytest.raises(ConfigError) as e:
            scaling_of(pool_with(bad))
        assert field in str(e.value), (bad, str(e.value))


def test_task_views_say_what_may_move():
    """Commands, shells, notebooks, TensorBoards and OpenPAI tasks (no trial) never move, even when
    they poll the preemption signal; a trial moves once it declared it can; a gang spans agents."""
    now = utcnow()

    def alloc(id_, trial_id, agents, *, pai_job_id=None, watches=True):
        return Allocation(id=id_, task_id=id_, trial_id=trial_id, pai_job_id=pai_job_id, state="RUNNING",
                          watches_preemption=watches, started_at=now - timedelta(hours=1),
                          resources=[{"agent_id": a, "slot_ids": list(s), "rank": i}
                                     for i, (a, s) in enumerate(agents)])

    rows = [LiveRow(alloc("cmd", None, [("i-1", [0])], pai_job_id=3)),
            LiveRow(alloc("quiet", 1, [("i-1", [1])], watches=False)),
            LiveRow(alloc("trial", 2, [("i-2", [0])]), progress=0.25, moves=1),
            LiveRow(alloc("gang", 3, [("i-2", [1]), ("i-3", [0, 1])]))]
    used, tasks = work_on_agents(rows, 5000.0, now.timestamp())
    views = {t.task_id: t for ts in tasks.values() for t in ts}
    assert not views["cmd"].movable and not views["quiet"].movable
    assert views["trial"].movable and views["trial"].moves == 1 and views["trial"].progress == 0.25
    assert views["trial"].started_at == pytest.approx(5000.0 - 3600.0)  # its age, on the tick's clock
    assert views["gang"].spans_agents and [t.slots for t in tasks["i-3"]] == [2]
    assert used == {"i-1": {0, 1}, "i-2": {0, 1}, "i-3": {0, 1}}
