"""Reads of metric series for the web UI's charts (``webui/charts.py`` turns them into what
``static/charts.js`` draws), downsampled by the database so a chart of a 1 M-report series never
brings a million rows into Python; also which trials an experiment chart draws and which metric
names a chart offers.

A series is one metric of one group of one trial, x in batches (``steps_completed``) or in
seconds since the epoch (``report_time``). Up to ``points`` reports come back as they are; a
longer series is cut into ``points // 2`` buckets of equal batch width (reports are indexed by
``(trial_id, metric_group, steps_completed)``) and each bucket gives its lowest and highest value
(min/max downsampling: spikes survive). The two points of a bucket sit at its first and last x;
which of min and max came first is not kept, a bucket being narrower than a pixel.

Reading a whole 1 M-report series costs about a second whatever the SQL (each report's JSON must
be parsed), so a bucket's min/max is over its first ``SAMPLE_ROWS / buckets`` reports, found by
an index seek: exact up to ``SAMPLE_ROWS`` reports, a stratified sample beyond. Non-numeric
values (the strings "NaN", "Infinity") are left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.master.db.models import Metric, Trial

MAX_POINTS = 4000
DEFAULT_POINTS = 1000
MAX_TRIALS = 50  # curves on one experiment chart
SAMPLE_ROWS = 20_000  # reports one downsampled series reads at most
MAX_METRIC_NAMES = 200
# A metric name goes into a JSON path on SQLite: no quote, backslash or control character.
METRIC_NAME = r"^[^\"\\\x00-\x1f]{1,255}$"
GROUP_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
XAxis = Literal["batches", "time"]
_METRIC_RE = re.compile(METRIC_NAME)


@dataclass
class Series:
    trial_id: int
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)
    downsampled: bool = False  # False: every numeric report of the series, as stored


def _sql(dialect: str, metric: str) -> tuple[str, str, dict[str, Any]]:
    """The value expression (NULL unless a number), the time expression, and their parameters."""
    if dialect == "postgresql":
        value = ("CASE WHEN json_typeof(metrics -> :metric) = 'number' "
                 "THEN (metrics ->> :metric)::float8 END")
        return value, "extract(epoch from report_time)", {"metric": metric}
    if not _METRIC_RE.match(metric):  # checked at the edge too; the path below must stay a path
        raise ValueError(f"metric name {metric!r} is not allowed")
    value = "CASE WHEN json_type(metrics, :path) IN ('integer', 'real') THEN json_extract(metrics, :path) END"
    return value, "(julianday(report_time) - 2440587.5) * 86400.0", {"path": f'$."{metric}"'}


async def trial_series(session: AsyncSession, trial_id: int, group: str, metric: str, x: XAxis,
                       points: int) -> Series:
    points = max(2, min(points, MAX_POINTS))
    where = "trial_id = :trial_id AND metric_group = :grp"
    args: dict[str, Any] = {"trial_id": trial_id, "grp": group, "cap": points + 1}
    # Bounds and "more than `points`?" come from the index alone, each read bounded.
    # One aggregate per statement: SQLite answers a lone min() or max() by a seek, both by a scan.
    lo = await session.scalar(text(f"SELECT min(steps_completed) FROM metrics WHERE {where}"), args)
    hi = await session.scalar(text(f"SELECT max(steps_completed) FROM metrics WHERE {where}"), args)
    out = Series(trial_id)
    if lo is None:
        return out
    some = await session.scalar(text(
        f"SELECT count(*) FROM (SELECT 1 FROM metrics WHERE {where} LIMIT :cap) AS c"), args)
    value, when, extra = _sql(session.get_bind().dialect.name, metric)
    args |= extra
    xcol = "steps_completed" if x == "batches" else when
    if (some or 0) <= points:
        rows = (await session.execute(text(
            f"SELECT x, v FROM (SELECT {xcol} AS x, {value} AS v, steps_completed AS s, id FROM metrics "
            f"WHERE {where}) AS r WHERE v IS NOT NULL ORDER BY s, id"), args)).all()
        out.x, out.y = [float(r[0]) for r in rows], [float(r[1]) for r in rows]
        return out
    out.downsampled = True
    buckets = points // 2
    args |= {"lo": int(lo), "span": int(hi) - int(lo) + 1, "n": buckets, "k": max(1, SAMPLE_ROWS // buckets)}
    # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
    buckets_read: Sequence[Any] = (await session.execute(
        text(_bucket_sql(session.get_bind().dialect.name, xcol, value, where)), args)).all()
    for x_lo, x_hi, v_lo, v_hi in buckets_read:
        out.x.append(float(x_lo))
        out.y.append(float(v_lo))
        if x_hi != x_lo or v_hi != v_lo:
            out.x.append(float(x_hi))
            out.y.append(float(v_hi))
    if x == "time":  # a restart can report earlier batches later: uPlot needs x ascending
        pairs = sorted(zip(out.x, out.y, strict=True))
        out.x, out.y = [p[0] for p in pairs], [p[1] for p in pairs]
    return out


def _bucket_sql(dialect: str, xcol: str, value: str, where: str) -> str:
    """Per bucket of batches, min and max of x and value over its first ``k`` reports: each bucket
    an index seek and a bounded range, so the read is ``n * k`` reports however long the series."""
    start = "(:lo + (b.i * :span) / :n)"
    end = "(:lo + ((b.i + 1) * :span) / :n)"
    in_bucket = f"{where} AND steps_completed >= {start} AND steps_completed < {end}"
    buckets = "WITH RECURSIVE b(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM b WHERE i + 1 < :n) "
    if dialect == "postgresql":
        sample = (f"SELECT b.i AS i, r.x, r.v FROM b CROSS JOIN LATERAL (SELECT {xcol} AS x, {value} AS v "
                  f"FROM metrics WHERE {in_bucket} ORDER BY steps_completed LIMIT :k) AS r")
    else:
        sample = (f"SELECT b.i AS i, {xcol} AS x, {value} AS v FROM b JOIN metrics ON metrics.id IN "
                  f"(SELECT id FROM metrics WHERE {in_bucket} ORDER BY steps_completed LIMIT :k)")
    return (f"{buckets}SELECT min(x), max(x), min(v), max(v) FROM ({sample}) AS s "
            "WHERE v IS NOT NULL GROUP BY i ORDER BY i")


async def experiment_trials(session: AsyncSession, exp_id: int, offset: int = 0) -> list[int]:
    """The trials an experiment chart draws: ``MAX_TRIALS`` of them in id order from ``offset``."""
    return list((await session.scalars(select(Trial.id).where(Trial.experiment_id == exp_id)
                                       .order_by(Trial.id).offset(offset).limit(MAX_TRIALS))).all())


async def metric_names(session: AsyncSession, trial_ids: Sequence[int]) -> dict[str, list[str]]:
    """Per group, the metric names the newest report of each trial holds (an indexed read per
    trial and group, so a trial's million reports are not scanned)."""
    names: dict[str, set[str]] = {}
    for trial_id in list(trial_ids)[:MAX_TRIALS]:
        for group in ("training", "validation"):
            newest = await session.scalar(
                select(Metric.metrics).where(Metric.trial_id == trial_id, Metric.group == group)
                .order_by(Metric.steps_completed.desc()).limit(1))
            for key, val in (newest or {}).items():
                if isinstance(val, int | float) and not isinstance(val, bool) and _METRIC_RE.match(key):
                    names.setdefault(group, set()).add(key)
    return {g: sorted(v)[:MAX_METRIC_NAMES] for g, v in sorted(names.items())}
