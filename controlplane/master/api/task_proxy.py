"""``/proxy/{task_id}/...``: the master passes HTTP and WebSocket traffic to a task's web server
(a notebook, a TensorBoard), as Determined's master does, with the user's own sign-in, each task
on an origin of its own.

Two listeners. The master's own (its API and pages) answers ``GET /proxy/{task_id}/...`` only
with a link: for a signed-in owner or admin, a 303 to the same path on the task's own origin
(``task_hosts.py``: ``<label>.<proxy host>:<proxy_port>``, or ``proxy_url``'s wildcard) carrying a
one-time ticket (``det_proxy_ticket``, good for a minute). It mints one only for a person's own
navigation: a request signed in by ``Authorization: Bearer`` (API clients, the CLI; browsers never
add it by themselves), or by the web UI's session cookie on a top-level navigation typed or from
the master's own pages (Fetch Metadata: ``Sec-Fetch-Mode: navigate``, ``Sec-Fetch-Dest: document``,
``Sec-Fetch-Site: same-origin|none``). Anything else (a task page's ``fetch``, an iframe, a
navigation from another page, a cookie with no Fetch Metadata) gets a 403 that says why and no
ticket; a navigation from another page gets a page with a link the person may follow themselves.

The proxy's listener (``proxy_port``) serves only these routes, and a task only on its own host
(``task_hosts.serves``; any other ``Host``, another task's included, is 421, before a ticket is
redeemed or a cookie set), so no two tasks and never the master share an origin. It never accepts
the master's session cookie. There the ticket is exchanged for a proxy session cookie
(``det_proxy``: HttpOnly, SameSite=Strict, host-only on the task's host, path
``/proxy/{task_id}/``, good for that task only) and the browser is sent to the same URL without
it. API clients may send ``Authorization: Bearer`` instead. A browser that comes with neither is
sent to the master's link.

Who may: the task's owner or an admin (``authz.require_owner`` with ``Action.EDIT``: using a
notebook runs code as its owner, so it is changing the task, not reading it; viewers and task
tokens never pass). Where to: ``RuntimeCore.proxy.resolve`` (``proxy_sessions.py``) asks the resolvers that kinds of
tasks register. A proxy session names the user's master token, so signing out of the master (or
the token's expiry) ends it too.

HTTP, every method: a request signed in by the proxy cookie must not be a subresource request of
another site's page (``Sec-Fetch-Site`` other than ``same-origin``/``none`` is allowed only for a
top-level navigation), and one that changes state must come from a page of the task's own origin
(``Origin`` names its ``Host``, or ``Sec-Fetch-Site: same-origin``).
The request goes on with its method, path (the target's ``base_path`` + what follows
``/proxy/{task_id}``, percent-encoding untouched), query string, headers and body (at most
64 MiB, streamed), plus the target's own ``headers`` (the task's secret: its server refuses
anyone else); the answer comes back streamed with its status and headers, plus
``Content-Security-Policy: frame-ancestors 'self'`` (no page of the master, or any other origin,
frames it). What the master never passes on: hop-by-hop headers, the caller's
``Authorization``, the master's cookies (``det_...``; other cookies go through), the CSRF and
allocation-token headers, and any ``Set-Cookie`` from the task that is not a host-only cookie of
its own host (``task_cookie_allowed``: no ``Domain``, no ``__Host-``/``__Secure-`` prefix, no
name of the master's), so a task cannot set cookies the master or another task receives.
A task that cannot be reached answers 502 naming the task; one that does not answer in time, 504.
``/proxy/{task_id}`` (no slash) redirects to ``/proxy/{task_id}/``, where relative links work.

WebSocket (``ws://<task host>/proxy/{task_id}/...``): on the task's own host only, signed in, in
order, with ``Authorization: Bearer``, a ``token`` query parameter (for clients that cannot set
headers; always removed from what the task sees), or the proxy cookie, which must come from a page
of the task's own origin (its ``Origin`` names the ``Host`` the socket was opened on). A refusal
accepts and closes at once with 4000 + the HTTP status (4401, 4403, 4404, 4421; 4502/4504 when the
task cannot be reached) and the message as the reason. Then frames go both ways, text as text and
binary as binary, until either side closes; the other is closed with the same code.
"""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import AsyncIterator, Iterable
from typing import Any
from urllib.parse import quote, unquote, urlencode

