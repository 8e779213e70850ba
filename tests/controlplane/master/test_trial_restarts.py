"""`restarts` as `det trial describe` and `det experiment describe` show it: the number of times the
trial restarted after a failure (Determined's meaning), never the failures themselves."""

from __future__ import annotations

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment


def one_trial(max_restarts: int) -> dict:
    return {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}, "max_restarts": max_restarts}


async def run_once(agent: FakeAgent, code: int) -> wire.StartTask:
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    await agent.exit(start.allocation_id, code)
    return start


async def the_trial(api, exp_id: int) -> dict:
    trial = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"][0]
    assert (await api.get(f"/api/v1/trials/{trial['id']}")).json()["trial"]["restarts"] == trial["restarts"]
    return trial


async def test_restarts_count_the_restarts_made(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    # (max_restarts, exit codes of its runs, final state, restarts shown)
    cases = [
        (1, [0], "STATE_COMPLETED", 0),  # never failed
        (2, [1, 0], "STATE_COMPLETED", 1),  # one restart
        (0, [1], "STATE_ERROR", 0),  # failed once, never restarted
        (2, [1, 1, 1], "STATE_ERROR", 2),  # restarted twice, then out of restarts
    ]
    for max_restarts, codes, state, restarts in cases:
        exp_id = await create_experiment(api, one_trial(max_restarts))
        for code in codes:
            await run_once(agent, code)
        trial = await the_trial(api, exp_id)
        assert (trial["state"], trial["restarts"]) == (state, restarts), (max_restarts, codes)
