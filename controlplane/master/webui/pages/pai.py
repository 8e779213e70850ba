"""The OpenPAI portal: ``/pai`` (every job in every state, filtered by state, user and name, paged in
SQL), ``/pai/jobs/{user}/{job}`` (status, task roles, each task's state, exit code, attempt, agent,
ports and SSH command, the job JSON, task logs that follow live) and ``/pai/submit`` (paste or
upload a v1 job JSON; ``?user=U&job=J`` clones a job under a new name).

Submit, Stop and Clone go through OpenPAI's REST routes from the browser (``static/pai.js``,
``static/app.js``), so who may do what and every message (a bad job's errors, all at once, with
their paths) are the API's. The job JSON, each role's command and the SSH command are shown only to
those the API would give them to (``GET .../config`` and ``.../ssh``: the owner or an admin); the
SSH key itself never is.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import quote, urlencode

from litestar import Response, get
from litestar.params import Parameter, QueryParameter

from controlplane.common.timeutil import aware
from controlplane.master.api.auth_guard import runtime_of, user_of
from controlplane.master.api.pai import JobName, Username
from controlplane.master.api.params import ListOffset
from controlplane.master.authz import Action, allows, opt
from controlplane.master.db.models import TaskLog
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import pai_jobs as orch
from controlplane.master.services import pai_portal as portal
from controlplane.master.webui import render
from controlplane.pai.spec import MAX_ROLE_NAME
from controlplane.state import pai_job as J

MAX_PAGE = 200
TAIL = 500  # log lines the job page opens with
MAX_POLL = 1000  # lines one poll brings
StateFilter = Literal["", "WAITING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED"]
Text = Annotated[str, Parameter(max_length=255, pattern=r"^[^\x00]*$")]
PageLimit = Annotated[int, Parameter(ge=1, le=MAX_PAGE, description="jobs per page")]
Role = Annotated[str | None, Parameter(max_length=MAX_ROLE_NAME, pattern=r"^[A-Za-z0-9._~]*$")]
# The log form's index field: empty for every task (a number field sends "" when left blank)
Index = Annotated[str, Parameter(max_length=4, pattern=r"^[0-9]*$", description="a task index, or empty")]
AfterId = Annotated[int, Parameter(ge=0, le=2**63 - 1)]
CloneUser = Annotated[str, Parameter(max_length=255, pattern=r"^[^\x00/]*$")]
CloneJob = Annotated[str, Parameter(max_length=128, pattern=r"^[A-Za-z0-9\-._~]*$")]


def job_url(username: str, name: str) -> str:
    return f"/pai/jobs/{quote(username, safe='')}/{quote(name, safe='')}"


def api_url(username: str, name: str) -> str:
    """The job's REST path (no space in it: app.js splits ``data-api`` on one)."""
    return f"/api/v1/user/{quote(username, safe='')}/jobs/{quote(name, safe='')}"


def ms_time(value: int | None) -> datetime | None:
    return datetime.fromtimestamp(value / 1000, UTC) if value is not None else None


@dataclass(frozen=True)
class Filters:
    state: str = ""
    user: str = ""
    name: str = ""
    limit: int = 50
    offset: int = 0

    def url(self, **change: Any) -> str:
        values = {**asdict(self), **change}
        return "/pai?" + urlencode({k: v for k, v in values.items() if v not in ("", None)})


@get(["/pai", "/pai/jobs"], opt=opt(Action.VIEW), include_in_schema=False)
async def jobs_page(request: AnyRequest, state_: Annotated[StateFilter, QueryParameter(name="state")] = "",
                    user: Text = "", name: Text = "", limit: PageLimit = 50, offset: ListOffset = 0) -> Response[Any]:
    f = Filters(state_, user, name, limit, offset)
    async with runtime_of(request).sessions() as session:
        jobs, total = await portal.job_page(session, state=f.state, username=f.user, name=f.name, offset=f.offset,
                                            limit=f.limit)
    return render.page(request, "pai_jobs.html", jobs=jobs, total=total, f=f, states=portal.STATES,
                       job_url=job_url, api_url=api_url, ms_time=ms_time, open_states=(J.WAITING, J.RUNNING))


def _line(row: TaskLog, task: tuple[str, int]) -> str:
    ts = aware(row.timestamp)
    stamp = ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if ts else ""
    text = row.log if row.log.endswith("\n") else row.log + "\n"
    return f"{stamp} [{task[0]}-{task[1]}] {text}"


def _log_context(base: str, names: dict[str, tuple[str, int]], rows: list[TaskLog], after: int, role: str | None,
                 index: int | None, done: bool) -> dict[str, Any]:
    last = rows[-1].id if rows else after
    params = {"after": last, **({"role": role} if role else {}), **({"index": index} if index is not None else {})}
    return {"lines": [_line(r, names[r.task_id]) for r in rows if r.task_id in names], "last_id": last,
            "follow": not done, "poll_url": f"{base}/logs", "poll_params": urlencode(params)}