import httpx
from litestar import Litestar, Response, route, websocket
from litestar.background_tasks import BackgroundTask
from litestar.datastructures import Cookie
from litestar.enums import HttpMethod
from litestar.response import Redirect, Stream
from litestar.response.base import ASGIResponse
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.typing import Subprotocol

from controlplane.master import browser_session as webui_session
from controlplane.master import task_hosts
from controlplane.master.api.auth_guard import ALLOCATION_HEADER, bearer_token, runtime_of, user_for, user_of
from controlplane.master.authz import Action, opt, require_owner
from controlplane.master.errors import ApiError, BadRequest, Forbidden, PayloadTooLarge, Unauthenticated
from controlplane.master.http_types import AnyRequest, AnyWebSocket
from controlplane.master.principals import AuthedUser
from controlplane.master.proxy_sessions import ProxySessions, ProxyTarget
from controlplane.master.runtime import MasterRuntime

log = logging.getLogger("controlplane.master.task_proxy")

PATHS = ["/proxy/{task_id:str}", "/proxy/{task_id:str}/{path:path}"]
TICKET_PARAM = "det_proxy_ticket"
PROXY_COOKIE = "det_proxy"
# Every proxied answer: no other origin (the master's pages included) may frame it.
ANSWER_CSP = "frame-ancestors 'self'"
NO_REFERRER = {"Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
HTTP_METHODS = [HttpMethod.GET, HttpMethod.HEAD, HttpMethod.POST, HttpMethod.PUT, HttpMethod.PATCH,
                HttpMethod.DELETE, HttpMethod.OPTIONS]
MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_FRAME_BYTES = 64 * 1024 * 1024
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 300.0  # for the task's answer to start, and between two chunks of it
TOKEN_PARAM = "token"  # a WebSocket's bearer token, for clients that cannot set headers

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "trailers", "transfer-encoding", "upgrade"})
# The master's credentials: a task never sees them.
MASTER_HEADERS = frozenset({"authorization", webui_session.CSRF_HEADER, ALLOCATION_HEADER})
# What the WebSocket client sets itself for its own handshake, or must not pass on.
SOCKET_HEADERS = frozenset({"host", "origin", "content-length", "sec-websocket-key", "sec-websocket-version",
                            "sec-websocket-extensions", "sec-websocket-protocol", "sec-websocket-accept"})

CLIENT_KEY = "task_proxy_client"


class ServiceUnavailable(ApiError):
    status = 503


class BadGateway(ApiError):
    status = 502


class GatewayTimeout(ApiError):
    status = 504


class _BodyTooLarge(Exception):
    pass


# ---- the HTTP client -------------------------------------------------------------------------
def client_for(app: Litestar) -> httpx.AsyncClient:
    """One client (and connection pool) per app, made on first use."""
    client = app.state.get(CLIENT_KEY)
    if client is None or client.is_closed:
        # trust_env=False: a task is on the cluster's own network, never behind HTTP_PROXY.
        client = httpx.AsyncClient(follow_redirects=False, trust_env=False,
                                   limits=httpx.Limits(max_connections=256, max_keepalive_connections=32))
        app.state[CLIENT_KEY] = client
    return client


async def close_client(app: Litestar) -> None:
    """Close the app's proxy client, if it made one (for whoever ends the app)."""
    client = app.state.get(CLIENT_KEY)
    if client is not None:
        app.state[CLIENT_KEY] = None
        await client.aclose()


