"""``GET /api/v1/experiments``: Determined's ``GetExperimentsRequest`` filters and sort orders in SQL.

Determined's semantics (``master/internal/api_experiment.go``): ``name`` and ``description`` match
a substring whatever its case; every one of ``labels`` must be on the experiment; ``states`` are
``experimentv1State`` names (``STATE_ACTIVE``...); ``users`` are usernames and ``userIds`` ids;
``experimentIdFilter`` compares the id (``lt``/``lte``/``gt``/``gte``, ``incl``/``notIn`` sets, an
empty ``incl`` matching nothing); ``archived=false`` across all projects also leaves out experiments
of archived projects and workspaces. ``sortBy`` is a ``SORT_BY_*`` name with ``orderBy``
(``ORDER_BY_DESC`` puts rows without a value last, as does ascending), ties by id in the same
direction. Only a page of rows is read; the sort keys that are aggregates (trials, checkpoints,
the best searcher metric) are correlated subqueries over indexed columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import ColumnElement, and_, case, false, func, literal, select, text
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import defer

from controlplane.master.db.models import Checkpoint, Experiment, Project, Trial, User, Workspace
from controlplane.master.errors import BadRequest
from controlplane.state import checkpoint as CK

MAX_FILTER_VALUES = 1000  # ids in experimentIdFilter.incl / notIn
MAX_LABELS = 100

# Determined's experimentv1State names; the substates of ACTIVE (QUEUED...) are no stored state, so
# they match nothing, as in Determined.
STATES = frozenset({
    "STATE_UNSPECIFIED", "STATE_ACTIVE", "STATE_PAUSED", "STATE_STOPPING_COMPLETED", "STATE_STOPPING_CANCELED",
    "STATE_STOPPING_ERROR", "STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED", "STATE_DELETING",
    "STATE_DELETE_FAILED", "STATE_STOPPING_KILLED", "STATE_QUEUED", "STATE_PULLING", "STATE_STARTING",
    "STATE_RUNNING",
})
ORDERS = frozenset({"ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC"})


def _count_trials() -> Any:
    return select(func.count(Trial.id)).where(Trial.experiment_id == Experiment.id).scalar_subquery()


def _checkpoints(agg: Any) -> Any:
    return (select(agg).where(Checkpoint.experiment_id == Experiment.id, Checkpoint.state == CK.COMPLETED)
            .scalar_subquery())


def _best_metric() -> Any:
    """The best of its trials' searcher metrics: the least, or the greatest where larger is better."""
    values = select(Trial.searcher_metric_value).where(Trial.experiment_id == Experiment.id)
    larger_is_better = Experiment.config["searcher"]["smaller_is_better"].as_boolean() == false()
    return case((larger_is_better, values.with_only_columns(func.max(Trial.searcher_metric_value)).scalar_subquery()),
                else_=values.with_only_columns(func.min(Trial.searcher_metric_value)).scalar_subquery())


# What a listed row never shows: the YAML as submitted and the searcher's snapshot (its code lives in
# experiment_contexts).
LIST_DEFERRED = (defer(Experiment.original_config), defer(Experiment.searcher_state))

# SORT_BY_* -> the column or expression (None: by id alone).
SORTS: dict[str, Any] = {
    "SORT_BY_UNSPECIFIED": None,
    "SORT_BY_ID": None,
    "SORT_BY_DESCRIPTION": lambda: Experiment.description,
    "SORT_BY_START_TIME": lambda: Experiment.start_time,
    "SORT_BY_END_TIME": lambda: Experiment.end_time,
    "SORT_BY_STATE": lambda: Experiment.state,
    "SORT_BY_NUM_TRIALS": _count_trials,
    "SORT_BY_PROGRESS": lambda: func.coalesce(Experiment.progress, 0),
    "SORT_BY_USER": lambda: User.username,
    "SORT_BY_NAME": lambda: Experiment.name,
    "SORT_BY_FORKED_FROM": lambda: literal(None),  # no experiment here is forked from another
    "SORT_BY_RESOURCE_POOL": lambda: Experiment.resource_pool,
    "SORT_BY_PROJECT_ID": lambda: Experiment.project_id,
    "SORT_BY_CHECKPOINT_SIZE": lambda: func.coalesce(_checkpoints(func.sum(Checkpoint.size)), 0),
    "SORT_BY_CHECKPOINT_COUNT": lambda: _checkpoints(func.count(Checkpoint.uuid)),
    "SORT_BY_SEARCHER_METRIC_VAL": _best_metric,
}


