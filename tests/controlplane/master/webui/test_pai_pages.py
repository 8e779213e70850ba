"""The OpenPAI portal's pages: every job in every state with filters and pages, a job's status, task
roles, tasks (state, attempt, exit code, ports, the SSH command for those the API gives the key to),
its JSON for its owner only, logs that follow, the submit page prefilled for a clone, and the queue's
GENERIC rows linking to it. The actions themselves are the REST API's (tests/webui/test_pai_portal_ui.py)."""

from __future__ import annotations

import html
import re
from typing import Any

from controlplane.master.services.logs import ingest_agent_logs
from controlplane.wire import agent_protocol as wire
from tests.controlplane.master.conftest import FakeAgent
from tests.controlplane.master.test_ownership import add_user


def job(name: str, command: str = "echo hi; sleep 60", tasks: int = 1) -> dict[str, Any]:
    return {"jobName": name, "image": "default", "retryCount": 1, "jobEnvs": {"API_TOKEN": "s3cret-value"},
            "taskRoles": [{"name": "main", "taskNumber": tasks, "cpuNumber": 1, "memoryMB": 256, "gpuNumber": 0,
                           "command": command}]}


async def submit(api, body: dict[str, Any], headers: dict | None = None, user: str = "determined") -> None:
    r = await api.post(f"/api/v1/user/{user}/jobs", json=body, headers=headers or {})
    assert r.status_code == 202, r.text


def names(text: str) -> list[str]:
    return re.findall(r'<tr data-pai-job="([^"]+)"', text)


async def started_job(api, name: str = "runner") -> tuple[FakeAgent, wire.StartTask]:
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    await submit(api, job(name))
    start = await agent.next_message()
    assert isinstance(start, wire.StartTask), start
    await agent.start(start)
    return agent, start


async def test_every_state_is_listed_newest_first_with_filters_and_pages(api):
    agent, start = await started_job(api, "runner")
    await submit(api, job("stopped-one"))
    r = await api.put("/api/v1/user/determined/jobs/stopped-one/executionType", json={"value": "STOP"})
    assert r.status_code == 202, r.text
    await agent.exit(start.allocation_id, 0)  # runner SUCCEEDED: ended jobs stay listed
    other = await add_user(api, "olga")
    await submit(api, job("hers"), headers=other, user="olga")

    r = await api.get("/pai")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert names(r.text) == ["hers", "stopped-one", "runner"]
    assert 'data-state="SUCCEEDED"' in r.text and 'data-state="STOPPED"' in r.text and 'data-state="WAITING"' in r.text
    assert 'href="/pai/jobs/olga/hers"' in r.text and 'href="/pai" class="active"' in r.text  # the nav's OpenPAI
    assert names((await api.get("/pai/jobs?state=STOPPED")).text) == ["stopped-one"]
    assert names((await api.get("/pai?user=olga")).text) == ["hers"]
    assert names((await api.get("/pai?name=STOP")).text) == ["stopped-one"]  # contains, any case
    assert "No OpenPAI job matches these filters." in (await api.get("/pai?name=%25")).text  # % is no wildcard
    page = (await api.get("/pai?limit=1&offset=1")).text
    assert names(page) == ["stopped-one"] and "2–2 of 3" in page
    assert 'href="/pai?limit=1&amp;offset=0"' in page and 'href="/pai?limit=1&amp;offset=2"' in page
    # Stop only on open jobs the viewer may edit: olga's waiting job, not for determined
    assert "executionType" not in page
    assert 'data-api="PUT /api/v1/user/olga/jobs/hers/executionType"' in (await api.get("/pai", headers=other)).text
    live = await api.get("/pai?state=WAITING", headers={"HX-Request": "true", "HX-Target": "live"})
    assert live.text.lstrip().startswith('<div id="live"') and "<html" not in live.text
    assert (await api.get("/pai?state=NOPE")).status_code == 400
    assert (await api.get("/pai?limit=0")).status_code == 400