# ---- paths and headers -----------------------------------------------------------------------
def split_path(scope: Any, task_id: str) -> tuple[str, str | None]:
    """(the task id as the client wrote it, the raw path after it, or None with no slash after it).
    The raw path keeps the client's percent-encoding (``%2F`` stays ``%2F``)."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes | bytearray):
        text = bytes(raw).decode("latin-1")
        if text.startswith("/proxy/"):
            segment, slash, rest = text[len("/proxy/"):].partition("/")
            return segment, ("/" + rest) if slash else None
    # No raw path from the server: Litestar's path has lost a trailing slash, so never redirect.
    path: str = scope.get("path_params", {}).get("path") or "/"
    return quote(task_id, safe=""), quote(path, safe="/:@!$&'()*+,;=~-._")


def connection_tokens(headers: Iterable[tuple[str, str]]) -> set[str]:
    """Headers a ``Connection`` header names: hop-by-hop for this connection only."""
    out: set[str] = set()
    for name, value in headers:
        if name.lower() == "connection":
            out.update(t.strip().lower() for t in value.split(",") if t.strip())
    return out


MASTER_COOKIES = frozenset({webui_session.COOKIE, PROXY_COOKIE})
COOKIE_PREFIXES = ("__host-", "__secure-")


def masters_cookie_name(name: str) -> bool:
    """A name of the master's cookies (``det_...``), with or without a ``__Host-``/``__Secure-`` prefix."""
    low = name.strip().lower()
    for prefix in COOKIE_PREFIXES:
        low = low.removeprefix(prefix)
    return low.startswith("det_") or low in MASTER_COOKIES


def without_master_cookie(value: str) -> str:
    """A ``Cookie`` header less the master's session and proxy cookies."""
    kept = [c for c in value.split(";") if c.strip() and not masters_cookie_name(c.split("=", 1)[0])]
    return "; ".join(c.strip() for c in kept)


def task_cookie_allowed(set_cookie: str) -> bool:
    """Whether a task's ``Set-Cookie`` stays within the task's own origin: host-only (no ``Domain``,
    which would reach the master and other tasks on the same site), and no name of the master's or
    with a ``__Host-``/``__Secure-`` prefix (which could shadow one)."""
    name, _, rest = set_cookie.partition("=")
    if name.strip().lower().startswith(COOKIE_PREFIXES) or masters_cookie_name(name):
        return False
    attributes = {a.split("=", 1)[0].strip().lower() for a in rest.split(";")[1:]}
    return "domain" not in attributes


def forwarded_headers(raw: Iterable[tuple[bytes, bytes]], *, client: str | None, scheme: str,
                      drop: frozenset[str] = frozenset(),
                      extra: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    """The request's headers as the task gets them (see the module docstring), with ``extra``
    (the target's own headers) and ``X-Forwarded-For/-Host/-Proto`` added."""
    extra = list(extra)
    items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]
    skip = (HOP_BY_HOP | MASTER_HEADERS | drop | connection_tokens(items) | {"x-forwarded-host", "x-forwarded-proto"}
            | {k.lower() for k, _ in extra})
    out: list[tuple[str, str]] = []
    forwarded_for: list[str] = []
    host = ""
    for name, value in items:
        low = name.lower()
        if low == "host":
            host = value
        if low in skip:
            continue
        if low == "cookie":
            value = without_master_cookie(value)
            if not value:
                continue
        if low == "x-forwarded-for":
            forwarded_for.append(value)
            continue
        out.append((name, value))
    out += extra
    if client:
        forwarded_for.append(client)
    if forwarded_for:
        out.append(("X-Forwarded-For", ", ".join(forwarded_for)))
    if host:
        out.append(("X-Forwarded-Host", host))
    out.append(("X-Forwarded-Proto", scheme))
    return out


def answer_headers(raw: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    """The task's answer headers as the client gets them: no hop-by-hop headers, and no cookie
    that reaches beyond the task's own origin (``task_cookie_allowed``)."""
    items = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in raw]
    skip = HOP_BY_HOP | connection_tokens(items)
    out = []
    for name, value in items:
        low = name.lower()
        if low in skip:
            continue
        if low in ("set-cookie", "set-cookie2") and not task_cookie_allowed(value):
            continue
        out.append((name, value))
    out.append(("Content-Security-Policy", ANSWER_CSP))
    return out


