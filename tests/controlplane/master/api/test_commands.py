"""What Determined 0.38.1's client sends to and reads from ``/api/v1/{commands,shells,notebooks,
tensorboards}``: launch and get answer with the ``config`` (secrets redacted), unset fields arrive
as ``null``, one entrypoint argument is a shell command line, a TensorBoard shows chosen trials,
``users`` keeps only theirs, and a shell's answer names the SSH user (``agentUserGroup``)."""

from __future__ import annotations

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent, create_experiment
from tests.controlplane.master.test_ownership import add_user


async def test_launch_and_get_answer_the_config_with_secrets_masked(api):
    config = {"entrypoint": ["python3", "-c", "print(1)"], "description": "cfg",
              "environment": {"environment_variables": ["AWS_SECRET_ACCESS_KEY=s3cret", "MODE=fast"]},
              "bind_mounts": [{"host_path": "/tmp", "container_path": "/tmp"}]}
    r = await api.post("/api/v1/commands", json={"config": config, "files": None, "template_name": None,
                                                 "workspaceId": None})
    assert r.status_code == 200, r.text
    launched = r.json()
    assert launched["config"]["entrypoint"] == config["entrypoint"]
    assert launched["config"]["resources"] == {"slots": 1, "resource_pool": "default"}
    assert launched["config"]["environment"]["image"] == "default"
    assert launched["config"]["bind_mounts"] == config["bind_mounts"]  # kept, as Determined keeps it
    assert launched["config"]["environment"]["environment_variables"] == ["AWS_SECRET_ACCESS_KEY=********",
                                                                         "MODE=fast"]
    got = (await api.get(f"/api/v1/commands/{launched['command']['id']}")).json()
    assert got["config"] == launched["config"] and got["command"]["id"] == launched["command"]["id"]
    assert "s3cret" not in str(got)


async def test_one_entrypoint_argument_is_a_shell_command_line(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    line = "for x in a b; do echo $x; done"
    assert (await api.post("/api/v1/commands", json={"config": {"entrypoint": [line]}})).status_code == 200
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask) and start.entrypoint[-1] == line  # bash -c runs it as written
    r = await api.post("/api/v1/commands", json={"config": {"entrypoint": [" "]}})
    assert r.status_code == 400 and "entrypoint" in r.json()["message"]


async def test_a_template_is_merged_under_the_config(api):
    r = await api.post("/api/v1/templates/cpu-small", json={"name": "cpu-small", "config": {"resources": {"slots": 0},
                                                                                   "description": "from tpl"}})
    assert r.status_code == 200, r.text
    body = {"config": {"entrypoint": "true", "description": "mine"}, "template_name": "cpu-small"}
    launched = (await api.post("/api/v1/commands", json=body)).json()
    assert launched["config"]["resources"]["slots"] == 0 and launched["config"]["description"] == "mine"
    r = await api.post("/api/v1/commands", json={"config": {"entrypoint": "true"}, "templateName": "nope"})
    assert r.status_code in (400, 404) and "nope" in r.json()["message"], r.text


async def test_a_preview_launches_nothing(api):
    r = await api.post("/api/v1/notebooks", json={"config": {"idle_timeout": "5m"}, "preview": True})
    assert r.status_code == 200, r.text
    assert r.json()["config"]["idle_timeout"] == "300s" and r.json()["notebook"]["id"] == ""
    assert (await api.get("/api/v1/notebooks")).json()["notebooks"] == []


async def test_a_tensorboard_of_experiments_or_of_chosen_trials(api):
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    exp_id = await create_experiment(api)
    trials = (await api.get(f"/api/v1/experiments/{exp_id}/trials")).json()["trials"]
    # the client sends what it was not given as null
    r = await api.post("/api/v1/tensorboards", json={"config": {}, "experimentIds": [exp_id], "trialIds": None,
                                                     "files": [], "workspaceId": None})
    assert r.status_code == 200, r.text
    board = r.json()["tensorboard"]
    assert (board["experimentIds"], board["trialIds"]) == ([exp_id], [])
    r = await api.post("/api/v1/tensorboards", json={"config": {}, "trialIds": [trials[0]["id"]],
                                                     "experimentIds": None})
    assert r.status_code == 200, r.text
    board = r.json()["tensorboard"]
    assert (board["experimentIds"], board["trialIds"]) == ([exp_id], [trials[0]["id"]])
    for body, field in (({"trialIds": [999999]}, "trialIds: no trial 999999"), ({}, "experimentIds"),
                        ({"experimentIds": [999999]}, "experimentIds: no experiment 999999")):
        r = await api.post("/api/v1/tensorboards", json={"config": {}, **body})
        assert r.status_code == 400 and field in r.json()["message"], r.text
    r = await api.post("/api/v1/commands", json={"config": {"entrypoint": "true"}, "trialIds": [1]})
    assert r.status_code == 400 and "trialIds" in r.json()["message"]


async def test_users_keeps_only_their_commands(api):
    other = await add_user(api, "olga")
    mine = (await api.post("/api/v1/commands", json={"config": {"entrypoint": "true"}})).json()["command"]
    theirs = (await api.post("/api/v1/commands", json={"config": {"entrypoint": "true"}},
                             headers=other)).json()["command"]
    listed = (await api.get("/api/v1/commands", params={"users": ["determined"]})).json()
    assert [c["id"] for c in listed["commands"]] == [mine["id"]] and listed["pagination"]["total"] == 1
    listed = (await api.get("/api/v1/commands", params={"users": ["olga", "determined"]})).json()
    assert {c["id"] for c in listed["commands"]} == {mine["id"], theirs["id"]}
    assert len((await api.get("/api/v1/commands")).json()["commands"]) == 2
    assert (await api.get("/api/v1/commands", params={"userIds": [0]})).status_code == 400


async def test_a_shells_answer_names_its_ssh_user(api):
    shell = (await api.post("/api/v1/shells", json={"config": {}})).json()["shell"]
    assert shell["agentUserGroup"]["user"] == "det"
