"""When the database is unreachable or its disk is full: what the master answers and logs.

``cause_of(exc)`` says whether an exception means the database cannot be used right now (a
connection refused or lost, a failover, SQLite's "disk I/O error", a full disk: ENOSPC or
"database or disk is full") rather than a bug: ``"database unavailable: ..."`` or
``"disk full: ..."``, a sentence without any value bound to a statement. The API answers such an
error with 503, that sentence and ``Retry-After`` (``app.py``); background loops wait and retry.

``DatabaseHealth`` logs one line when the database becomes unusable and one when it is usable
again, however many requests and loops hit it meanwhile (the measured outage of 35 s wrote 31,874
log lines and 262 tracebacks before).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable

from sqlalchemy import exc as sa_exc

log = logging.getLogger("controlplane.master.database")

RETRY_AFTER_S = 5  # what a 503 tells a client to wait
DISK_FULL = "disk full"
UNAVAILABLE = "database unavailable"

# Driver errors that mean "no usable connection": asyncpg's and the standard library's, by name so
# that neither driver must be importable.
_CONNECTION_ERRORS = {
    "PostgresConnectionError", "ConnectionDoesNotExistError", "CannotConnectNowError", "ConnectionFailureError",
    "ConnectionRejectionError", "ClientCannotConnectError", "TooManyConnectionsError", "AdminShutdownError",
    "CrashShutdownError", "ServerNotReadyError",
}
_NET_ERRNOS = (errno.ECONNREFUSED, errno.ECONNRESET, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT)
_DRIVER_DIRS = ("/sqlalchemy/", "/asyncpg/", "/aiosqlite/")
# SQLSTATE classes 08 (connection exception) and 57P (operator intervention: shutdown, failover).
_UNAVAILABLE_SQLSTATES = ("08", "57P")
_SQLITE_FULL = ("database or disk is full", "sqlite_full")
_SQLITE_IO = ("disk i/o error", "sqlite_ioerr", "unable to open database file")


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc``, the driver error SQLAlchemy wrapped (``orig``) and what caused them, once each."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(seen) < 12:
        e = todo.pop(0)
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo += [getattr(e, "orig", None), e.__cause__, e.__context__]
    return seen


def _from_driver(exc: BaseException) -> bool:
    """Raised while the database driver or SQLAlchemy ran: a plain ConnectionRefusedError or
    TimeoutError from elsewhere (a proxied task, a cloud API) is not the database's."""
    tb = exc.__traceback__
    while tb is not None:
        if any(d in tb.tb_frame.f_code.co_filename for d in _DRIVER_DIRS):
            return True
        tb = tb.tb_next
    return False


def cause_of(exc: BaseException) -> str | None:
    """``"disk full: ..."`` or ``"database unavailable: ..."`` for an error that says the database
    cannot be used now; None for anything else (a bug, a constraint, bad SQL)."""
    chain = _chain(exc)
    for e in chain:
        text = str(e).lower()
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            return f"{DISK_FULL}: no space left on the master's disk"
        if any(m in text for m in _SQLITE_FULL) or getattr(e, "sqlite_errorname", "") == "SQLITE_FULL":
            return f"{DISK_FULL}: the database or its disk is full"
    for e in chain:
        name = type(e).__name__
        text = str(e).lower()
        sqlstate = str(getattr(e, "sqlstate", "") or "")
        if isinstance(e, sa_exc.DBAPIError) and e.connection_invalidated:
            return f"{UNAVAILABLE}: the connection to it was lost"
        if isinstance(e, sa_exc.TimeoutError):  # the pool gave no connection in time: they all hang
            return f"{UNAVAILABLE}: no connection to it became free in time"
        if name in _CONNECTION_ERRORS or sqlstate.startswith(_UNAVAILABLE_SQLSTATES):
            return f"{UNAVAILABLE}: {name}"
        if any(m in text for m in _SQLITE_IO) or str(getattr(e, "sqlite_errorname", "")).startswith("SQLITE_IOERR"):
            return f"{UNAVAILABLE}: disk I/O error"
        network = isinstance(e, ConnectionError | TimeoutError) or (isinstance(e, OSError) and e.errno in _NET_ERRNOS)
        if network and _from_driver(e):
            return f"{UNAVAILABLE}: {e.strerror or name}" if isinstance(e, OSError) else f"{UNAVAILABLE}: {name}"
    return None


class DatabaseHealth:
    """Up or down, and since when; one log line per change of state.

    ``failed(cause)`` is called wherever an error ``cause_of`` recognises reaches the top (the API's
    handler, a background loop); ``succeeded()`` wherever a transaction committed (the orchestrator's
    tick, twice a second). A full disk counts as back only once ``has_space()`` says so, so a read
    that succeeds while writes still fail does not make the log flap."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 has_space: Callable[[], bool] = lambda: True) -> None:
        self.clock = clock
        self.has_space = has_space
        self.cause: str | None = None
        self.down_since: float | None = None
        self.failures = 0  # errors seen during this outage

    @property
    def down(self) -> bool:
        return self.cause is not None

    def failed(self, cause: str) -> None:
        self.failures += 1
        if self.cause is None:
            self.cause, self.down_since = cause, self.clock()
            log.error("%s; API requests that need it answer 503 and work waits until it is back", cause)
        elif cause != self.cause and cause.startswith(DISK_FULL) != self.cause.startswith(DISK_FULL):
            log.error("%s (was: %s)", cause, self.cause)
            self.cause = cause

    def succeeded(self) -> None:
        if self.cause is None:
            return
        if self.cause.startswith(DISK_FULL) and not self.has_space():
            return
        took = self.clock() - (self.down_since or self.clock())
        log.warning("database available again after %.1fs (%d failed request(s) and loop pass(es) meanwhile)",
                    took, self.failures)
        self.cause, self.down_since, self.failures = None, None, 0


def free_space_check(path: str, minimum_bytes: int = 1 << 20) -> Callable[[], bool]:
    """``has_space`` for a database whose files live under ``path`` (SQLite): at least a MiB free."""
    import shutil

    def has_space() -> bool:
        try:
            return shutil.disk_usage(path).free >= minimum_bytes
        except OSError:
            return True  # nothing to say: let a successful write decide

    return has_space
