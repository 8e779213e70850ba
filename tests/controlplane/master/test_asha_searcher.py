"""ASHA through the master: a validation's time metric reaches the searcher, its Stop stops the trial
at its next boundary (preemption), the replacement trial is created, and the experiment completes."""

from __future__ import annotations

from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_experiment_inputs import _refused
from tests.controlplane.master.test_metrics_api import report
from tests.controlplane.master.test_trial_lifecycle import task_headers, trial_states

HALVING = {**CONFIG, "searcher": {"name": "async_halving", "metric": "loss", "max_trials": 3, "num_rungs": 2,
                                  "divisor": 2, "max_concurrent_trials": 2, "time_metric": "epochs", "max_time": 4}}


async def validate(api, start, steps: int, metrics: dict) -> None:
    body = {"reports": [report("validation", steps, metrics)]}
    r = await api.post(f"/api/v1/trials/{start.env['DET_TRIAL_ID']}/metrics/batch", json=body,
                       headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text


async def preempt_requested(api, start) -> bool:
    r = await api.get(f"/api/v1/allocations/{start.allocation_id}/signals/preemption", params={"timeout_seconds": 0},
                      headers=task_headers(start.session_token))
    assert r.status_code == 200, r.text
    return bool(r.json()["preempt"])


async def test_async_halving_stops_the_worse_trial_by_its_time_metric_and_completes(api):
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id = await create_experiment(api, HALVING)
    first, second = sorted([await agent.next_message(), await agent.next_message()],
                           key=lambda m: int(m.env["DET_TRIAL_ID"]))
    await agent.start(first)
    await agent.start(second)
    # rungs of 2 and 4 epochs; the rung is read from the validation's "epochs", not its batches
    await validate(api, first, 100, {"loss": 0.5, "epochs": 2})
    await validate(api, second, 100, {"loss": 0.9})  # no epochs: decides nothing
    assert await trial_states(api, exp_id) == ["STATE_RUNNING", "STATE_RUNNING"]
    assert not await preempt_requested(api, second)
    await validate(api, second, 100, {"loss": 0.9, "epochs": 2.5})  # rung 0: second of keep 1
    assert await trial_states(api, exp_id) == ["STATE_RUNNING", "STATE_STOPPING_COMPLETED", "STATE_QUEUED"]
    assert await preempt_requested(api, second) and not await preempt_requested(api, first)
    await agent.exit(second.allocation_id, 0)
    third = await agent.next_message()  # the replacement takes the freed slot
    await agent.start(third)
    await validate(api, first, 200, {"loss": 0.4, "epochs": 4})  # the top rung: stopped, 3 of 3 created
    assert await trial_states(api, exp_id) == ["STATE_STOPPING_COMPLETED", "STATE_COMPLETED", "STATE_RUNNING"]
    await agent.exit(first.allocation_id, 0)
    await agent.exit(third.allocation_id, 0)
    assert await trial_states(api, exp_id) == ["STATE_COMPLETED"] * 3
    exp = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["progress"] == 1.0


async def test_an_asha_search_that_would_start_too_many_trials_at_once_is_refused(api):
    config = {**HALVING, "searcher": {**HALVING["searcher"], "max_trials": 100_000, "max_concurrent_trials": 0,
                                      "num_rungs": 10, "divisor": 4}}  # min(4**9, max_trials) at once
    await _refused(api, 400, "searcher.max_concurrent_trials", "100000 trials at once", "limit of 2000",
                   config=config)


async def test_adaptive_asha_without_a_length_is_refused_naming_the_field(api):
    config = {**CONFIG, "searcher": {"name": "adaptive_asha", "metric": "loss", "max_trials": 4}}
    await _refused(api, 400, "searcher.max_time: required", config=config)


async def test_a_stop_for_a_trial_whose_start_was_not_seen_yet_still_stops_it(api):
    """The process reported before the agent's TaskStarted was handled: the Stop is not lost."""
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    exp_id = await create_experiment(api, HALVING)
    first, second = sorted([await agent.next_message(), await agent.next_message()],
                           key=lambda m: int(m.env["DET_TRIAL_ID"]))
    await agent.start(first)
    await validate(api, first, 100, {"loss": 0.5, "epochs": 2})
    assert await trial_states(api, exp_id) == ["STATE_RUNNING", "STATE_QUEUED"]
    await validate(api, second, 100, {"loss": 0.9, "epochs": 2})  # its TaskStarted is still on the way
    assert await trial_states(api, exp_id) == ["STATE_RUNNING", "STATE_STOPPING_COMPLETED", "STATE_QUEUED"]
    assert await preempt_requested(api, second)
    await agent.start(second)  # arrives late: changes nothing
    await agent.exit(second.allocation_id, 0)
    assert (await trial_states(api, exp_id))[1] == "STATE_COMPLETED"
