"""Task logs: stored per line, looked up per trial, formatted as Determined prints them.

Lines come from agents (their WebSocket) and from tasks themselves (``POST /api/v1/task/logs``,
body ``PostTaskLogsRequest``). A task writes only under its own task and allocation, only while
it is its trial's current run (checked in the inserting transaction, ``services/fencing.py``); a
user writes only for trials they own. PostgreSQL text cannot hold NUL, which a process may well
print: NUL characters in log text are stored as U+FFFD (the replacement character) on every
database, so a line is never lost or refused for them. A line longer than ``MAX_LINE_BYTES`` (64 KiB)
is stored as its first 64 KiB and a marker saying how long it was (``controlplane/common/log_lines.py``,
the agent's own rule), never refused and never cut silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from sqlalchemy import Select, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.bounded_cache import BoundedCache
from controlplane.common.log_lines import bounded
from controlplane.common.log_prefixes import default_level, split_prefixes
from controlplane.common.timeutil import utcnow
from controlplane.master.authz import Action, require_owner
from controlplane.master.db.models import Allocation, Experiment, TaskLog, Trial
from controlplane.master.errors import Forbidden, NotFound
from controlplane.master.principals import Principal, TaskPrincipal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import experiment_reads, fencing
from controlplane.wire import agent_protocol as wire

NO_NUL = r"^[^\x00]*$"
MAX_LINES_PER_POST = 10_000
MAX_LINE_CHARS = 64 << 20  # the route's body cap: a line past MAX_LINE_BYTES is cut when stored, not refused


Text16 = Annotated[str, msgspec.Meta(max_length=16, pattern=NO_NUL)]
Text32 = Annotated[str, msgspec.Meta(max_length=32, pattern=NO_NUL)]
Text160 = Annotated[str, msgspec.Meta(max_length=160, pattern=NO_NUL)]
Text255 = Annotated[str, msgspec.Meta(max_length=255, pattern=NO_NUL)]


class TaskLogEntry(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1TaskLog as a task posts it."""

    log: Annotated[str, msgspec.Meta(max_length=MAX_LINE_CHARS)]
    task_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=NO_NUL)] | None = None
    allocation_id: Text160 | None = None
    timestamp: datetime | None = None
    level: Text32 | None = None
    stdtype: Text16 | None = None
    source: Text32 | None = None
    agent_id: Text255 | None = None
    container_id: Text255 | None = None
    rank_id: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    id: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)] | None = None  # assigned by the master; ignored


class PostTaskLogsRequest(msgspec.Struct, rename="camel", kw_only=True):
    logs: Annotated[list[TaskLogEntry], msgspec.Meta(max_length=MAX_LINES_PER_POST)]


# allocation id -> (task id, trial id): never changes once the allocation exists.
_alloc_cache: BoundedCache[str, tuple[str, int | None]] = BoundedCache(20_000)


async def _allocation_owner(rt: MasterRuntime, allocation_id: str) -> tuple[str, int | None] | None:
    hit = _alloc_cache.get(allocation_id)
    if hit is not None:
        return hit
    async with rt.sessions() as session:
        row = (await session.execute(select(Allocation.task_id, Allocation.trial_id)
                                     .where(Allocation.id == allocation_id))).first()
    if row is None:
        return None
    return _alloc_cache.put(allocation_id, (row[0], row[1]))


async def ingest_agent_logs(rt: MasterRuntime, agent_id: str, msg: wire.TaskLogs) -> None:
    owner = await _allocation_owner(rt, msg.allocation_id)
    if owner is None or not msg.lines:
        return
    task_id, trial_id = owner
    rows = [
        {
            "task_id": task_id, "trial_id": trial_id, "allocation_id": msg.allocation_id, "agent_id": agent_id,
            "rank_id": line.rank, "stdtype": line.stdtype, "level": line.level or default_level(line.stdtype),
            "source": "task", "timestamp": datetime.fromtimestamp(line.timestamp, UTC),
            "log": line.message + "\n",
        }
        for line in msg.lines
    ]
    await insert_rows(rt, rows, trial_id)


