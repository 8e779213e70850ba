"""Rendering pages: one Jinja2 environment, built on first use so the API alone never imports it.

``page()`` renders a template with what every page needs (the user, the CSRF token, the nav).
An htmx poll (``HX-Request`` with ``HX-Target: live``) gets only the template's ``live`` block,
so a page refreshes its changing part without reloading and without a second handler.
"""

from __future__ import annotations

import functools
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from litestar import Response

from controlplane.master import browser_session as web_session
from controlplane.master.api.auth_guard import user_of
from controlplane.master.authz import Action, allows
from controlplane.master.http_types import AnyRequest

if TYPE_CHECKING:
    import jinja2

TEMPLATES = Path(__file__).parent / "templates"
LIVE_BLOCK = "live"
NAV = (("/experiments", "Experiments"), ("/jobs", "Job Queue"), ("/cluster", "Cluster"), ("/models", "Models"),
       ("/pai", "OpenPAI"))


@functools.cache
def environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["when"] = when
    env.filters["duration"] = duration
    env.filters["money"] = money
    env.filters["state"] = short_state
    env.filters["metric"] = metric
    env.globals["pager"] = env.get_template("_pager.html").module.pager  # type: ignore[attr-defined]
    return env


def page(request: AnyRequest, template: str, **context: Any) -> Response[Any]:
    user = user_of(request)
    token = web_session.cookie_token(request)
    base = {"user": user, "csrf": web_session.csrf_token(token) if token else "", "nav": NAV,
            "path": request.url.path, "may": lambda action, owner=None: allows(user, Action(action), owner)}
    tmpl = environment().get_template(template)
    ctx = {**base, **context}
    if request.headers.get("hx-request") and request.headers.get("hx-target") == LIVE_BLOCK \
            and LIVE_BLOCK in tmpl.blocks:
        body = "".join(tmpl.blocks[LIVE_BLOCK](tmpl.new_context(ctx)))
    else:
        body = tmpl.render(ctx)
    return Response(body, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                             "Content-Security-Policy": CSP})


def missing(request: AnyRequest, message: str) -> Response[Any]:
    """A 404 page (an unknown id in a page's path), rather than the API's JSON error."""
    response = page(request, "missing.html", message=message)
    response.status_code = 404
    return response


# Every script and style comes from the master; no inline script runs (htmx's own indicator
# styles are turned off in base.html's htmx config so it injects none).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")


# ---- filters ------------------------------------------------------------------------------------

def when(value: datetime | str | None) -> str:
    if value is None or value == "":
        return "–"
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.strftime("%Y-%m-%d %H:%M:%S")


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {s % 3600 // 60:02d}m"


def money(value: float | None) -> str:
    return "–" if value is None else f"${value:,.2f}"


def short_state(value: str | None) -> str:
    """``STATE_RUNNING`` (the API's form) reads ``RUNNING``."""
    return "–" if not value else value.removeprefix("STATE_")


def metric(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.6g}"
