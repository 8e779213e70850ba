"""Fork, continue and delete from the experiment page: the buttons an ended experiment offers, the
fork page's config (secrets masked), and the create it sends (``parentId``): the parent's code is
reused and a masked secret keeps the parent's value; another user may not fork what they cannot read."""

from __future__ import annotations

import base64
import io
import tarfile

import yaml

from tests.controlplane.master.conftest import CONFIG, create_experiment
from tests.controlplane.master.test_users_api import admin, bearer, create_user, login  # noqa: F401 (a fixture)

SECRET = {"type": "s3", "bucket": "b", "access_key": "AKIA", "secret_key": "s3cr3t"}


def files_of(b64_tgz: str) -> dict[str, str]:
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(b64_tgz)), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read().decode() for m in tar.getmembers() if m.isfile()}


async def test_an_ended_experiment_offers_continue_delete_and_fork(api):
    exp = await create_experiment(api, {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}})
    page = (await api.get(f"/experiments/{exp}")).text
    assert f'href="/experiments/{exp}/fork"' in page and "DELETE /api/v1/experiments" not in page  # running
    assert (await api.post(f"/api/v1/experiments/{exp}/kill")).status_code == 200
    for _ in range(100):
        if (await api.get(f"/api/v1/experiments/{exp}")).json()["experiment"]["state"] == "STATE_CANCELED":
            break
    page = (await api.get(f"/experiments/{exp}")).text
    assert f'data-api="DELETE /api/v1/experiments/{exp}"' in page and 'data-go="/experiments"' in page
    assert 'data-api="POST /api/v1/experiments/continue"' in page and f'{{"id": {exp}}}' in page


async def test_fork_reuses_the_parents_code_and_secrets(api, admin):  # noqa: F811
    api.rt.settings.checkpoint_storage_choices = [{"name": "team", **SECRET}]  # the admin's bucket, picked by type
    parent = await create_experiment(api, {**CONFIG, "checkpoint_storage": SECRET},
                                     files={"train.py": "print('parent code')\n"})
    page = await api.get(f"/experiments/{parent}/fork")
    assert page.status_code == 200 and "s3cr3t" not in page.text and "********" in page.text
    shown = yaml.safe_load(page.text.split('aria-label="experiment config (YAML)">')[1].split("</textarea>")[0]
                           .replace("&#39;", "'").replace("&quot;", '"'))
    assert shown["name"].endswith("(fork)")
    shown["hyperparameters"]["lr"]["maxval"] = 0.05
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(shown), "parentId": parent})
    assert r.status_code == 200, r.text
    child = r.json()["experiment"]["id"]
    model_def = (await api.get(f"/api/v1/experiments/{child}/model_def")).json()["b64Tgz"]
    assert files_of(model_def) == {"train.py": "print('parent code')\n"}
    async with api.rt.sessions() as session:
        from controlplane.master.db.models import Experiment

        stored = await session.get(Experiment, child)
        assert stored.config["checkpoint_storage"]["secret_key"] == "s3cr3t"  # not the mask
        assert stored.config["hyperparameters"]["lr"]["maxval"] == 0.05

    # Another user may not take this user's code (or its secrets) by forking it.
    await create_user(api, admin, "mallory", password="pw")
    r = await api.post("/api/v1/experiments", headers=bearer(await login(api, "mallory", "pw")),
                       json={"config": yaml.safe_dump(shown), "parentId": parent})
    assert r.status_code == 403, r.text
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(shown), "parentId": 999999})
    assert r.status_code == 404 and "parentId" in r.text
