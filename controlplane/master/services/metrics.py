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

from sqlalchemy import insert, select, update

from controlplane.common.floats import decode_nonfinite, encode_nonfinite
from controlplane.common.timeutil import utcnow
from controlplane.master.api.requests import expect_dict, expect_int, field, parse_time
from controlplane.master.db.models import Experiment, Metric, Trial
from controlplane.master.errors import BadRequest, NotFound
from controlplane.master.runtime import MasterRuntime

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
    validations: list[tuple[float, int]] = []
    async with rt.sessions.begin() as session:
        row = (await session.execute(
            select(Trial.total_batches, Trial.searcher_metric_value, Experiment.config)
            .join(Experiment, Experiment.id == Trial.experiment_id).where(Trial.id == trial_id))).first()
        if row is None:
            raise NotFound(f"trial {trial_id} not found")
        total_batches, best, config = row
        searcher = config.get("searcher") or {}
        metric_name = searcher.get("metric", "")
        smaller = bool(searcher.get("smaller_is_better", True))
        await session.execute(insert(Metric), rows)
        for r in reports:
            total_batches = max(total_batches, r.steps_completed)
            if r.group != "validation":
                continue
            value = _searcher_value(r.avg_metrics, metric_name)
            if value is None:
                continue
            validations.append((value, r.steps_completed))
            if best is None or (value < best if smaller else value > best):
                best = value
        await session.execute(update(Trial).where(Trial.id == trial_id)
                              .values(total_batches=total_batches, searcher_metric_value=best))
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
