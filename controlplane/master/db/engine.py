"""Async engine and session factory for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine


def async_url(url: str) -> str:
    """Map a plain URL onto the async driver this project ships with."""
    if url.startswith("sqlite:"):
        return "sqlite+aiosqlite:" + url[len("sqlite:"):]
    for prefix in ("postgresql://", "postgres://", "postgresql+psycopg://", "postgresql+psycopg2://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix):]
    return url


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


SQLITE_BUSY_TIMEOUT_S = 30.0


def make_engine(url: str) -> AsyncEngine:
    url = async_url(url)
    if is_sqlite(url):
        engine = create_async_engine(url, connect_args={"timeout": 30}, hide_parameters=True)

        @event.listens_for(engine.sync_engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            # WAL lets readers run beside the writer. synchronous=NORMAL: a commit is written to the
            # WAL (in the OS's page cache) before the 200, so it survives the master's process being
            # killed (kill -9), which is the durability the master promises; the WAL is fsynced at
            # checkpoints, so a power loss or kernel crash may lose the last commits (FULL would
            # fsync on every commit: one disk flush per acknowledged batch).
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute(f"PRAGMA busy_timeout={int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
            # We issue BEGIN ourselves (below), so write transactions can take the lock up front.
            dbapi_conn.isolation_level = None

        @event.listens_for(engine.sync_engine, "begin")
        def _begin(conn: Any) -> None:
            # A deferred transaction that reads and then writes fails at once with "database is
            # locked" when another writer won meanwhile (busy_timeout does not help there), so
            # write transactions take the write lock at BEGIN; reads stay deferred and never wait.
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE_OPTION) else "BEGIN")

        return engine
    # Up to 40 connections (PostgreSQL's default max_connections is 100): PG_WRITE_SLOTS for write
    # transactions, the rest for reads, so a list is never queued behind a burst of metric writes.
    # All 40 stay open once made: overflow connections are closed on return, and under load the
    # master spent a few percent of its CPU opening new ones.
    # hide_parameters: a database error's text never carries the values bound to it (what users sent:
    # names, passwords' hashes, tokens' hashes), so it may be logged.
    return create_async_engine(url, pool_size=40, max_overflow=0, pool_pre_ping=True, hide_parameters=True)


def describe_error(exc: DBAPIError) -> str:
    """A database error for the log without any value bound to its statement: the driver's error
    class and SQLSTATE, the statement's start and where in the master it was run (a driver's own
    message may quote a parameter, e.g. asyncpg's "invalid input for query argument $1: 'x'")."""
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "sqlite_errorname", None) or ""
    statement = " ".join(str(exc.statement or "").split())[:200]
    frames = [f"{f.filename.rsplit('/controlplane/', 1)[-1]}:{f.lineno} {f.name}"
              for f in traceback.extract_tb(exc.__traceback__) if "/controlplane/" in f.filename][-3:]
    return (f"database error {type(orig).__name__}{f' ({code})' if code else ''} in {statement!r}"
            f" at {' < '.join(reversed(frames)) or 'an unknown place'}")


# Write transactions at once on PostgreSQL. The master is one process: a few more transactions in
# flight than it has cores keep the database busy while it does Python work; more only wait for
# pool connections, and the pool's queue lets a newcomer overtake a waiter, so under load a few
# writes waited seconds while most took milliseconds. Writes wait for a slot in arrival order.
PG_WRITE_SLOTS = 16


WRITE_OPTION = "controlplane_write"

T = TypeVar("T")


async def to_the_end(step: Awaitable[T]) -> T:
    """Runs a transaction's BEGIN, COMMIT, ROLLBACK or close to its end even when the caller is
    cancelled meanwhile, then passes the cancel on. Cut off half-way, the driver's thread still
    finishes it, but SQLAlchemy no longer knows the connection's state: on SQLite a connection
    nobody uses kept the write lock, and every later write waited out busy_timeout."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


class SessionFactory(async_sessionmaker[Any]):
    """``factory()`` opens a read session; ``factory.begin()`` a write transaction, which on
    SQLite takes the write lock at BEGIN."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__(engine, expire_on_commit=False)
        self._write_bind = engine.execution_options(**{WRITE_OPTION: True})
        # SQLite has one writer at a time. Writers queued on SQLite's own lock poll it with growing
        # sleeps (busy_timeout), so under load a write waits far longer than the writes ahead of it
        # take; queued here they go in turn, as soon as the one before commits. PostgreSQL: see
        # PG_WRITE_SLOTS. (asyncio's Semaphore is first come, first served.)
        self._write_turn = asyncio.Semaphore(1 if engine.dialect.name == "sqlite" else PG_WRITE_SLOTS)

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncSession]:  # type: ignore[override]
        async with contextlib.AsyncExitStack() as turn:  # the write turn, given back however this ends
            try:
                async with asyncio.timeout(SQLITE_BUSY_TIMEOUT_S):
                    await turn.enter_async_context(self._write_turn)
            except TimeoutError:
                pass  # a write nested in others (none should be): SQLite's busy_timeout, the pool's timeout decide
            session = self(bind=self._write_bind)
            try:
                await to_the_end(session.begin())
                yield session
                await to_the_end(session.commit())
            except BaseException:
                await to_the_end(session.rollback())
                raise
            finally:
                await to_the_end(session.close())


def make_sessionmaker(engine: AsyncEngine) -> SessionFactory:
    return SessionFactory(engine)
