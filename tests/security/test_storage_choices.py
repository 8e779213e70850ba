"""Red team: a user's experiment config points its checkpoint storage somewhere of its choosing.

The attack (the issue's): bob sets ``checkpoint_storage: {type: shared_fs, host_path: <the cluster's
host_path>/<admin's checkpoint uuid>}`` (both readable by anyone in the experiment and checkpoint
answers): the agent would make ``.staging/<allocation>`` inside admin's read-only checkpoint and the
master publish bob's checkpoint there, breaking admin's download and warm start. Or ``host_path: D``
for any directory D (a root-only one), a ``directory`` storage at D, a bucket or endpoint of his own,
or a sub-path that climbs out (``..``, an absolute path), names a checkpoint (a uuid-shaped part),
the staging area (``.staging``) or OpenPAI outputs. He tries it at create, through a template, a
fork and ``det e continue``'s override, and a PATCH.

Each must fail: a 400 naming the field (every problem of the block in one answer) and listing the
admin's choices (name, type, location); nothing is stored; admin's checkpoint keeps downloading.
What an experiment may do: pick a choice by name or by its location, with a sub-path of plain names.
"""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import yaml

from controlplane.master.redaction import MASK
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent
from tests.controlplane.master.test_ownership import add_user, login
from tests.controlplane.master.test_templates_api import post_template

ONE_TRIAL = {**CONFIG, "max_restarts": 0, "searcher": {**CONFIG["searcher"], "max_trials": 1}}
S3_CHOICE = {"name": "team-s3", "type": "s3", "bucket": "team", "prefix": "det", "access_key": "AKIA-TEAM",
             "secret_key": "TEAM-SECRET-1"}


def choices(api, tmp: Path) -> Path:
    """The admin's list: the cluster default, a scratch file system and a team bucket."""
    scratch = tmp / "scratch"
    api.rt.settings.checkpoint_storage_choices = [{"name": "scratch", "type": "shared_fs", "host_path": str(scratch)},
                                                  S3_CHOICE]
    return scratch


def default_root(api) -> Path:
    return Path(api.rt.settings.default_checkpoint_storage()["host_path"])


async def create(api, headers: dict, storage, base: dict | None = None, **body) -> tuple[int, str, dict]:
    config = {**(base or ONE_TRIAL), **({"checkpoint_storage": storage} if storage is not None else {})}
    r = await api.post("/api/v1/experiments", headers=headers,
                       json={"config": yaml.safe_dump(config), "modelDefinition": [], **body})
    return r.status_code, r.json().get("message", ""), r.json()


async def admins_checkpoint(api) -> str:
    """A checkpoint of admin's, written by its trial and published by the master."""
    admin = await login(api, "admin")
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    r = await api.post("/api/v1/experiments", headers=admin, json={"config": yaml.safe_dump(ONE_TRIAL),
                                                                   "modelDefinition": []})
    assert r.status_code == 200, r.text
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask)
    await agent.start(start)
    ckpt = str(uuid.uuid4())
    staged = default_root(api) / ".staging" / start.allocation_id / ckpt
    staged.mkdir(parents=True)
    (staged / "state.pt").write_bytes(b"admin's weights")
    r = await api.post("/api/v1/checkpoints", json={
        "uuid": ckpt, "allocationId": start.allocation_id, "state": "STATE_COMPLETED",
        "resources": {"state.pt": "15"}, "metadata": {"steps_completed": 1}},
        headers={"Grpc-Metadata-x-allocation-token": f"Bearer {start.session_token}", "Authorization": ""})
    assert r.status_code == 200, r.text
    await agent.exit(start.allocation_id, 0)
    return ckpt


async def downloads(api, ckpt: str) -> bytes:
    r = await api.get(f"/checkpoints/{ckpt}")
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content), mode="r:gz") as tar:
        return tar.extractfile("./state.pt").read()  # type: ignore[union-attr]


def refused(result: tuple[int, str, dict], *fields: str) -> str:
    status, message, _ = result
    assert status == 400, (status, message)
    for field in fields:
        assert f"checkpoint_storage.{field}" in message, (field, message)
    return message


async def test_a_host_path_at_another_users_checkpoint_is_refused_naming_the_field_and_the_choices(api, tmp_path):
    scratch = choices(api, tmp_path)
    ckpt = await admins_checkpoint(api)
    bob = await add_user(api, "bob")
    experiments = (await api.get("/api/v1/experiments")).json()["pagination"]["total"]

    message = refused(await create(api, bob, {"type": "shared_fs", "host_path": str(default_root(api) / ckpt)}),
                      "host_path")
    for choice in (f"default (shared_fs host_path {default_root(api)})", f"scratch (shared_fs host_path {scratch})",
                   "team-s3 (s3 bucket team prefix det)"):
        assert choice in message, message
    assert "TEAM-SECRET" not in message and "AKIA" not in message
    refused(await create(api, bob, {"type": "shared_fs", "host_path": str(default_root(api)), "storage_path": ckpt}),
            "storage_path")
    refused(await create(api, bob, {"storage_path": ckpt}), "storage_path")  # the cluster's, then his sub-path

    assert (await api.get("/api/v1/experiments")).json()["pagination"]["total"] == experiments  # nothing stored
    assert not (default_root(api) / ckpt / ".staging").exists()
    assert await downloads(api, ckpt) == b"admin's weights"