# ---- HTTP ------------------------------------------------------------------------------------
class ProxiedStream(Stream):
    """A streamed answer whose headers are the task's, repeated ones (``Set-Cookie``) included,
    and no ``Content-Type`` the task did not send."""

    def __init__(self, content: AsyncIterator[bytes], *, raw_headers: list[tuple[str, str]], status_code: int,
                 background: BackgroundTask) -> None:
        content_type = next((v for k, v in raw_headers if k.lower() == "content-type"), None)
        super().__init__(content, status_code=status_code, media_type=content_type, background=background)
        self.raw_headers = [(k, v) for k, v in raw_headers if k.lower() != "content-type"]
        self.has_content_type = content_type is not None

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        response = super().to_asgi_response(*args, **kwargs)
        if not self.has_content_type and "content-type" in response.headers:
            del response.headers["content-type"]
        for name, value in self.raw_headers:
            response.headers.add(name, value)
        return response


def _declared_length(request: AnyRequest) -> int | None:
    value = request.headers.get("content-length")
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise BadRequest("Content-Length: not a number") from None


def _too_large() -> PayloadTooLarge:
    mib, rest = divmod(MAX_BODY_BYTES, 1024 * 1024)
    limit = f"{mib} MiB" if mib and not rest else f"{MAX_BODY_BYTES} bytes"
    return PayloadTooLarge(f"request body: larger than the task proxy's limit of {limit}")


async def _bounded_body(request: AnyRequest) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in request.stream():
        seen += len(chunk)
        if seen > MAX_BODY_BYTES:
            raise _BodyTooLarge
        if chunk:
            yield chunk


async def _relay(upstream: httpx.Response, proxy: ProxySessions, task_id: str) -> AsyncIterator[bytes]:
    """The task's answer as it comes (still encoded as the task sent it, e.g. gzip)."""
    try:
        async for chunk in upstream.aiter_raw():
            proxy.touch(task_id)
            yield chunk
    except httpx.TransportError as e:
        # The status line has gone out: the client sees the connection end early.
        log.warning("task %s: its answer broke off: %s", task_id, e)
        raise
    finally:
        await upstream.aclose()


def _target_error(task_id: str, target: ProxyTarget, e: httpx.TransportError) -> ApiError:
    where = f"{target.host}:{target.port}"
    if isinstance(e, httpx.TimeoutException):
        return GatewayTimeout(f"task {task_id} did not answer in time at {where}")
    if isinstance(e, httpx.ConnectError):
        return BadGateway(f"task {task_id} is not reachable at {where}: {e or 'connection refused'}")
    return BadGateway(f"task {task_id} failed to answer at {where}: {e or type(e).__name__}")


# ---- the origins -------------------------------------------------------------------------------
class Misdirected(ApiError):
    status = 421


