"""A database the master cannot use (unreachable, a failover, a full disk) is a 503 naming it with a
Retry-After, logged once when it goes and once when it is back; what agents report meanwhile waits
and is applied afterwards (issue 24 item 5)."""

from __future__ import annotations

import asyncio
import errno
import logging
import sqlite3
import time

import pytest
from sqlalchemy import exc as sa_exc

from controlplane.master.agent_inbox import AgentInbox
from controlplane.master.db import outage
from controlplane.master.db.engine import make_engine, make_sessionmaker
from controlplane.wire import agent_protocol as wire
from tests.support.cluster import free_port


def _wrapped(orig: Exception) -> sa_exc.DBAPIError:
    return sa_exc.OperationalError("INSERT INTO t VALUES (?)", {"v": "secret"}, orig)


@pytest.mark.parametrize(("error", "said"), [
    (_wrapped(sqlite3.OperationalError("database or disk is full")), "disk full: the database or its disk is full"),
    (OSError(errno.ENOSPC, "No space left on device"), "disk full: no space left on the master's disk"),
    (_wrapped(sqlite3.OperationalError("disk I/O error")), "database unavailable: disk I/O error"),
    (sa_exc.TimeoutError("QueuePool limit of size 40 overflow 0 reached"),
     "database unavailable: no connection to it became free in time"),
])
def test_a_full_disk_or_a_failing_database_is_named_as_such(error, said):
    assert outage.cause_of(error) == said


@pytest.mark.parametrize("error", [
    _wrapped(sqlite3.IntegrityError("UNIQUE constraint failed: users.username")),
    ConnectionRefusedError(errno.ECONNREFUSED, "refused by a task's port"),  # not raised by a database driver
    ValueError("a bug"),
])
def test_other_errors_are_not_called_an_outage(error):
    assert outage.cause_of(error) is None


def test_the_log_says_once_when_the_database_goes_and_once_when_it_is_back(caplog):
    now = [100.0]
    health = outage.DatabaseHealth(clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="controlplane.master.database"):
        for _ in range(500):
            health.failed("database unavailable: ConnectionRefusedError")
        now[0] += 30
        health.succeeded()
        health.succeeded()
    lines = [r.getMessage() for r in caplog.records if r.name == "controlplane.master.database"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("database unavailable: ConnectionRefusedError")
    assert "available again after 30.0s (500 failed" in lines[1]
    assert not any(r.exc_info for r in caplog.records)


def test_a_full_disk_is_over_only_once_there_is_room_again(caplog):
    room = [False]
    health = outage.DatabaseHealth(has_space=lambda: room[0])
    health.failed("disk full: the database or its disk is full")
    health.succeeded()  # a read went through, but the disk is still full
    assert health.down
    room[0] = True
    health.succeeded()
    assert not health.down


async def test_api_answers_503_naming_the_unreachable_database_and_logs_it_once(api, caplog):
    rt = api.rt
    good_engine, good_sessions = rt.engine, rt.sessions
    dead = make_engine(f"postgresql://postgres@127.0.0.1:{free_port()}/gone")  # nothing listens there
    rt.engine, rt.sessions = dead, make_sessionmaker(dead)
    try:
        with caplog.at_level(logging.INFO):
            answers = [await api.get(path) for path in ("/api/v1/experiments", "/api/v1/workspaces", "/api/v1/agents",
                                                         "/api/v1/experiments", "/api/v1/models")]
            answers.append(await api.post("/api/v1/auth/login", json={"username": "admin", "password": ""}))
            for r in answers:
                assert r.status_code == 503, (r.request.url, r.status_code, r.text)
                assert r.json()["message"].startswith("database unavailable: "), r.text
                assert r.headers["Retry-After"] == str(outage.RETRY_AFTER_S)
            rt.engine, rt.sessions = good_engine, good_sessions
            deadline = time.monotonic() + 30
            while rt.db_health.down and time.monotonic() < deadline:  # the orchestrator's next tick
                rt.orchestrator.wake()
                await asyncio.sleep(0.1)
            assert (await api.get("/api/v1/experiments")).status_code == 200
    finally:
        rt.engine, rt.sessions = good_engine, good_sessions
        await dead.dispose()
    outage_lines = [r for r in caplog.records if r.name == "controlplane.master.database"]
    assert [r.levelname for r in outage_lines] == ["ERROR", "WARNING"], [r.getMessage() for r in outage_lines]
    assert "available again" in outage_lines[1].getMessage()
    assert not [r for r in caplog.records if r.exc_info or "internal error" in r.getMessage()]


async def test_an_agents_exit_waits_out_the_outage_and_is_applied_in_order(caplog):
    """The socket only reads; the inbox keeps a reported exit while the database refuses it and applies
    it after, and meanwhile the reconciler sees it pending (so it never calls the task lost)."""
    applied: list[object] = []
    down = [True]

    async def apply(msg: object) -> None:
        if down[0]:
            raise ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed") from _wrapped(
                sqlite3.OperationalError("disk I/O error"))
        applied.append(msg)

    health = outage.DatabaseHealth()
    inbox = AgentInbox("agent-1", apply, health)
    logs = wire.TaskLogs(allocation_id="a.1", lines=[])
    exited = wire.TaskExited(allocation_id="a.1", exit_code=0)
    inbox.put(logs)
    inbox.put(exited)
    await asyncio.sleep(0.6)  # a few retries
    assert applied == [] and inbox.pending_exits() == {"a.1"} and health.down
    down[0] = False
    await asyncio.wait_for(inbox.idle.wait(), 30)
    assert applied == [logs, exited] and inbox.pending_exits() == set()
