"""Task logs: stored per line, looked up per trial, formatted as Determined prints them."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import insert, select

from controlplane.master.db.models import Allocation, TaskLog
from controlplane.master.runtime import MasterRuntime
from controlplane.wire import agent_protocol as wire

_alloc_cache: dict[str, tuple[str, int | None]] = {}  # allocation id -> (task id, trial id); never changes


async def _allocation_owner(rt: MasterRuntime, allocation_id: str) -> tuple[str, int | None] | None:
    hit = _alloc_cache.get(allocation_id)
    if hit is not None:
        return hit
    async with rt.sessions() as session:
        row = (await session.execute(select(Allocation.task_id, Allocation.trial_id)
                                     .where(Allocation.id == allocation_id))).first()
    if row is None:
        return None
    _alloc_cache[allocation_id] = (row[0], row[1])
    return _alloc_cache[allocation_id]


async def ingest_agent_logs(rt: MasterRuntime, agent_id: str, msg: wire.TaskLogs) -> None:
    owner = await _allocation_owner(rt, msg.allocation_id)
    if owner is None or not msg.lines:
        return
    task_id, trial_id = owner
    rows = [
        {
            "task_id": task_id, "trial_id": trial_id, "allocation_id": msg.allocation_id, "agent_id": agent_id,
            "rank_id": line.rank, "stdtype": line.stdtype, "level": line.level or "LOG_LEVEL_INFO",
            "source": "task", "timestamp": datetime.fromtimestamp(line.timestamp, timezone.utc),
            "log": line.message + "\n",
        }
        for line in msg.lines
    ]
    await insert_rows(rt, rows, trial_id)


async def insert_rows(rt: MasterRuntime, rows: list[dict], trial_id: int | None) -> None:
    async with rt.sessions.begin() as session:
        await session.execute(insert(TaskLog), rows)
    if trial_id is not None:
        rt.notifier.notify(("trial-logs", trial_id))


def format_message(row: TaskLog) -> str:
    """'[ts] <container> [rank=N] || LEVEL: log' as the real master does (reference §2.4)."""
    ts = row.timestamp if row.timestamp.tzinfo else row.timestamp.replace(tzinfo=timezone.utc)
    stamp = ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    container = (row.allocation_id or "")[-8:].rjust(8)
    text = row.log
    rank = ""
    if row.rank_id is not None and not text.startswith("[rank="):
        rank = f"[rank={row.rank_id}] "
    level = (row.level or "LOG_LEVEL_INFO").removeprefix("LOG_LEVEL_")
    return f"[{stamp}] {container} {rank}|| {level}: {text}"