def _host_label(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def task_origin(connection: Any, task_id: str) -> str:
    """The origin of ``task_id``'s own host, as this caller reaches the master (``task_hosts``)."""
    rt: MasterRuntime = runtime_of(connection)
    try:
        return task_hosts.task_origin(task_id, proxy_url=rt.settings.proxy_url, scheme=connection.url.scheme,
                                      host_header=connection.headers.get("host"), proxy_port=rt.proxy_port)
    except task_hosts.NoProxyHost as e:
        raise ServiceUnavailable(str(e)) from None


def master_origin(connection: Any, task_id: str) -> str | None:
    """The master's own origin as a caller of a task's host reaches it: the host that task's host
    was formed from (or the same loopback/IP host, for an old link to the bare proxy port), on
    the API's port; None when the proxy has an origin of its own (``proxy_url``), which says
    nothing of it."""
    rt: MasterRuntime = runtime_of(connection)
    if rt.settings.proxy_url:
        return None
    host = task_hosts.master_host(task_id, connection.headers.get("host"))
    if host is None:
        host = task_hosts.hostname(connection.headers.get("host"))
        if host is None or not (host == "localhost" or task_hosts.ip_of(host) is not None):
            return None
    return f"{connection.url.scheme}://{_host_label(host)}:{rt.settings.port}"


def _query(scope: Any, drop: str) -> str:
    raw = scope.get("query_string", b"").decode("latin-1")
    return "&".join(p for p in raw.split("&") if p and unquote(p.split("=", 1)[0]) != drop)


def top_level_navigation(connection: Any) -> bool:
    """A browser's top-level navigation (a link followed, a URL typed), by its Fetch Metadata."""
    return (connection.headers.get("sec-fetch-mode") == "navigate"
            and connection.headers.get("sec-fetch-dest") in (None, "document"))


def navigation_problem(request: AnyRequest) -> str | None:
    """Why a request signed in by the session cookie gets no ticket, or None: only a person's own
    top-level navigation does, typed or from the master's own pages (Fetch Metadata, which pages
    cannot forge). A task's page (same-site with the master in a production setup) that fetches,
    frames, opens or posts to the link is refused."""
    site = request.headers.get("sec-fetch-site")
    mode = request.headers.get("sec-fetch-mode")
    dest = request.headers.get("sec-fetch-dest")
    if site is None or mode is None:
        return ("the browser sent no Fetch Metadata (Sec-Fetch-Site, Sec-Fetch-Mode): open the task from this "
                "master's own pages in a current browser, or send Authorization: Bearer")
    if not top_level_navigation(request):
        return (f"only a top-level navigation gets a ticket to a task, not this request (Sec-Fetch-Mode: "
                f"{mode[:20]}, Sec-Fetch-Dest: {(dest or '')[:20]}): a page cannot open a task for you")
    if site not in ("same-origin", "none"):
        return (f"the link was followed from another page (Sec-Fetch-Site: {site[:20]}), not from this master's "
                "own pages or typed: a task's page cannot open another task for you")
    return None


CONFIRM_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Open task {task}?</title></head>
<body><p>{why}</p><p><a href="{href}">Open task {task}</a> if you meant to.</p></body></html>"""


def _refused_navigation(task_id: str, why: str, href: str) -> Response[Any]:
    """A top-level navigation from another page: 403, with a link the person may follow themselves
    (from this page, a same-origin navigation)."""
    body = CONFIRM_PAGE.format(task=html.escape(task_id), why=html.escape(why), href=html.escape(href))
    return Response(body, status_code=403, media_type="text/html; charset=utf-8",
                    headers={**NO_REFERRER, "X-Frame-Options": "DENY",
                             "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'"})


@route(PATHS, http_method=[HttpMethod.GET, HttpMethod.HEAD], name="task-proxy-link", opt=opt(Action.VIEW),
       include_in_schema=False)
async def proxy_link(request: AnyRequest, task_id: str) -> Response[Any]:
    """The master's ``/proxy/{task_id}/...``: a one-time ticket to the same path on the task's origin."""
    rt: MasterRuntime = runtime_of(request)
    target = await rt.proxy.resolve(rt.sessions, task_id)
    user = user_of(request)
    require_owner(user, Action.EDIT, target.owner_id, f"task {task_id}")
    segment, rest = split_path(request.scope, task_id)
    query = _query(request.scope, TICKET_PARAM)
    token = bearer_token(request.headers.get("authorization"))
    if token is None:  # a browser's cookie: only the person's own navigation
        why = navigation_problem(request)
        if why is not None:
            here = f"/proxy/{segment}{rest or '/'}" + (f"?{query}" if query else "")
            if top_level_navigation(request):
                return _refused_navigation(task_id, why, here)
            raise Forbidden(why)
        token = webui_session.cookie_token(request)
    if token is None:  # pragma: no cover - the guard signed the user in with one of them
        raise Unauthenticated("missing credentials")
    origin = task_origin(request, task_id)
    ticket = urlencode({TICKET_PARAM: rt.proxy.mint_ticket(token, task_id, user.id)})
    location = f"{origin}/proxy/{segment}{rest or '/'}?" + (f"{query}&" if query else "") + ticket
    return Redirect(location, status_code=303, headers=NO_REFERRER)


def _cookie_path(segment: str) -> str:
    return f"/proxy/{segment}/"


def _on_own_host(connection: Any, task_id: str) -> None:
    """Misdirected (421) unless the request reached ``task_id``'s own host: no ticket is redeemed,
    no cookie set and nothing served for a task on another task's origin."""
    rt: MasterRuntime = runtime_of(connection)
    if not task_hosts.serves(task_id, connection.headers.get("host"), proxy_url=rt.settings.proxy_url):
        host = (connection.headers.get("host") or "")[:100]
        raise Misdirected(f"task {task_id} is not served on host {host!r}: each task has a host of its own "
                          f"({task_hosts.task_label(task_id)}.<proxy host>); open it from the master "
                          f"(/proxy/{task_id}/)")


async def _redeem(request: AnyRequest, task_id: str, ticket: str) -> Response[Any]:
    """A ticket from the master's link: the proxy cookie, and the same URL without the ticket."""
    rt = runtime_of(request)
    redeemed = rt.proxy.redeem_ticket(ticket, task_id)
    if redeemed is None:
        raise Unauthenticated(f"the link to task {task_id} has expired or was used already: open it from the "
                              "master again")
    token, owner = redeemed
    user = await user_for(request, token)
    target = await rt.proxy.resolve(rt.sessions, task_id)
    require_owner(user, Action.EDIT, target.owner_id, f"task {task_id}")
    segment, rest = split_path(request.scope, task_id)
    query = _query(request.scope, TICKET_PARAM)
    cookie = Cookie(key=PROXY_COOKIE, value=rt.proxy.new_session(token, task_id, owner), path=_cookie_path(segment),
                    httponly=True, samesite="strict", secure=request.url.scheme == "https")
    return Redirect(f"/proxy/{segment}{rest or '/'}" + (f"?{query}" if query else ""), status_code=303,
                    headers=NO_REFERRER, cookies=[cookie])


def _from_own_page(connection: Any) -> bool:
    """A request made by a page of this origin (``Origin``, or ``Sec-Fetch-Site``: browsers set them
    on every state-changing request and pages cannot forge them)."""
    if connection.headers.get("origin"):
        return webui_session.origin_is_host(connection)
    return connection.headers.get("sec-fetch-site") == "same-origin"


def _from_another_site_page(connection: Any) -> bool:
    """A subresource request (fetch, image, frame) made by a page of another origin: Fetch Metadata
    says so. Top-level navigations (a link the person followed) are not."""
    site = connection.headers.get("sec-fetch-site")
    if site is None or site in ("same-origin", "none"):
        return False
    return not top_level_navigation(connection)


def _session_token(connection: Any, task_id: str) -> str | None:
    """The master token behind this task's proxy cookie; of several (one tossed in by another
    task's page), the one that is a session for this task."""
    proxy = runtime_of(connection).proxy
    for value in webui_session.cookie_values(connection, PROXY_COOKIE):
        token = proxy.session_token(value, task_id)
        if token is not None:
            return token
    return None


async def _proxy_user(request: AnyRequest, task_id: str) -> AuthedUser:
    """The proxy origin's sign-in: a bearer token, or this task's proxy cookie (never the master's)."""
    token = bearer_token(request.headers.get("authorization"))
    if token is None:
        token = _session_token(request, task_id)
        if token is None:
            raise Unauthenticated(f"not signed in to task {task_id}: open it from the master "
                                  f"(/proxy/{task_id}/), or send Authorization: Bearer")
        if _from_another_site_page(request):
            raise Forbidden("a request signed in by the proxy cookie must come from a page of the task's own origin "
                            "or be a top-level navigation")
        if request.method not in webui_session.SAFE_METHODS and not _from_own_page(request):
            raise Forbidden("a request signed in by the proxy cookie that changes state must come from a page "
                            "of the task's own origin")
    return await user_for(request, token)


@route(PATHS, http_method=HTTP_METHODS, name="task-proxy", opt=opt(Action.PUBLIC), include_in_schema=False)
async def proxy_http(request: AnyRequest, task_id: str) -> Response[Any]:
    # Action.PUBLIC only tells the guard to leave authentication to this handler: the proxy's
    # origin signs callers in its own way (_proxy_user) and checks the owner before anything
    # reaches the task.
    segment, rest = split_path(request.scope, task_id)
    query = _query(request.scope, TICKET_PARAM)
    try:
        _on_own_host(request, task_id)
    except Misdirected:
        master = master_origin(request, task_id)
        if master is not None and webui_session.is_page(request):  # an old link to the bare proxy port
            return Redirect(f"{master}/proxy/{segment}{rest or '/'}" + (f"?{query}" if query else ""),
                            status_code=303, headers=NO_REFERRER)
        raise
    ticket = request.query_params.get(TICKET_PARAM)
    if ticket is not None and request.method in ("GET", "HEAD"):
        return await _redeem(request, task_id, ticket)
    if rest is None:
        return Redirect(f"/proxy/{segment}/" + (f"?{query}" if query else ""), status_code=307)
    try:
        user = await _proxy_user(request, task_id)
    except Unauthenticated:
        master = master_origin(request, task_id)
        if master is not None and webui_session.is_page(request):  # a browser: the master's link signs it in
            return Redirect(f"{master}/proxy/{segment}{rest}" + (f"?{query}" if query else ""),
                            status_code=303, headers=NO_REFERRER)
        raise
    rt: MasterRuntime = runtime_of(request)
    target = await rt.proxy.resolve(rt.sessions, task_id)
    require_owner(user, Action.EDIT, target.owner_id, f"task {task_id}")

    declared = _declared_length(request)
    if declared is not None and declared > MAX_BODY_BYTES:
        raise _too_large()
    has_body = declared is not None or "transfer-encoding" in request.headers
    client_host = request.client.host if request.client else None
    headers = forwarded_headers(request.scope["headers"], client=client_host, scheme=request.url.scheme,
                                extra=target.headers)
    raw_target = target.path_for(rest) + (f"?{query}" if query else "")
    timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
    outgoing = httpx.Request(request.method, httpx.URL(scheme="http", host=target.host, port=target.port,
                                                       raw_path=raw_target.encode("latin-1")),
                             headers=headers, content=_bounded_body(request) if has_body else None,
                             extensions={"timeout": timeout.as_dict()})
    rt.proxy.touch(task_id)
    try:
        upstream = await client_for(request.app).send(outgoing, stream=True)
    except _BodyTooLarge:
        raise _too_large() from None
    except httpx.TransportError as e:
        log.info("task proxy: %s %s for task %s: %r", request.method, raw_target, task_id, e)
        raise _target_error(task_id, target, e) from None
    return ProxiedStream(_relay(upstream, rt.proxy, task_id), raw_headers=answer_headers(upstream.headers.raw),
                         status_code=upstream.status_code, background=BackgroundTask(upstream.aclose))


# ---- WebSocket -------------------------------------------------------------------------------
async def socket_user(socket: AnyWebSocket, task_id: str) -> AuthedUser:
    """The user a WebSocket handshake signs in as (see the module docstring)."""
    token = bearer_token(socket.headers.get("authorization")) or socket.query_params.get(TOKEN_PARAM) or None
    if token is None:
        token = _session_token(socket, task_id)
        if token is None:
            raise Unauthenticated("missing credentials: send Authorization: Bearer, a token query parameter, "
                                  "or the task's proxy cookie")
        if not webui_session.origin_is_host(socket):
            raise Forbidden("a WebSocket signed in by the proxy cookie must be opened by a page of the proxy's "
                            "task's own origin (its Origin must match the Host)")
    return await user_for(socket, token)


def without_token_param(query: str) -> str:
    """The query string less the master's ``token`` parameter."""
    return "&".join(p for p in query.split("&") if p and unquote(p.split("=", 1)[0]) != TOKEN_PARAM)


def sendable(code: int | None, default: int = 1000) -> int:
    """A close code that may go on the wire (1005 and 1006 only describe what happened)."""
    if code is None or code == 1005:
        return default
    if code in (1000, 1001, 1002, 1003) or 1007 <= code <= 1014 or 3000 <= code <= 4999:
        return code
    return 1011


async def _close_quietly(socket: AnyWebSocket, code: int, reason: str = "") -> None:
    try:
        await socket.close(code=code, reason=reason.encode()[:120].decode(errors="ignore"))
    except Exception:  # noqa: BLE001 - the client is gone already
        pass


async def _refuse(socket: AnyWebSocket, code: int, reason: str) -> None:
    try:
        await socket.accept()
    except Exception:  # noqa: BLE001 - the client is gone already
        return
    await _close_quietly(socket, code, reason)


async def _client_to_task(socket: AnyWebSocket, upstream: ClientConnection, proxy: ProxySessions,
                          task_id: str) -> int:
    """Frames from the client to the task; returns the client's close code."""
    while True:
        event = await socket.receive()
        if event["type"] == "websocket.disconnect":
            return int(event.get("code", 1000))
        data = event.get("bytes")
        if data is None:
            data = event.get("text")
        if isinstance(data, str | bytes):
            proxy.touch(task_id)
            await upstream.send(data)


async def _task_to_client(socket: AnyWebSocket, upstream: ClientConnection, proxy: ProxySessions,
                          task_id: str) -> None:
    """Frames from the task to the client, until the task closes."""
    async for message in upstream:
        proxy.touch(task_id)
        if isinstance(message, str):
            await socket.send_text(message)
        else:
            await socket.send_bytes(message)


@websocket(PATHS, name="task-proxy-socket", opt=opt(Action.PUBLIC))
async def proxy_socket(socket: AnyWebSocket, task_id: str) -> None:
    # Action.PUBLIC only tells the guard to leave authentication to this handler, which signs the
    # caller in (socket_user) and checks the owner before anything reaches the task.
    rt: MasterRuntime = runtime_of(socket)
    try:
        _on_own_host(socket, task_id)
        user = await socket_user(socket, task_id)
        target = await rt.proxy.resolve(rt.sessions, task_id)
        require_owner(user, Action.EDIT, target.owner_id, f"task {task_id}")
    except ApiError as e:
        await _refuse(socket, 4000 + e.status, e.message)
        return
    _, rest = split_path(socket.scope, task_id)
    query = without_token_param(socket.scope.get("query_string", b"").decode("latin-1"))
    host = f"[{target.host}]" if ":" in target.host else target.host
    url = f"ws://{host}:{target.port}{target.path_for(rest or '/')}" + (f"?{query}" if query else "")
    client_host = socket.client.host if socket.client else None
    headers = forwarded_headers(socket.scope["headers"], client=client_host,
                                scheme="https" if socket.url.scheme == "wss" else "http", drop=SOCKET_HEADERS,
                                extra=target.headers)
    subprotocols = [Subprotocol(p) for p in socket.scope.get("subprotocols") or []]
    where = f"{target.host}:{target.port}"
    try:
        upstream = await connect(url, additional_headers=headers, subprotocols=subprotocols or None,
                                 open_timeout=CONNECT_TIMEOUT_S, max_size=MAX_FRAME_BYTES, proxy=None,
                                 user_agent_header=None)
    except TimeoutError:
        await _refuse(socket, 4504, f"task {task_id} did not answer in time at {where}")
        return
    except InvalidStatus as e:
        await _refuse(socket, 4502, f"task {task_id} refused the WebSocket: HTTP {e.response.status_code}")
        return
    except (OSError, InvalidHandshake) as e:
        await _refuse(socket, 4502, f"task {task_id} is not reachable at {where}: {e}")
        return
    rt.proxy.touch(task_id)
    try:
        await socket.accept(subprotocols=upstream.subprotocol)
        to_task = asyncio.create_task(_client_to_task(socket, upstream, rt.proxy, task_id))
        to_client = asyncio.create_task(_task_to_client(socket, upstream, rt.proxy, task_id))
        try:
            done, _ = await asyncio.wait({to_task, to_client}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (to_task, to_client):
                t.cancel()
            await asyncio.gather(to_task, to_client, return_exceptions=True)
        client_left = to_task in done and not isinstance(to_task.exception(), ConnectionClosed)
        if client_left:
            code = to_task.result() if to_task.exception() is None else 1011
            await upstream.close(code=sendable(code), reason="")
        else:  # the task closed (or its connection broke)
            await _close_quietly(socket, sendable(upstream.close_code), upstream.close_reason or "")
    finally:
        await upstream.close()


MASTER_ROUTES = [proxy_link]  # on the master's own listener
PROXY_ROUTES = [proxy_http, proxy_socket]  # the proxy's listener serves these alone
