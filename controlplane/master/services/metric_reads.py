"""Reads of a trial's reports for Determined's SDK: the metric streams and the summary metrics.

- ``report_pages`` feeds ``GET /api/v1/trials/metrics/{trial_metrics,training_metrics,
  validation_metrics}`` (``trial.iter_metrics(group)``, ``stream_training_metrics()``...): per
  trial in id order, pages of ``PAGE`` reports in (steps, id) order, each page an indexed
  keyset read, as Determined's ``streamMetrics`` sends them.
- ``summary_metrics`` is a trial's ``summaryMetrics`` (``trial.summary_metrics``): per group
  (``avg_metrics`` for training, ``validation_metrics`` for validation, else the group's name) and
  metric, its type and, for numbers, count/min/max/sum/mean, and every metric's ``last`` value,
  as Determined's ``calculateNewSummaryMetrics`` keeps them. Determined updates it on every write;
  here the database computes it when asked, in one aggregate over the trial's reports (no row
  leaves the database) plus one indexed read of the newest report per group, so the
  group-committed write path stays as it is. Only single-trial answers carry it.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import msgspec
from sqlalchemy import Text, cast, select, text
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso
from controlplane.master.db.models import Metric
from controlplane.master.runtime import MasterRuntime

PAGE = 1000
MAX_SUMMARY_METRICS = 10_000  # (group, metric, type) rows of one summary
SPECIALS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
TRAINING, VALIDATION = "training", "validation"

_SQLITE = """
SELECT m.metric_group AS grp, j.key AS name,
       CASE j.type WHEN 'integer' THEN 'number' WHEN 'real' THEN 'number' WHEN 'text' THEN 'string'
                   WHEN 'true' THEN 'boolean' WHEN 'false' THEN 'boolean' ELSE j.type END AS kind,
       CASE WHEN j.type = 'text' AND j.value IN ('NaN', 'Infinity', '-Infinity') THEN j.value END AS special,
       count(*) AS n,
       min(CASE WHEN j.type IN ('integer', 'real') THEN j.value END) AS lo,
       max(CASE WHEN j.type IN ('integer', 'real') THEN j.value END) AS hi,
       sum(CASE WHEN j.type IN ('integer', 'real') THEN j.value END) AS total
