"""Who may read a user's files: their experiment's code, their notebooks' and commands' contexts, their
checkpoints. Each route that returns files is asked by every kind of caller; then every GET route of the
served schema is walked by the callers who must not see the code, and no answer may carry it.

The rule (controlplane/master/authz.py): code (a model definition, a task's context, an OpenPAI job's
spec) is its owner's or an admin's, and a task token reads only its own task's context; checkpoints are
shared like Determined's (any signed-in user, the model registry), a task token only its own experiment's.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import tarfile
import uuid
from dataclasses import dataclass

import yaml

from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import CONFIG, FakeAgent
from tests.controlplane.master.test_authorization import Work, bearer, calls_for, login, task_headers

EXP_CODE = f"experiment-code-{uuid.uuid4().hex}"
NOTEBOOK_CODE = f"notebook-code-{uuid.uuid4().hex}"
MARKERS = (EXP_CODE.encode(), NOTEBOOK_CODE.encode())
OK, REFUSED = (200,), (403, 404)


def v1_files(files: dict[str, str]) -> list[dict]:
    return [{"path": p, "type": 48, "content": base64.b64encode(c.encode()).decode(), "mtime": "0",
             "uid": 0, "gid": 0, "mode": 0o644} for p, c in files.items()]


@dataclass
class Seeded:
    headers: dict[str, dict]  # caller -> request headers
    exp_id: int
    trial: wire.StartTask  # the owner's trial
    notebook: wire.StartTask  # the owner's notebook
    notebook_id: str
    ckpt: str


async def seed(api) -> Seeded:
    admin = await login(api, "admin")
    for name, role in (("nora", "user"), ("vera", "viewer")):
        r = await api.post("/api/v1/users", headers=bearer(admin),
                           json={"user": {"username": name, "role": role}, "password": "pw", "isHashed": False})
        assert r.status_code == 200, r.text
    agent = FakeAgent(api.rt, slots=2)
    await agent.register()
    config = {**CONFIG, "searcher": {**CONFIG["searcher"], "max_trials": 1}}  # type: ignore[dict-item]
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump(config),
                                                    "modelDefinition": v1_files({"train.py": f"# {EXP_CODE}\n"})})
    assert r.status_code == 200, r.text
    exp_id = r.json()["experiment"]["id"]
    trial = await agent.next_message()
    assert isinstance(trial, wire.StartTask), trial
    await agent.start(trial)
    r = await api.post("/api/v1/notebooks", json={"config": {}, "files": v1_files({"nb.py": f"# {NOTEBOOK_CODE}\n"})})
    assert r.status_code == 200, r.text
    notebook_id = r.json()["notebook"]["id"]
    notebook = await agent.next_message()
    assert isinstance(notebook, wire.StartTask), notebook
    await agent.start(notebook)
    ckpt = str(uuid.uuid4())
    files = api.rt.settings.data_dir / "checkpoints" / ".staging" / trial.allocation_id / ckpt  # published on report
    files.mkdir(parents=True)
    (files / "state.pt").write_bytes(b"weights")
    r = await api.post("/api/v1/checkpoints", headers=task_headers(trial.session_token), json={
        "uuid": ckpt, "taskId": trial.task_id, "allocationId": trial.allocation_id, "state": "STATE_COMPLETED",
        "resources": {"state.pt": "7"}, "metadata": {"steps_completed": 1}})
    assert r.status_code == 200, r.text
    headers = {"admin": bearer(admin), "owner": dict(api.headers), "other user": bearer(await login(api, "nora", "pw")),
               "viewer": bearer(await login(api, "vera", "pw"))}
    return Seeded(headers, exp_id, trial, notebook, notebook_id, ckpt)


def leaked(content: bytes) -> list[str]:
    """The markers of the owner's code found in an answer: as text, in a tar.gz, or a base64 tar.gz in JSON."""
    def scan(data: bytes) -> set[bytes]:
        found = {m for m in MARKERS if m in data}
        if data[:2] == b"\x1f\x8b":
            try:
                found |= scan(gzip.decompress(data))
            except (OSError, EOFError):
                pass
        return found

    found = scan(content)
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    stack = [body]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str) and len(item) >= 16:
            try:
                found |= scan(base64.b64decode(item, validate=True))
            except ValueError:
                pass
    return sorted(m.decode() for m in found)


