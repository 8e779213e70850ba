"""Group commit for task metric reports: many requests' batches in one fenced transaction.

Each acknowledged batch used to be its own transaction (BEGIN, fenced UPDATE of the trial, INSERT,
COMMIT): with a hundred trials reporting at once, the master spent most of its time on the
round trips and bookkeeping of those transactions rather than on the rows. Here a request puts
its checked reports on a queue and waits; a writer takes everything queued (one batch per trial,
so a transaction never updates a trial row twice) and stores it in one transaction:

1. one UPDATE of all the group's trials, each under the fencing conditions of
   ``services/fencing.py`` for a task (its trial's current run, its allocation live), returning
   the trials it updated;
2. the reason for each trial it did not update (404/403/409, as ``fencing.refuse`` says);
3. one INSERT of the accepted batches' rows (a repeated report is skipped by the unique index).

A request gets its answer only after that COMMIT, so a 200 still means the rows are durable. If
the group's transaction fails as a whole (a lost connection, a deadlock), each batch is retried
alone, so one batch's failure is never another's. PostgreSQL runs a few writers at once (their
groups hold distinct trials, so they never wait on each other's rows); SQLite, one writer at a
time anyway, runs one.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import msgspec
from sqlalchemy import CursorResult, DateTime, bindparam, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from controlplane.common.timeutil import utcnow
from controlplane.master.authz import Action
from controlplane.master.background import BackgroundLoop
from controlplane.master.errors import ApiError, Conflict
from controlplane.master.principals import TaskPrincipal
from controlplane.master.services import fencing, metric_summaries
from controlplane.state import allocation as A

log = logging.getLogger(__name__)

MAX_GROUP_BATCHES = 64  # requests per transaction
MAX_GROUP_ROWS = 20_000  # rows per transaction (a single bigger batch still goes alone)
PG_WRITERS = 4
SQLITE_WRITERS = 1


@dataclass(slots=True)
class Report:
    """One metrics report as stored (a group, a step, its values)."""

    group: str
    steps_completed: int
    trial_run_id: int | None
    report_time: datetime | None
    avg_metrics: dict[str, Any]
    batch_metrics: list[Any] | None


@dataclass(slots=True)
class TrialUpdate:
    """What a batch changes on its trial row: the highest steps, and the batch's best validation."""

    max_steps: int
    best: float | None = None  # the searcher metric's best value among the batch's validations
    best_steps: int | None = None
    smaller_is_better: bool = True


@dataclass(slots=True)
class RowsFor:
    """Reports of one trial and run, ready to insert."""

    trial_id: int
    run_id: int
    reports: list[Report]


@dataclass(slots=True, eq=False)
class _Pending:
    principal: TaskPrincipal
    rows: RowsFor
    update: TrialUpdate
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


# ---- the statements ------------------------------------------------------------------------------

# The new maxima are computed in SQL from the row's old values (every SET expression reads the old
# row), so concurrent reports of one trial cannot lose one another's steps or best validation.
_BETTER = ("v.best IS NOT NULL AND (t.searcher_metric_value IS NULL OR "
           "(v.smaller AND v.best < t.searcher_metric_value) OR (NOT v.smaller AND v.best > t.searcher_metric_value))")
_SET = ("total_batches = CASE WHEN t.total_batches < v.steps THEN v.steps ELSE t.total_batches END, "
        f"searcher_metric_value = CASE WHEN {_BETTER} THEN v.best ELSE t.searcher_metric_value END, "
        f"best_validation_steps = CASE WHEN {_BETTER} THEN v.best_steps ELSE t.best_validation_steps END")
# fencing._conditions for a task, row by row: its trial's current run, its allocation not ended.
_FENCE = ("t.id = v.id AND t.run_id = v.run AND EXISTS (SELECT 1 FROM allocations AS a WHERE a.id = v.alloc "
          f"AND a.trial_id = t.id AND a.state <> '{A.TERMINATED}')")
