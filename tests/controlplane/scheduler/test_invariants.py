"""Seeded random passes: whatever the mix, a plan never double-books a slot, gangs keep
their shape, victims are strictly behind a waiting request in the queue (lower priority, or equal
priority and queued later), and the same inputs give the same plan."""

from __future__ import annotations

import random

from controlplane.scheduler.capacity import Capacity
from controlplane.scheduler.gang import group_shape_error
from controlplane.scheduler.model import AgentSnapshot, PoolPolicy, Request, Running
from controlplane.scheduler.planner import plan
from controlplane.scheduler.priority import behind


def scenario(seed: int) -> tuple[list[Request], list[Running], list[AgentSnapshot]]:
    rng = random.Random(seed)
    agents, running = [], []
    for i in range(rng.randint(1, 12)):
        size = rng.choice([1, 2, 4, 8])
        used = tuple(range(rng.randint(0, size))) if rng.random() < 0.5 else ()
        agents.append(AgentSnapshot(f"a{i:02d}", "default", tuple(range(size)), frozenset(used),
                                    schedulable=rng.random() < 0.9, zero_slot_tasks=rng.randint(0, 2)))
        if used:
            running.append(Running(f"run{i}", f"job{rng.randint(0, 4)}", "default", ((f"a{i:02d}", used),),
                                   priority=rng.randint(1, 99), started_at=rng.random() * 100,
                                   preemptible=rng.random() < 0.8, preempting=rng.random() < 0.1,
                                   queue_position=float(rng.randint(0, 3)), submitted_at=float(rng.randint(0, 20))))
    pending = []
    for i in range(rng.randint(0, 30)):
        # One in five is a task group (an OpenPAI job): slots per task, the sum needed.
        tasks = tuple(rng.choice([0, 1, 1, 2, 3, 4]) for _ in range(rng.randint(1, 5))) if rng.random() < 0.2 else ()
        pending.append(Request(f"p{i}", f"job{rng.randint(0, 6)}", "default",
                               sum(tasks) if tasks else rng.choice([0, 1, 1, 2, 3, 4, 8, 16]),
                               priority=rng.randint(1, 99), weight=rng.choice([1.0, 2.0]),
                               max_slots=rng.choice([None, None, 4, 8]), queue_position=float(rng.randint(0, 3)),
                               submitted_at=float(rng.randint(0, 20)), tasks=tasks))
    return pending, running, agents


def test_random_plans_keep_the_invariants():
    for seed in range(300):
        pending, running, agents = scenario(seed)
        for kind in ("priority", "fair_share"):
            policy = {"default": PoolPolicy("default", scheduler=kind, max_zero_slot_per_agent=3)}
            p = plan(policy, pending, running, agents, 0.0)
            assert p == plan(policy, list(reversed(pending)), list(reversed(running)), list(reversed(agents)), 0.0)
            by_id = {a.agent_id: a for a in agents}
            reqs = {r.allocation_id: r for r in pending}
            booked: set[tuple[str, int]] = set()
            assert len({x.allocation_id for x in p.placements}) == len(p.placements)
            for x in p.placements:
                r = reqs[x.allocation_id]
                assert sum(len(s) for _, s in x.resources) == r.slots_needed
                if r.tasks:  # a task group: one entry per task, in order, each task's slots on one agent
                    assert tuple(len(s) for _, s in x.resources) == r.tasks
                elif r.slots_needed > 1 and len(x.resources) > 1:  # a gang takes whole agents of one size
                    assert len({len(by_id[a].slot_ids) for a, _ in x.resources}) == 1
                    assert all(len(s) == len(by_id[a].slot_ids) for a, s in x.resources)
                for agent_id, slots in x.resources:
                    assert by_id[agent_id].schedulable
                    for s in slots:
                        assert s in by_id[agent_id].slot_ids and s not in by_id[agent_id].used_slot_ids
                        assert (agent_id, s) not in booked
                        booked.add((agent_id, s))
            run = {r.allocation_id: r for r in running}
            assert len({x.allocation_id for x in p.preemptions}) == len(p.preemptions)
            for x in p.preemptions:
                assert run[x.allocation_id].preemptible and not run[x.allocation_id].preempting
                if kind == "priority":
                    assert any(behind(run[x.allocation_id], r) and not r.tasks for r in pending)
            assert plan(policy, [r for r in pending if r.tasks], running, agents, 0.0).preemptions == []


def test_a_group_fits_idle_agents_exactly_when_it_could_ever_fit():
    # could_ever_fit_group (counts of agents per size) and find_group (agent by agent) pack alike.
    rng = random.Random(7)
    for _ in range(500):
        agents = [AgentSnapshot(f"a{i}", "default", tuple(range(rng.choice([0, 1, 2, 4, 8]))), frozenset())
                  for i in range(rng.randint(0, 6))]
        tasks = [rng.choice([0, 1, 1, 2, 3, 4, 5, 8]) for _ in range(rng.randint(1, 8))]
        for fitting in ("best", "worst"):
            cap = Capacity(agents, fitting)
            found = cap.find_group(tasks)
            assert (found is not None) == cap.could_ever_fit_group(tasks), (agents, tasks, fitting)
            if agents:  # no agents: no message (nothing to judge by), and nothing fits
                assert (found is not None) == (group_shape_error(tasks, agents, "default", fitting) is None)
            if found is not None:
                slots = [(a, s) for a, ss in found for s in ss]
                assert len(slots) == len(set(slots)) == sum(tasks)
                assert [len(ss) for _, ss in found] == tasks