def _clean(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for row in rows:
        text = bounded(row["log"])
        if "\x00" in text:
            text = text.replace("\x00", "\ufffd")
        row["log"] = text
    return rows


async def insert_rows(rt: MasterRuntime, rows: list[dict[str, Any]], trial_id: int | None) -> None:
    async with rt.sessions.begin() as session:
        await session.execute(insert(TaskLog), _clean(rows))
    if trial_id is not None:
        rt.streams.logged(trial_id)
        rt.notifier.notify(("trial-logs", trial_id))


async def _trial_of_task(session: AsyncSession, principal: Principal, task_id: str, where: str) -> int:
    """A user posting lines for ``task_id``: the task's trial, which they must own."""
    row = (await session.execute(select(Trial.id, Experiment.owner_id)
                                 .join(Experiment, Experiment.id == Trial.experiment_id)
                                 .where(Trial.task_id == task_id))).first()
    if row is None:
        raise NotFound(f"{where}.taskId: task {task_id} not found")
    require_owner(principal, Action.TASK_REPORT, row[1], f"task {task_id}")
    return row[0]


async def post_task_logs(rt: MasterRuntime, principal: Principal, body: PostTaskLogsRequest) -> None:
    """Stores a task's lines once every one is its own (403 naming the first that is not)."""
    if not body.logs:
        return
    task = principal if isinstance(principal, TaskPrincipal) else None
    now = utcnow()
    rows: list[dict[str, Any]] = []
    trials: set[int] = set()
    async with rt.sessions.begin() as session:
        user_trials: dict[str, int] = {}
        for i, e in enumerate(body.logs):
            where = f"logs[{i}]"
            if task is not None:
                if e.task_id is not None and e.task_id != task.task_id:
                    raise Forbidden(f"{where}.taskId: this allocation token is not valid for task {e.task_id}")
                if e.allocation_id and e.allocation_id != task.allocation_id:
                    raise Forbidden(f"{where}.allocationId: this allocation token is not valid for "
                                    f"allocation {e.allocation_id}")
                task_id, trial_id, alloc_id = task.task_id, task.trial_id, task.allocation_id
            else:
                if e.task_id is None:
                    raise Forbidden(f"{where}.taskId: required with a user token")
                task_id, alloc_id = e.task_id, e.allocation_id or ""
                if task_id not in user_trials:
                    user_trials[task_id] = await _trial_of_task(session, principal, task_id, where)
                trial_id = user_trials[task_id]
            if trial_id is not None:
                trials.add(trial_id)
            when = e.timestamp or now
            rows.append({
                "task_id": task_id, "trial_id": trial_id, "allocation_id": alloc_id,
                "agent_id": e.agent_id or "", "rank_id": e.rank_id, "stdtype": e.stdtype or "stdout",
                "level": e.level or split_prefixes(e.log).level or default_level(e.stdtype),
                "source": e.source or "task",
                "timestamp": when if when.tzinfo else when.replace(tzinfo=UTC),
                "log": e.log if e.log.endswith("\n") else e.log + "\n",
            })
        if task is not None:  # fenced: only the trial's current, live run writes
            if task.trial_id is not None:
                await fencing.hold_trial(session, task, task.trial_id)
            else:
                await fencing.hold_allocation(session, task)
        await session.execute(insert(TaskLog), _clean(rows))
    for trial_id in trials:
        rt.streams.logged(trial_id)
        rt.notifier.notify(("trial-logs", trial_id))


def trial_log_query(trial_id: int, *, rank_ids: Sequence[int] = (), stdtypes: Sequence[str] = (),
                    levels: Sequence[str] = (), search_text: str = "") -> Select[Any]:
    """A trial's log lines with the filters of ``det trial logs`` (the API) and the trial page."""
    stmt = select(TaskLog).where(TaskLog.trial_id == trial_id)
    if rank_ids:
        stmt = stmt.where(TaskLog.rank_id.in_(rank_ids))
    if stdtypes:
        stmt = stmt.where(TaskLog.stdtype.in_(stdtypes))
    if levels:
        stmt = stmt.where(TaskLog.level.in_(levels))
    if search_text:
        stmt = stmt.where(TaskLog.log.contains(search_text, autoescape=True))
    return stmt


async def trial_tail(session: AsyncSession, trial_id: int, *, rank_ids: Sequence[int] = (),
                     levels: Sequence[str] = (), search_text: str = "", limit: int) -> list[TaskLog]:
    """The trial's newest ``limit`` lines that pass ``trial_log_query``'s filters, oldest first."""
    stmt = trial_log_query(trial_id, rank_ids=rank_ids, levels=levels, search_text=search_text)
    rows = list((await session.scalars(stmt.order_by(TaskLog.id.desc()).limit(limit))).all())
    return rows[::-1]


async def trial_lines_after(session: AsyncSession, trial_id: int, after: int, *, rank_ids: Sequence[int] = (),
                            levels: Sequence[str] = (), search_text: str = "", limit: int) -> list[TaskLog]:
    """The trial's first ``limit`` lines after id ``after`` that pass ``trial_log_query``'s filters."""
    stmt = trial_log_query(trial_id, rank_ids=rank_ids, levels=levels, search_text=search_text)
    return list((await session.scalars(stmt.where(TaskLog.id > after).order_by(TaskLog.id).limit(limit))).all())


def format_message(row: TaskLog) -> str:
    """'[ts] <container> [rank=N] || LEVEL: log' as the real master does (reference §2.4), each prefix
    once: a line printed as ``[rank=0] INFO: msg`` (stored as printed) shows ``[rank=0] || INFO: msg``."""
    ts = row.timestamp if row.timestamp.tzinfo else row.timestamp.replace(tzinfo=UTC)
    stamp = ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    container = (row.allocation_id or "")[-8:].rjust(8)
    rank_id, level_name, text = split_prefixes(row.log)
    if row.level and level_name and level_name != row.level:
        text = row.log  # the text names another level than the line's: show it as printed
    rank_id = row.rank_id if row.rank_id is not None else rank_id
    rank = f"[rank={rank_id}] " if rank_id is not None and not text.startswith("[rank=") else ""
    level = (row.level or level_name or default_level(row.stdtype)).removeprefix("LOG_LEVEL_")
    return f"[{stamp}] {container} {rank}|| {level}: {text}"


async def read_rows(rt: MasterRuntime, stmt: Select[Any]) -> Sequence[Any]:
    """The log rows ``stmt`` (a ``trial_log_query``) selects, as plain rows of every column."""
    async with rt.sessions() as session:
        return (await session.execute(stmt.with_only_columns(*TaskLog.__table__.c))).all()


async def trial_state(rt: MasterRuntime, trial_id: int) -> str | None:
    """The trial's state now; None for no such trial."""
    async with rt.sessions() as session:
        return await experiment_reads.trial_state(session, trial_id)