_PG_UPDATE = text(
    f"UPDATE trials AS t SET {_SET} FROM unnest(CAST(:ids AS integer[]), CAST(:runs AS integer[]), "
    "CAST(:allocs AS varchar[]), CAST(:steps AS bigint[]), CAST(:best AS float8[]), CAST(:best_steps AS bigint[]), "
    f"CAST(:smaller AS boolean[])) AS v(id, run, alloc, steps, best, best_steps, smaller) WHERE {_FENCE} "
    "RETURNING t.id")
_PG_LOCK = text("SELECT id FROM trials WHERE id = ANY(CAST(:ids AS integer[])) ORDER BY id FOR UPDATE")
# SQLite has no arrays: the group travels as one JSON array of rows.
_SQLITE_UPDATE = text(
    f"UPDATE trials AS t SET {_SET} FROM (SELECT json_extract(value, '$[0]') AS id, "
    "json_extract(value, '$[1]') AS run, json_extract(value, '$[2]') AS alloc, json_extract(value, '$[3]') AS steps, "
    "json_extract(value, '$[4]') AS best, json_extract(value, '$[5]') AS best_steps, "
    f"json_extract(value, '$[6]') AS smaller FROM json_each(:group)) AS v WHERE {_FENCE} RETURNING id")

# The insert: no ORM objects and no per-row SQLAlchemy JSON processing (msgspec encodes each
# value once); a repeated report (same trial, run, group, step: a retry whose 200 was lost) is
# skipped by the unique index. PostgreSQL gets all rows in one statement as arrays (one round trip,
# one prepared plan whatever the size); SQLite runs one prepared statement over them (executemany).
_COLS = "trial_id, trial_run_id, metric_group, steps_completed, metrics, batch_metrics, report_time"
_REPORT_KEY = "trial_id, trial_run_id, metric_group, steps_completed"
# The rows stored come back for the trials' summary metrics. PostgreSQL: their ids (RETURNING), taken
# from the sequence in the order of the reports (the rows are inserted in that order), so with every
# report stored the ids in ascending order are the reports'; SQLite, whose executemany returns no
# rows: how many it stored and the last id, the write lock being held. With a repeat skipped, the
# stored rows' keys are read back by id.
_PG_INSERT = text(
    f"INSERT INTO metrics ({_COLS}) SELECT i, r, g, s, CAST(m AS json), CAST(b AS json), t "
    "FROM unnest(CAST(:trials AS integer[]), CAST(:runs AS integer[]), CAST(:groups AS varchar[]), "
    "CAST(:steps AS bigint[]), CAST(:metrics AS text[]), CAST(:batch AS text[]), CAST(:times AS timestamptz[])) "
    f"WITH ORDINALITY AS u(i, r, g, s, m, b, t, n) ORDER BY n ON CONFLICT ({_REPORT_KEY}) DO NOTHING RETURNING id")
_PG_INSERTED = text(f"SELECT id, {_REPORT_KEY} FROM metrics WHERE id = ANY(CAST(:ids AS bigint[])) ORDER BY id")
_SQLITE_INSERT = text(
    f"INSERT INTO metrics ({_COLS}) VALUES (:trial_id, :run, :group, :steps, :metrics, :batch, :at) "
    f"ON CONFLICT ({_REPORT_KEY}) DO NOTHING").bindparams(bindparam("at", type_=DateTime(timezone=True)))
_SQLITE_LAST_ROWID = text("SELECT last_insert_rowid()")
_SQLITE_INSERTED = text(f"SELECT id, {_REPORT_KEY} FROM metrics WHERE id >= :first ORDER BY id")
_json = msgspec.json.Encoder().encode


