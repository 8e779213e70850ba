"""Test databases: PostgreSQL databases made and dropped through the admin URL, and the migrated,
seeded template each test's master database is copied from (see tests/conftest.py)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PG_ADMIN_URL = os.environ.get("DET_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")


def run_async(coro) -> None:
    """asyncio.run, in a thread of its own where this thread already runs a loop (Playwright's
    sync API, which the browser tests hold open for the whole session; async fixtures)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(coro)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


async def _pg_admin(sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def pg_url(name: str) -> str:
    return f"{PG_ADMIN_URL.rsplit('/', 1)[0]}/{name}"


def create_pg_database(template: str | None = None) -> str:
    """A new database's name; a copy of ``template`` when given."""
    name = f"det_test_{uuid.uuid4().hex[:12]}"
    # FILE_COPY: a few small databases copied whole beat PostgreSQL 15's WAL-logged copy (0.08 s vs 0.2 s).
    copy = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
    run_async(_pg_admin(f'CREATE DATABASE "{name}"{copy}'))
    return name


def drop_pg_database(name: str) -> None:
    run_async(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@contextmanager
def pg_database(template: str | None = None) -> Iterator[str]:
    """A new PostgreSQL database's URL (a copy of ``template`` when given), dropped after."""
    name = create_pg_database(template)
    try:
        yield pg_url(name)
    finally:
        drop_pg_database(name)


@contextmanager
def empty_database(backend: str, directory: Path) -> Iterator[str]:
    """An empty database's URL: an SQLite file in ``directory``, or a new PostgreSQL database dropped after."""
    if backend == "sqlite":
        directory.mkdir(parents=True, exist_ok=True)
        yield f"sqlite:///{directory}/master.db"
        return
    with pg_database() as url:
        yield url


async def _seed(db_url: str, data_dir: Path) -> None:
    """Migrate to head and create the default users, as a master's first start does; then forget
    the cluster's identity so that each copy's master makes its own."""
    from sqlalchemy import delete

    from controlplane.master.app import build_runtime, start_runtime, stop_runtime
    from controlplane.master.db.models import ClusterInfo
    from controlplane.master.settings import MasterSettings

    rt = build_runtime(MasterSettings(data_dir=data_dir, db_url=db_url, join_token="template"))
    rt.autoscaler = None  # only the start-up's database work is wanted
    await start_runtime(rt)
    try:
        async with rt.sessions.begin() as session:
            await session.execute(delete(ClusterInfo))
    finally:
        await stop_runtime(rt)


class TemplateDatabases:
    """One test process's migrated, seeded template database of each backend, made on first use."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._sqlite: Path | None = None
        self._postgres: str | None = None

    @contextmanager
    def copy(self, backend: str, directory: Path) -> Iterator[str]:
        """A copy of the template's URL: an SQLite file in ``directory``, or a PostgreSQL database dropped after."""
        if backend == "sqlite":
            path = directory / "master.db"
            self.copy_sqlite(path)
            yield f"sqlite:///{path}"
            return
        with pg_database(template=self.postgres()) as url:
            yield url

    def copy_sqlite(self, dest: Path) -> None:
        if self._sqlite is None:
            path = self.workdir / "template.db"
            run_async(_seed(f"sqlite:///{path}", self.workdir / "sqlite-data"))
            self._sqlite = path
        dest.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(self._sqlite) as src, sqlite3.connect(dest) as dst:
            src.backup(dst)
        dest.chmod(0o600)

    def postgres(self) -> str:
        """The template database's name (no connection may stay open on it: copies need that)."""
        if self._postgres is None:
            name = create_pg_database()
            run_async(_seed(pg_url(name), self.workdir / "pg-data"))
            self._postgres = name
        return self._postgres

    def drop(self) -> None:
        if self._postgres is not None:
            drop_pg_database(self._postgres)
