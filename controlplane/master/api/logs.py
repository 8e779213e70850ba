"""Trial logs: NDJSON streamed with chunked encoding so `det trial logs -f` prints live.

The stream reads a page (``PAGE`` lines, keyset on the line id) at a time, so memory and each
database read stay bounded however long the log. Once the 200 is sent an error cannot change
the status any more: a failure mid-stream ends it with one final ``{"error": ...}`` line (what
Determined's streaming gateway sends) instead of a broken connection.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, get, post
from litestar.params import Parameter, QueryParameter
from litestar.response import Stream
from sqlalchemy import Select, select

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.api.paging_params import TrialId
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import TaskLog, Trial
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.logs import (
    NO_NUL,
    PostTaskLogsRequest,
    format_message,
    post_task_logs,
    trial_log_query,
)
from controlplane.master.services.paging import MAX_INT64
from controlplane.state import trial as T

log = logging.getLogger(__name__)

PAGE = 1000
_encoder = msgspec.json.Encoder()
LEVELS = ["LOG_LEVEL_TRACE", "LOG_LEVEL_DEBUG", "LOG_LEVEL_INFO", "LOG_LEVEL_WARNING",
          "LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"]
Order = Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"]
Filter = Annotated[list[str] | None, Parameter(max_items=64)]


def _entry(row: TaskLog) -> dict:
    return {
        "id": str(row.id), "trialId": row.trial_id, "timestamp": iso(row.timestamp),
        "level": row.level, "message": format_message(row), "log": row.log, "agentId": row.agent_id,
        "containerId": row.allocation_id, "rankId": row.rank_id, "stdtype": row.stdtype, "source": row.source,
        "taskId": row.task_id, "allocationId": row.allocation_id,
    }


def _line(row: TaskLog) -> bytes:
    return _encoder.encode({"result": _entry(row)}) + b"\n"


def _error_line(message: str) -> bytes:
    return _encoder.encode({"error": {"error": message, "message": message, "httpCode": 500}}) + b"\n"


async def read_page(rt: MasterRuntime, stmt: Select, trial_id: int) -> tuple[list[TaskLog], str | None]:
    """One page of lines and the trial's state (to know when a followed stream may end)."""
    async with rt.sessions() as session:
        rows = list((await session.scalars(stmt)).all())
        state = await session.scalar(select(Trial.state).where(Trial.id == trial_id))
    return rows, state


def _check_filters(rank_ids: list[int], stdtypes: list[str], levels: list[str]) -> None:
    if any(not 0 <= r <= 2**31 - 1 for r in rank_ids):
        raise BadRequest("rankIds: each must be between 0 and 2147483647")
    if any(len(s) > 16 or "\x00" in s for s in stdtypes):
        raise BadRequest("stdtypes: each must be at most 16 characters, without NUL")
    if any(lv not in LEVELS for lv in levels):
        raise BadRequest(f"levels: must be among {', '.join(LEVELS)}")


@get("/api/v1/trials/{trial_id:int}/logs", operation_id="TrialLogs", opt=opt(Action.VIEW, ("trial", "trial_id")),
     tags=["trials"], media_type="application/x-ndjson")
async def trial_logs(
    request: Request, trial_id: TrialId, follow: bool = False,
    limit: Annotated[int, Parameter(ge=0, le=MAX_INT64, description="at most this many lines; 0: all")] = 0,
    order_by: Annotated[Order, QueryParameter(name="orderBy")] = "ORDER_BY_ASC",
    rank_ids: Annotated[list[int] | None, QueryParameter(name="rankIds", max_items=1024)] = None,
    stdtypes: Filter = None,
    levels: Filter = None,
    search_text: Annotated[str | None, QueryParameter(name="searchText", max_length=1024, pattern=NO_NUL)] = None,
) -> Stream:
    """NDJSON lines ``{"result": v1TrialLogsResponse}``; ``follow`` keeps the stream open until the
    trial ends; ``ORDER_BY_DESC`` gives the newest first (``--tail``) and is never followed."""
    rt = runtime_of(request)
    rank_ids, stdtypes, levels = rank_ids or [], stdtypes or [], levels or []
    _check_filters(rank_ids, stdtypes, levels)
    async with rt.sessions() as session:
        if await session.get(Trial, trial_id) is None:
            raise NotFound(f"trial {trial_id} not found")

    def base_query() -> Select:
        return trial_log_query(trial_id, rank_ids=rank_ids, stdtypes=stdtypes, levels=levels,
                               search_text=search_text or "")

    descending = order_by == "ORDER_BY_DESC"

    async def lines() -> AsyncIterator[bytes]:
        sent = 0
        last_id: int | None = None
        while True:
            page = PAGE if limit <= 0 else min(PAGE, limit - sent)
            stmt = base_query()
            if descending:
                if last_id is not None:
                    stmt = stmt.where(TaskLog.id < last_id)
                stmt = stmt.order_by(TaskLog.id.desc())
            else:
                stmt = stmt.where(TaskLog.id > (last_id or 0)).order_by(TaskLog.id)
            rows, trial_state = await read_page(rt, stmt.limit(page), trial_id)
            for row in rows:
                yield _line(row)
            sent += len(rows)
            if rows:
                last_id = rows[-1].id
            if limit > 0 and sent >= limit:
                return
            if len(rows) == page:
                continue
            if descending or not follow:
                return
            if T.TRIAL.is_terminal(trial_state or T.COMPLETED):
                if not rows:
                    return
                continue  # one more pass: lines may have landed with the final state
            await rt.notifier.wait(("trial-logs", trial_id), timeout=1.0)

    async def stream() -> AsyncIterator[bytes]:
        try:
            async for chunk in lines():
                yield chunk
        except Exception:  # noqa: BLE001 - the 200 is sent: end the stream with a line saying why
            log.exception("trial %s log stream failed", trial_id)
            yield _error_line(f"reading the logs of trial {trial_id} failed; the master log has the details")

    return Stream(stream(), media_type="application/x-ndjson")


@post("/api/v1/task/logs", operation_id="PostTaskLogs", opt=opt(Action.TASK_REPORT, "body"), tags=["tasks"],
      status_code=200)
async def post_logs(request: Request, data: PostTaskLogsRequest) -> dict[str, Any]:
    """ship_logs.py's path (reference §4.5): a task sends its own lines."""
    await post_task_logs(runtime_of(request), principal_of(request), data)
    return {}


ROUTES = [trial_logs, post_logs]
