"""Fixtures shared by the whole suite.

``db_url`` runs a test once on SQLite and once on PostgreSQL (127.0.0.1:5432, trust auth),
each time on a fresh, empty database that is dropped afterwards. Set
DET_TEST_DATABASES=sqlite (or postgres) to run one backend only.
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

PG_ADMIN_URL = os.environ.get("DET_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = [b.strip() for b in os.environ.get("DET_TEST_DATABASES", "sqlite,postgres").split(",") if b.strip()]


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def _run(coro) -> None:  # noqa: ANN001
    """asyncio.run, in a thread of its own where this thread already runs a loop (Playwright's
    sync API, which the browser tests hold open for the whole session)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/master.db"
        return
    name = f"det_test_{uuid.uuid4().hex[:12]}"
    _run(_pg_admin(f'CREATE DATABASE "{name}"'))
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        _run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
