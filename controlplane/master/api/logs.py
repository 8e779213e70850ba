"""Trial logs: NDJSON streamed with chunked encoding so `det trial logs -f` prints live."""

from __future__ import annotations

from controlplane.master.authz import Action, opt

from collections.abc import AsyncIterator

import msgspec
from litestar import Request, get, post
from litestar.response import Stream
from sqlalchemy import select

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import TaskPrincipal, current_user, runtime_of, user_or_task
from controlplane.master.api.requests import expect_dict, field, parse_time, path_int, read_json
from controlplane.master.db.models import TaskLog, Trial
from controlplane.master.errors import BadRequest, Forbidden, NotFound
from controlplane.master.services.logs import format_message, insert_rows
from controlplane.state import trial as T

PAGE = 1000
_encoder = msgspec.json.Encoder()
LEVELS = ["LOG_LEVEL_TRACE", "LOG_LEVEL_DEBUG", "LOG_LEVEL_INFO", "LOG_LEVEL_WARNING",
          "LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"]


def _entry(row: TaskLog) -> dict:
    return {
        "id": str(row.id), "trialId": row.trial_id, "timestamp": iso(row.timestamp),
        "level": row.level, "message": format_message(row), "log": row.log, "agentId": row.agent_id,
        "containerId": row.allocation_id, "rankId": row.rank_id, "stdtype": row.stdtype, "source": row.source,
        "taskId": row.task_id, "allocationId": row.allocation_id,
    }


def _line(row: TaskLog) -> bytes:
    return _encoder.encode({"result": _entry(row)}) + b"\n"


@get("/api/v1/trials/{trial_id:str}/logs", operation_id="TrialLogs", opt=opt(Action.VIEW, ("trial", "trial_id")), tags=["trials"])
async def trial_logs(request: Request, trial_id: str, follow: bool = False, limit: int = 0,
                     orderBy: str = "ORDER_BY_ASC") -> Stream:  # noqa: N803
    await current_user(request)
    rt = runtime_of(request)
    tid = path_int(trial_id, "trialId")
    q = request.query_params
    rank_ids = [path_int(r, "rankIds") for r in q.getall("rankIds", [])]
    stdtypes = q.getall("stdtypes", [])
    levels = q.getall("levels", [])
    search = q.get("searchText")
    if any(lv not in LEVELS for lv in levels):
        raise BadRequest(f"levels: must be among {', '.join(LEVELS)}")
    if orderBy not in ("ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"):
        raise BadRequest("orderBy: must be ORDER_BY_ASC or ORDER_BY_DESC")
    async with rt.sessions() as session:
        if await session.get(Trial, tid) is None:
            raise NotFound(f"trial {tid} not found")

    def base_query():  # noqa: ANN202
        stmt = select(TaskLog).where(TaskLog.trial_id == tid)
        if rank_ids:
            stmt = stmt.where(TaskLog.rank_id.in_(rank_ids))
        if stdtypes:
            stmt = stmt.where(TaskLog.stdtype.in_(stdtypes))
        if levels:
            stmt = stmt.where(TaskLog.level.in_(levels))
        if search:
            stmt = stmt.where(TaskLog.log.contains(search))
        return stmt

    async def stream() -> AsyncIterator[bytes]:
        descending = orderBy == "ORDER_BY_DESC"
        sent = 0
        last_id = 0
        if descending:  # --tail: the newest `limit` lines, newest first; never followed further
            async with rt.sessions() as session:
                stmt = base_query().order_by(TaskLog.id.desc())
                if limit > 0:
                    stmt = stmt.limit(limit)
                rows = (await session.scalars(stmt)).all()
            for row in rows:
                yield _line(row)
            return
        while True:
            async with rt.sessions() as session:
                page = PAGE if limit <= 0 else min(PAGE, limit - sent)
                rows = (await session.scalars(
                    base_query().where(TaskLog.id > last_id).order_by(TaskLog.id).limit(page))).all()
                trial_state = await session.scalar(select(Trial.state).where(Trial.id == tid))
            for row in rows:
                yield _line(row)
            sent += len(rows)
            if rows:
                last_id = rows[-1].id
            if limit > 0 and sent >= limit:
                return
            if len(rows) == page:
                continue
            if not follow or T.TRIAL.is_terminal(trial_state or T.COMPLETED):
                if not follow or not rows:
                    return
                continue  # one more pass: lines may have landed with the final state
            await rt.notifier.wait(("trial-logs", tid), timeout=1.0)

    return Stream(stream(), media_type="application/x-ndjson")


@post("/api/v1/task/logs", operation_id="PostTaskLogs", opt=opt(Action.TASK_REPORT, "body"), tags=["tasks"], status_code=200)
async def post_task_logs(request: Request) -> dict:
    """ship_logs.py's path (reference §4.5): a task sends its own lines."""
    principal = await user_or_task(request)
    rt = runtime_of(request)
    body = expect_dict(await read_json(request), "body")
    logs = field(body, "logs", [])
    if not isinstance(logs, list):
        raise BadRequest("logs: must be a list")
    rows = []
    for i, entry in enumerate(logs):
        entry = expect_dict(entry, f"logs[{i}]")
        alloc_id = field(entry, "allocationId", "")
        if isinstance(principal, TaskPrincipal) and alloc_id and alloc_id != principal.allocation_id:
            raise Forbidden(f"logs[{i}].allocation_id: not this token's allocation")
        if isinstance(principal, TaskPrincipal) and field(entry, "taskId", "") not in ("", principal.task_id):
            raise Forbidden(f"logs[{i}].taskId: not this token's task")
        text = field(entry, "log", "")
        if not isinstance(text, str):
            raise BadRequest(f"logs[{i}].log: must be a string")
        rows.append({
            "task_id": field(entry, "taskId", "") or (principal.task_id if isinstance(principal, TaskPrincipal) else ""),
            "trial_id": principal.trial_id if isinstance(principal, TaskPrincipal) else None,
            "allocation_id": alloc_id, "agent_id": field(entry, "agentId", "") or "",
            "rank_id": field(entry, "rankId"), "stdtype": field(entry, "stdtype", "stdout") or "stdout",
            "level": field(entry, "level") or "LOG_LEVEL_INFO", "source": field(entry, "source", "task") or "task",
            "timestamp": parse_time(field(entry, "timestamp"), f"logs[{i}].timestamp") or _now(),
            "log": text if text.endswith("\n") else text + "\n",
        })
    if rows:
        await insert_rows(rt, rows, principal.trial_id if isinstance(principal, TaskPrincipal) else None)
    return {}


def _now():  # noqa: ANN202
    from controlplane.common.timeutil import utcnow

    return utcnow()


ROUTES = [trial_logs, post_task_logs]
