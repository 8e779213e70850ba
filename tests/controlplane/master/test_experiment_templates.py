"""`det experiment create --template NAME`: the template is merged under the config before validation."""

from __future__ import annotations

import base64

import pytest
import yaml
from sqlalchemy import select

from controlplane.master.db.models import Experiment
from controlplane.master.redaction import MASK
from tests.controlplane.master.test_templates_api import new_user, post_template

FILES = [{"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode(), "mtime": "0",
          "uid": 0, "gid": 0, "mode": 0o644}]
TEMPLATE = {
    "entrypoint": "python3 train.py",  # the config below leaves it out: alone it would be refused
    "description": "from the template",
    "max_restarts": 7,
    "labels": ["template-label"],
    "hyperparameters": {"lr": {"type": "double", "minval": 0.5, "maxval": 0.9}, "batch_size": 32},
    "searcher": {"name": "random", "metric": "accuracy", "smaller_is_better": False, "max_trials": 9,
                 "max_length": {"batches": 100}},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp/tpl-ckpts", "save_trial_best": 3},
    "environment": {"environment_variables": ["FROM_TEMPLATE=1"]},
}
CONFIG = {
    "name": "with-template",
    "max_restarts": 1,
    "labels": ["mine"],
    "hyperparameters": {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1}},
    "searcher": {"name": "random", "max_trials": 2, "max_concurrent_trials": 2},
    "checkpoint_storage": {"save_trial_latest": 2},
}


@pytest.fixture(autouse=True)
def storage_choices(api):
    """The admin's storage places the templates name (a template cannot bring its own either)."""
    api.rt.settings.checkpoint_storage_choices = [{"name": "tpl", "type": "shared_fs", "host_path": "/tmp/tpl-ckpts"},
                                                  {"name": "s3", "type": "s3", "bucket": "b", "secret_key": "sk-2"}]


async def create(api, config: dict, headers: dict | None = None, **extra):
    # The fields Determined's CLI sends (reference §2.2), `template` among them.
    body = {"config": yaml.safe_dump(config), "modelDefinition": FILES, "activate": True, "parentId": None,
            "projectId": None, "template": None, "validateOnly": False, **extra}
    return await api.post("/api/v1/experiments", headers=headers or {}, json=body)


async def test_the_config_wins_maps_merge_and_lists_are_replaced(api):
    assert (await post_template(api, "base", TEMPLATE)).status_code == 200
    alone = await create(api, CONFIG)
    assert alone.status_code == 400 and "entrypoint" in alone.json()["message"]

    r = await create(api, CONFIG, template="base")
    assert r.status_code == 200, r.text
    cfg = r.json()["config"]
    assert cfg["entrypoint"] == "python3 train.py" and cfg["description"] == "from the template"
    assert cfg["max_restarts"] == 1 and cfg["labels"] == ["mine"]
    assert cfg["hyperparameters"] == {"lr": {"type": "double", "minval": 0.001, "maxval": 0.1},
                                      "batch_size": {"type": "const", "val": 32}}
    searcher = cfg["searcher"]
    assert (searcher["metric"], searcher["smaller_is_better"], searcher["max_trials"]) == ("accuracy", False, 2)
    assert searcher["max_length"] == {"batches": 100}
    storage = cfg["checkpoint_storage"]
    assert (storage["type"], storage["host_path"], storage["save_trial_best"], storage["save_trial_latest"]) == \
        ("shared_fs", "/tmp/tpl-ckpts", 3, 2)
    assert cfg["environment"]["environment_variables"] == ["FROM_TEMPLATE=1"]
    experiment = r.json()["experiment"]
    assert yaml.safe_load(experiment["originalConfig"]) == CONFIG  # what the user wrote, not the merge
    assert experiment["labels"] == ["mine"] and len(experiment["trialIds"]) == 2

    # templateName (the request struct's other spelling) works the same; validateOnly stores nothing.
    r = await create(api, CONFIG, templateName="base", validateOnly=True)
    assert r.status_code == 200 and r.json()["config"]["entrypoint"] == "python3 train.py"
    r = await create(api, CONFIG, template="base", templateName="other")
    assert r.status_code == 400 and r.json()["message"].startswith("template:")


async def test_an_unknown_template_is_a_400_naming_it(api):
    r = await create(api, {**CONFIG, "entrypoint": "python3 train.py"}, template="no-such")
    assert r.status_code == 400
    assert r.json()["message"] == "template: no template named 'no-such' (see det template list)"
    async with api.rt.sessions() as session:
        assert (await session.scalars(select(Experiment))).all() == []


async def test_a_merge_the_schema_refuses_names_the_template(api):
    assert (await post_template(api, "typo", {**TEMPLATE, "max_restart": 3})).status_code == 200
    r = await create(api, CONFIG, template="typo")
    assert r.status_code == 400
    message = r.json()["message"]
    assert message.startswith("invalid experiment config (merged with template 'typo'):") and "max_restart" in message


async def test_anyone_may_use_someone_elses_template_and_its_secrets_stay_hidden(api):
    secret = {**TEMPLATE, "checkpoint_storage": {"type": "s3", "bucket": "b", "secret_key": "sk-2"}}
    assert (await post_template(api, "s3", secret)).status_code == 200
    nora = await new_user(api, "nora", "user")
    r = await create(api, {**CONFIG, "checkpoint_storage": None}, headers=nora, template="s3")
    assert r.status_code == 200, r.text
    assert r.json()["config"]["checkpoint_storage"]["secret_key"] == MASK and "sk-2" not in r.text
    async with api.rt.sessions() as session:
        stored = (await session.get(Experiment, r.json()["experiment"]["id"])).config
    assert stored["checkpoint_storage"]["secret_key"] == "sk-2"  # the task gets it in its StartTask