async def test_a_job_page_shows_its_tasks_ssh_command_and_json_to_its_owner_only(api):
    _, start = await started_job(api, "runner")
    r = await api.get("/pai/jobs/determined/runner")
    assert r.status_code == 200, r.text
    page = r.text
    assert 'data-pai-state>RUNNING<' in page and 'data-task="main-0" data-state="RUNNING"' in page
    assert "0 of 1" in page  # retries of retryCount
    assert start.allocation_id.endswith(".1") and "agent-1" in page
    ssh_port = re.search(r"ssh:(\d+)", start.env["PAI_CONTAINER_HOST_PORT_LIST"])
    assert ssh_port and f"ssh:{ssh_port[1]}" in page
    assert "det pai ssh runner main-0" in page
    assert "echo hi; sleep 60" in html.unescape(page) and "s3cret-value" in page  # the owner reads the JSON
    assert 'data-api="PUT /api/v1/user/determined/jobs/runner/executionType"' in page
    assert 'href="/pai/submit?user=determined&amp;job=runner"' in page
    assert "PRIVATE KEY" not in page

    other = await add_user(api, "olga")
    theirs = (await api.get("/pai/jobs/determined/runner", headers=other)).text
    assert 'data-task="main-0" data-state="RUNNING"' in theirs
    for secret in ("s3cret-value", "sleep 60", "det pai ssh", "executionType", "/pai/submit?"):
        assert secret not in theirs, secret
    admin = await add_user(api, "ada", role="admin")
    assert "det pai ssh --user determined runner main-0" in (await api.get("/pai/jobs/determined/runner",
                                                                             headers=admin)).text


async def test_task_logs_open_with_the_newest_lines_and_the_poller_brings_the_rest(api):
    agent, start = await started_job(api, "talker")
    await ingest_agent_logs(api.rt, "agent-1", wire.TaskLogs(start.allocation_id, [
        wire.LogLine(timestamp=1.0, message="first <line>"), wire.LogLine(timestamp=2.0, message="second")]))
    page = (await api.get("/pai/jobs/determined/talker?role=main&index=0")).text
    assert (await api.get("/pai/jobs/determined/talker?role=&index=")).status_code == 200  # the blank form
    assert "[main-0] first &lt;line&gt;\n" in page and "[main-0] second\n" in page
    last = int(re.search(r'data-last-id="(\d+)"', page)[1])
    assert f'hx-get="/pai/jobs/determined/talker/logs?after={last}&amp;role=main&amp;index=0"' in page
    await ingest_agent_logs(api.rt, "agent-1", wire.TaskLogs(start.allocation_id, [
        wire.LogLine(timestamp=3.0, message="third")]))
    poll = (await api.get(f"/pai/jobs/determined/talker/logs?after={last}&role=main&index=0")).text
    assert "[main-0] third" in poll and "second" not in poll and 'hx-trigger="every 2s"' in poll
    assert "has no task role other" in (await api.get("/pai/jobs/determined/talker?role=other")).text
    await agent.exit(start.allocation_id, 3)  # FAILED, the retry queued: lines of both attempts are the job's
    r = await api.put("/api/v1/user/determined/jobs/talker/executionType", json={"value": "STOP"})
    assert r.status_code == 202, r.text
    poll = (await api.get("/pai/jobs/determined/talker/logs?after=999999")).text
    assert "hx-get" not in poll  # ended, nothing left: the poller stops
    page = (await api.get("/pai/jobs/determined/talker")).text
    assert "data-pai-state>STOPPED<" in page and "executionType" not in page


async def test_unknown_jobs_are_404_pages(api):
    for path in ("/pai/jobs/determined/nope", "/pai/jobs/nobody/nope/logs", "/pai/submit?user=determined&job=nope"):
        r = await api.get(path)
        assert r.status_code == 404 and "OpenPAI job nope of user" in r.text, path
    assert (await api.get("/pai/jobs/determined/bad%20name")).status_code == 400


async def test_clone_prefills_the_submit_page_with_the_json_under_a_free_name(api):
    await submit(api, job("train"))
    await submit(api, job("train-2"))
    r = await api.get("/pai/submit?user=determined&job=train")
    assert r.status_code == 200
    text = html.unescape(re.search(r"<textarea[^>]*>(.*?)</textarea>", r.text, re.S)[1])
    assert '"jobName": "train-3"' in text and '"command": "echo hi; sleep 60"' in text
    assert 'data-submit-path="/api/v1/user/determined/jobs"' in r.text
    other = await add_user(api, "olga")
    theirs = await api.get("/pai/submit?user=determined&job=train", headers=other)
    assert "only the owner of job train or an admin" in theirs.text and "s3cret-value" not in theirs.text
    empty = await api.get("/pai/submit")
    assert re.search(r"<textarea[^>]*></textarea>", empty.text) and '<script src="/static/pai.js"' in empty.text


async def test_the_queues_generic_rows_link_to_the_portal(api):
    await submit(api, job("queued", tasks=2))
    r = await api.get("/jobs")
    assert r.status_code == 200
    row = re.search(r'<tr data-job-id="[^"]+">(.*?)</tr>', r.text, re.S)[1]
    assert "<td>GENERIC</td>" in row and '<a href="/pai/jobs/determined/queued">queued</a>' in row
