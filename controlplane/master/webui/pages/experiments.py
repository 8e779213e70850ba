"""The experiment list (``/experiments``): filters, sort and pages done in SQL, one page of rows
read, so it stays fast with tens of thousands of experiments. Actions are buttons that call the
REST API (``static/app.js``), shown only where ``authz.allows`` says the API would accept them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from litestar import Response, get
from litestar.params import Parameter, QueryParameter
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import aware
from controlplane.master.api.auth_guard import runtime_of
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import Experiment
from controlplane.master.http_types import AnyRequest
from controlplane.master.orchestration import progress
from controlplane.master.services import experiment_reads as reads
from controlplane.master.webui import render
from controlplane.state import experiment as E

MAX_PAGE = 200
STATES = ("ACTIVE", "PAUSED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_COMPLETED", "STOPPING_ERROR",
          "COMPLETED", "CANCELED", "ERROR", "DELETING", "DELETE_FAILED")
StateFilter = Literal["", "ACTIVE", "PAUSED", "STOPPING_CANCELED", "STOPPING_KILLED", "STOPPING_COMPLETED",
                      "STOPPING_ERROR", "COMPLETED", "CANCELED", "ERROR", "DELETING", "DELETE_FAILED"]
Sort = Literal["id", "name", "state", "owner", "start", "end", "progress"]
Text = Annotated[str, Parameter(max_length=255, pattern=r"^[^\x00]*$")]


@dataclass(frozen=True)
class Filters:
    state: str = ""
    owner: str = ""
    label: str = ""
    q: str = ""
    archived: bool = False
    sort: str = "id"
    order: str = "desc"
    limit: int = 50
    offset: int = 0

    def url(self, **change: Any) -> str:
        values = {**self.__dict__, **change}
        values["archived"] = "true" if values["archived"] else ""
        return "/experiments?" + urlencode({k: v for k, v in values.items() if v not in ("", None)})


@dataclass
class Row:
    exp: Experiment
    owner: str
    progress: float
    best: float | None
    duration_s: float
    cost: float | None


async def _costs(session: AsyncSession, ids: list[int], now: datetime) -> dict[int, float]:
    from controlplane.master.services.spend import experiment_spend

    return await experiment_spend(session, ids, now) if ids else {}


async def list_page(session: AsyncSession, f: Filters) -> tuple[list[Row], int]:
    rows, total = await reads.experiment_list(session, state=f.state, owner=f.owner, label=f.label, search=f.q,
                                              archived=f.archived, sort=f.sort, order=f.order, offset=f.offset,
                                              limit=f.limit)
    exps: list[Experiment] = [e for e, _ in rows]
    done = await progress.of_experiments(session, exps)
    best = await reads.best_searcher_metrics(session, exps)
    now = datetime.now(UTC)
    costs = await _costs(session, [e.id for e in exps], now)
    out = [Row(e, owner, done[e.id], best[e.id], ((aware(e.end_time) or now) - aware(e.start_time)).total_seconds(),
               costs.get(e.id)) for e, owner in rows]
    return out, total


def actions(state: str, archived: bool) -> list[tuple[str, str, str]]:
    """(label, REST call, confirmation) of what can be done to an experiment in ``state``."""
    out = []
    if state == E.ACTIVE:
        out.append(("Pause", "pause", ""))
    if state == E.PAUSED:
        out.append(("Activate", "activate", ""))
    if state in (E.ACTIVE, E.PAUSED, E.STOPPING_COMPLETED, E.STOPPING_CANCELED, E.STOPPING_ERROR):
        out.append(("Kill", "kill", "Kill this experiment? Its trials stop now."))
    if E.EXPERIMENT.is_terminal(state):
        out.append(("Unarchive", "unarchive", "") if archived else ("Archive", "archive", ""))
    return out


@get("/experiments", opt=opt(Action.VIEW), include_in_schema=False)
async def experiments_page(
    request: AnyRequest, state_: Annotated[StateFilter, QueryParameter(name="state")] = "",
    owner: Text = "", label: Text = "", q: Text = "",
    archived: bool = False, sort: Sort = "id", order: Literal["asc", "desc"] = "desc",
    limit: Annotated[int, Parameter(ge=1, le=MAX_PAGE)] = 50,
    offset: Annotated[int, Parameter(ge=0, le=10_000_000)] = 0,
) -> Response[Any]:
    f = Filters(state_, owner, label, q, archived, sort, order, limit, offset)
    async with runtime_of(request).sessions() as session:
        rows, total = await list_page(session, f)
    return render.page(request, "experiments.html", rows=rows, total=total, f=f, states=STATES,
                       actions=actions, sorts=list(reads.LIST_SORT_COLUMNS))


ROUTES: list[Any] = [experiments_page]
