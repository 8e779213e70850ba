"""Determined's web UI lives under ``/det/``; its links (bookmarks, the CLI's and docs' URLs, e.g.
``/det/experiments/1/overview``) are sent to this UI's page for the same thing. The redirect carries
no data: the page it names checks who may see it."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from litestar import get
from litestar.response import Redirect

from controlplane.master.authz import Action, opt

# Determined's page (its path under /det/) -> ours; the first pattern that matches wins.
_PAGES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^experiments/(\d+)/trials/(\d+)(?:/.*)?$"), "/trials/{1}"),
    (re.compile(r"^experiments/(\d+)(?:/.*)?$"), "/experiments/{0}"),
    (re.compile(r"^trials/(\d+)/(\d+)(?:/.*)?$"), "/trials/{1}"),  # /det/trials/<exp>/<trial>
    (re.compile(r"^trials/(\d+)(?:/.*)?$"), "/trials/{0}"),
    (re.compile(r"^models/([^/]+)(?:/.*)?$"), "/models/{0}"),
    (re.compile(r"^models/?$"), "/models"),
    (re.compile(r"^(?:clusters?|resourcepool)(?:/.*)?$"), "/cluster"),
    (re.compile(r"^(?:jobs|queue)(?:/.*)?$"), "/jobs"),
    (re.compile(r"^login/?$"), "/login"),
]


def our_path(determined_path: str) -> str:
    """The page of this UI for Determined's ``/det/<determined_path>``; the experiment list otherwise
    (Determined's dashboard, projects and workspaces all list experiments)."""
    rest = determined_path.strip("/")
    for pattern, target in _PAGES:
        m = pattern.match(rest)
        if m:
            return target.format(*(quote(g, safe="") for g in m.groups()))
    return "/experiments"


@get(["/det", "/det/{rest:path}"], opt=opt(Action.PUBLIC), include_in_schema=False)
async def determined_page(rest: str = "") -> Redirect:
    return Redirect(our_path(rest), status_code=301)


ROUTES: list[Any] = [determined_page]
