"""Where the master's task proxy sends ``/proxy/{task_id}/...``, and when each task was last used.

All of it is one master's (``ProxySessions``, ``RuntimeCore.proxy``). A kind of task that serves
HTTP (a notebook, a TensorBoard) has a resolver, added where the master is wired
(``app.build_runtime``): given a session and a task id, it answers the task's ``ProxyTarget`` (who
owns it, the address and port it listens on, the path prefix it serves under) or None when the
id is not one of its tasks. ``resolve`` asks the resolvers in the order they were added; the
first answer wins.

The activity record keeps, per task id, the monotonic time of the last request or WebSocket
frame the proxy passed (in either direction), so an idle-timeout loop can end tasks nobody
uses: ``idle_for(task_id)`` is the seconds since then, None when the proxy never carried any.
It lives in this process's memory (a restarted master starts every task's clock afresh), and
``forget`` drops a task's entry once it has ended.

The proxy's own sign-in (the proxy listens on an origin of its own, ``api/task_proxy.py``):
``mint_ticket`` gives a signed-in user a one-time ticket for one task, good for
``TICKET_TTL_S``; the proxy's origin redeems it (``redeem_ticket``) for a proxy session
(``new_session``, ``session_token``) that names the user's own master token and that task only,
for at most ``SESSION_TTL_S``. Both live in this process's memory: a restarted master asks the
browser to open the task from the master again.

A task's secret (``task_secret``): what its web server requires on every request, derived from
its job's own SSH host key (stored with the job, never in an answer) and handed to it in
``SECRET_ENV``; the proxy adds it as ``ProxyTarget.headers``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from controlplane.master.errors import NotFound

SECRET_ENV = "DET_TASK_PROXY_SECRET"  # a served task's secret, in its environment
SECRET_HEADER = "Authorization"  # how the proxy hands it to the task: "token <secret>" (Jupyter's own form)


def task_secret(job_key: str, job_id: str) -> str:
    """The secret a served task's web server requires: an HMAC of its job id under its job's own
    SSH host key, so only the master and the task itself know it."""
    if not job_key:
        raise ValueError(f"job {job_id} has no key to derive its proxy secret from")
    return hmac.new(job_key.encode(), f"task-proxy:{job_id}".encode(), hashlib.sha256).hexdigest()


def secret_headers(secret: str) -> tuple[tuple[str, str], ...]:
    return ((SECRET_HEADER, f"token {secret}"),)


@dataclass(frozen=True)
class ProxyTarget:
    """A task's HTTP endpoint: ``http://{host}:{port}{base_path}{rest of the path}``.

    ``base_path`` is prefixed to what follows ``/proxy/{task_id}`` ("" or "/" for none); a task
    told to serve under ``/proxy/{task_id}/`` (Jupyter's ``base_url``, TensorBoard's
    ``--path_prefix``) gets ``base_path=f"/proxy/{task_id}"``. ``headers`` are added to every
    request and WebSocket handshake the proxy passes (the task's secret)."""

    owner_id: int
    host: str
    port: int
    base_path: str = ""
    headers: tuple[tuple[str, str], ...] = ()

    def path_for(self, rest: str) -> str:
        """The path to request on the task for ``rest`` (what followed ``/proxy/{task_id}``)."""
        if not rest.startswith("/"):
            rest = "/" + rest
        return self.base_path.rstrip("/") + rest


Resolver = Callable[[AsyncSession, str], Awaitable[ProxyTarget | None]]

TICKET_TTL_S = 60.0
SESSION_TTL_S = 8 * 3600.0
MAX_ENTRIES = 10_000  # of each kind; the oldest go first past it


@dataclass(frozen=True)
class _Grant:
    user_token: str  # the master token it was minted from: signing out of the master ends it
    task_id: str
    expires: float


def _put(store: dict[str, _Grant], grant: _Grant) -> str:
    now = time.monotonic()
    for key in [k for k, g in store.items() if g.expires <= now]:
        del store[key]
    while len(store) >= MAX_ENTRIES:
        del store[next(iter(store))]
    key = secrets.token_urlsafe(32)
    store[key] = grant
    return key


def _get(store: dict[str, _Grant], key: str, task_id: str) -> str | None:
    grant = store.get(key)
    if grant is None or grant.task_id != task_id:
        return None
    if grant.expires <= time.monotonic():
        store.pop(key, None)
        return None
    return grant.user_token


class ProxySessions:
    """One master's proxy state (``RuntimeCore.proxy``): its resolvers (wired in
    ``app.build_runtime``), each task's last traffic, and the proxy's tickets and sessions."""

    def __init__(self) -> None:
        self._resolvers: list[Resolver] = []
        self._last_activity: dict[str, float] = {}
        self._tickets: dict[str, _Grant] = {}
        self._sessions: dict[str, _Grant] = {}

    # ---- where a task is -----------------------------------------------------------------
    def add_resolver(self, fn: Resolver) -> None:
        """Ask ``fn`` after the resolvers already added (adding one twice changes nothing)."""
        if fn not in self._resolvers:
            self._resolvers.append(fn)

    def remove_resolver(self, fn: Resolver) -> None:
        if fn in self._resolvers:
            self._resolvers.remove(fn)

    def resolvers(self) -> tuple[Resolver, ...]:
        return tuple(self._resolvers)

    async def resolve(self, sessions: async_sessionmaker[Any], task_id: str) -> ProxyTarget:
        """The target of ``task_id``, from the first resolver that knows it; NotFound naming it else."""
        async with sessions() as session:
            for fn in tuple(self._resolvers):
                target = await fn(session, task_id)
                if target is not None:
                    return target
        raise NotFound(f"task {task_id} not found: no running task serves a proxy under that id")

    # ---- activity ----------------------------------------------------------------------------
    def touch(self, task_id: str, now: float | None = None) -> None:
        """Record traffic for ``task_id`` (a proxied request, a chunk of its answer, a frame)."""
        if task_id not in self._last_activity and len(self._last_activity) >= MAX_ENTRIES:
            del self._last_activity[next(iter(self._last_activity))]  # bounded: a task never forgotten goes
        self._last_activity[task_id] = time.monotonic() if now is None else now

    def idle_for(self, task_id: str, now: float | None = None) -> float | None:
        """Seconds since the proxy last carried traffic for ``task_id``; None if it never did."""
        last = self._last_activity.get(task_id)
        if last is None:
            return None
        return max(0.0, (time.monotonic() if now is None else now) - last)

    def forget(self, task_id: str) -> None:
        """Drop a task's activity record (call it when the task ends)."""
        self._last_activity.pop(task_id, None)

    # ---- the proxy's own sign-in -----------------------------------------------------------
    def mint_ticket(self, user_token: str, task_id: str) -> str:
        """A one-time ticket for ``task_id`` on the proxy's origin, for the holder of ``user_token``."""
        return _put(self._tickets, _Grant(user_token, task_id, time.monotonic() + TICKET_TTL_S))

    def redeem_ticket(self, ticket: str, task_id: str) -> str | None:
        """The master token a ticket for ``task_id`` was minted from (once); None when unknown,
        used, expired or for another task."""
        token = _get(self._tickets, ticket, task_id)
        if token is not None:
            self._tickets.pop(ticket, None)
        return token

    def new_session(self, user_token: str, task_id: str) -> str:
        """A proxy session for ``task_id`` (the value of its proxy cookie)."""
        return _put(self._sessions, _Grant(user_token, task_id, time.monotonic() + SESSION_TTL_S))

    def session_token(self, session: str, task_id: str) -> str | None:
        """The master token behind a proxy session for ``task_id``; None when unknown or expired."""
        return _get(self._sessions, session, task_id)
