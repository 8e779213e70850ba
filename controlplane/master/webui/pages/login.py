"""Sign in and out. The sign-in form posts username and password; the answer sets the session
cookie and goes to ``next`` (a path on this master only). Sign-out ends the session itself, not
just the cookie."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from litestar import Request, Response, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body
from litestar.response import Redirect

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.authz import Action, opt
from controlplane.master.errors import Unauthenticated
from controlplane.master.services import auth
from controlplane.master.services.token_cache import USER_TOKENS
from controlplane.master.webui import render
from controlplane.master.webui import session as web_session

MAX_FIELD = 256


class LoginForm(msgspec.Struct):
    username: Annotated[str, msgspec.Meta(max_length=MAX_FIELD)] = ""
    password: Annotated[str, msgspec.Meta(max_length=MAX_FIELD)] = ""
    next: Annotated[str, msgspec.Meta(max_length=2048)] = "/"


class LogoutForm(msgspec.Struct):
    csrf: Annotated[str, msgspec.Meta(max_length=128)] = ""


def _login_page(next_path: str, error: str = "", username: str = "", status: int = 200) -> Response:
    body = render.environment().get_template("login.html").render(
        next=web_session.safe_next(next_path), error=error, username=username)
    return Response(body, status_code=status, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store", "Content-Security-Policy": render.CSP,
                             "X-Frame-Options": "DENY"})


@get(web_session.LOGIN_PATH, opt=opt(Action.PUBLIC), include_in_schema=False)
async def login_form(next: str = "/") -> Response:  # noqa: A002 (the query parameter's name)
    return _login_page(next[:2048])


@post(web_session.LOGIN_PATH, opt=opt(Action.PUBLIC), include_in_schema=False, status_code=303)
async def login_submit(request: Request,
                       data: Annotated[LoginForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response:
    try:
        async with runtime_of(request).sessions.begin() as session:
            token, _user = await auth.login(session, data.username, data.password, False)
    except Unauthenticated:
        return _login_page(data.next, "Wrong username or password.", data.username, status=401)
    secure = request.url.scheme == "https"
    return Redirect(web_session.safe_next(data.next), status_code=303,
                    cookies=[web_session.session_cookie(token, secure=secure)])


@post("/logout", opt=opt(Action.PUBLIC), include_in_schema=False, status_code=303)
async def logout(request: Request,
                 data: Annotated[LogoutForm, Body(media_type=RequestEncodingType.URL_ENCODED)]) -> Response:
    token = web_session.cookie_token(request)
    if token and web_session.csrf_ok(request, token, data.csrf):
        async with runtime_of(request).sessions.begin() as session:
            await auth.logout(session, token)
        USER_TOKENS.drop(auth.token_hash(token))
    return Redirect(web_session.LOGIN_PATH, status_code=303, cookies=[web_session.expired_cookie()])


@get("/", opt=opt(Action.PUBLIC), include_in_schema=False)
async def home() -> Redirect:
    return Redirect("/experiments", status_code=303)


ROUTES: list[Any] = [login_form, login_submit, logout, home]
