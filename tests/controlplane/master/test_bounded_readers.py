"""Readers cannot starve the API: long streams are capped per user and in all, a follower holds no
database connection while it waits and is woken by new lines, configs are capped in
hyperparameters, lists leave the submitted YAML out, and an oversized body is refused unread."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest
import yaml

from tests.controlplane.master.conftest import CONFIG, create_experiment
from tests.controlplane.master.test_logs_api import post_lines, running


async def until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


class OpenStream:
    """A GET served by the app itself, its body chunks seen as they are sent (httpx's ASGI transport
    would wait for the end of a stream that never ends)."""

    def __init__(self, api, path: str) -> None:
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self.status = 0
        target, _, query = path.partition("?")
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
                 "scheme": "http", "path": target, "raw_path": target.encode(), "query_string": query.encode(),
                 "root_path": "", "client": ("127.0.0.1", 1), "server": ("master", 80),
                 "headers": [(b"host", b"master"), (b"authorization", api.headers["Authorization"].encode())]}
        sent = False
        gone = asyncio.Event()

        async def receive() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            elif message.get("body"):
                self.chunks.put_nowait(message["body"])

        self.task = asyncio.create_task(api._transport.app(scope, receive, send))

    async def lines(self, timeout: float = 20.0) -> list[str]:
        chunk = await asyncio.wait_for(self.chunks.get(), timeout)
        return [json.loads(line)["result"]["log"].strip() for line in chunk.splitlines() if line.strip()]

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def sign_in(api, username: str) -> dict:
    r = await api.post("/api/v1/auth/login", json={"username": username, "password": ""})
    assert r.status_code == 200, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def test_past_the_stream_caps_follows_and_metric_streams_are_429_naming_the_cap(api):
    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    await post_lines(api, start, "one line")
    api.rt.settings.max_streams_per_user = 2
    held = [api.rt.streams.take("user determined", 2, 256) for _ in range(2)]  # two streams of determined's
    try:
        for path in (f"/api/v1/trials/{tid}/logs?follow=true", f"/api/v1/trials/{tid}/logs",
                     f"/api/v1/trials/metrics/trial_metrics?trialIds={tid}&group=training"):
            r = await api.get(path)
            assert r.status_code == 429, (path, r.text)
            assert "at most 2 per user" in r.json()["message"]
        admin = await sign_in(api, "admin")
        r = await api.get(f"/api/v1/trials/{tid}/logs", headers=admin)  # another user still reads
        assert r.status_code == 200 and "one line" in r.text
        r = await api.get(f"/api/v1/trials/{tid}/logs", params={"limit": 10})  # one page needs no slot
        assert r.status_code == 200 and "one line" in r.text
        api.rt.settings.max_streams = 2
        r = await api.get(f"/api/v1/trials/{tid}/logs", headers=admin)
        assert r.status_code == 429 and "at most 2)" in r.json()["message"]
    finally:
        for slot in held:
            slot.release()
    assert api.rt.streams.total == 0  # the admin's finished read gave its slot back


async def test_a_waiting_follower_holds_no_connection_is_woken_by_new_lines_and_frees_its_slot(api):
    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    await post_lines(api, start, "first")
    stream = OpenStream(api, f"/api/v1/trials/{tid}/logs?follow=true")
    try:
        assert await stream.lines() == ["first"]
        assert stream.status == 200 and api.rt.streams.total == 1
        pool = api.rt.engine.sync_engine.pool
        await until(lambda: ("trial-logs", tid) in api.rt.notifier._events and pool.checkedout() == 0,
                    "the follower waiting with no connection checked out")
        await post_lines(api, start, "second")
        assert await stream.lines() == ["second"]
    finally:
        await stream.close()
    await until(lambda: api.rt.streams.total == 0, "the slot of the follower whose client went")


async def test_a_config_over_the_hyperparameter_cap_is_refused_naming_hyperparameters(api):
    api.rt.settings.max_hyperparameters = 3
    three = {"a": 1, "b": {"type": "const", "val": 2}, "group": {"c": {"type": "int", "minval": 1, "maxval": 4}}}
    await create_experiment(api, {**CONFIG, "hyperparameters": three})
    four = {**three, "group": {**three["group"], "d": {"type": "categorical", "vals": [1, 2]}}}
    r = await api.post("/api/v1/experiments", json={"config": yaml.safe_dump({**CONFIG, "hyperparameters": four}),
                                                    "modelDefinition": []})
    assert r.status_code == 400, r.text
    assert "hyperparameters: more than 3 hyperparameters, over the limit of 3" in r.json()["message"]


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
async def test_sixty_thousand_hyperparameters_are_refused_naming_the_field_and_the_limit(api, as_json):
    hps = {f"h{i}": {"type": "int", "minval": 1, "maxval": 10} if i % 20 == 0 else i for i in range(60_000)}
    config = {**CONFIG, "hyperparameters": hps}
    r = await api.post("/api/v1/experiments", json={
        "config": config if as_json else yaml.safe_dump(config, default_flow_style=None), "modelDefinition": []})
    assert r.status_code == 400, r.text
    assert "hyperparameters: more than 1000 hyperparameters, over the limit of 1000" in r.json()["message"]


async def test_a_huge_json_config_is_refused_by_its_size_before_it_is_decoded(api):
    """An 80 MB JSON `config` held the event loop 2.5 s being decoded; its JSON text is measured first."""
    import msgspec

    from controlplane.master.errors import BadRequest
    from controlplane.master.services.experiment_requests import config_value

    with pytest.raises(BadRequest, match="config: 8388609 bytes of JSON, over the limit"):
        config_value(msgspec.Raw(b"[" * (8 * 1024 * 1024 + 1)), 1024 * 1024)  # not JSON: never decoded
    big = {"config": {f"k{i}": i for i in range(1_000_000)}, "modelDefinition": []}
    r = await api.post("/api/v1/experiments", json=big)
    assert r.status_code == 400 and "bytes of JSON, over the limit" in r.json()["message"], r.text
    r = await api.post("/api/v1/experiments", json={"config": 5, "modelDefinition": []})
    assert r.status_code == 400 and "config: must be the YAML text or a JSON object" in r.json()["message"], r.text


async def test_the_experiment_list_leaves_the_submitted_yaml_to_the_experiment_itself(api):
    exp_id = await create_experiment(api, {**CONFIG, "description": "x" * 50_000})
    row = (await api.get("/api/v1/experiments", params={"limit": 10})).json()["experiments"][0]
    assert row["originalConfig"] == "" and row["config"]["searcher"]["name"] == "random"
    one = (await api.get(f"/api/v1/experiments/{exp_id}")).json()["experiment"]
    assert "x" * 50_000 in one["originalConfig"]


async def test_a_body_over_the_cap_is_refused_with_413_before_it_is_read(api):
    sent: list[int] = []

    async def sixty_mib() -> AsyncIterator[bytes]:
        for _ in range(60):
            sent.append(1)
            yield b"x" * (1 << 20)

    r = await api.post("/api/v1/workspaces", content=sixty_mib(),
                       headers={"Content-Length": str(60 << 20), "Content-Type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["message"] == f"request body: larger than this route's limit of {16 << 20} bytes"
    assert len(sent) <= 1  # refused on its Content-Length, not after reading it
    sent.clear()

    async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted while read, cut at the cap
        for _ in range(60):
            sent.append(1)
            yield b"x" * (1 << 20)

    r = await api.post("/api/v1/workspaces", content=chunked(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and len(sent) <= 18


@pytest.mark.timeout(120)
async def test_experiment_creation_takes_a_context_larger_than_the_default_cap(api):
    files = {"train.py": "print('hi')\n", "data.txt": "x" * (15 << 20)}  # 20 MiB once base64-encoded
    assert await create_experiment(api, CONFIG, files) > 0


async def test_readers_of_one_trial_share_a_page_until_new_lines_are_stored(api):
    from sqlalchemy import event

    start = await running(api)
    tid = int(start.env["DET_TRIAL_ID"])
    await post_lines(api, start, "one", "two")
    reads: list[str] = []

    def count(conn, cursor, statement, *args) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM task_logs" in statement:
            reads.append(statement)

    event.listen(api.rt.engine.sync_engine, "before_cursor_execute", count)
    try:
        admin = await sign_in(api, "admin")
        for headers in ({}, admin):  # two users, the same query: one read of the database
            r = await api.get(f"/api/v1/trials/{tid}/logs", headers=headers)
            assert [json.loads(x)["result"]["log"] for x in r.text.splitlines()] == ["one\n", "two\n"]
        assert len(reads) == 1
        await post_lines(api, start, "three")
        r = await api.get(f"/api/v1/trials/{tid}/logs")
        assert [json.loads(x)["result"]["log"] for x in r.text.splitlines()] == ["one\n", "two\n", "three\n"]
        assert len(reads) == 2
    finally:
        event.remove(api.rt.engine.sync_engine, "before_cursor_execute", count)
