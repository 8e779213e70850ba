"""A trial whose setup failed before its entrypoint ran (its environment.pip_requirements did not
install, its startup hook failed: ``TaskExited.setup_failed``) ends in ERROR at once, not after
``max_restarts`` identical failures; any other failure is still restarted."""

from __future__ import annotations

import yaml
from sqlalchemy import select

from controlplane.master.db.models import StateTransition
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

REQUIREMENTS = ["termcolor==2.4.0", "--find-links ./wheels"]


def config(pip_requirements: list[str] | None = None) -> dict:
    environment = {"pip_requirements": pip_requirements} if pip_requirements else {}
    return {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}, "max_restarts": 5,  # type: ignore[dict-item]
            "environment": environment}


async def the_trial(api, exp_id: int) -> dict:
    return (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"][0]


async def test_a_failed_setup_ends_the_trial_without_restarts(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api, config(REQUIREMENTS))
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask) and start.pip_requirements == REQUIREMENTS
    await agent.start(start)
    why = "environment.pip_requirements failed to install (pip exited 1; its messages are above)"
    await api.rt.orchestrator.task_exited(agent.agent_id, wire.TaskExited(start.allocation_id, 1, why,
                                                                         setup_failed=True))
    trial = await the_trial(api, exp_id)
    assert (trial["state"], trial["restarts"]) == ("STATE_ERROR", 0)
    experiment = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert experiment["state"] == "STATE_ERROR"
    async with api.rt.sessions() as session:
        reasons = (await session.scalars(select(StateTransition.reason).where(
            StateTransition.entity == "trial", StateTransition.entity_id == str(trial["id"]),
            StateTransition.to_state == "ERROR"))).all()
    assert len(reasons) == 1 and why in reasons[0] and "not restarted" in reasons[0]

    # The same exit code without setup_failed is the entrypoint's own failure: restarted as before.
    exp_id = await create_experiment(api, config())
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask) and start.pip_requirements == []
    await agent.start(start)
    await agent.exit(start.allocation_id, 1)
    trial = await the_trial(api, exp_id)
    assert (trial["state"], trial["restarts"]) == ("STATE_QUEUED", 1)


async def test_pip_requirements_must_be_requirement_lines(api):
    for bad, says in (("torch", "must be a list of requirement strings"), ([""], "must be a list"),
                      (["a\nb"], "environment.pip_requirements[0]: must be one line")):
        body = {**config(), "environment": {"pip_requirements": bad}}
        r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(body), "modelDefinition": []})
        assert r.status_code == 400 and says in r.text, (bad, r.text)
