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
Past ``MAX_TRACKED_TASKS`` the least recently used task's record goes.
It lives in this process's memory (a restarted master starts every task's clock afresh), and
``forget`` drops a task's entry once it has ended.

The proxy's own sign-in (the proxy listens on an origin of its own, ``api/task_proxy.py``):
``mint_ticket`` gives a signed-in user a one-time ticket for one task, good for
``TICKET_TTL_S``; the task's origin redeems it (``redeem_ticket``) for a proxy session
(``new_session``, ``session_token``) that names the user's own master token and that task only,
for at most ``SESSION_TTL_S``. Both are kept per user, at most ``MAX_TICKETS_PER_OWNER`` and
``MAX_SESSIONS_PER_OWNER`` each: past the cap that user's least recently used goes, never another
user's, so nobody's use ends anyone else's sessions. Both live in this process's memory: a
restarted master asks the browser to open the task from the master again.

A task's secret (``task_secret``): what its web server requires on every request, derived from
its job's own SSH host key (stored with the job, never in an answer) and handed to it in
``SECRET_ENV``; the proxy adds it as ``ProxyTarget.headers``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict
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
# Per owner (user id): past the cap, that owner's least recently used go first; nobody else's.
MAX_TICKETS_PER_OWNER = 16
MAX_SESSIONS_PER_OWNER = 64
MAX_TRACKED_TASKS = 10_000  # activity records; the least recently used task's goes first past it
SWEEP_EVERY_S = 60.0  # expired grants of owners who never come back are dropped this often


@dataclass(frozen=True)
class _Grant:
    user_token: str  # the master token it was minted from: signing out of the master ends it
    task_id: str
    owner: int  # the user's id: whose cap it counts against
    expires: float


class _Grants:
    """Tickets or sessions, kept per owner in last-use order (OrderedDict, most recent last)."""

    def __init__(self, per_owner: int) -> None:
        self.per_owner = per_owner
        self._by_owner: dict[int, OrderedDict[str, _Grant]] = {}
        self._owner_of: dict[str, int] = {}
        self._next_sweep = 0.0

    def __len__(self) -> int:
        return len(self._owner_of)

    def count(self, owner: int) -> int:
        return len(self._by_owner.get(owner, ()))

    def put(self, grant: _Grant) -> str:
        now = time.monotonic()
        self._sweep(now)
        bucket = self._by_owner.setdefault(grant.owner, OrderedDict())
        for key in [k for k, g in bucket.items() if g.expires <= now]:
            self.pop(key)
        while len(bucket) >= self.per_owner:
            self.pop(next(iter(bucket)))
        key = secrets.token_urlsafe(32)
        bucket[key] = grant
        self._by_owner[grant.owner] = bucket  # pop may have dropped the emptied bucket
        self._owner_of[key] = grant.owner
        return key

    def get(self, key: str, task_id: str) -> _Grant | None:
        """The live grant ``key`` for ``task_id`` (now its owner's most recently used), else None."""
        owner = self._owner_of.get(key)
        if owner is None:
            return None
        bucket = self._by_owner[owner]
        grant = bucket[key]
        if grant.expires <= time.monotonic():
            self.pop(key)
            return None
        if grant.task_id != task_id:
            return None
        bucket.move_to_end(key)
        return grant

    def pop(self, key: str) -> _Grant | None:
        owner = self._owner_of.pop(key, None)
        if owner is None:
            return None
        bucket = self._by_owner[owner]
        grant = bucket.pop(key)
        if not bucket:
            del self._by_owner[owner]
        return grant

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_EVERY_S
        for bucket in list(self._by_owner.values()):
            for key in [k for k, g in bucket.items() if g.expires <= now]:
                self.pop(key)


class ProxySessions:
    """One master's proxy state (``RuntimeCore.proxy``): its resolvers (wired in
    ``app.build_runtime``), each task's last traffic, and the proxy's tickets and sessions."""

    def __init__(self) -> None:
        self._resolvers: list[Resolver] = []
        self._last_activity: OrderedDict[str, float] = OrderedDict()
        self.tickets = _Grants(MAX_TICKETS_PER_OWNER)
        self.sessions = _Grants(MAX_SESSIONS_PER_OWNER)

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
        self._last_activity[task_id] = time.monotonic() if now is None else now
        self._last_activity.move_to_end(task_id)
        while len(self._last_activity) > MAX_TRACKED_TASKS:  # bounded: the least recently used goes
            self._last_activity.popitem(last=False)

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
    def mint_ticket(self, user_token: str, task_id: str, owner: int) -> str:
        """A one-time ticket for ``task_id`` on its origin, for user ``owner`` holding ``user_token``."""
        return self.tickets.put(_Grant(user_token, task_id, owner, time.monotonic() + TICKET_TTL_S))

    def redeem_ticket(self, ticket: str, task_id: str) -> tuple[str, int] | None:
        """(the master token, the user id) a ticket for ``task_id`` was minted for, once; None when
        unknown, used, expired or for another task."""
        grant = self.tickets.get(ticket, task_id)
        if grant is None:
            return None
        self.tickets.pop(ticket)
        return grant.user_token, grant.owner

    def new_session(self, user_token: str, task_id: str, owner: int) -> str:
        """A proxy session of user ``owner`` for ``task_id`` (the value of its proxy cookie)."""
        return self.sessions.put(_Grant(user_token, task_id, owner, time.monotonic() + SESSION_TTL_S))

    def session_token(self, session: str, task_id: str) -> str | None:
        """The master token behind a proxy session for ``task_id``; None when unknown or expired."""
        grant = self.sessions.get(session, task_id)
        return grant.user_token if grant is not None else None