async def test_a_host_path_at_a_root_only_directory_or_a_bucket_of_ones_own_is_refused(api, tmp_path):
    choices(api, tmp_path)
    bob = await add_user(api, "bob")
    secret = tmp_path / "root-only"
    secret.mkdir(mode=0o700)
    cases = [
        ({"type": "shared_fs", "host_path": str(secret)}, ["host_path"]),
        ({"type": "shared_fs", "host_path": str(tmp_path / "scratch" / "sub")}, ["host_path"]),  # under a choice
        ({"type": "directory", "container_path": str(secret)}, ["type"]),
        ({"type": "s3", "bucket": "bobs-bucket"}, ["bucket"]),
        ({"type": "gcs", "bucket": "team"}, ["type"]),
        ({"name": "root-only"}, ["name"]),
        # the team's bucket, with his own endpoint and keys and a prefix outside the team's: all at once
        ({"type": "s3", "bucket": "team", "prefix": "elsewhere", "endpoint_url": "http://127.0.0.1:9",
          "access_key": "BOB", "secret_key": "BOBS"}, ["prefix", "endpoint_url", "access_key", "secret_key"]),
        ({"name": "scratch", "container_path": "/", "temp_dir": "/etc"}, ["container_path"]),
    ]
    for storage, fields in cases:
        refused(await create(api, bob, storage), *fields)
    assert list(secret.iterdir()) == []


async def test_a_sub_path_that_leaves_its_place_or_names_a_checkpoint_is_refused(api, tmp_path):
    choices(api, tmp_path)
    bob = await add_user(api, "bob")
    ckpt, alloc = str(uuid.uuid4()), f"1.{uuid.uuid4()}.1"
    team = {k: v for k, v in S3_CHOICE.items() if k != "name"}  # Determined's way of naming the team bucket
    for bad in ("..", "../elsewhere", "team/../../x", "/etc", ckpt, f"team/{ckpt}", ".staging",
                f".staging/{alloc}", "team/.hidden", "pai-outputs", "deadbeef-0000"):
        refused(await create(api, bob, {"type": "shared_fs", "host_path": str(default_root(api)),
                                        "storage_path": bad}), "storage_path")
        refused(await create(api, bob, {**team, "prefix": bad if bad.startswith("/") else f"det/{bad}"}), "prefix")
    refused(await create(api, bob, {"name": "scratch", "storage_path": ckpt}), "storage_path")
    refused(await create(api, bob, {"name": "team-s3", "prefix": "other/x"}), "prefix")  # not under det/


async def test_every_way_a_config_gets_a_storage_is_held_to_the_choices(api, tmp_path):
    """Templates merged under it, a fork, continue's override and a PATCH: the same rule."""
    choices(api, tmp_path)
    bob = await add_user(api, "bob")
    evil = {"type": "shared_fs", "host_path": str(tmp_path / "root-only")}
    assert (await post_template(api, "evil", {"checkpoint_storage": evil}, bob)).status_code == 200
    refused(await create(api, bob, None, template="evil"), "host_path")

    single = {**ONE_TRIAL, "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}}
    status, _, answer = await create(api, bob, {"name": "scratch", "storage_path": "bob"}, single)
    assert status == 200, answer
    parent = answer["experiment"]["id"]
    refused(await create(api, bob, evil, parentId=parent), "host_path")  # a fork
    assert (await api.post(f"/api/v1/experiments/{parent}/kill", headers=bob)).status_code == 200
    r = await api.post("/api/v1/experiments/continue", headers=bob, json={
        "id": parent, "overrideConfig": yaml.safe_dump({"checkpoint_storage": evil})})
    assert r.status_code == 400 and "checkpoint_storage.host_path" in r.json()["message"], r.text
    r = await api.patch(f"/api/v1/experiments/{parent}", headers=bob, json={
        "checkpointStorage": {"hostPath": "/", "saveTrialBest": 3}})
    stored = (await api.get(f"/api/v1/experiments/{parent}", headers=bob)).json()["config"]["checkpoint_storage"]
    assert stored["host_path"] == str(tmp_path / "scratch") and stored["storage_path"] == "bob", (r.text, stored)


async def test_an_experiment_picks_a_choice_and_stores_the_admins_block(api, tmp_path):
    scratch = choices(api, tmp_path)
    bob = await add_user(api, "bob")
    for storage in ({"name": "scratch", "storage_path": "team/bob", "save_trial_best": 2},
                    {"type": "shared_fs", "host_path": str(scratch), "storage_path": "team/bob/",
                     "save_trial_best": 2}):
        status, message, answer = await create(api, bob, storage)
        assert status == 200, message
        stored = answer["config"]["checkpoint_storage"]
        assert stored == {"type": "shared_fs", "host_path": str(scratch), "storage_path": "team/bob",
                          "save_experiment_best": 0, "save_trial_best": 2, "save_trial_latest": 1}
    status, message, answer = await create(api, bob, {"name": "team-s3", "prefix": "det/bob"})
    assert status == 200, message
    shown = answer["config"]["checkpoint_storage"]  # the admin's keys, masked in every answer
    assert (shown["bucket"], shown["prefix"]) == ("team", "det/bob")
    assert (shown["secret_key"], shown["access_key"]) == (MASK, MASK)
    assert "TEAM-SECRET" not in str(answer)
    admin = await login(api, "admin")
    config = (await api.get("/api/v1/master/config", headers=admin)).json()["config"]
    assert "TEAM-SECRET" not in str(config) and config["checkpoint_storage_choices"][1]["secret_key"] == MASK
