"""Summary metrics kept at write time (services/metric_summaries.py): folded as Determined folds
them, written in the transaction that stores the rows (a failure leaves neither), a retried report
counted once, concurrent writers of one trial losing nothing, and the metrics page's total taken
from them rather than from a count of the trial's reports."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event, func, select

from controlplane.common.timeutil import utcnow
from controlplane.master.db.models import Metric, TrialMetricSummary
from controlplane.master.services import metric_summaries, metric_writer
from controlplane.master.services.metric_summaries import GroupSummary
from tests.controlplane.master.test_metrics_api import report, running_trial


def test_a_group_folds_numbers_specials_and_kinds_and_keeps_the_newest_report():
    g = GroupSummary()
    g.add(1, 1, {"loss": 0.5, "acc": 1, "phase": "warm", "flag": True})
    g.add(2, 3, {"loss": "NaN", "acc": 3, "phase": 2})
    g.add(3, 2, {"loss": 0.25, "acc": "Infinity", "xs": [1, 2]})  # fewer steps: not the newest
    entries = g.entries()
    assert entries["loss"] == {"type": "number", "count": 3, "min": "NaN", "max": "NaN", "sum": "NaN",
                               "mean": "NaN", "last": "NaN"}  # NaN wins min and max, as Go's math.Min
    assert entries["acc"] == {"type": "number", "count": 3, "min": 1.0, "max": "Infinity", "sum": "Infinity",
                              "mean": "Infinity", "last": 3}
    assert entries["phase"] == {"type": "string", "last": 2}  # a string and a number: Determined says string
    assert entries["flag"] == {"type": "boolean", "last": None}  # not in the newest report
    assert entries["xs"] == {"type": "array", "last": None}
    assert (g.reports, g.last_steps, g.last_id) == (3, 3, 2)
    stored = GroupSummary.from_row(g.reports, g.last_steps, g.last_id, g.last, g.stored_metrics())
    assert stored.entries() == entries  # non-finite values survive the JSON they are stored as


def test_a_group_keeps_at_most_max_names(monkeypatch):
    monkeypatch.setattr(metric_summaries, "MAX_NAMES", 2)
    g = GroupSummary()
    g.add(1, 1, {"a": 1, "b": 2, "c": 3})
    g.add(2, 2, {"c": 4, "a": 5})
    assert sorted(g.entries()) == ["a", "b"] and g.entries()["a"]["count"] == 2


async def _stored(api, trial_id: int) -> tuple[int, int]:
    """(metric rows, summarized reports) of the trial."""
    async with api.rt.sessions() as session:
        rows = await session.scalar(select(func.count()).select_from(Metric).where(Metric.trial_id == trial_id))
        reports = await session.scalar(select(func.coalesce(func.sum(TrialMetricSummary.reports), 0))
                                       .where(TrialMetricSummary.trial_id == trial_id))
    return int(rows or 0), int(reports or 0)


@pytest.mark.both_databases  # one transaction for rows and summary, per dialect
async def test_a_failure_while_summarizing_stores_neither_the_rows_nor_the_summary(api, monkeypatch):
    _, tid, _ = await running_trial(api)
    reports = [metric_writer.Report("training", s, None, None, {"loss": 1.0 / s}, None) for s in (1, 2, 3)]

    async def lost(session, summaries):
        raise RuntimeError("connection lost while summarizing")

    monkeypatch.setattr(metric_summaries, "store", lost)
    with pytest.raises(RuntimeError, match="summarizing"):
        async with api.rt.sessions.begin() as session:
            await metric_writer.insert_rows(session, [metric_writer.RowsFor(tid, 1, reports)], utcnow())
    assert await _stored(api, tid) == (0, 0)
    monkeypatch.undo()
    async with api.rt.sessions.begin() as session:
        await metric_writer.insert_rows(session, [metric_writer.RowsFor(tid, 1, reports)], utcnow())
    assert await _stored(api, tid) == (3, 3)


@pytest.mark.both_databases  # the unique index's skipped rows must not be counted, per dialect
async def test_a_retried_batch_is_summarized_once_and_describe_reads_it(api):
    _, tid, h = await running_trial(api)
    body = {"reports": [report("training", s, {"loss": s / 4}) for s in (1, 2, 3, 4)]
            + [report("validation", 4, {"loss": 0.5}), report("training", 4, {"loss": 9.0})]}  # a repeat inside
    for _ in range(2):  # the second: a retry whose 200 was lost
        r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=body, headers=h)
        assert r.status_code == 200, r.text
    assert await _stored(api, tid) == (5, 5)
    summary = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]["summaryMetrics"]
    assert summary["avg_metrics"]["loss"] == {"type": "number", "count": 4, "min": 0.25, "max": 1.0, "sum": 2.5,
                                              "mean": 0.625, "last": 1.0}  # the first report of steps 4 stands
    assert summary["validation_metrics"]["loss"]["last"] == 0.5
    latest = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]["latestValidation"]
    assert latest["totalBatches"] == 4 and latest["metrics"]["avgMetrics"] == {"loss": 0.5}


@pytest.mark.both_databases  # concurrent writers of one trial: row locks on PostgreSQL, SQLite's one writer
async def test_concurrent_writers_of_one_trial_lose_no_count(api):
    _, tid, h = await running_trial(api)

    async def post(k: int, owner: bool) -> int:
        rows = [{**report("training", k * 10 + i, {"loss": 1.0}), **({"trialRunId": 0} if owner else {})}
                for i in range(10)]
        r = await api.post(f"/api/v1/trials/{tid}/metrics/batch", json={"reports": rows},
                           headers={} if owner else h)
        return r.status_code

    codes = await asyncio.gather(*(post(k, owner) for k in range(6) for owner in (False, True)))
    assert set(codes) == {200}
    assert await _stored(api, tid) == (120, 120)
    summary = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]["summaryMetrics"]
    assert summary["avg_metrics"]["loss"]["count"] == 120 and summary["avg_metrics"]["loss"]["sum"] == 120.0


async def test_the_first_metrics_page_counts_no_report(api):
    _, tid, h = await running_trial(api)
    body = {"reports": [report("training", s, {"loss": 1.0}) for s in range(1, 41)]
            + [report("validation", s, {"loss": 1.0}) for s in (10, 20)]}
    assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=body, headers=h)).status_code == 200
    statements: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        statements.append(" ".join(statement.lower().split()))

    engine = api.rt.engine.sync_engine
    event.listen(engine, "before_cursor_execute", seen)
    try:
        whole = (await api.get(f"/api/v1/trials/{tid}/metrics", params={"limit": 5})).json()
        training = (await api.get(f"/api/v1/trials/{tid}/metrics", params={"limit": 5, "group": "training"})).json()
        workloads = (await api.get(f"/api/v1/trials/{tid}/workloads", params={"limit": 5})).json()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert (whole["pagination"]["total"], training["pagination"]["total"]) == (42, 40)
    assert workloads["pagination"]["total"] == 42
    assert not [s for s in statements if "count(" in s and "from metrics" in s], statements


@pytest.mark.both_databases  # ids from the sequence (PostgreSQL) or the rowid (SQLite) break the tie
async def test_a_later_report_at_the_same_steps_is_the_last(api):
    _, tid, h = await running_trial(api)
    body = {"reports": [report("training", 5, {"loss": 1.0}), report("training", 3, {"loss": 0.5})]}
    assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=body, headers=h)).status_code == 200
    again = {"reports": [{**report("training", 5, {"loss": 2.0}), "trialRunId": 0}]}  # its owner, run 0
    assert (await api.post(f"/api/v1/trials/{tid}/metrics/batch", json=again)).status_code == 200
    summary = (await api.get(f"/api/v1/trials/{tid}")).json()["trial"]["summaryMetrics"]
    assert summary["avg_metrics"]["loss"] == {"type": "number", "count": 3, "min": 0.5, "max": 2.0, "sum": 3.5,
                                              "mean": 3.5 / 3, "last": 2.0}
