"""Trial logs: NDJSON streamed with chunked encoding so `det trial logs -f` prints live.

The stream reads a page (``PAGE`` lines, keyset on the line id) at a time, each in its own short
session, so memory and each database read stay bounded however long the log. Once the 200 is sent
an error cannot change the status any more: a failure mid-stream ends it with one final
``{"error": ...}`` line (what Determined's streaming gateway sends) instead of a broken connection.

A read that may outlast one page (``follow``, or no ``limit``: Determined 0.38.1's ``det trial
logs`` sends none and prints what one stream carries, so the whole log stays one answer for it, or
a ``limit`` over a page) takes one of the master's stream slots (``stream_slots.py``: per user and
in all, 429 beyond). A follower holds no session while it waits: it sleeps on the ingest path's
notification and reads at most once per ``FOLLOW_READ_S``; without lines it only looks at the
trial's state, which followers of one trial share (``_trial_state``, read at most once a second).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Annotated, Any, Literal

import anyio
import msgspec
from litestar import get, post
from litestar.background_tasks import BackgroundTask
from litestar.params import Parameter, QueryParameter
from litestar.response import Stream
from sqlalchemy import Select

from controlplane.common.timeutil import iso
from controlplane.master.api.auth_guard import principal_of, runtime_of
from controlplane.master.api.paging_params import TrialId
from controlplane.master.api.responses import EmptyResponse
from controlplane.master.authz import Action, opt
from controlplane.master.db.models import TaskLog
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.http_types import AnyRequest
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import experiment_reads as reads
from controlplane.master.services import logs as log_svc
from controlplane.master.services.logs import (
    NO_NUL,
    PostTaskLogsRequest,
    format_message,
    post_task_logs,
    trial_log_query,
)
from controlplane.master.services.paging import MAX_INT64
from controlplane.master.stream_slots import Slot, take_slot
from controlplane.state import trial as T

log = logging.getLogger(__name__)

PAGE = 1000
_encoder = msgspec.json.Encoder()
LEVELS = ["LOG_LEVEL_TRACE", "LOG_LEVEL_DEBUG", "LOG_LEVEL_INFO", "LOG_LEVEL_WARNING",
          "LOG_LEVEL_ERROR", "LOG_LEVEL_CRITICAL"]
Order = Literal["ORDER_BY_ASC", "ORDER_BY_DESC", "ORDER_BY_UNSPECIFIED"]
Filter = Annotated[list[str] | None, Parameter(max_items=64)]


class V1TrialLogsResponse(msgspec.Struct, rename="camel", kw_only=True):
    """One line of a trial's log (Determined's v1TrialLogsResponse)."""

    id: str
    trial_id: int | None
    timestamp: str | None
    level: str
    message: str
    log: str
    agent_id: str
    container_id: str
    rank_id: int | None
    stdtype: str
    source: str
    task_id: str
    allocation_id: str


class TrialLogsLine(msgspec.Struct, kw_only=True):
    """One NDJSON line of the stream."""

    result: V1TrialLogsResponse


def _entry(row: Any) -> V1TrialLogsResponse:  # a TaskLog or a row of its columns
    return V1TrialLogsResponse(
        id=str(row.id), trial_id=row.trial_id, timestamp=iso(row.timestamp),
        level=row.level, message=format_message(row), log=row.log, agent_id=row.agent_id,
        container_id=row.allocation_id, rank_id=row.rank_id, stdtype=row.stdtype, source=row.source,
        task_id=row.task_id, allocation_id=row.allocation_id,
    )


def _line(row: Any) -> bytes:
    return _encoder.encode(TrialLogsLine(result=_entry(row))) + b"\n"


def stream_error_line(message: str) -> bytes:
    return _encoder.encode({"error": {"error": message, "message": message, "httpCode": 500}}) + b"\n"


def log_stream(lines: AsyncIterator[bytes], slot: Slot | None, what: str) -> Stream:
    """A log stream's answer (a trial's, a task's: ``what`` names it): its NDJSON lines, held in its
    stream slot when it took one. A failure mid-stream ends it with an error line, the 200 being sent."""

    async def stream() -> AsyncIterator[bytes]:
        try:
            async for chunk in lines:
                yield chunk
        except Exception:
            log.exception("%s log stream failed", what)
            yield stream_error_line(f"reading the logs of {what} failed; the master log has the details")

    if slot is None:
        return Stream(stream(), media_type="application/x-ndjson")
    return Stream(slot.hold_while(stream()), media_type="application/x-ndjson", background=BackgroundTask(slot.release))


FOLLOW_READ_S = 1.0  # a follower reads new lines at most this often (a burst lands as one page)
STATE_TTL_S = 1.0  # followers of one trial share one look at its state per this long


async def read_page(rt: MasterRuntime, stmt: Select[Any], key: tuple[Any, ...]) -> tuple[bytes, int, int | None]:
    """One page's NDJSON, its line count and last line id, while the stream has its turn
    (``StreamSlots.turn``): what another reader of the trial read under the same ``key`` (the same
    query, no lines stored since), else read as plain rows (no ORM objects) and encoded in a worker
    thread, so the loop stays free for other requests."""
    async with rt.streams.turn() as cost:
        shared = rt.streams.shared_page(key)
        if shared is not None:
            cost[0] = shared[0]  # sending it costs about what reading it did: yield as much to others
            return shared[1]
        started = time.monotonic()
        rows = await log_svc.read_rows(rt, stmt)
        page = (await anyio.to_thread.run_sync(_lines, rows), len(rows), rows[-1].id) if rows else (b"", 0, None)
        rt.streams.keep_page(key, page, time.monotonic() - started)
        return page


def _lines(rows: Sequence[Any]) -> bytes:
    return b"".join(_line(row) for row in rows)


async def _trial_state(rt: MasterRuntime, trial_id: int) -> str | None:
    """The trial's state as of at most ``STATE_TTL_S`` ago (to know when a followed stream may end)."""
    states, now = rt.streams.trial_states, time.monotonic()
    hit = states.get(trial_id)
    if hit is not None and now - hit[0] < STATE_TTL_S:
        return hit[1]
    state = await log_svc.trial_state(rt, trial_id)
    if len(states) > 4096:  # followed trials are few; drop what is stale
        for k in [k for k, (at, _) in states.items() if now - at >= STATE_TTL_S]:
            del states[k]
    states[trial_id] = (time.monotonic(), state)
    return state


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
    request: AnyRequest, trial_id: TrialId, follow: bool = False,
    limit: Annotated[int, Parameter(ge=0, le=MAX_INT64, description="at most this many lines; 0: all")] = 0,
    offset: Annotated[int, Parameter(ge=0, le=MAX_INT64, description="lines to skip first, in the order asked")] = 0,
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
    if not await reads.existing_trials(rt.sessions, [trial_id]):
        raise NotFound(f"trial {trial_id} not found")

    def base_query() -> Select[Any]:
        return trial_log_query(trial_id, rank_ids=rank_ids, stdtypes=stdtypes, levels=levels,
                               search_text=search_text or "")

    descending = order_by == "ORDER_BY_DESC"
    follow = follow and not descending
    filters = (tuple(rank_ids), tuple(stdtypes), tuple(levels), search_text or "")
    slot = take_slot(rt.streams, rt.settings, principal_of(request)) if follow or limit <= 0 or limit > PAGE else None

    async def lines() -> AsyncIterator[bytes]:
        sent = 0
        last_id: int | None = None
        ended = False  # the trial was seen in a final state: read what is left, then stop
        while True:
            page = PAGE if limit <= 0 else min(PAGE, limit - sent)
            stmt = base_query()
            if descending:
                if last_id is not None:
                    stmt = stmt.where(TaskLog.id < last_id)
                stmt = stmt.order_by(TaskLog.id.desc())
            else:
                stmt = stmt.where(TaskLog.id > (last_id or 0)).order_by(TaskLog.id)
            # ``offset`` skips the first lines until a page has been read past them (keyset after that).
            skip = offset if last_id is None else 0
            logged = rt.streams.log_counts.get(trial_id, 0)  # before the read: lines stored later change it
            key = (trial_id, logged, filters, descending, last_id, skip, page)
            chunk, count, last = await read_page(rt, stmt.limit(page).offset(skip), key)
            read_at = time.monotonic()
            if count:
                yield chunk
                sent, last_id = sent + count, last
            if limit > 0 and sent >= limit:
                return
            if count == page:
                continue
            if not follow or (ended and not count):
                return
            if ended:
                continue  # one more pass: lines may have landed with the final state
            while rt.streams.log_counts.get(trial_id, 0) == logged:  # idle (no session held) until lines come
                if T.TRIAL.is_terminal(await _trial_state(rt, trial_id) or T.COMPLETED):
                    ended = True
                    break
                await rt.notifier.wait(("trial-logs", trial_id), timeout=FOLLOW_READ_S)
            if not ended:  # at most one read per FOLLOW_READ_S: what lands meanwhile comes in the same page
                await asyncio.sleep(max(0.0, read_at + FOLLOW_READ_S - time.monotonic()))

    return log_stream(lines(), slot, f"trial {trial_id}")


@post("/api/v1/task/logs", operation_id="PostTaskLogs", opt=opt(Action.TASK_REPORT, "body"), tags=["tasks"],
      status_code=200, request_max_body_size=64 * 1024 * 1024)  # up to 10,000 lines
async def post_logs(request: AnyRequest, data: PostTaskLogsRequest) -> EmptyResponse:
    """ship_logs.py's path (reference §4.5): a task sends its own lines."""
    await post_task_logs(runtime_of(request), principal_of(request), data)
    return EmptyResponse()


ROUTES = [trial_logs, post_logs]
