"""Fair share: weighted max-min shares of a pool's slots, capped by max_slots."""

from __future__ import annotations

from collections import Counter

from controlplane.scheduler.fair_share import shares, whole_shares
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, pools, req, running


def per_job(p) -> Counter:
    return Counter(x.allocation_id.split("-")[0] for x in p.placements)


def many(job: str, n: int, **kw) -> list:
    return [req(f"{job}-{i}", 1, job=job, submitted=i, **kw) for i in range(n)]


def test_equal_weights_split_evenly():
    p = plan(pools(scheduler="fair_share"), many("A", 4) + many("B", 4), [], [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 2, "B": 2}


def test_weights_three_to_one():
    p = plan(pools(scheduler="fair_share"), many("A", 4, weight=3.0) + many("B", 4, weight=1.0), [],
             [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 3, "B": 1}


def test_max_slots_caps_and_the_rest_goes_to_others():
    p = plan(pools(scheduler="fair_share"), many("A", 4, max_slots=1) + many("B", 4), [], [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 1, "B": 3}


def test_water_filling():
    assert shares(10, {"a": 2, "b": 10, "c": 10}, {"a": 1, "b": 1, "c": 1}) == {"a": 2.0, "b": 4.0, "c": 4.0}


def test_whole_shares_scenarios():
    # (capacity, demand, weight, expected whole shares)
    cases = [
        (4, {"A": 4, "B": 4}, {"A": 1.0, "B": 1.0}, {"A": 2, "B": 2}),
        (4, {"A": 4, "B": 4}, {"A": 3.0, "B": 1.0}, {"A": 3, "B": 1}),
        (8, {"A": 10, "B": 30}, {"A": 1.0, "B": 1.0}, {"A": 4, "B": 4}),
        (5, {"A": 5, "B": 5}, {"A": 1.0, "B": 1.0}, {"A": 3, "B": 2}),  # the odd slot to the older job
        (8, {"A": 1, "B": 30}, {"A": 1.0, "B": 1.0}, {"A": 1, "B": 7}),
    ]
    for capacity, demand, weight, expected in cases:
        seniority = {j: (float(i), j) for i, j in enumerate(sorted(demand))}
        assert whole_shares(capacity, demand, weight, seniority) == expected


def test_running_work_counts_toward_the_share():
    run = [running("a-run", {"x": (0, 1)}, job="A")]
    p = plan(pools(scheduler="fair_share"), many("A", 4) + many("B", 4), run, [agent("x", 4, used=(0, 1))], NOW)
    assert per_job(p) == {"B": 2}


def test_gangs_stay_within_the_share_and_stuck_jobs_step_aside():
    # B's 4-slot gang can never fit in a share of 2: it steps aside, A uses the pool.
    pending = many("A", 4) + [req("B-0", 4, job="B")]
    p = plan(pools(scheduler="fair_share"), pending, [], [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 4}
    # With two 2-slot gangs, each job gets one.
    pending = [req("A-0", 2, job="A"), req("A-1", 2, job="A"), req("B-0", 2, job="B", submitted=1)]
    assert per_job(plan(pools(scheduler="fair_share"), pending, [], [agent("x", 4)], NOW)) == {"A": 1, "B": 1}


def test_preempts_newest_work_of_a_job_over_its_share():
    run = [running(f"A-r{i}", {"x": (i,)}, job="A", started=i) for i in range(4)]
    agents = [agent("x", 4, used=(0, 1, 2, 3))]
    p = plan(pools(scheduler="fair_share"), many("B", 2), run, agents, NOW)
    assert [x.allocation_id for x in p.preemptions] == ["A-r3", "A-r2"]
    assert "fair share" in p.preemptions[0].reason and p.placements == []
    assert plan(pools(scheduler="fair_share", preemption=False), many("B", 2), run, agents, NOW).preemptions == []


def test_no_preemption_of_a_job_within_its_share():
    run = [running("A-r0", {"x": (0, 1)}, job="A"), running("B-r0", {"x": (2, 3)}, job="B")]
    p = plan(pools(scheduler="fair_share"), many("B", 2), run, [agent("x", 4, used=(0, 1, 2, 3))], NOW)
    assert p.preemptions == [] and p.placements == []


def test_fair_share_is_deterministic():
    pending = many("A", 5, weight=2.0) + many("B", 5) + many("C", 3)
    agents = [agent(f"a{i}", 2) for i in range(3)]
    first = plan(pools(scheduler="fair_share"), pending, [], agents, NOW)
    assert first == plan(pools(scheduler="fair_share"), list(reversed(pending)), [], list(reversed(agents)), NOW)
    assert per_job(first) == {"A": 3, "B": 2, "C": 1}
