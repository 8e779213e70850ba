"""Browser sessions: the user token in a cookie, and the CSRF token that goes with it.

The cookie (``det_session``; ``__Host-det_session`` on https, which no other host can set) is
HttpOnly (no script reads the token) and SameSite=Strict (no other site's page sends it; a task's
host may be the same site, so the master also copes with cookies of its name tossed in beside
its own: ``cookie_values``). Any request authenticated by the cookie that changes state must also carry
``X-CSRF-Token`` (htmx and ``app.js`` add it) or a ``csrf`` form field: a value derived from the
token that a page of another origin cannot know. API clients send ``Authorization: Bearer`` and
are not affected.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import quote, urlsplit

from litestar.datastructures import Cookie

from controlplane.master.http_types import AnyConnection

COOKIE = "det_session"
# Its name on https: a __Host- cookie is Secure, Path=/ and host-only, so no page of another host
# (a task's, on the same site) can set one of that name for the master, and a det_session it
# tosses in is not even read.
SECURE_COOKIE = "__Host-det_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOGIN_PATH = "/login"


def cookie_name(connection: AnyConnection) -> str:
    """The session cookie's name for this request: ``SECURE_COOKIE`` on https, else ``COOKIE``."""
    return SECURE_COOKIE if connection.url.scheme == "https" else COOKIE


def session_cookie(token: str, *, secure: bool) -> Cookie:
    return Cookie(key=SECURE_COOKIE if secure else COOKIE, value=token, path="/", httponly=True, samesite="strict",
                  secure=secure)


def expired_cookie(*, secure: bool = False) -> Cookie:
    return Cookie(key=SECURE_COOKIE if secure else COOKIE, value="", path="/", httponly=True, samesite="strict",
                  secure=secure, max_age=0)


def csrf_token(session_token: str) -> str:
    return hmac.new(session_token.encode(), b"controlplane-csrf", hashlib.sha256).hexdigest()[:40]


MAX_COOKIE_VALUES = 32  # of one name tried per request: each unknown one costs a token lookup
SIGNED_IN_STATE = "cookie_token"  # connection.state: the cookie value the guard signed in with


def cookie_values(connection: AnyConnection, name: str) -> list[str]:
    """Every distinct non-empty value of cookie ``name`` in the request, in the browser's order
    (at most ``MAX_COOKIE_VALUES``). A page of another host of the same site (a task's origin) can
    set a cookie of the same name with a ``Domain`` and a narrower path, which the browser sends
    beside and before this master's own (cookie tossing): the caller tries each, so a tossed one
    neither signs the browser in nor locks it out."""
    out: list[str] = []
    for header in connection.headers.getall("cookie", []):
        for part in header.split(";"):
            key, eq, value = part.partition("=")
            value = value.strip().strip('"')
            if eq and key.strip() == name and value and value not in out:
                out.append(value)
                if len(out) >= MAX_COOKIE_VALUES:
                    return out
    return out


def cookie_token(connection: AnyConnection) -> str | None:
    """The session cookie's token this request was signed in with (the guard records which, of
    several); without that record, the only value, or None."""
    signed_in = getattr(connection.state, SIGNED_IN_STATE, None)
    if isinstance(signed_in, str):
        return signed_in
    values = cookie_tokens(connection)
    return values[0] if len(values) == 1 else None


def csrf_ok(connection: AnyConnection, session_token: str, form_value: str | None = None) -> bool:
    sent = connection.headers.get(CSRF_HEADER) or form_value or ""
    return hmac.compare_digest(sent, csrf_token(session_token))


def origin_is_host(connection: AnyConnection) -> bool:
    """The request's ``Origin`` names the host it was sent to: a page of this master made it."""
    origin, host = connection.headers.get("origin"), connection.headers.get("host")
    if not origin or not host:
        return False
    return urlsplit(origin).netloc.lower() == host.lower()


def is_page(connection: AnyConnection) -> bool:
    """A browser navigating to a page (not the API, the docs or an asset): it is sent to sign in,
    where a client of the API gets its 401."""
    path = connection.url.path
    return (connection.scope.get("method") in SAFE_METHODS and "text/html" in connection.headers.get("accept", "")
            and not path.startswith(("/api/", "/docs", "/static/")))


def login_url(connection: AnyConnection) -> str:
    target = connection.url.path + (f"?{connection.url.query}" if connection.url.query else "")
    return f"{LOGIN_PATH}?next={quote(target, safe='')}"


def safe_next(target: str | None) -> str:
    """Only a path on this master: ``//evil.example`` or ``https://...`` would be an open redirect."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


def cookie_tokens(connection: AnyConnection) -> list[str]:
    """Every session-cookie value the request carries (``cookie_values``), under this scheme's name."""
    return cookie_values(connection, cookie_name(connection))
