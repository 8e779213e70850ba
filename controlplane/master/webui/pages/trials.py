"""One trial (``/trials/{id}``): metric charts, checkpoints, restarts (its allocations and state
changes with their reasons) and its logs, which follow live: the page shows the newest lines and
a poller (htmx, every 2 s) asks ``/trials/{id}/logs?after=<last id>`` for what came since."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from litestar import Response, get
from litestar.params import Parameter

from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.api.logs import LEVELS
from controlplane.master.api.params import TrialId
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import TaskLog
from controlplane.master.http_types import AnyRequest
from controlplane.master.services import (
    allocations,
    checkpoints,
    experiment_reads,
    logs,
    metric_series,
    state_transitions,
)
from controlplane.master.webui import render
from controlplane.state import trial as T

TAIL = 500  # lines the page opens with
MAX_POLL = 1000  # lines one poll brings
MAX_ROWS = 100  # checkpoints, allocations, transitions shown
Level = Literal["", "TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
Rank = Annotated[int | None, Parameter(ge=0, le=2**31 - 1)]
Search = Annotated[str, Parameter(max_length=1024, pattern=r"^[^\x00]*$")]
AfterId = Annotated[int, Parameter(ge=0, le=2**63 - 1)]


def _ranks(rank: int | None) -> list[int]:
    return [rank] if rank is not None else []


def _levels(level: str) -> list[str]:
    # A level shows it and the more severe ones.
    return LEVELS[LEVELS.index(f"LOG_LEVEL_{level}"):] if level else []


def _log_context(trial_id: int, rows: list[TaskLog], after: int, rank: int | None, level: str, q: str,
                 done: bool) -> dict[str, Any]:
    last = rows[-1].id if rows else after
    params = urlencode({"after": last, "level": level, "q": q, **({"rank": rank} if rank is not None else {})})
    return {"lines": [logs.format_message(r) for r in rows], "last_id": last, "follow": not done,
            "poll_url": f"/trials/{trial_id}/logs", "poll_params": params}


@get("/trials/{trial_id:int}", opt=opt(Action.VIEW), include_in_schema=False)
async def trial_page(request: AnyRequest, trial_id: TrialId, rank: Rank = None, level: Level = "",
                     q: Search = "") -> Response[Any]:
    async with runtime_of(request).sessions() as session:
        trial = await experiment_reads.find_trial(session, trial_id)
        exp = await experiment_reads.experiment_without_code(session, trial.experiment_id) if trial else None
        if trial is None or exp is None:
            return render.missing(request, f"Trial {trial_id} does not exist.")
        runs = await allocations.of_trial(session, trial_id, MAX_ROWS)
        transitions = await state_transitions.of_trial(session, trial_id, MAX_ROWS)
        # An htmx poll of the live block draws neither the logs nor the chart: skip their reads.
        live_only = request.headers.get("hx-target") == render.LIVE_BLOCK
        lines = [] if live_only else await logs.trial_tail(session, trial_id, rank_ids=_ranks(rank),
                                                           levels=_levels(level), search_text=q, limit=TAIL)
        context = {
            "trial": trial, "exp": exp, "allocations": runs, "transitions": transitions,
            "checkpoints": await checkpoints.newest_of_trial(session, trial_id, MAX_ROWS),
            "metric_names": {} if live_only else await metric_series.metric_names(session, [trial_id]),
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
        state = await experiment_reads.trial_state(session, trial_id)
        if state is None:
            return render.missing(request, f"Trial {trial_id} does not exist.")
        rows = await logs.trial_lines_after(session, trial_id, after, rank_ids=_ranks(rank), levels=_levels(level),
                                            search_text=q, limit=MAX_POLL)
    done = T.TRIAL.is_terminal(state) and not rows  # lines may land with the final state: one more poll
    body = render.environment().get_template("_trial_logs_poll.html").render(
        **_log_context(trial_id, rows, after, rank, level, q, done))
    return Response(body, media_type="text/html; charset=utf-8",
                    headers={"Cache-Control": "no-store", "Content-Security-Policy": render.CSP})


ROUTES: list[Any] = [trial_page, trial_logs_poll]
