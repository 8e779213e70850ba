"""The Job Queue page (``/jobs``): one pool's queue in scheduling order, as `det job list` shows it:
experiments, OpenPAI jobs (type GENERIC, each linking to its portal page, ``pages/pai.py``), commands,
shells and notebooks.

Manage Job (priority or weight, pool, ahead of / behind / to the top) is a dialog that
``static/jobs.js`` turns into the same ``POST /api/v1/job-queues`` body `det job update` sends, so
the constraints and the messages are the API's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from litestar import Response, get
from litestar.params import Parameter

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.params import ListOffset
from controlplane.master.authz import Action, opt
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import jobs as svc
from controlplane.master.webui import render
from controlplane.master.webui.pages import pai

MAX_PAGE = 200
PageLimit = Annotated[int, Parameter(ge=1, le=MAX_PAGE, description="jobs per page")]
PoolName = Annotated[str | None, Parameter(min_length=1, max_length=255, pattern=r"^[^\x00]*$",
                                           description="the resource pool whose queue to show")]
SHORT_ID = 8  # what `det job list` shows of a job id (and the shortest prefix the API takes)


@dataclass(frozen=True)
class JobEntry:
    position: int  # jobs ahead of it in the pool's queue
    job_id: str
    short_id: str
    kind: str  # the v1Job type without TYPE_, as `det job list` shows it
    name: str
    exp_id: int | None  # an experiment's id (its row links to its page); None for other kinds
    pai_url: str | None  # an OpenPAI job's (GENERIC) portal page; None for other kinds
    priority: int
    weight: float
    submitted: Any
    acquired: int
    needed: int
    state: str
    username: str
    owner_id: int
    waiting: str = ""  # why its pending work waits (the scheduler's last pass): shown under its status


def short_ids(ids: list[str]) -> dict[str, str]:
    """Each id cut to the shortest length, at least SHORT_ID, at which the ids stay distinct."""
    length = SHORT_ID
    while len({i[:length] for i in ids}) < len(set(ids)):
        length += 1
    return {i: i[:length] for i in ids}


@get("/jobs", opt=opt(Action.VIEW), include_in_schema=False)
async def jobs_page(request: AnyRequest, pool: PoolName = None, limit: PageLimit = 50,
                    offset: ListOffset = 0) -> Response[Any]:
    rt = runtime_of(request)
    names = rt.settings.pool_names()
    chosen = pool or (names[0] if names else "default")
    config = rt.settings.pool(chosen)
    if config is None:
        response = render.page(request, "jobs.html", pools=names, pool=chosen, missing=True, jobs=[], total=0,
                               fair_share=False, head="", limit=limit, offset=offset, self_url=_url(request))
        response.status_code = 404
        return response
    async with rt.sessions() as session:
        # every queued job of the pool: the order needs them all
        rows = [row for row in await svc.job_rows(session, rt, chosen) if svc.in_queue(row)]
    window = rows[offset:offset + limit]
    short = short_ids([r.job_id for r in rows])
    jobs = [JobEntry(position=offset + i, job_id=r.job_id, short_id=short[r.job_id], kind=r.type.removeprefix("TYPE_"),
                     name=r.name, exp_id=r.experiment.id if r.experiment is not None else None,
                     pai_url=pai.job_url(r.username, r.name) if r.kind == "pai" else None, priority=r.priority,
                     weight=r.weight, submitted=r.submitted, acquired=r.allocated, needed=r.requested,
                     state="SCHEDULED" if r.scheduled else "QUEUED", username=r.username, owner_id=r.owner_id,
                     waiting=r.waiting)
            for i, r in enumerate(window)]
    return render.page(request, "jobs.html", pools=names, pool=chosen, missing=False, jobs=jobs, total=len(rows),
                       fair_share=config.policy.scheduler == "fair_share",
                       head=rows[0].job_id if rows else "", limit=limit, offset=offset, self_url=_url(request))


def _url(request: AnyRequest) -> str:
    """The page's own URL, which its live part polls."""
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


ROUTES: list[Any] = [jobs_page]
