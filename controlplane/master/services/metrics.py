"""Metric reports: validated in full, stored in one transaction, then shown to the searcher.

The request shapes are msgspec Structs in Determined's wire format (``v1TrialMetrics``), decoded
once at the API edge; values are arbitrary JSON, with NaN/±Inf as the strings of
``controlplane.common.floats``. A report that got a 200 is committed (the transaction ends
before the response), so it survives a master crash. Validation happens before any row is
written: a malformed report rejects its whole batch and nothing of it is stored. The write is
fenced (``services/fencing.py``): a task's superseded run, or a user who does not own the trial,
stores nothing.

Reads page (``services/paging.py``): rows come in (group, step, id) order, or (step, id) order
within one group, each page an indexed range read; the first page's ``total`` is the count the
trial's summary metrics keep (``metric_summaries.py``), so no page counts the trial's reports.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec
from sqlalchemy import and_, case, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.bounded_cache import BoundedCache
from controlplane.common.floats import decode_nonfinite, encode_nonfinite
from controlplane.common.timeutil import iso, utcnow
from controlplane.config.stored import searcher_of
from controlplane.master.db.models import Experiment, Metric, Trial
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.principals import Principal, TaskPrincipal
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services import fencing, metric_summaries
from controlplane.master.services.metric_writer import Report, RowsFor, TrialUpdate, insert_rows
from controlplane.master.services.paging import (
    MAX_INT64,
    Pagination,
    decode_cursor,
    encode_cursor,
    one_of_offset_or_cursor,
    page_size,
    pagination,
)
from controlplane.searchers import asha
from controlplane.searchers.registry import uses_validations as searcher_uses_validations

MAX_REPORTS_PER_BATCH = 100_000
MAX_VALUE_DEPTH = 32  # nesting of one metric value (lists of lists ...)
NO_NUL = r"^[^\x00]*$"

Steps = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT64)]
RunId = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
GroupName = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[^.\x00]+$",
                                        description="training, validation or another name without '.'")]
MetricName = Annotated[str, msgspec.Meta(max_length=1024, pattern=NO_NUL)]


class MetricValues(msgspec.Struct, rename="camel", kw_only=True):
    avg_metrics: dict[MetricName, Any]
    batch_metrics: list[Any] | None = None


class TrialMetrics(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's ``v1TrialMetrics``."""

    steps_completed: Steps
    metrics: MetricValues
    trial_id: Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)] | None = None
    trial_run_id: RunId | None = None
    report_time: datetime | None = None
    group: GroupName | None = None  # ours: a report may name its group inside


class BatchReport(TrialMetrics, kw_only=True):
    group: GroupName


class ReportTrialMetricsRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/v1/trials/{id}/metrics`` (Determined's ReportTrialMetrics)."""

    metrics: TrialMetrics
    group: GroupName | None = None  # or inside ``metrics``


class ReportBatchRequest(msgspec.Struct, rename="camel", kw_only=True):
    """``POST /api/v1/trials/{id}/metrics/batch``: many reports, stored all or none."""

    reports: Annotated[list[BatchReport], msgspec.Meta(max_length=MAX_REPORTS_PER_BATCH)]


class TrainingMetricsRequest(msgspec.Struct, rename="camel", kw_only=True):
    training_metrics: TrialMetrics


class ValidationMetricsRequest(msgspec.Struct, rename="camel", kw_only=True):
    validation_metrics: TrialMetrics


def _depth_ok(value: Any, depth: int) -> bool:
    if isinstance(value, (list, dict)):
        if depth >= MAX_VALUE_DEPTH:
            return False
        items = value.values() if isinstance(value, dict) else value
        return all(_depth_ok(v, depth + 1) for v in items)
    return True


_SCALARS = (int, str, bool)


def _checked_avg(avg: dict[str, Any], group: str, where: str) -> dict[str, Any]:
    """``avg`` with non-finite floats as strings, after its checks: values are not objects,
    validations not null, lists not too deep. Plain numbers (nearly every value) take one type
    test each."""
    encoded = avg
    for key, value in avg.items():
        kind = type(value)
        if kind is float:
            if value - value == 0:  # finite (inf - inf and nan - nan are nan)
                continue
        elif kind in _SCALARS:
            continue
        elif kind is dict:
            raise BadRequest(f"{where}.metrics.avgMetrics.{key}: a metric value must be a number, string, "
                             "boolean or list, not an object")
        elif value is None:
            if group == "validation":
                raise BadRequest(f"{where}.metrics.avgMetrics.{key}: a validation metric cannot be null")
            continue
        elif not _depth_ok(value, 1):
            raise BadRequest(f"{where}.metrics.avgMetrics.{key}: nested deeper than {MAX_VALUE_DEPTH} levels")
        if encoded is avg:
            encoded = dict(avg)
        encoded[key] = encode_nonfinite(value)
    return encoded


def to_report(m: TrialMetrics, group: str, where: str) -> Report:
    """One decoded report, checked beyond its types (see ``_checked_avg``)."""
    avg = _checked_avg(m.metrics.avg_metrics, group, where)
    batch = m.metrics.batch_metrics
    if batch is not None:
        if not _depth_ok(batch, 0):
            raise BadRequest(f"{where}.metrics.batchMetrics: nested deeper than {MAX_VALUE_DEPTH} levels")
        batch = encode_nonfinite(batch)
    when = m.report_time
    if when is not None and when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return Report(group, m.steps_completed, m.trial_run_id, when, avg, batch)


def single_report(body: ReportTrialMetricsRequest) -> Report:
    group = body.group or body.metrics.group
    if group is None:
        raise BadRequest("group: required (training, validation, ...)")
    return to_report(body.metrics, group, "metrics")


def batch_reports(body: ReportBatchRequest) -> list[Report]:
    return [to_report(r, r.group, f"reports[{i}]") for i, r in enumerate(body.reports)]


def _searcher_value(metrics: dict[str, Any], name: str) -> float | None:
    value = decode_nonfinite(metrics.get(name))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


# (cluster id, trial id) -> (searcher name, searcher metric, smaller is better, time unit): fixed once the
# experiment exists. Trial ids are per database, hence the cluster id (tests run several masters in a process).
# Bounded: the oldest entry goes first (a long-lived master sees unboundedly many trials).
SEARCHER_CACHE_SIZE = 20_000
_searcher_of_trial: BoundedCache[tuple[str, int], tuple[str, str, bool, str]] = BoundedCache(SEARCHER_CACHE_SIZE)


async def _searcher_settings(rt: MasterRuntime, session: AsyncSession, trial_id: int) -> tuple[str, str, bool, str]:
    hit = _searcher_of_trial.get((rt.cluster_id, trial_id))
    if hit is None:
        config = await session.scalar(select(Experiment.config).join(Trial, Trial.experiment_id == Experiment.id)
                                      .where(Trial.id == trial_id))
        if config is None:
            raise NotFound(f"trial {trial_id} not found")
        s = searcher_of(config)
        hit = (s.name, s.metric, s.smaller_is_better, s.time_unit)
        _searcher_of_trial.put((rt.cluster_id, trial_id), hit)
    return hit


def _trial_values(update: TrialUpdate) -> dict[str, Any]:
    """``update`` as the values of a fenced UPDATE of one trial (a user's reports)."""
    steps = update.max_steps
    values: dict[str, Any] = {"total_batches": case((Trial.total_batches < steps, steps), else_=Trial.total_batches)}
    if update.best is not None:
        best = update.best
        better = best < Trial.searcher_metric_value if update.smaller_is_better else best > Trial.searcher_metric_value
        values["searcher_metric_value"] = case((Trial.searcher_metric_value.is_(None), best), (better, best),
                                               else_=Trial.searcher_metric_value)
        values["best_validation_steps"] = case((Trial.searcher_metric_value.is_(None), update.best_steps),
                                               (better, update.best_steps), else_=Trial.best_validation_steps)
    return values


def _run_id(principal: Principal, reports: list[Report]) -> int:
    """The run the reports belong to: a task's own run (a report naming another is refused)."""
    if isinstance(principal, TaskPrincipal):
        for i, r in enumerate(reports):
            if r.trial_run_id not in (None, principal.run_id):
                raise BadRequest(f"reports[{i}].trialRunId: this allocation is run {principal.run_id}, "
                                 f"not run {r.trial_run_id}")
        return principal.run_id
    return 0


async def store_reports(rt: MasterRuntime, principal: Principal, trial_id: int, reports: list[Report]) -> None:
    """Stores every report atomically (if ``principal`` may write into the trial now), then tells
    the searcher about new validations. The one path every metric report takes."""
    if not reports:
        return
    now = utcnow()
    default_run = _run_id(principal, reports)
    settings = _searcher_of_trial.get((rt.cluster_id, trial_id))
    if settings is None:
        async with rt.sessions() as session:
            settings = await _searcher_settings(rt, session, trial_id)
    searcher_name, metric_name, smaller, time_unit = settings
    validations: list[tuple[float, int]] = []  # (searcher metric value, steps), in report order
    searcher_times: list[int | None] = []  # each validation's time step in the searcher's unit
    for r in reports:
        if r.group == "validation":
            value = _searcher_value(r.avg_metrics, metric_name)
            if value is not None:
                validations.append((value, r.steps_completed))
                searcher_times.append(asha.time_step(time_unit, r.avg_metrics, r.steps_completed))
    update = TrialUpdate(max_steps=max(r.steps_completed for r in reports), smaller_is_better=smaller)
    if validations:
        # The batch's best, the earliest steps among equals (a later tie does not replace it).
        update.best, update.best_steps = min(validations, key=lambda vs: (vs[0] if smaller else -vs[0], vs[1]))
    rows = RowsFor(trial_id, default_run, reports)
    if isinstance(principal, TaskPrincipal):
        await rt.metric_writer.write(principal, rows, update)  # group commit, fenced by run
    else:
        async with rt.sessions.begin() as session:
            # The fenced UPDATE comes first: it computes the new maxima in SQL (no read-modify-write
            # race between reports) and holds the trial row until the metric rows commit with it.
            await fencing.update_trial(session, principal, trial_id, _trial_values(update))
            await insert_rows(session, [rows], now)
    if validations and searcher_uses_validations(searcher_name):
        for (value, _), time in zip(validations, searcher_times, strict=True):
            if time is not None:  # an ASHA validation without its time metric decides nothing
                await rt.orchestrator.validation_reported(trial_id, value, time)


# ---- reads -------------------------------------------------------------------------------------


class MetricRow(msgspec.Struct, rename="camel", kw_only=True):
    group: str
    steps_completed: int
    trial_run_id: int
    report_time: str | None
    metrics: dict[str, Any]


class MetricsPage(msgspec.Struct, rename="camel", kw_only=True):
    metrics: list[MetricRow]
    pagination: Pagination
    next_cursor: str | None = None


_COLUMNS = (Metric.id, Metric.group, Metric.steps_completed, Metric.trial_run_id, Metric.report_time, Metric.metrics)
_Key = tuple[str, int, int]  # (group, steps, id): the listing's sort key


def _after(group: str, steps: int, row_id: int) -> Any:
    """Rows of ``group`` after (steps, id); written so the (trial, group, steps) index bounds it."""
    return and_(Metric.group == group, Metric.steps_completed >= steps,
                or_(Metric.steps_completed > steps, Metric.id > row_id))


async def trial_metrics(session: AsyncSession, trial_id: int, group: str | None, *, limit: int, offset: int,
                        cursor: str | None) -> MetricsPage:
    one_of_offset_or_cursor(offset, cursor)
    if await session.get(Trial, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    size = page_size(limit)
    base = select(*_COLUMNS).where(Metric.trial_id == trial_id)
    order = (Metric.steps_completed, Metric.id) if group else (Metric.group, Metric.steps_completed, Metric.id)
    if cursor is None:
        # The stored count of the trial's summary metrics: a row per group, never a count of its reports.
        total = await metric_summaries.report_count(session, trial_id, [group] if group else None)
        stmt = base.where(Metric.group == group) if group else base
        rows = list((await session.execute(stmt.order_by(*order).offset(offset).limit(size + 1))).all())
    else:
        offset, total, (g, steps, row_id) = decode_cursor(cursor, _Key)
        if group and g != group:
            raise BadRequest(f"cursor: a cursor of group {g!r}, not {group!r}")
        rows = list((await session.execute(base.where(_after(g, steps, row_id)).order_by(*order)
                                           .limit(size + 1))).all())
        if not group and len(rows) <= size:  # the rest of this group did not fill the page: later groups
            rows += (await session.execute(base.where(Metric.group > g).order_by(*order)
                                           .limit(size + 1 - len(rows)))).all()
    more = len(rows) > size
    rows = rows[:size]
    next_cursor = None
    if more:
        last = rows[-1]
        next_cursor = encode_cursor(offset + len(rows), total, [last.group, last.steps_completed, last.id])
    return MetricsPage(
        metrics=[MetricRow(group=r.group, steps_completed=r.steps_completed, trial_run_id=r.trial_run_id,
                           report_time=iso(r.report_time), metrics=r.metrics) for r in rows],
        pagination=pagination(offset, limit, total, len(rows)), next_cursor=next_cursor)
