"""A trial's workloads: its training and validation reports and its checkpoints, in step order
(what ``det experiment describe`` merges), a page at a time.

The three kinds are three indexed, ordered, limited reads merged by the database (UNION ALL of
already-limited parts), so a page costs about its own size whether it is the first or, through
the cursor, the thousandth; the first page's total takes the reports' count from the trial's
summary metrics (``metric_summaries.py``) and counts only checkpoints. Order: (step, kind:
training < validation < checkpoint, row id / uuid).
"""

from __future__ import annotations

from typing import Any

import msgspec
from sqlalchemy import BigInteger, Integer, String, func, literal_column, or_, select, union_all
from sqlalchemy.ext.asyncio import AsyncSession

from controlplane.common.timeutil import iso
from controlplane.master.db.models import Checkpoint, Metric, Trial
from controlplane.master.errors import NotFound
from controlplane.master.services import metric_summaries
from controlplane.master.services.paging import (
    Pagination,
    decode_cursor,
    encode_cursor,
    one_of_offset_or_cursor,
    page_size,
    pagination,
)

KINDS = ("training", "validation")  # kinds 0 and 1; checkpoints are kind 2
_Key = tuple[int, int, int, str]  # (steps, kind, metric id, checkpoint uuid)


class WorkloadsPage(msgspec.Struct, rename="camel", kw_only=True):
    workloads: list[dict[str, Any]]
    pagination: Pagination
    next_cursor: str | None = None


def _after(steps_col: Any, tie_col: Any, kind: int, key: _Key | None) -> list[Any]:
    """This kind's rows after ``key`` in the listing's order (bounded below on the step index)."""
    if key is None:
        return []
    steps, ck, num, ref = key
    if kind > ck:
        return [steps_col >= steps]
    if kind < ck:
        return [steps_col > steps]
    return [steps_col >= steps, or_(steps_col > steps, tie_col > (num if kind < 2 else ref))]


def _parts(trial_id: int, key: _Key | None, per_part: int) -> Any:
    parts = []
    for kind, group in enumerate(KINDS):
        parts.append(select(select(
            Metric.steps_completed.label("steps"), literal_column(str(kind), Integer).label("kind"),
            Metric.id.label("num"), literal_column("''", String).label("ref"))
            .where(Metric.trial_id == trial_id, Metric.group == group,
                   *_after(Metric.steps_completed, Metric.id, kind, key))
            .order_by(Metric.steps_completed, Metric.id).limit(per_part).subquery()))
    parts.append(select(select(
        Checkpoint.steps_completed.label("steps"), literal_column("2", Integer).label("kind"),
        literal_column("0", BigInteger).label("num"), Checkpoint.uuid.label("ref"))
        .where(Checkpoint.trial_id == trial_id, *_after(Checkpoint.steps_completed, Checkpoint.uuid, 2, key))
        .order_by(Checkpoint.steps_completed, Checkpoint.uuid).limit(per_part).subquery()))
    return union_all(*parts).subquery()


async def _total(session: AsyncSession, trial_id: int) -> int:
    metrics = await metric_summaries.report_count(session, trial_id, list(KINDS))  # kept at write time
    ckpts = await session.scalar(select(func.count()).select_from(Checkpoint).where(
        Checkpoint.trial_id == trial_id)) or 0
    return metrics + ckpts


def _metric_json(kind: str, m: Any) -> dict[str, Any]:
    return {kind: {"totalBatches": m.steps_completed, "numInputs": 0, "endTime": iso(m.report_time),
                   "metrics": {"avgMetrics": m.metrics, "batchMetrics": m.batch_metrics}}}


def _checkpoint_json(c: Checkpoint) -> dict[str, Any]:
    return {"checkpoint": {
        "totalBatches": c.steps_completed, "state": c.state, "uuid": c.uuid, "endTime": iso(c.report_time),
        "resources": {k: str(v) for k, v in (c.resources or {}).items()}, "metadata": c.metadata_}}


async def trial_workloads(session: AsyncSession, trial_id: int, *, limit: int, offset: int,
                          cursor: str | None) -> WorkloadsPage:
    one_of_offset_or_cursor(offset, cursor)
    if await session.get(Trial, trial_id) is None:
        raise NotFound(f"trial {trial_id} not found")
    size = page_size(limit)
    key: _Key | None = None
    if cursor is None:
        total = await _total(session, trial_id)
        skip = offset
    else:
        offset, total, key = decode_cursor(cursor, _Key)
        skip = 0
    u = _parts(trial_id, key, skip + size + 1)
    keys = (await session.execute(select(u).order_by(u.c.steps, u.c.kind, u.c.num, u.c.ref)
                                  .offset(skip).limit(size + 1))).all()
    more = len(keys) > size
    keys = keys[:size]
    metric_ids = [k.num for k in keys if k.kind < 2]
    uuids = [k.ref for k in keys if k.kind == 2]
    metrics = {m.id: m for m in (await session.scalars(select(Metric).where(Metric.id.in_(metric_ids)))).all()} \
        if metric_ids else {}
    ckpts = {c.uuid: c for c in (await session.scalars(select(Checkpoint).where(Checkpoint.uuid.in_(uuids)))).all()} \
        if uuids else {}
    out = []
    for k in keys:
        if k.kind < 2 and k.num in metrics:
            out.append(_metric_json(KINDS[k.kind], metrics[k.num]))
        elif k.kind == 2 and k.ref in ckpts:
            out.append(_checkpoint_json(ckpts[k.ref]))
    next_cursor = None
    if more:
        last = keys[-1]
        next_cursor = encode_cursor(offset + len(keys), total, [last.steps, last.kind, last.num, last.ref])
    return WorkloadsPage(workloads=out, pagination=pagination(offset, limit, total, len(out)),
                         next_cursor=next_cursor)
