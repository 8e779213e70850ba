"""The experiment pages with the in-process app: list filters and bounds, detail (config redacted,
unknown id a 404 page), trial logs polled after an id, the live block alone for htmx, and the
chart data downsampled by the database."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert, update

from controlplane.master.db.models import Metric, TaskLog, Trial
from tests.controlplane.master.conftest import CONFIG, create_experiment


async def _trial_of(api, exp_id: int) -> int:
    r = await api.get(f"/api/v1/experiments/{exp_id}/trials")
    return r.json()["trials"][0]["id"]


async def _metrics(api, trial_id: int, values: list[float], group: str = "training") -> None:
    now = datetime.now(UTC)
    async with api.rt.sessions.begin() as session:
        await session.execute(insert(Metric), [
            {"trial_id": trial_id, "trial_run_id": 0, "group": group, "steps_completed": i + 1,
             "metrics": {"loss": v, "note": "x"}, "report_time": now} for i, v in enumerate(values)])


async def test_list_filters_sorts_and_pages(api):
    a = await create_experiment(api, {**CONFIG, "name": "alpha"})
    b = await create_experiment(api, {**CONFIG, "name": "beta <b>"})
    assert (await api.put(f"/api/v1/experiments/{b}/labels/tuned")).status_code == 200
    assert (await api.post(f"/api/v1/experiments/{a}/pause")).status_code == 200

    page = (await api.get("/experiments")).text
    assert f'data-experiment="{a}"' in page and f'data-experiment="{b}"' in page
    assert "beta &lt;b&gt;" in page and "<b>" not in page.split("<main>")[1]  # escaped
    assert f'data-api="POST /api/v1/experiments/{a}/activate"' in page  # paused: activate, not pause
    assert f'data-api="POST /api/v1/experiments/{b}/pause"' in page
    for query, shown, hidden in (("label=tuned", b, a), ("state=PAUSED", a, b), ("q=alpha", a, b),
                                 (f"q={b}", b, a), ("owner=determined&q=beta", b, a)):
        text = (await api.get(f"/experiments?{query}")).text
        assert f'data-experiment="{shown}"' in text and f'data-experiment="{hidden}"' not in text, query
    text = (await api.get("/experiments?sort=name&order=asc&limit=1")).text
    assert f'data-experiment="{a}"' in text and f'data-experiment="{b}"' not in text and 'data-total="2"' in text
    text = (await api.get("/experiments?sort=name&order=asc&limit=1&offset=1")).text
    assert f'data-experiment="{b}"' in text


async def test_list_params_are_bounded(api):
    for query, field in (("limit=201", "limit"), ("offset=-1", "offset"), ("state=NOPE", "state"),
                         ("sort=password", "sort"), ("q=" + "x" * 256, "q")):
        r = await api.get(f"/experiments?{query}")
        assert r.status_code == 400 and field in r.text, (query, r.text)


async def test_live_block_alone_for_htmx(api):
    await create_experiment(api)
    r = await api.get("/experiments", headers={"HX-Request": "true", "HX-Target": "live"})
    assert r.status_code == 200 and r.text.lstrip().startswith('<div id="live"') and "<html" not in r.text


async def test_detail_redacts_config_and_unknown_ids_are_404_pages(api):
    config = {**CONFIG, "environment": {"environment_variables": ["AWS_SECRET_ACCESS_KEY=hunter2"]}}
    exp_id = await create_experiment(api, config)
    page = await api.get(f"/experiments/{exp_id}")
    assert page.status_code == 200 and "hunter2" not in page.text and "AWS_SECRET_ACCESS_KEY=********" in page.text
    trial_id = await _trial_of(api, exp_id)
    assert f'href="/trials/{trial_id}"' in page.text
    for path in ("/experiments/999999", "/trials/999999", "/trials/999999/logs"):
        r = await api.get(path)
        assert r.status_code == 404 and "text/html" in r.headers["content-type"], path
    assert (await api.get("/experiments/0")).status_code == 400


async def test_trial_page_logs_follow_after_an_id_with_filters(api):
    exp_id = await create_experiment(api)
    trial_id = await _trial_of(api, exp_id)
    now = datetime.now(UTC)

    async def log(line: str, rank: int, level: str = "LOG_LEVEL_INFO") -> None:
        async with api.rt.sessions.begin() as session:
            await session.execute(insert(TaskLog), [{"task_id": "t", "trial_id": trial_id, "rank_id": rank,
                                                     "level": level, "timestamp": now, "log": line + "\n"}])

    await log("first <line>", 0)
    page = (await api.get(f"/trials/{trial_id}")).text
    assert "first &lt;line&gt;" in page and 'hx-trigger="every 2s"' in page
    last = int(page.split('data-last-id="')[1].split('"')[0])
    await log("second", 1)
    await log("third", 0, "LOG_LEVEL_ERROR")
    poll = (await api.get(f"/trials/{trial_id}/logs?after={last}")).text
    assert "second" in poll and "third" in poll and "first" not in poll and 'hx-swap-oob="beforeend:#log-lines"' in poll
    only = (await api.get(f"/trials/{trial_id}/logs?after={last}&rank=0")).text
    assert "third" in only and "second" not in only
    assert "second" not in (await api.get(f"/trials/{trial_id}/logs?after={last}&level=ERROR")).text
    assert "third" not in (await api.get(f"/trials/{trial_id}/logs?after={last}&q=sec")).text
    # Once the trial has ended and nothing is left, the poller stops asking.
    async with api.rt.sessions.begin() as session:
        await session.execute(update(Trial).where(Trial.id == trial_id).values(state="CANCELED"))
    end = (await api.get(f"/trials/{trial_id}/logs?after={last + 1000}")).text
    assert "hx-get" not in end


async def test_series_raw_when_short_and_downsampled_by_buckets_when_long(api):
    exp_id = await create_experiment(api)
    trial_id = await _trial_of(api, exp_id)
    await _metrics(api, trial_id, [1.0 / (i + 1) for i in range(10)])
    r = await api.get(f"/ui/data/trials/{trial_id}/series?metric=loss")
    s = r.json()["series"][0]
    assert r.status_code == 200 and s["x"] == list(range(1, 11)) and s["y"][0] == 1.0 and not s["downsampled"]
    assert (await api.get(f"/ui/data/trials/{trial_id}/series?metric=note")).json()["series"][0]["x"] == []

    long = [float(i % 7) for i in range(3000)]
    long[1234] = 100.0  # a spike min/max buckets keep
    exp2 = await create_experiment(api)
    t2 = await _trial_of(api, exp2)
    await _metrics(api, t2, long)
    s = (await api.get(f"/ui/data/trials/{t2}/series?metric=loss&points=100")).json()["series"][0]
    assert s["downsampled"] and len(s["x"]) <= 100 and max(s["y"]) == 100.0 and min(s["y"]) == 0.0
    assert s["x"] == sorted(s["x"]) and s["x"][0] == 1 and s["x"][-1] == 3000
    t = (await api.get(f"/ui/data/trials/{t2}/series?metric=loss&points=100&x=time")).json()["series"][0]
    assert len(t["x"]) == len(s["x"]) and abs(t["x"][0] - datetime.now(UTC).timestamp()) < 600

    both = (await api.get(f"/ui/data/experiments/{exp_id}/series?metric=loss")).json()["series"]
    assert [len(x["x"]) for x in both] == [10, 0]  # its two trials, the second without reports


async def test_series_params_are_bounded(api):
    exp_id = await create_experiment(api)
    trial_id = await _trial_of(api, exp_id)
    for query, field in (("metric=loss&points=4001", "points"), ('metric=a"b', "metric"), ("metric=loss&x=steps", "x"),
                         ("metric=loss&group=a%20b", "group"), ("", "metric")):
        r = await api.get(f"/ui/data/trials/{trial_id}/series?{query}")
        assert r.status_code == 400 and field in r.text, (query, r.text)
    assert (await api.get("/ui/data/trials/999999/series?metric=loss")).status_code == 404
    assert (await api.get("/ui/data/experiments/999999/series?metric=loss")).status_code == 404


async def test_a_viewer_sees_no_mutating_buttons(api):
    exp_id = await create_experiment(api)
    admin = (await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""})).json()["token"]
    r = await api.post("/api/v1/users", json={"user": {"username": "vera", "role": "viewer"}, "password": "pw",
                                              "isHashed": False}, headers={"Authorization": f"Bearer {admin}"})
    assert r.status_code == 200, r.text
    token = (await api.post("/api/v1/auth/login", json={"username": "vera", "password": "pw"})).json()["token"]
    headers = {"Authorization": f"Bearer {token}"}
    for path in ("/experiments", f"/experiments/{exp_id}"):
        text = (await api.get(path, headers=headers)).text
        assert f'data-experiment="{exp_id}"' in text or path != "/experiments"
        assert "data-api=" not in text and "data-api-form" not in text, path
    assert "data-api-form" in (await api.get(f"/experiments/{exp_id}")).text  # its owner does