FROM metrics AS m, json_each(m.metrics) AS j
WHERE m.trial_id = :trial_id
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2 LIMIT :cap
"""
_POSTGRES = """
SELECT m.metric_group AS grp, kv.key AS name, json_typeof(kv.value) AS kind,
       CASE WHEN json_typeof(kv.value) = 'string' AND (kv.value #>> '{}') IN ('NaN', 'Infinity', '-Infinity')
            THEN kv.value #>> '{}' END AS special,
       count(*) AS n,
       min(CASE WHEN json_typeof(kv.value) = 'number' THEN (kv.value #>> '{}')::float8 END) AS lo,
       max(CASE WHEN json_typeof(kv.value) = 'number' THEN (kv.value #>> '{}')::float8 END) AS hi,
       sum(CASE WHEN json_typeof(kv.value) = 'number' THEN (kv.value #>> '{}')::float8 END) AS total
FROM metrics AS m, json_each(m.metrics) AS kv
WHERE m.trial_id = :trial_id
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2 LIMIT :cap
"""


_REPORT = (Metric.id, Metric.trial_id, Metric.trial_run_id, Metric.group, Metric.steps_completed,
           Metric.report_time, cast(Metric.metrics, Text).label("metrics"),
           cast(Metric.batch_metrics, Text).label("batch_metrics"))
_encoder = msgspec.json.Encoder()


def _raw(text: str | None) -> msgspec.Raw | None:
    return None if text is None else msgspec.Raw(text.encode())


def page_line(rows: Sequence[Any]) -> bytes:
    """One stream line ``{"result": {"metrics": [...]}}`` of rows of ``_REPORT``: the stored JSON is
    spliced in as it is, never decoded and encoded again (run in a worker thread)."""
    page = [report_json(r) | {"metrics": ({"validation_metrics": _raw(r.metrics)} if r.group == VALIDATION else
                                          {"avg_metrics": _raw(r.metrics), "batch_metrics": _raw(r.batch_metrics)})}
            for r in rows]
    return _encoder.encode({"result": {"metrics": page}}) + b"\n"


def report_json(row: Any) -> dict[str, Any]:
    """Determined's ``v1MetricsReport``: validation values under ``validation_metrics`` (the SDK
    reads that key for the validation group), any other group's under ``avg_metrics``."""
    if row.group == VALIDATION:
        metrics: dict[str, Any] = {"validation_metrics": row.metrics}
    else:
        metrics = {"avg_metrics": row.metrics, "batch_metrics": row.batch_metrics}
    return {"id": row.id, "trialId": row.trial_id, "trialRunId": row.trial_run_id, "group": row.group,
            "totalBatches": row.steps_completed, "endTime": iso(row.report_time), "archived": False,
            "metrics": metrics}


async def report_pages(rt: MasterRuntime, trial_ids: list[int], group: str) -> AsyncIterator[bytes]:
    """Every report of ``group`` of each trial, a page (one NDJSON line) at a time: each its own short
    session, read as plain rows and encoded in a worker thread while the stream has its turn
    (``StreamSlots.turn``), so the event loop stays free for other requests."""
    for trial_id in sorted(trial_ids):
        after: tuple[int, int] | None = None
        while True:
            q = select(*_REPORT).where(Metric.trial_id == trial_id, Metric.group == group)
            if after is not None:
                steps, row_id = after
                q = q.where((Metric.steps_completed > steps)
                            | ((Metric.steps_completed == steps) & (Metric.id > row_id)))
            async with rt.streams.turn():
                async with rt.sessions() as session:
                    rows = list((await session.execute(q.order_by(Metric.steps_completed, Metric.id)
                                                       .limit(PAGE))).all())
                line = await anyio.to_thread.run_sync(page_line, rows) if rows else b""
            if rows:
                yield line
                after = (rows[-1].steps_completed, rows[-1].id)
            if len(rows) < PAGE:
                break


def summary_key(group: str) -> str:
    return {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}.get(group, group)


def _number(value: float) -> float | str:
    """Non-finite values as the strings JSON can carry (Determined's replaceSpecialFloatsWithString)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _fold(a: float, b: float, pick: Any) -> float:
    """min/max where NaN wins, as Go's math.Min/math.Max."""
    return math.nan if math.isnan(a) or math.isnan(b) else pick(a, b)


def _numeric_summary(parts: list[tuple[str | None, int, Any, Any, Any]]) -> dict[str, Any]:
    """Numbers and the NaN/±Infinity strings of one metric, folded as Determined folds them."""
    count, lo, hi, total = 0, math.inf, -math.inf, 0.0
    for special, n, part_lo, part_hi, part_sum in parts:
        if special is not None:
            part_lo = part_hi = SPECIALS[special]
            part_sum = SPECIALS[special] * n
        elif part_lo is None:
            continue
        count += n
        lo, hi = _fold(lo, float(part_lo), min), _fold(hi, float(part_hi), max)
        total += float(part_sum)
    mean = total / count if count else math.nan
    return {"type": "number", "count": count, "min": _number(lo), "max": _number(hi), "sum": _number(total),
            "mean": _number(mean)}


async def summary_metrics(session: AsyncSession, trial_id: int) -> dict[str, Any] | None:
    """The trial's ``summaryMetrics``, or None before its first report."""
    sql = _POSTGRES if session.get_bind().dialect.name == "postgresql" else _SQLITE
    # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
    rows: Sequence[Any] = (await session.execute(text(sql), {"trial_id": trial_id, "cap": MAX_SUMMARY_METRICS})).all()
    if not rows:
        return None
    kinds: dict[tuple[str, str], dict[str, list[Any]]] = {}
    for grp, name, kind, special, n, lo, hi, total in rows:
        kind = "number" if special is not None else kind
        kinds.setdefault((grp, name), {}).setdefault(kind, []).append((special, n, lo, hi, total))
    out: dict[str, dict[str, Any]] = {}
    for (grp, name), by_kind in kinds.items():
        if len(by_kind) > 1:
            entry: dict[str, Any] = {"type": "string"}  # values of different types: Determined says string
        elif "number" in by_kind:
            entry = _numeric_summary(by_kind["number"])
        else:
            entry = {"type": next(iter(by_kind))}
        out.setdefault(summary_key(grp), {})[name] = entry
    for grp in {g for g, _ in kinds}:
        newest = await session.scalar(select(Metric.metrics).where(Metric.trial_id == trial_id, Metric.group == grp)
                                      .order_by(Metric.steps_completed.desc(), Metric.id.desc()).limit(1))
        for name, entry in out[summary_key(grp)].items():
            entry["last"] = (newest or {}).get(name)
    return out