def _ssh_hint(viewer: str, owner: str, name: str, task: str) -> str:
    who = f" --user {shlex.quote(owner)}" if owner != viewer else ""
    return f"det pai ssh{who} {name} {task}"


@get("/pai/jobs/{username:str}/{job_name:str}", opt=opt(Action.VIEW), include_in_schema=False)
async def job_page(request: AnyRequest, username: Username, job_name: JobName, role: Role = None,
                   index: Index = "") -> Response[Any]:
    viewer = user_of(request)
    role, task = role or None, int(index) if index else None
    live_only = request.headers.get("hx-target") == render.LIVE_BLOCK
    async with runtime_of(request).sessions() as session:
        view = await portal.job_view(session, username, job_name)
        if view is None:
            return render.missing(request, f"OpenPAI job {job_name} of user {username} does not exist.")
        roles = [r.name for r in view.spec.task_roles]
        log_error = f"Job {job_name} has no task role {role}." if role is not None and role not in roles else ""
        names = portal.task_ids(view.job, view.spec, role, task)
        # An htmx poll of the live block draws no logs: skip their read.
        rows = [] if live_only or log_error else await portal.log_tail(session, list(names), TAIL)
    owner_reads = allows(viewer, Action.READ_OWN, view.job.owner_id)  # what GET .../config and .../ssh allow
    base = job_url(view.owner, view.job.name)
    done = J.PAI_JOB.is_terminal(view.job.state)
    ssh = {(t.role, t.index): _ssh_hint(viewer.username, view.owner, view.job.name, f"{t.role}-{t.index}")
           for t in view.tasks if t.ssh_port and owner_reads}
    return render.page(
        request, "pai_job.html", view=view, job=view.job, status=view.detail.job_status, spec=view.spec,
        base=base, api=api_url(view.owner, view.job.name), owner_reads=owner_reads, ssh=ssh, done=done,
        config_json=json.dumps(view.job.spec, indent=2, sort_keys=False) if owner_reads else "",
        ms_time=ms_time, roles=roles, role=role, index=task, log_error=log_error,
        clone_url="/pai/submit?" + urlencode({"user": view.owner, "job": view.job.name}),
        **_log_context(base, names, rows, 0, role, task, done))


@get("/pai/jobs/{username:str}/{job_name:str}/logs", opt=opt(Action.VIEW), include_in_schema=False)
async def job_logs_poll(request: AnyRequest, username: Username, job_name: JobName, after: AfterId = 0,
                        role: Role = None, index: Index = "") -> Response[Any]:
    """The lines after ``after`` (at most ``MAX_POLL``) and the next poller; once the job has ended and
    nothing is left to read, a poller that stops."""
    role, task = role or None, int(index) if index else None
    async with runtime_of(request).sessions() as session:
        found = await portal.find(session, username, job_name)
        if found is None:
            return render.missing(request, f"OpenPAI job {job_name} of user {username} does not exist.")
        job, owner = found
        names = portal.task_ids(job, orch.parsed(job), role, task)
        rows = await portal.log_after(session, list(names), after, MAX_POLL)
    done = J.PAI_JOB.is_terminal(job.state) and not rows  # lines may land with the final state: one more poll
    body = render.environment().get_template("_trial_logs_poll.html").render(
        **_log_context(job_url(owner, job.name), names, rows, after, role, task, done))
    return Response(body, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store", "Content-Security-Policy": render.CSP})


@get("/pai/submit", opt=opt(Action.VIEW), include_in_schema=False)
async def submit_page(request: AnyRequest, user: CloneUser = "", job: CloneJob = "") -> Response[Any]:
    """The submit form; with ``user`` and ``job``, prefilled with that job's JSON under a free name
    (for those who may read it: its owner or an admin, as ``GET .../config``)."""
    viewer = user_of(request)
    text, problem, source = "", "", ""
    if user and job:
        async with runtime_of(request).sessions() as session:
            found = await portal.find(session, user, job)
            if found is None:
                return render.missing(request, f"OpenPAI job {job} of user {user} does not exist.")
            row, owner = found
            source = job_url(owner, row.name)
            if allows(viewer, Action.READ_OWN, row.owner_id):
                config = dict(row.spec)
                config["jobName"] = await portal.clone_name(session, viewer.id, row.name)
                text = json.dumps(config, indent=2)
            else:
                problem = f"only the owner of job {row.name} or an admin may read its config, so only they clone it"
    return render.page(request, "pai_submit.html", text=text, problem=problem, source=source, clone_of=job,
                       submit_path=f"/api/v1/user/{quote(viewer.username, safe='')}/jobs",
                       jobs_base=f"/pai/jobs/{quote(viewer.username, safe='')}/")


ROUTES: list[Any] = [jobs_page, job_page, job_logs_poll, submit_page]