def _is_pg(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "postgresql"


async def insert_rows(session: AsyncSession, batches: list[RowsFor], now: datetime) -> None:
    """INSERTs the reports of ``batches`` (a report without a time gets ``now``) and folds those
    stored (not a repeat the unique index skipped) into their trials' summary metrics, in the same
    transaction (``metric_summaries.py``). The caller holds the trials' rows."""
    trials: list[int] = []
    runs: list[int] = []
    groups: list[str] = []
    steps: list[int] = []
    metrics: list[str] = []
    batch: list[str | None] = []
    times: list[datetime] = []
    for b in batches:
        for r in b.reports:
            trials.append(b.trial_id)
            runs.append(b.run_id if r.trial_run_id is None else r.trial_run_id)
            groups.append(r.group)
            steps.append(r.steps_completed)
            metrics.append(_json(r.avg_metrics).decode())
            batch.append(None if r.batch_metrics is None else _json(r.batch_metrics).decode())
            # stored in UTC: SQLite keeps a timestamp's digits and drops its offset
            times.append(now if r.report_time is None else r.report_time.astimezone(UTC))
    reports = [r.avg_metrics for b in batches for r in b.reports]
    if _is_pg(session):
        ids: list[int] = sorted((await session.execute(_PG_INSERT, {
            "trials": trials, "runs": runs, "groups": groups, "steps": steps, "metrics": metrics, "batch": batch,
            "times": times})).scalars())
        if len(ids) == len(reports):  # every report stored (no repeat): ascending ids in report order
            await metric_summaries.add_reports(session, zip(trials, groups, ids, steps, reports, strict=True))
            return
        if not ids:
            return
        stored_rows = _PG_INSERTED.bindparams(ids=ids)
    else:
        result = await session.execute(_SQLITE_INSERT, [
            {"trial_id": i, "run": r, "group": g, "steps": s, "metrics": m, "batch": b, "at": t}
            for i, r, g, s, m, b, t in zip(trials, runs, groups, steps, metrics, batch, times, strict=True)])
        stored = cast(CursorResult[Any], result).rowcount  # executemany: the rows of every parameter set
        if not stored:
            return
        # The write lock is held: the rows stored took the ids after the largest, one by one.
        first = int(await session.scalar(_SQLITE_LAST_ROWID) or 0) - stored + 1
        if stored == len(reports):  # every report stored (no repeat): ids in report order
            await metric_summaries.add_reports(session, zip(trials, groups, range(first, first + stored), steps,
                                                            reports, strict=True))
            return
        stored_rows = _SQLITE_INSERTED.bindparams(first=first)
    # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
    inserted: Sequence[Any] = (await session.execute(stored_rows)).all()
    # Each stored row's values: the first report of its key (a repeat in the same batch was skipped).
    values: dict[tuple[int, int, str, int], dict[str, Any]] = {}
    for key in zip(trials, runs, groups, steps, reports, strict=True):
        values.setdefault(key[:4], key[4])
    await metric_summaries.add_reports(session, [(trial, group, row_id, steps, values[(trial, run, group, steps)])
                                                 for row_id, trial, run, group, steps in inserted])


async def _update_trials(session: AsyncSession, group: list[_Pending]) -> set[int]:
    """The one fenced UPDATE of the group's trials; the ids it updated."""
    ids = [p.rows.trial_id for p in group]
    runs = [p.principal.run_id for p in group]
    allocs = [p.principal.allocation_id for p in group]
    steps = [p.update.max_steps for p in group]
    best = [p.update.best for p in group]
    best_steps = [p.update.best_steps for p in group]
    smaller = [p.update.smaller_is_better for p in group]
    if _is_pg(session):
        # Row locks in id order, as the ORM's flushes take them, so a group never deadlocks with
        # a transaction that updates several trials (an experiment's kill).
        await session.execute(_PG_LOCK, {"ids": sorted(ids)})
        result = await session.execute(_PG_UPDATE, {"ids": ids, "runs": runs, "allocs": allocs, "steps": steps,
                                                     "best": best, "best_steps": best_steps, "smaller": smaller})
    else:
        rows = list(zip(ids, runs, allocs, steps, best, best_steps, [int(s) for s in smaller], strict=True))
        result = await session.execute(_SQLITE_UPDATE, {"group": _json(rows).decode()})
    return {row[0] for row in result.all()}


# ---- the writer ----------------------------------------------------------------------------------


class MetricWriter:
    """Queues task metric batches and commits them in groups (see the module's docstring)."""

    def __init__(self, sessions: async_sessionmaker[Any], *, writers: int) -> None:
        self._sessions = sessions
        self._writers = writers
        self._queue: deque[_Pending] = deque()
        self._busy_trials: set[int] = set()  # trials in a group being written
        self._loops: list[BackgroundLoop] = []  # the writers, started on the serving loop by the first write

    async def write(self, principal: TaskPrincipal, rows: RowsFor, update: TrialUpdate) -> None:
        """Returns once the batch is committed; raises why it was refused (404/403/409)."""
        pending = _Pending(principal, rows, update)
        # Read the outcome even when the request is gone (a client that hung up), so asyncio does
        # not log an unretrieved exception.
        pending.done.add_done_callback(lambda f: f.cancelled() or f.exception())
        self._queue.append(pending)
        if len(self._loops) < self._writers:
            for _ in range(self._writers - len(self._loops)):
                loop = BackgroundLoop("metric writer", self._write_group, log=log, interval_s=None, run_first=True)
                loop.start()
                self._loops.append(loop)
        self._wake_writers()
        await asyncio.shield(pending.done)  # a client that hangs up does not abort the group

    async def stop(self) -> None:
        await asyncio.gather(*(loop.stop() for loop in self._loops))
        self._loops = []
        while self._queue:
            pending = self._queue.popleft()
            if not pending.done.done():
                pending.done.set_exception(Conflict("the master is shutting down; report again"))

    def _take_group(self) -> list[_Pending]:
        """Up to the group bounds, oldest first, one batch per trial and none of a trial in flight."""
        group: list[_Pending] = []
        later: list[_Pending] = []
        trials: set[int] = set()
        rows = 0
        while self._queue and len(group) < MAX_GROUP_BATCHES:
            p = self._queue.popleft()
            trial = p.rows.trial_id
            size = len(p.rows.reports)
            if trial in trials or trial in self._busy_trials or (group and rows + size > MAX_GROUP_ROWS):
                later.append(p)
                if len(later) > 4 * MAX_GROUP_BATCHES:
                    break
                continue
            group.append(p)
            trials.add(trial)
            rows += size
        self._queue.extendleft(reversed(later))
        self._busy_trials |= trials
        return group

    def _wake_writers(self) -> None:
        for loop in self._loops:
            loop.wake()

    async def _write_group(self) -> bool:
        """One writer's step: store the next group; whether there was one (then it looks again at once)."""
        group = self._take_group()
        if not group:
            return False
        try:
            await self._store(group)
        finally:
            self._busy_trials.difference_update(p.rows.trial_id for p in group)
            self._wake_writers()  # the queue may hold batches of those trials
        return True

    async def _store(self, group: list[_Pending]) -> None:
        try:
            outcome = await self._commit(group)
        except asyncio.CancelledError:
            for p in group:
                if not p.done.done():
                    p.done.set_exception(Conflict("the master is shutting down; report again"))
            raise
        except Exception as exc:  # noqa: BLE001 - the group failed as a whole: each batch alone
            if len(group) > 1:
                log.warning("a group of %d metric batches failed (%s); storing them one by one", len(group), exc)
                for p in group:
                    await self._store([p])
                return
            outcome = {id(group[0]): exc}
        for p in group:
            if p.done.done():
                continue
            error = outcome.get(id(p))
            if error is None:
                p.done.set_result(None)
            else:
                p.done.set_exception(error)

    async def _commit(self, group: list[_Pending]) -> dict[int, BaseException]:
        """One transaction for the group; the refused batches' reasons (by ``id`` of the pending)."""
        refused: dict[int, BaseException] = {}
        now = utcnow()
        async with self._sessions.begin() as session:
            updated = await _update_trials(session, group)
            for p in group:
                if p.rows.trial_id not in updated:
                    refused[id(p)] = await _reason(session, p)
            accepted = [p.rows for p in group if id(p) not in refused]
            if accepted:
                await insert_rows(session, accepted, now)
        return refused


async def _reason(session: AsyncSession, p: _Pending) -> BaseException:
    try:
        await fencing.refuse(session, p.principal, p.rows.trial_id, Action.TASK_REPORT)
    except ApiError as exc:
        return exc
    return Conflict(f"trial {p.rows.trial_id}: the report was refused")  # refuse always raises


def writers_for(dialect: str) -> int:
    return PG_WRITERS if dialect == "postgresql" else SQLITE_WRITERS
