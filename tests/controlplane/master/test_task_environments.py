"""Task environments through the master: environment.image is checked against the live agents of
the experiment's pool at create, trials go only to agents offering it and are told its name, a
trial whose environment left with its agent waits, and the agents list shows what each offers."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import yaml
from sqlalchemy import select

from controlplane.master.db.models import Allocation
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment

ONE = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1, "max_concurrent_trials": 1}}


def with_image(image, **resources) -> dict:
    return {**ONE, "environment": {"image": image}, **({"resources": resources} if resources else {})}


async def refused(api, config: dict) -> str:
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(config), "modelDefinition": []})
    assert r.status_code == 400, r.text
    return r.json()["message"]


async def test_an_environment_no_live_agent_offers_is_refused_naming_the_ones_that_exist(api):
    await FakeAgent(api.rt, "agent-1").register()
    await FakeAgent(api.rt, "agent-2", environments=("default", "determined-0.38.1")).register()
    for image in ("tf-2", "determinedai/pytorch-ngc-dev:0.38.1", {"cpu": "tf-2", "cuda": "determined-0.38.1"}):
        message = await refused(api, with_image(image))
        assert "environment.image" in message and "offers the environment" in message, message
        assert "environments offered: default, determined-0.38.1" in message, message


async def test_a_malformed_image_is_refused_naming_the_field(api):
    for image, words in ((5, "must be a name or a map"), ({"tpu": "x"}, "unknown device type"), ("", "empty")):
        message = await refused(api, with_image(image))
        assert message.startswith("invalid experiment config: environment.image: ") and words in message, message


async def test_only_the_experiments_pool_counts(api):
    await FakeAgent(api.rt, "agent-1", pool="other", environments=("default", "torch")).register()
    message = await refused(api, with_image("torch"))
    assert "resource pool 'default' has no live agent" in message and "environments offered: default" in message


async def test_without_an_image_the_default_environment_needs_no_agent(api):
    await create_experiment(api, ONE)  # no agent at all: it waits, as before environments


async def test_a_trial_goes_to_the_agent_offering_its_environment_and_is_told_its_name(api):
    plain = FakeAgent(api.rt, "agent-1", slots=1)
    offering = FakeAgent(api.rt, "agent-2", slots=1, environments=("default", "determined-0.38.1"))
    await plain.register()
    await offering.register()
    await create_experiment(api, with_image("determined-0.38.1"))
    start = await offering.next_message()
    assert isinstance(start, wire.StartTask) and start.environment == "determined-0.38.1"
    await create_experiment(api, with_image({"cpu": "default", "cuda": "determined-0.38.1"}))
    start = await plain.next_message()  # a CPU agent: the map's cpu name
    assert isinstance(start, wire.StartTask) and start.environment == "default"


async def test_a_trial_whose_environment_left_with_its_agent_waits_for_it(api):
    plain = FakeAgent(api.rt, "agent-1", slots=1)
    offering = FakeAgent(api.rt, "agent-2", slots=1, environments=("default", "torch"))
    await plain.register()
    await offering.register()
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(with_image("torch")),
                                                    "modelDefinition": [], "activate": False})
    assert r.status_code == 200, r.text
    exp_id = r.json()["experiment"]["id"]
    await offering.disconnect()
    assert (await api.post(f"/api/v1/experiments/{exp_id}/activate")).status_code == 200
    for _ in range(3):
        await api.rt.orchestrator.tick()
    with pytest.raises(asyncio.TimeoutError):
        await plain.next_message(timeout=1.5)  # the free agent does not offer torch
    async with api.rt.sessions() as session:
        states = (await session.scalars(select(Allocation.state))).all()
    assert states == ["PENDING"]
    await offering.register()  # it is back: the trial starts there
    start = await offering.next_message()
    assert isinstance(start, wire.StartTask) and start.environment == "torch"


async def test_the_agents_list_shows_their_environments(api):
    await FakeAgent(api.rt, "agent-1").register()
    await FakeAgent(api.rt, "agent-2", environments=("default", "determined-0.38.1")).register()
    agents = (await api.get("/api/v1/agents")).json()["agents"]
    assert {a["id"]: a["environments"] for a in agents} == {"agent-1": ["default"],
                                                            "agent-2": ["default", "determined-0.38.1"]}


def test_an_older_agents_register_offers_the_default_environment():
    old = b'{"type":"register","agent_id":"a","slots":[]}'
    reg = wire.decode_from_agent(old)
    assert isinstance(reg, wire.Register) and reg.environments == ["default"]
    start = msgspec.json.decode(wire.encode(wire.StartTask("x", "t", "TRIAL", "true", {}, [], "tok")))
    start.pop("environment")  # an older master's StartTask
    assert wire.decode_from_master(msgspec.json.encode(start)).environment == "default"


async def test_the_clusters_task_container_defaults_image_is_the_environment_of_an_experiment_naming_none(api):
    api.rt.settings.default_image = "determined-0.38.1"  # master.yaml: task_container_defaults.image
    plain = FakeAgent(api.rt, "agent-1", slots=1)
    await plain.register()
    message = await refused(api, ONE)  # only `default` is offered: nowhere for it to run
    assert "offers the environment 'determined-0.38.1'" in message and "environment.image" in message, message
    offering = FakeAgent(api.rt, "agent-2", slots=1, environments=("default", "determined-0.38.1"))
    await offering.register()
    exp_id = await create_experiment(api, ONE)
    start = await offering.next_message()
    assert isinstance(start, wire.StartTask) and start.environment == "determined-0.38.1"
    config = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["config"]
    assert config["environment"]["image"] == "determined-0.38.1"
    # What the experiment names itself wins.
    await create_experiment(api, with_image("default"))
    start = await plain.next_message()
    assert isinstance(start, wire.StartTask) and start.environment == "default"


def test_task_container_defaults_image_is_read_from_master_yaml(tmp_path):
    from controlplane.config.errors import ConfigError
    from controlplane.master.settings import load_settings

    path = tmp_path / "master.yaml"
    path.write_text(yaml.safe_dump({"task_container_defaults": {"image": {"cpu": "determined-0.38.1"}}}))
    assert load_settings(path).default_image == {"cpu": "determined-0.38.1"}
    path.write_text(yaml.safe_dump({"task_container_defaults": {"image": 3}}))
    with pytest.raises(ConfigError, match="task_container_defaults.image"):
        load_settings(path)