@dataclass
class ExperimentFilter:
    """One ``GetExperimentsRequest``'s filters and order, checked by ``check``."""

    name: str | None = None
    description: str | None = None
    labels: list[str] = field(default_factory=list)
    archived: bool | None = None
    states: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    user_ids: list[int] = field(default_factory=list)
    project_id: int | None = None
    id_gt: int | None = None
    id_gte: int | None = None
    id_lt: int | None = None
    id_lte: int | None = None
    id_in: list[int] | None = None
    id_not_in: list[int] | None = None
    sort_by: str | None = None
    order_by: str | None = None

    def check(self) -> ExperimentFilter:
        """400 naming the parameter for a value Determined's enums or this master's bounds refuse."""
        for label in self.labels:
            if not label or "\x00" in label or len(label) > 255:
                raise BadRequest(f"labels: {label[:40]!r} is not a label (1 to 255 characters, no NUL)")
        if len(self.labels) > MAX_LABELS:
            raise BadRequest(f"labels: at most {MAX_LABELS}, got {len(self.labels)}")
        unknown = [s for s in self.states if s not in STATES]
        if unknown:
            raise BadRequest(f"states: {unknown[0][:40]!r} is not an experiment state (one of "
                             f"{', '.join(sorted(STATES))})")
        for what, values in (("experimentIdFilter.incl", self.id_in), ("experimentIdFilter.notIn", self.id_not_in)):
            if values is not None and len(values) > MAX_FILTER_VALUES:
                raise BadRequest(f"{what}: at most {MAX_FILTER_VALUES} ids, got {len(values)}")
        if self.sort_by and self.sort_by not in SORTS:
            raise BadRequest(f"sortBy: {self.sort_by[:64]!r} is not one of {', '.join(SORTS)}")
        if self.order_by and self.order_by not in ORDERS:
            raise BadRequest(f"orderBy: {self.order_by[:64]!r} is not one of {', '.join(sorted(ORDERS))}")
        return self


def _has_labels(session: AsyncSession, labels: Sequence[str]) -> list[Any]:
    """Labels are a JSON list: the database looks inside it, one EXISTS per label (all must be there)."""
    postgres = session.get_bind().dialect.name == "postgresql"
    out = []
    for i, label in enumerate(dict.fromkeys(labels)):
        name = f"label_{i}"
        sql = (f"EXISTS (SELECT 1 FROM json_array_elements_text(experiments.labels) AS l WHERE l = :{name})"
               if postgres else
               f"EXISTS (SELECT 1 FROM json_each(experiments.labels) WHERE json_each.value = :{name})")
        out.append(text(sql).bindparams(**{name: label}))
    return out


def _where(session: AsyncSession, f: ExperimentFilter) -> list[ColumnElement[bool] | Any]:
    conds: list[Any] = []
    if f.name:
        conds.append(Experiment.name.icontains(f.name, autoescape=True))
    if f.description:
        conds.append(Experiment.description.icontains(f.description, autoescape=True))
    if f.labels:
        conds.extend(_has_labels(session, f.labels))
    if f.archived is not None:
        conds.append(Experiment.archived.is_(f.archived))
        if not f.archived and not f.project_id:  # Determined's: nor those of an archived project or workspace
            conds.append(Experiment.project_id.in_(
                select(Project.id).join(Workspace, Workspace.id == Project.workspace_id)
                .where(Project.archived.is_(False), Workspace.archived.is_(False))))
    if f.states:
        conds.append(Experiment.state.in_([s.removeprefix("STATE_") for s in f.states]))
    if f.users:
        conds.append(User.username.in_(f.users))
    if f.user_ids:
        conds.append(Experiment.owner_id.in_(f.user_ids))
    if f.project_id:  # Determined's 0: every project
        conds.append(Experiment.project_id == f.project_id)
    for op, value in (("__gt__", f.id_gt), ("__ge__", f.id_gte), ("__lt__", f.id_lt), ("__le__", f.id_lte)):
        if value is not None:
            conds.append(getattr(Experiment.id, op)(value))
    if f.id_in is not None:
        conds.append(Experiment.id.in_(f.id_in) if f.id_in else false())
    if f.id_not_in:
        conds.append(Experiment.id.not_in(f.id_not_in))
    return conds


def _ordered(q: Any, f: ExperimentFilter) -> Any:
    desc = f.order_by == "ORDER_BY_DESC"
    make = SORTS.get(f.sort_by or "SORT_BY_ID")
    tie = Experiment.id.desc() if desc else Experiment.id.asc()
    if make is None:
        return q.order_by(tie)
    column = make()
    return q.order_by((column.desc() if desc else column.asc()).nulls_last(), tie)


async def page(session: AsyncSession, f: ExperimentFilter, *, offset: int,
               limit: int) -> tuple[list[tuple[Experiment, str]], int]:
    """A page of the matching experiments (without their original YAML or searcher snapshot:
    progress comes from ``progress_basis``) with their owner's name, and how many match."""
    q = (select(Experiment, User.username).join(User, User.id == Experiment.owner_id)
         .options(*LIST_DEFERRED))
    conds = _where(session, f)
    if conds:
        q = q.where(and_(*conds))
    total = await count(session, q, joins_user=bool(f.users))
    rows: Sequence[Any] = (await session.execute(_ordered(q, f).offset(offset).limit(limit))).all()
    return [(e, username) for e, username in rows], int(total or 0)


async def count(session: AsyncSession, q: Any, *, joins_user: bool) -> int:
    """How many rows ``q`` (experiments joined with their owner) matches, counted without the join
    unless a condition names the owner: every experiment has one, and without the join an
    unfiltered count is read from an index rather than from every experiment's row."""
    counted = select(func.count()).select_from(Experiment)
    if joins_user:
        counted = counted.join(User, User.id == Experiment.owner_id)
    where = q.whereclause
    if where is not None:
        counted = counted.where(where)
    return int(await session.scalar(counted) or 0)
