"""Reads of a trial's reports for Determined's SDK: the metric streams and the summary metrics.

- ``report_pages`` feeds ``GET /api/v1/trials/metrics/{trial_metrics,training_metrics,
  validation_metrics}`` (``trial.iter_metrics(group)``, ``stream_training_metrics()``...): per
  trial in id order, pages of ``PAGE`` reports in (steps, id) order, each page an indexed
  keyset read, as Determined's ``streamMetrics`` sends them.
- ``summary_metrics`` is a trial's ``summaryMetrics`` (``trial.summary_metrics``): per group
  (``avg_metrics`` for training, ``validation_metrics`` for validation, else the group's name) and
  metric, its type and, for numbers, count/min/max/sum/mean, and every metric's ``last`` value,
  as Determined's ``calculateNewSummaryMetrics`` keeps them. As Determined does, the write path
  keeps them up to date (``metric_summaries.py``), so this read is a row per group whatever the
  trial's history. Only single-trial answers carry it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import anyio
import msgspec
from sqlalchemy import Text, cast, select

from controlplane.common.timeutil import iso
from controlplane.master.db.models import Metric
from controlplane.master.runtime import MasterRuntime
from controlplane.master.services.metric_summaries import summary_metrics

__all__ = ["PAGE", "TRAINING", "VALIDATION", "page_line", "report_json", "report_pages", "summary_metrics"]

PAGE = 1000
TRAINING, VALIDATION = "training", "validation"


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
