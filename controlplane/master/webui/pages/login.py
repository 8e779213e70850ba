"""Sign in and out. The sign-in form posts username and password; the answer sets the session
cookie and goes to ``next`` (a path on this master only). Sign-out ends the session itself, not
just the cookie.

Both forms refuse (403, nothing done) a post a browser says comes from another site: its ``Origin``
is not the master's own, or, without ``Origin``, ``Sec-Fetch-Site`` says cross-site or same-site,
or, without either, its ``Referer`` is another origin (login CSRF: another site's page signing the
browser in as the attacker). A post that says nothing of where it comes from (not a browser, or a
very old one) is taken. Sign-out needs no CSRF token: a same-origin or unmarked sign-out always ends
the session it carries, so a user who clicks it is never left signed in."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

import msgspec
from litestar import Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect

from controlplane.master import browser_session as web_session
from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.authz import Action, opt
from controlplane.master.errors import Unauthenticated
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import auth
from controlplane.master.token_cache import token_hash
from controlplane.master.webui import render

MAX_FIELD = 256


class LoginForm(msgspec.Struct):
    username: Annotated[str, msgspec.Meta(max_length=MAX_FIELD)] = ""
    password: Annotated[str, msgspec.Meta(max_length=MAX_FIELD)] = ""
    next: Annotated[str, msgspec.Meta(max_length=2048)] = "/"


class LogoutForm(msgspec.Struct):
    csrf: Annotated[str, msgspec.Meta(max_length=128)] = ""


def _login_page(next_path: str, error: str = "", username: str = "", status: int = 200) -> Response[Any]:
    body = render.environment().get_template("login.html").render(
        next=web_session.safe_next(next_path), error=error, username=username)
    return Response(body, status_code=status, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store", "Content-Security-Policy": render.CSP,
                             "X-Frame-Options": "DENY"})


def cross_site(request: AnyRequest) -> str | None:
    """Why a browser's form post comes from another site, or None (same origin, or nothing says).
    The master's own origins: the host the request was sent to, and ``public_url`` (behind a proxy
    that rewrites ``Host``)."""
    public = urlsplit(runtime_of(request).settings.public_url).netloc.lower()
    own = {(request.headers.get("host") or "").lower(), public} - {""}  # "null" or no Host: nothing matches
    origin = request.headers.get("origin")
    if origin is not None:
        return None if urlsplit(origin).netloc.lower() in own else f"its Origin is {origin[:100]!r}, not this master"
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return None if fetch_site in ("same-origin", "none") else f"the browser says it is {fetch_site[:20]!r}"
    referer = request.headers.get("referer")
    if referer and urlsplit(referer).netloc.lower() not in own:
        return "its Referer is another site"
    return None


def _refused(what: str, why: str) -> Response[Any]:
    return Response(f"{what} refused: this form was posted from another site ({why}); use this master's own page",
                    status_code=403, media_type="text/plain; charset=utf-8", headers={"Cache-Control": "no-store"})


async def _end_cookie_sessions(request: AnyRequest) -> None:
    """End every session whose token the browser sends as its session cookie (tossed ones too)."""
    tokens = web_session.cookie_tokens(request)
    if not tokens:
        return
    rt = runtime_of(request)
    async with rt.sessions.begin() as session:  # one transaction for all of them (at most MAX_COOKIE_VALUES)
        for token in tokens:
            await auth.logout(session, token)
    for token in tokens:
        rt.tokens.users.drop(token_hash(token))


@get(web_session.LOGIN_PATH, opt=opt(Action.PUBLIC), include_in_schema=False)
async def login_form(next: str = "/") -> Response[Any]:  # the query parameter's name
    return _login_page(next[:2048])


@post(web_session.LOGIN_PATH, opt=opt(Action.PUBLIC), include_in_schema=False, status_code=303)
async def login_submit(request: AnyRequest,
                       data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    if (why := cross_site(request)) is not None:
        return _refused("sign-in", why)
    try:
        async with runtime_of(request).sessions.begin() as session:
            token, _user = await auth.login(session, data.username, data.password, False)
    except Unauthenticated:
        return _login_page(data.next, "Wrong username or password.", data.username, status=401)
    await _end_cookie_sessions(request)  # a session cookie a page tossed in must not outlive a fresh sign-in
    secure = request.url.scheme == "https"
    return Redirect(web_session.safe_next(data.next), status_code=303,
                    cookies=[web_session.session_cookie(token, secure=secure)])


@post("/logout", opt=opt(Action.PUBLIC), include_in_schema=False, status_code=303)
async def logout(request: AnyRequest,
                 data: Annotated[LogoutForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response[Any]:
    if (why := cross_site(request)) is not None:
        return _refused("sign-out", why)  # the session and its cookie are left as they were
    await _end_cookie_sessions(request)
    expired = web_session.expired_cookie(secure=request.url.scheme == "https")
    return Redirect(web_session.LOGIN_PATH, status_code=303, cookies=[expired])


@get("/", opt=opt(Action.PUBLIC), include_in_schema=False)
async def home() -> Redirect:
    return Redirect("/experiments", status_code=303)


ROUTES: list[Any] = [login_form, login_submit, logout, home]
