"""Fair share: weighted max-min shares of a pool's slots, capped by max_slots."""

from __future__ import annotations

from collections import Counter

from controlplane.scheduler.fair_share import shares
from controlplane.scheduler.planner import plan
from tests.controlplane.scheduler.scenarios import NOW, agent, pools, req


def per_job(p) -> Counter:  # noqa: ANN001
    return Counter(x.allocation_id.split("-")[0] for x in p.placements)


def many(job: str, n: int, **kw) -> list:  # noqa: ANN003
    return [req(f"{job}-{i}", 1, job=job, submitted=i, **kw) for i in range(n)]


def test_equal_weights_split_evenly():
    p = plan(pools(scheduler="fair_share"), many("A", 4) + many("B", 4), [], [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 2, "B": 2}


def test_weights_three_to_one():
    p = plan(pools(scheduler="fair_share"), many("A", 4, weight=3.0) + many("B", 4, weight=1.0), [], [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 3, "B": 1}


def test_max_slots_caps_and_the_rest_goes_to_others():
    p = plan(pools(scheduler="fair_share"), many("A", 4, max_slots=1) + many("B", 4), [], [agent("x", 4)], NOW)
    assert per_job(p) == {"A": 1, "B": 3}


def test_water_filling():
    assert shares(10, {"a": 2, "b": 10, "c": 10}, {"a": 1, "b": 1, "c": 1}) == {"a": 2.0, "b": 4.0, "c": 4.0}
