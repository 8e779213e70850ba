"""One trial (``/trials/{id}``): metric charts, checkpoints, restarts (its allocations and state
changes with their reasons) and its logs, which follow live: the page shows the newest lines and
a poller (htmx, every 2 s) asks ``/trials/{id}/logs?after=<last id>`` for what came since."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from litestar import Response, get
from litestar.params import Parameter
from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.logs import LEVELS
from controlplane.master.api.params import TrialId
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import Allocation, Checkpoint, Metric, StateTransition, TaskLog, Trial
from controlplane.master.http_types import AnyRequest
from controlplane.master.services.logs import format_message, trial_log_query
from controlplane.master.webui import charts, render
from controlplane.master.webui.pages.experiment_detail import load_experiment
from controlplane.state import trial as T

TAIL = 500  # lines the page opens with
MAX_POLL = 1000  # lines one poll brings
MAX_ROWS = 100  # checkpoints, allocations, transitions shown
Level = Literal["", "TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
Rank = Annotated[int | None, Parameter(ge=0, le=2**31 - 1)]
Search = Annotated[str, Parameter(max_length=1024, pattern=r"^[^\x00]*$")]
AfterId = Annotated[int, Parameter(ge=0, le=2**63 - 1)]


def _logs(trial_id: int, rank: int | None, level: str, q: str) -> Select[Any]:
    # A level shows it and the more severe ones.
    return trial_log_query(trial_id, rank_ids=[rank] if rank is not None else [], search_text=q,
                           levels=LEVELS[LEVELS.index(f"LOG_LEVEL_{level}"):] if level else [])


async def _tail(session: AsyncSession, stmt: Select[Any]) -> list[TaskLog]:
    rows = list((await session.scalars(stmt.order_by(TaskLog.id.desc()).limit(TAIL))).all())
    return rows[::-1]


def _log_context(trial_id: int, rows: list[TaskLog], after: int, rank: int | None, level: str, q: str,
                 done: bool) -> dict[str, Any]:
    last = rows[-1].id if rows else after
    params = urlencode({"after": last, "level": level, "q": q, **({"rank": rank} if rank is not None else {})})
    return {"lines": [format_message(r) for r in rows], "last_id": last, "follow": not done,
            "poll_url": f"/trials/{trial_id}/logs", "poll_params": params}


async def _checkpoints(session: AsyncSession, trial_id: int) -> list[tuple[Checkpoint, dict[str, Any]]]:
    """Newest first, each with the validation metrics reported at its batches."""
    ckpts = list((await session.scalars(select(Checkpoint).where(Checkpoint.trial_id == trial_id)
                                        .order_by(Checkpoint.report_time.desc()).limit(MAX_ROWS))).all())
    steps = {c.steps_completed for c in ckpts}
    found: dict[int, dict[str, Any]] = {}
    if steps:
        rows = (await session.execute(select(Metric.steps_completed, Metric.metrics).where(
            Metric.trial_id == trial_id, Metric.group == "validation", Metric.steps_completed.in_(steps)))).tuples()
        for s, m in rows:
            found.setdefault(s, m)
    return [(c, found.get(c.steps_completed, {})) for c in ckpts]


@get("/trials/{trial_id:int}", opt=opt(Action.VIEW), include_in_schema=False)
async def trial_page(request: AnyRequest, trial_id: TrialId, rank: Rank = None, level: Level = "",
                     q: Search = "") -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        trial = await session.get(Trial, trial_id)
        exp = await load_experiment(session, trial.experiment_id) if trial else None
        if trial is None or exp is None:
            return render.missing(request, f"Trial {trial_id} does not exist.")
        allocations = list((await session.scalars(select(Allocation).where(Allocation.trial_id == trial_id)
                                                  .order_by(Allocation.created_at).limit(MAX_ROWS))).all())
        transitions = list((await session.scalars(select(StateTransition).where(
            StateTransition.entity == "trial", StateTransition.entity_id == str(trial_id))
            .order_by(StateTransition.id).limit(MAX_ROWS))).all())
        # An htmx poll of the live block draws neither the logs nor the chart: skip their reads.
        live_only = request.headers.get("hx-target") == render.LIVE_BLOCK
        lines = [] if live_only else await _tail(session, _logs(trial_id, rank, level, q))
        context = {
            "trial": trial, "exp": exp, "allocations": allocations, "transitions": transitions,
            "checkpoints": await _checkpoints(session, trial_id),
            "metric_names": {} if live_only else await charts.metric_names(session, [trial_id]),
            "searcher_metric": exp.searcher.metric,
            "rank": rank, "level": level, "q": q, "levels": [lv.removeprefix("LOG_LEVEL_") for lv in LEVELS],
            **_log_context(trial_id, lines, 0, rank, level, q, T.TRIAL.is_terminal(trial.state)),
        }
    return render.page(request, "trial.html", **context)


@get("/trials/{trial_id:int}/logs", opt=opt(Action.VIEW), include_in_schema=False)
async def trial_logs_poll(request: AnyRequest, trial_id: TrialId, after: AfterId = 0, rank: Rank = None,
                          level: Level = "", q: Search = "") -> Response[Any]:
    """The lines after ``after`` (at most ``MAX_POLL``) and the next poller; once the trial has
    ended and nothing is left to read, a poller that stops."""
    async with runtime_of(request).sessions() as session:
        state = await session.scalar(select(Trial.state).where(Trial.id == trial_id))
        if state is None:
            return render.missing(request, f"Trial {trial_id} does not exist.")
        rows = list((await session.scalars(_logs(trial_id, rank, level, q).where(TaskLog.id > after)
                                           .order_by(TaskLog.id).limit(MAX_POLL))).all())
    done = T.TRIAL.is_terminal(state) and not rows  # lines may land with the final state: one more poll
    body = render.environment().get_template("_trial_logs_poll.html").render(
        **_log_context(trial_id, rows, after, rank, level, q, done))
    return Response(body, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store", "Content-Security-Policy": render.CSP})


ROUTES: list[Any] = [trial_page, trial_logs_poll]
