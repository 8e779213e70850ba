"""Metric reports: validated in full, stored in one transaction, then shown to the searcher.

A report that got a 200 is committed (the transaction ends before the response), so it
survives a master crash. Validation happens before any row is written: a malformed report
rejects its whole batch and nothing of it is stored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import case, select, update

from controlplane.common.floats import decode_nonfinite, encode_nonfinite
from controlplane.common.timeutil import utcnow
from controlplane.master.api.requests import expect_dict, expect_int, field, parse_time
from controlplane.master.db.models import Experiment, Metric, Trial
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.runtime import MasterRuntime
from controlplane.searchers.base import uses_validations as searcher_uses_validations

MAX_REPORTS_PER_BATCH = 100_000


@dataclass(frozen=True)
class Report:
    group: str
    steps_completed: int
    trial_run_id: int
    report_time: datetime | None
    avg_metrics: dict
    batch_metrics: list | None


def _check_values(metrics: dict, where: str) -> dict:
    for key, value in metrics.items():
        if isinstance(value, dict):
            raise BadRequest(f"{where}.{key}: a metric value must be a number, string, boolean or list, "
                             "not an object")
    return encode_nonfinite(metrics)


def parse_report(raw: Any, where: str) -> Report:
    """One report: {group, stepsCompleted, trialRunId, reportTime, metrics: {avgMetrics, batchMetrics}}."""
    raw = expect_dict(raw, where)
    group = field(raw, "group")
    if not isinstance(group, str) or not group or "." in group:
        raise BadRequest(f"{where}.group: must be a non-empty name without '.', got {group!r}")
    steps = expect_int(field(raw, "stepsCompleted"), f"{where}.stepsCompleted", minimum=0)
    run_id = field(raw, "trialRunId", 0)
    run_id = 0 if run_id is None else expect_int(run_id, f"{where}.trialRunId", minimum=0)
    body = expect_dict(field(raw, "metrics"), f"{where}.metrics")
    avg = expect_dict(field(body, "avgMetrics"), f"{where}.metrics.avgMetrics")
    batch = field(body, "batchMetrics")
    if batch is not None and not isinstance(batch, list):
        raise BadRequest(f"{where}.metrics.batchMetrics: must be a list or null")
    if group == "validation":
        for key, value in avg.items():
            if value is None:
                raise BadRequest(f"{where}.metrics.avgMetrics.{key}: a validation metric cannot be null")
    return Report(group, steps, run_id, parse_time(field(raw, "reportTime"), f"{where}.reportTime"),
                  _check_values(avg, f"{where}.metrics.avgMetrics"),
                  encode_nonfinite(batch) if batch is not None else None)


def parse_single(body: Any) -> Report:
    """POST /api/v1/trials/{id}/metrics: {group, metrics: {trialId, stepsCompleted, ..., metrics}}."""
    body = expect_dict(body, "body")
    inner = dict(expect_dict(field(body, "metrics"), "metrics"))
    inner.setdefault("group", field(body, "group"))
    return parse_report(inner, "metrics")


def parse_batch(body: Any) -> list[Report]:
    body = expect_dict(body, "body")
    reports = field(body, "reports")
    if not isinstance(reports, list):
        raise BadRequest("reports: required (a list of metric reports)")
    if len(reports) > MAX_REPORTS_PER_BATCH:
        raise BadRequest(f"reports: at most {MAX_REPORTS_PER_BATCH} per call, got {len(reports)}")
    return [parse_report(r, f"reports[{i}]") for i, r in enumerate(reports)]


def _searcher_value(metrics: dict, name: str) -> float | None:
    value = decode_nonfinite(metrics.get(name))
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


# trial id -> (searcher name, searcher metric, smaller is better): fixed once the experiment exists.
_searcher_of_trial: dict[int, tuple[str, str, bool]] = {}


async def _searcher_settings(session, trial_id: int) -> tuple[str, str, bool]:  # noqa: ANN001
    hit = _searcher_of_trial.get(trial_id)
    if hit is None:
        config = await session.scalar(select(Experiment.config).join(Trial, Trial.experiment_id == Experiment.id)
                                      .where(Trial.id == trial_id))
        if config is None:
            raise NotFound(f"trial {trial_id} not found")
        s = config.get("searcher") or {}
        hit = _searcher_of_trial[trial_id] = (s.get("name", ""), s.get("metric", ""), bool(s.get("smaller_is_better", True)))
    return hit


def _insert_ignoring_repeats(session):  # noqa: ANN001, ANN202
    if session.bind.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as dialect_insert
    else:
        from sqlalchemy.dialects.sqlite import insert as dialect_insert
    return dialect_insert(Metric).on_conflict_do_nothing(
        index_elements=["trial_id", "trial_run_id", "metric_group", "steps_completed"])


async def store_reports(rt: MasterRuntime, trial_id: int, reports: list[Report]) -> None:
    """Stores every report atomically, then tells the searcher about new validations."""
    if not reports:
        return
    now = utcnow()
    rows = [{
        "trial_id": trial_id, "trial_run_id": r.trial_run_id, "group": r.group,
        "steps_completed": r.steps_completed, "metrics": r.avg_metrics, "batch_metrics": r.batch_metrics,
        "report_time": r.report_time or now,
    } for r in reports]
    async with rt.sessions() as session:
        searcher_name, metric_name, smaller = await _searcher_settings(session, trial_id)
    validations: list[tuple[float, int]] = []
    for r in reports:
        if r.group == "validation":
            value = _searcher_value(r.avg_metrics, metric_name)
            if value is not None:
                validations.append((value, r.steps_completed))
    max_steps = max(r.steps_completed for r in reports)
    values: dict = {"total_batches": case((Trial.total_batches < max_steps, max_steps), else_=Trial.total_batches)}
    if validations:
        best = (min if smaller else max)(v for v, _ in validations)
        better = best < Trial.searcher_metric_value if smaller else best > Trial.searcher_metric_value
        values["searcher_metric_value"] = case((Trial.searcher_metric_value.is_(None), best), (better, best),
                                               else_=Trial.searcher_metric_value)
    async with rt.sessions.begin() as session:
        await session.execute(_insert_ignoring_repeats(session), rows)
        # One UPDATE computes the new maxima in SQL: no read-modify-write race between reports.
        await session.execute(update(Trial).where(Trial.id == trial_id).values(**values))
    if validations and searcher_uses_validations(searcher_name):
        for value, steps in validations:
            await rt.orchestrator.validation_reported(trial_id, value, steps)


async def trial_metrics(rt: MasterRuntime, trial_id: int, group: str | None) -> list[Metric]:
    async with rt.sessions() as session:
        if await session.get(Trial, trial_id) is None:
            raise NotFound(f"trial {trial_id} not found")
        q = select(Metric).where(Metric.trial_id == trial_id)
        if group:
            q = q.where(Metric.group == group)
        return list((await session.scalars(q.order_by(Metric.steps_completed, Metric.id))).all())
