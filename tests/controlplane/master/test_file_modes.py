"""The master's data dir is 0700 and its SQLite files 0600 (they hold configs with storage keys
and token hashes), whatever the umask, including files an older master left 0644."""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from controlplane.master.app import create_app, start_runtime, stop_runtime
from controlplane.master.file_modes import sqlite_path
from controlplane.master.settings import MasterSettings
from tests.controlplane.master.conftest import JOIN_TOKEN, create_experiment


@asynccontextmanager
async def login_client(app) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://m") as client:
        r = await client.post("/api/v1/auth/login", json={"username": "determined", "password": ""})
        client.headers["Authorization"] = f"Bearer {r.json()['token']}"
        yield client


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_data_dir_and_sqlite_files_are_private(db_url, tmp_path):
    data_dir = tmp_path / "master"
    data_dir.mkdir(mode=0o755)
    data_dir.chmod(0o755)
    db = sqlite_path(db_url)
    if db is not None:  # a database an older master created world-readable
        db.touch()
        db.chmod(0o644)
    old = os.umask(0o022)
    try:
        app = create_app(MasterSettings(data_dir=data_dir, db_url=db_url, join_token=JOIN_TOKEN))
        rt = app.state.runtime
        await start_runtime(rt)
        try:
            async with login_client(app) as api:
                await create_experiment(api)  # writes: the WAL and its index exist now
            assert mode(data_dir) == 0o700
            if db is not None:
                files = [db.with_name(db.name + s) for s in ("", "-wal", "-shm")]
                assert all(f.exists() for f in files)
                assert {f.name: mode(f) for f in files} == {f.name: 0o600 for f in files}
        finally:
            await stop_runtime(rt)
    finally:
        os.umask(old)


def test_a_new_sqlite_database_is_born_private(tmp_path):
    from controlplane.master.file_modes import private_sqlite_files

    old = os.umask(0)
    try:
        private_sqlite_files(f"sqlite+aiosqlite:///{tmp_path}/sub/new.db")
    finally:
        os.umask(old)
    assert mode(tmp_path / "sub" / "new.db") == 0o600
    assert sqlite_path("postgresql://u:p@h/db") is None and sqlite_path("sqlite://") is None