def files_in(content: bytes) -> bytes:
    """Every file's bytes of a tar.gz answer (a b64Tgz JSON answer or the archive itself)."""
    if content[:1] == b"{":
        content = base64.b64decode(json.loads(content)["b64Tgz"])
    with tarfile.open(fileobj=io.BytesIO(content), mode="r:gz") as tar:
        return b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())  # type: ignore[union-attr]


async def test_only_the_owner_an_admin_or_the_task_itself_reads_a_users_code(api):
    s = await seed(api)
    trial_token, notebook_token = (task_headers(s.trial.session_token), task_headers(s.notebook.session_token))
    callers = {**s.headers, "own task": {}, "another task": {}}
    users_only = {"admin": OK, "owner": OK, "other user": REFUSED, "viewer": REFUSED}
    # route -> (its own task's token, another task's token, who may read it, what its files hold)
    routes = {
        f"/api/v1/tasks/{s.trial.task_id}/context_directory":
            (trial_token, notebook_token, {**users_only, "own task": OK, "another task": REFUSED}, EXP_CODE),
        f"/api/v1/tasks/{s.notebook.task_id}/context_directory":
            (notebook_token, trial_token, {**users_only, "own task": OK, "another task": REFUSED}, NOTEBOOK_CODE),
        # A task reads its code through its own context_directory, never through its experiment.
        f"/api/v1/experiments/{s.exp_id}/model_def":
            (trial_token, notebook_token, {**users_only, "own task": REFUSED, "another task": REFUSED}, EXP_CODE),
        f"/checkpoints/{s.ckpt}":
            (trial_token, notebook_token, {"admin": OK, "owner": OK, "other user": OK, "viewer": OK,
                                           "own task": OK, "another task": REFUSED}, "weights"),
    }
    wrong = []
    for url, (own, other, expect, content) in routes.items():
        for caller in callers:
            headers = {"own task": own, "another task": other}.get(caller) or callers[caller]
            r = await api.get(url, headers=headers)
            if r.status_code not in expect[caller]:
                wrong.append(f"{caller}: GET {url} answered {r.status_code}, want {expect[caller]}: {r.text[:120]}")
            elif r.status_code == 200 and content.encode() not in files_in(r.content):
                wrong.append(f"{caller}: GET {url} answered 200 without the files")
    assert not wrong, "\n".join(wrong)

    # No other route hands the code to those who may not read it: every GET of the schema, with the owner's ids.
    work = Work(user_id=1, username="determined", exp_id=s.exp_id, trial_id=int(s.trial.env["DET_TRIAL_ID"]),
                alloc_id=s.trial.allocation_id, task_id=s.trial.task_id, job_id=s.notebook_id, ckpt=s.ckpt,
                spare_ckpt=s.ckpt, model="none", template="none", task_token="", workspace_id=1, project_id=1,
                pai_job="none", commands={k: s.notebook_id for k in ("command", "shell", "notebook", "tensorboard")})
    gets = [c for c in calls_for(api._transport.app, work) if c.method == "GET"]
    assert len(gets) > 50, [c.path for c in gets]
    outsiders = {"other user": s.headers["other user"], "viewer": s.headers["viewer"], "another task": notebook_token}
    for caller, headers in outsiders.items():
        for call in gets:
            r = await api.get(call.url, params=call.params, headers=headers)
            if found := leaked(r.content):
                wrong.append(f"{caller}: GET {call.path} answered {r.status_code} with the owner's code {found}")
    assert not wrong, "\n".join(wrong)
