"""Zero-slot (CPU) tasks: scheduled apart from slotted work, capped per agent."""

from __future__ import annotations

from controlplane.scheduler.model import PoolPolicy
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, req


def test_capped_per_agent_and_not_blocked_by_slotted_work():
    policy = {"default": PoolPolicy("default", max_zero_slot_per_agent=2)}
    pending = [req("big", 8)] + [req(f"cpu{i}", 0, submitted=i) for i in range(5)]
    p = plan(policy, pending, [], [agent("a", 2, used=(0, 1), zero=1), agent("b", 2)], NOW)
    where = [(x.allocation_id, x.resources[0][0]) for x in p.placements]
    assert where == [("cpu0", "b"), ("cpu1", "a"), ("cpu2", "b")]
