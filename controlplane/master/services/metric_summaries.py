"""A trial's summary metrics, kept up to date as its reports are written (Determined's
``summaryMetrics``, which its master updates on every write).

One row per trial and group (``trial_metric_summaries``): how many reports it holds, its newest
report by (steps, id) and that report's values, and per metric name the kinds of value seen
(bits of ``KIND_BITS``) with, for numbers and the NaN/±Infinity strings, count/min/max/sum. The
metric write path (``metric_writer.insert_rows``) folds the rows it inserted into these in the
same transaction, so a crash loses neither; the caller holds the trial's row (the fenced UPDATE
or, on PostgreSQL, the writer's ``FOR UPDATE``), so concurrent writers of one trial take turns
and never lose each other's counts. A retried report that the unique index skipped is not
counted. Reads (``GET /api/v1/trials/{id}``, the first page of a trial's metrics) then cost a row
per group whatever the trial's history.

The answer is what ``metric_reads`` aggregated per read before (migration 0017 backfilled the
rows that way): per group key (``avg_metrics`` for training, ``validation_metrics`` for
validation, else the group's name) and metric, its type (``string`` for values of several
kinds) and, for numbers, count/min/max/sum/mean, where NaN wins min and max as Go's math.Min
does, and every metric's ``last`` value: the newest report's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import add
from typing import Any

import msgspec
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

MAX_NAMES = 10_000  # metric names one group's summary keeps (a name beyond is not summarized)
MAX_SUMMARY_METRICS = 10_000  # (group, metric) entries of one answer
NUMBER, STRING, BOOLEAN, NULL, ARRAY, OBJECT = 1, 2, 4, 8, 16, 32
KIND_NAMES = {NUMBER: "number", STRING: "string", BOOLEAN: "boolean", NULL: "null", ARRAY: "array", OBJECT: "object"}
SPECIALS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
TRAINING, VALIDATION = "training", "validation"

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


def summary_key(group: str) -> str:
    return {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}.get(group, group)


def _number(value: float) -> float | str:
    """Non-finite values as the strings JSON can carry (Determined's replaceSpecialFloatsWithString)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value


def _float(value: Any) -> float:
    return SPECIALS[value] if isinstance(value, str) else float(value)


_PLAIN = {float, int}


def _fold(acc: list[Any], values: list[Any]) -> None:
    """Folds one metric's values into its ``[kinds, count, min, max, sum]``, one by one."""
    for value in values:
        kind = type(value)
        if kind is float:
            x = value
        elif kind is int:
            try:
                x = float(value)
            except OverflowError:  # an integer beyond a double
                x = math.inf if value > 0 else -math.inf
        elif kind is str and value in SPECIALS:
            x = SPECIALS[value]
        else:
            acc[0] |= (STRING if kind is str else BOOLEAN if kind is bool else NULL if value is None
                       else ARRAY if kind is list else OBJECT if kind is dict else STRING)
            continue
        acc[0] |= NUMBER
        acc[1] += 1
        acc[4] += x
        if x != x:  # NaN wins min and max, as Go's math.Min/math.Max (and stays: NaN compares false)
            acc[2] = acc[3] = x
        else:
            if x < acc[2]:
                acc[2] = x
            if x > acc[3]:
                acc[3] = x


@dataclass(slots=True)
class GroupSummary:
    """One trial's group: its reports folded in (``add``), stored as one row."""

    reports: int = 0
    last_steps: int = -1
    last_id: int = -1
    last: dict[str, Any] = field(default_factory=dict)
    # name -> [kinds, count, min, max, sum] (floats in memory; non-finite ones as strings when stored)
    metrics: dict[str, list[Any]] = field(default_factory=dict)

    def add(self, row_id: int, steps: int, values: dict[str, Any]) -> None:
        """One stored report (its avgMetrics as stored: NaN/±Inf as strings)."""
        self.add_many([(row_id, steps, values)])

    def add_many(self, reports: Sequence[tuple[int, int, dict[str, Any]]]) -> None:
        """Stored reports, (row id, steps, avgMetrics) in id order: each metric's values are folded
        together, a list of plain numbers by min/max/sum in C, anything else value by value."""
        if not reports:
            return
        self.reports += len(reports)
        row_id, steps, values = max(reports, key=lambda r: (r[1], r[0]))
        if steps > self.last_steps or (steps == self.last_steps and row_id > self.last_id):
            self.last_steps, self.last_id, self.last = steps, row_id, values
        by_name: dict[str, list[Any]] = {}
        for _, _, values in reports:
            for name, value in values.items():
                seen = by_name.get(name)
                if seen is None:
                    by_name[name] = [value]
                else:
                    seen.append(value)
        metrics = self.metrics
        for name, seen in by_name.items():
            acc = metrics.get(name)
            if acc is None:
                if len(metrics) >= MAX_NAMES:
                    continue
                acc = metrics[name] = [0, 0, math.inf, -math.inf, 0.0]
            if {type(v) for v in seen} <= _PLAIN:
                try:
                    xs = [float(v) for v in seen]
                except OverflowError:  # an integer beyond a double: value by value
                    _fold(acc, seen)
                    continue
                acc[0] |= NUMBER
                acc[1] += len(xs)
                acc[4] = reduce(add, xs, acc[4])  # in order, as value by value
                if acc[2] == acc[2]:  # NaN, once seen, stays (a plain number is never NaN)
                    acc[2], acc[3] = min(acc[2], min(xs)), max(acc[3], max(xs))
            else:
                _fold(acc, seen)

    def stored_metrics(self) -> dict[str, list[Any]]:
        return {name: [a[0], a[1], _number(a[2]), _number(a[3]), _number(a[4])] for name, a in self.metrics.items()}

    @classmethod
    def from_row(cls, reports: int, last_steps: int, last_id: int, last: Any, metrics: Any) -> GroupSummary:
        return cls(int(reports), int(last_steps), int(last_id), last if isinstance(last, dict) else {},
                   {name: [int(a[0]), int(a[1]), _float(a[2]), _float(a[3]), _float(a[4])]
                    for name, a in (metrics or {}).items()})

    def entries(self) -> dict[str, dict[str, Any]]:
        """The answer's entries of this group, by name."""
        out: dict[str, dict[str, Any]] = {}
        for name in sorted(self.metrics):
            kinds, count, lo, hi, total = self.metrics[name]
            if kinds & (kinds - 1):
                entry: dict[str, Any] = {"type": "string"}  # values of different types: Determined says string
            elif kinds == NUMBER:
                entry = {"type": "number", "count": count, "min": _number(lo), "max": _number(hi),
                         "sum": _number(total), "mean": _number(total / count if count else math.nan)}
            else:
                entry = {"type": KIND_NAMES.get(kinds, "string")}
            entry["last"] = self.last.get(name)
            out[name] = entry
        return out


# ---- the database ----------------------------------------------------------------------------------

_COLUMNS = "trial_id, metric_group, reports, last_steps, last_id, last_metrics, metrics"
_READ = ("SELECT trial_id, metric_group, reports, last_steps, last_id, CAST(last_metrics AS TEXT), "
         "CAST(metrics AS TEXT) FROM trial_metric_summaries")
_UPSERT = ("INSERT INTO trial_metric_summaries ({cols}) VALUES (:trial_id, :grp, :reports, :last_steps, :last_id, "
           "{json_last}, {json_metrics}) ON CONFLICT (trial_id, metric_group) DO UPDATE SET "
           "reports = excluded.reports, last_steps = excluded.last_steps, last_id = excluded.last_id, "
           "last_metrics = excluded.last_metrics, metrics = excluded.metrics")
_PG_UPSERT = text(_UPSERT.format(cols=_COLUMNS, json_last="CAST(:last AS json)", json_metrics="CAST(:metrics AS json)"))
_SQLITE_UPSERT = text(_UPSERT.format(cols=_COLUMNS, json_last=":last", json_metrics=":metrics"))
_CHUNK = 500  # trial ids per IN list


def _is_pg(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "postgresql"


async def _load(session: AsyncSession, trial_ids: Sequence[int], *, lock: bool = False
                ) -> dict[tuple[int, str], GroupSummary]:
    out: dict[tuple[int, str], GroupSummary] = {}
    for i in range(0, len(trial_ids), _CHUNK):
        chunk = list(trial_ids[i:i + _CHUNK])
        marks = ", ".join(f":t{j}" for j in range(len(chunk)))
        sql = f"{_READ} WHERE trial_id IN ({marks}) ORDER BY trial_id, metric_group"
        if lock and _is_pg(session):
            sql += " FOR UPDATE"
        # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
        rows: Sequence[Any] = (await session.execute(text(sql), {f"t{j}": t for j, t in enumerate(chunk)})).all()
        for trial_id, group, reports, last_steps, last_id, last, metrics in rows:
            out[(trial_id, group)] = GroupSummary.from_row(reports, last_steps, last_id, _decode(last),
                                                           _decode(metrics))
    return out


async def add_reports(session: AsyncSession, rows: Iterable[tuple[int, str, int, int, dict[str, Any]]]) -> None:
    """Folds stored reports, (trial id, group, row id, steps, avgMetrics) in id order, into their
    groups' summaries. In the transaction that inserted them, with their trials' rows held."""
    by_group: dict[tuple[int, str], list[tuple[int, int, dict[str, Any]]]] = {}
    for trial_id, group, row_id, steps, values in rows:
        by_group.setdefault((trial_id, group), []).append((row_id, steps, values))
    if not by_group:
        return
    current = await _load(session, sorted({t for t, _ in by_group}), lock=True)
    changed: dict[tuple[int, str], GroupSummary] = {}
    for key, reports in by_group.items():
        summary = changed[key] = current.get(key) or GroupSummary()
        summary.add_many(reports)
    await store(session, changed)


async def store(session: AsyncSession, summaries: dict[tuple[int, str], GroupSummary]) -> None:
    """Writes these (trial id, group) summaries over what is stored."""
    if not summaries:
        return
    params = [{"trial_id": trial_id, "grp": group, "reports": s.reports, "last_steps": s.last_steps,
               "last_id": s.last_id, "last": _encode(s.last).decode(), "metrics": _encode(s.stored_metrics()).decode()}
              for (trial_id, group), s in summaries.items()]
    await session.execute(_PG_UPSERT if _is_pg(session) else _SQLITE_UPSERT, params)


async def summary_metrics(session: AsyncSession, trial_id: int) -> dict[str, Any] | None:
    """The trial's ``summaryMetrics``, or None before its first report with a value."""
    groups = await _load(session, [trial_id])
    out: dict[str, dict[str, Any]] = {}
    left = MAX_SUMMARY_METRICS
    for (_, group), summary in sorted(groups.items()):
        if left <= 0:
            break
        entries = summary.entries()
        if not entries:
            continue
        if len(entries) > left:
            entries = dict(list(entries.items())[:left])
        left -= len(entries)
        out.setdefault(summary_key(group), {}).update(entries)
    return out or None


async def report_count(session: AsyncSession, trial_id: int, groups: Sequence[str] | None = None) -> int:
    """How many reports the trial holds (of ``groups`` if given): a row per group, never a count of them."""
    sql = "SELECT coalesce(sum(reports), 0) FROM trial_metric_summaries WHERE trial_id = :trial_id"
    args: dict[str, Any] = {"trial_id": trial_id}
    if groups is not None:
        if not groups:
            return 0
        sql += " AND metric_group IN (" + ", ".join(f":g{i}" for i in range(len(groups))) + ")"
        args |= {f"g{i}": g for i, g in enumerate(groups)}
    return int(await session.scalar(text(sql), args) or 0)
