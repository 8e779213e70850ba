from controlplane.scheduler.fifo import AgentSnapshot, PendingRequest, plan


def agent(agent_id, slots, used=(), pool="default", schedulable=True):
    return AgentSnapshot(agent_id, pool, tuple(range(slots)), frozenset(used), schedulable)


def test_places_in_queue_order_with_exact_slot_accounting():
    pending = [PendingRequest("a", "default", 2), PendingRequest("b", "default", 1), PendingRequest("c", "default", 2)]
    placements = plan(pending, [agent("x", 2), agent("y", 2)])
    assert [(p.allocation_id, p.agent_id, p.slot_ids) for p in placements] == [
        ("a", "x", (0, 1)),
        ("b", "y", (0,)),
    ]


def test_head_of_queue_blocks_the_requests_behind_it():
    # "big" fits once x frees its slot; the 1-slot request behind it must wait its turn.
    pending = [PendingRequest("big", "default", 2), PendingRequest("small", "default", 1)]
    assert plan(pending, [agent("x", 2, used={0})]) == []


def test_a_request_no_agent_could_ever_hold_does_not_block_the_queue():
    pending = [PendingRequest("huge", "default", 8), PendingRequest("small", "default", 1)]
    assert [p.allocation_id for p in plan(pending, [agent("x", 2)])] == ["small"]


def test_best_fit_keeps_the_big_hole_for_the_big_request():
    pending = [PendingRequest("one", "default", 1), PendingRequest("four", "default", 4)]
    placements = plan(pending, [agent("big", 4), agent("small", 2, used={0})])
    assert {p.allocation_id: p.agent_id for p in placements} == {"one": "small", "four": "big"}


def test_pools_and_unschedulable_agents_are_respected():
    pending = [PendingRequest("gpu-job", "gpu", 1), PendingRequest("cpu-job", "default", 1)]
    placements = plan(pending, [agent("c", 1), agent("g", 1, pool="gpu", schedulable=False)])
    assert [(p.allocation_id, p.agent_id) for p in placements] == [("cpu-job", "c")]


def test_zero_slot_requests_fit_anywhere():
    placements = plan([PendingRequest("z", "default", 0)], [agent("x", 1, used={0})])
    assert [(p.allocation_id, p.slot_ids) for p in placements] == [("z", ())]
