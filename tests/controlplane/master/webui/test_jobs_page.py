"""The Job Queue page: one pool's queue in the order `GET /job-queues-v2` (what `det job list`
reads) gives, Manage Job only on jobs the viewer may edit, a live part that htmx polls alone, and
bounded parameters (a bad one is a 400 naming it, an unknown pool a 404 page)."""

from __future__ import annotations

import re

from tests.controlplane.master.conftest import CONFIG, FakeAgent, create_experiment
from tests.controlplane.master.test_ownership import add_user

SINGLE = {**CONFIG, "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}}}


def _row_ids(html: str) -> list[str]:
    return re.findall(r'<tr data-job-id="([^"]+)"', html)


async def _three_jobs(api) -> list[int]:
    agent = FakeAgent(api.rt, slots=1)
    await agent.register()
    ids = [await create_experiment(api, {**SINGLE, "name": f"job-{n}"}) for n in range(3)]
    await agent.next_message()  # the first runs; the other two wait for the slot
    return ids


async def test_the_queue_in_scheduling_order_with_a_manage_menu_for_the_owner(api):
    await _three_jobs(api)
    listed = [j["full"]["jobId"] for j in (await api.get("/api/v1/job-queues-v2")).json()["jobs"]]
    r = await api.get("/jobs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert _row_ids(r.text) == listed and len(listed) == 3
    assert r.text.count("data-manage-job=") == 3 and '<dialog id="manage-job"' in r.text
    assert "SCHEDULED" in r.text and "QUEUED" in r.text and "0/1" in r.text and "1/1" in r.text
    assert "<script>" not in r.text  # the dialog is wired by /static/jobs.js, never inline


async def test_a_user_sees_no_manage_menu_on_other_users_jobs(api):
    await _three_jobs(api)
    viewer = await add_user(api, "someone-else")
    r = await api.get("/jobs", headers=viewer)
    assert r.status_code == 200 and len(_row_ids(r.text)) == 3
    assert "data-manage-job=" not in r.text


async def test_htmx_polls_get_only_the_live_part_and_pages_are_bounded(api):
    await _three_jobs(api)
    listed = [j["full"]["jobId"] for j in (await api.get("/api/v1/job-queues-v2")).json()["jobs"]]
    r = await api.get("/jobs?pool=default&limit=1&offset=1", headers={"HX-Request": "true", "HX-Target": "live"})
    assert r.status_code == 200
    assert r.text.lstrip().startswith('<div id="live"') and "<html" not in r.text
    assert 'hx-get="/jobs?pool=default&amp;limit=1&amp;offset=1"' in r.text
    assert _row_ids(r.text) == listed[1:2]
    assert '<td class="num">1</td>' in r.text  # its position in the whole queue, not in the page


async def test_bad_parameters_are_4xx_naming_them(api):
    r = await api.get("/jobs?limit=0")
    assert r.status_code == 400 and "limit" in r.json()["message"]
    r = await api.get("/jobs?offset=-1")
    assert r.status_code == 400 and "offset" in r.json()["message"]
    r = await api.get("/jobs?pool=nope")
    assert r.status_code == 404 and "Resource pool nope not found" in r.text


async def test_a_waiting_job_shows_why_under_its_status(api):
    await _three_jobs(api)
    await api.rt.orchestrator.tick()
    reason = "waiting for 1 slot: resource pool &#39;default&#39; has 0 free of 1 slot"
    r = await api.get("/jobs")
    assert r.status_code == 200
    assert r.text.count(f'<small class="muted waiting">{reason}</small>') == 2  # the two queued experiments
    assert f'title="{reason}"' in r.text
