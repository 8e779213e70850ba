"""Reads of experiments and their trials for the API and the web UI: each a page or one row, with
what its answer shows (owner, trial ids, progress, project name, validation summaries). The queries
live here; ``api/experiments.py`` turns the rows into Determined's JSON, the experiment and trial
pages (``webui/pages/``) into HTML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import defer

from controlplane.master.db.models import Experiment, ExperimentContext, Metric, Trial, TrialMetricSummary, User
from controlplane.master.errors import NotFound
from controlplane.master.orchestration import progress
from controlplane.master.services import experiment_list as listing
from controlplane.master.services import run_summaries, workspaces
from controlplane.master.services.run_summaries import ExperimentSummary
from controlplane.master.services.workspaces import ProjectNames


@dataclass(frozen=True)
class ExperimentRead:
    """One experiment as an answer shows it."""

    exp: Experiment
    username: str
    trial_ids: list[int]
    progress: float | None
    project: ProjectNames | None  # its project and workspace names
    summary: ExperimentSummary = ExperimentSummary()  # its checkpoints and best trial


@dataclass(frozen=True)
class Validation:
    """A trial's validation report: at ``steps``, ``metrics``, reported ``at``."""

    steps: int
    metrics: dict[str, Any]
    at: datetime | None


@dataclass(frozen=True)
class ExperimentDetail:
    """What the experiment page shows besides the experiment row."""

    owner: str
    n_trials: int
    trials: list[Trial]  # a page by id
    with_metric: list[Trial]  # by id, those with a searcher metric
    trial_of_request: dict[str, int]  # the searcher's request id -> trial id


async def experiment_row(session: AsyncSession, exp_id: int) -> Experiment:
    """The experiment row, or NotFound naming it."""
    exp = await session.get(Experiment, exp_id)
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    return exp


async def model_definition(session: AsyncSession, exp_id: int) -> bytes:
    """The experiment's code (the tar.gz of its context), or NotFound naming it."""
    archive = await session.scalar(select(ExperimentContext.model_definition)
                                   .where(ExperimentContext.experiment_id == exp_id))
    if archive is None:
        raise NotFound(f"experiment {exp_id} not found")
    return archive


async def _shown_row(session: AsyncSession, exp_id: int, *deferred: Any) -> Experiment:
    """The experiment row without what answers never show (the searcher's snapshot: progress comes
    from ``progress_basis``), or NotFound naming it."""
    exp = await session.scalar(select(Experiment).where(Experiment.id == exp_id).options(
        defer(Experiment.searcher_state), *deferred))
    if exp is None:
        raise NotFound(f"experiment {exp_id} not found")
    return exp


async def experiment(session: AsyncSession, exp_id: int) -> ExperimentRead:
    exp = await _shown_row(session, exp_id)
    username = await session.scalar(select(User.username).where(User.id == exp.owner_id)) or ""
    trial_ids = list((await session.scalars(
        select(Trial.id).where(Trial.experiment_id == exp_id).order_by(Trial.id))).all())
    done = await progress.of_experiments(session, [exp])
    names = await workspaces.project_names(session, {exp.project_id})
    summary = await run_summaries.experiments(session, [exp])
    return ExperimentRead(exp, username, trial_ids, done[exp.id], names.get(exp.project_id), summary[exp.id])


async def experiments_page(session: AsyncSession, f: listing.ExperimentFilter, *, offset: int,
                           limit: int) -> tuple[list[ExperimentRead], int]:
    """A page of the experiments ``f`` matches in its order (without their code or original
    YAML), and how many match."""
    rows, total = await listing.page(session, f, offset=offset, limit=limit)
    ids = [e.id for e, _ in rows]
    trials: dict[int, list[int]] = {i: [] for i in ids}
    if ids:
        for exp_id, tid in (await session.execute(select(Trial.experiment_id, Trial.id)
                                                  .where(Trial.experiment_id.in_(ids)).order_by(Trial.id))).all():
            trials[exp_id].append(tid)
    done = await progress.of_experiments(session, [e for e, _ in rows])
    names = await workspaces.project_names(session, {e.project_id for e, _ in rows})
    summaries = await run_summaries.experiments(session, [e for e, _ in rows])
    return [ExperimentRead(e, u, trials[e.id], done[e.id], names.get(e.project_id), summaries[e.id])
            for e, u in rows], total


async def trials_page(session: AsyncSession, exp_id: int, *, offset: int,
                      limit: int) -> tuple[Experiment, list[Trial], int]:
    """The experiment, a page of its trials by id, and how many it has."""
    exp = await _shown_row(session, exp_id, defer(Experiment.original_config))
    q = select(Trial).where(Trial.experiment_id == exp_id).order_by(Trial.id)
    total = await session.scalar(select(func.count()).select_from(q.subquery())) or 0
    trials = list((await session.scalars(q.offset(offset).limit(limit))).all())
    return exp, trials, total


async def trial(session: AsyncSession, trial_id: int) -> tuple[Trial, Experiment]:
    found = await session.get(Trial, trial_id)
    if found is None:
        raise NotFound(f"trial {trial_id} not found")
    # a trial's experiment row exists (foreign key)
    return found, await _shown_row(session, found.experiment_id, defer(Experiment.original_config))


async def existing_trials(sessions: async_sessionmaker[Any], trial_ids: Sequence[int]) -> set[int]:
    """Which of ``trial_ids`` are trials."""
    async with sessions() as session:
        return set((await session.scalars(select(Trial.id).where(Trial.id.in_(trial_ids)))).all())


async def validation_summaries(session: AsyncSession, trial_ids: list[int]
                               ) -> tuple[dict[int, Validation], dict[int, Validation]]:
    """Per trial: (best validation, latest validation) as Determined's MetricsWorkload.

    Two indexed reads, a row or two per trial however many validations it has: the latest, by
    (steps, id), is the one its validation summary names (``metric_summaries.py``, kept at write
    time), the best at the steps the write path recorded with the searcher metric.
    """
    best: dict[int, Validation] = {}
    latest: dict[int, Validation] = {}
    if not trial_ids:
        return best, latest
    cols = (Metric.trial_id, Metric.steps_completed, Metric.metrics, Metric.report_time)
    newest = (select(*cols).join(TrialMetricSummary, TrialMetricSummary.last_id == Metric.id)
              .where(TrialMetricSummary.trial_id.in_(trial_ids), TrialMetricSummary.group == "validation"))
    # Rows of Any: mypy unpacks SQLAlchemy's untyped Row[*tuple[Any, ...]] into objects.
    newest_rows: Sequence[Any] = (await session.execute(newest)).all()
    for tid, steps, metrics, at in newest_rows:
        latest[tid] = Validation(steps, metrics, at)
    at_best = (select(*cols).join(Trial, and_(Trial.id == Metric.trial_id,
                                              Metric.steps_completed == Trial.best_validation_steps))
               .where(Metric.trial_id.in_(trial_ids), Metric.group == "validation")
               .order_by(Metric.trial_id, Metric.id.desc()))
    best_rows: Sequence[Any] = (await session.execute(at_best)).all()
    for tid, steps, metrics, at in best_rows:
        best[tid] = Validation(steps, metrics, at)  # the first run's report at those steps wins
    return best, latest


# ---- the web UI's pages ----------------------------------------------------------------------
# The experiment list's sort keys, each a column (ties go by id in the same direction).
LIST_SORT_COLUMNS = {"id": Experiment.id, "name": Experiment.name, "state": Experiment.state, "owner": User.username,
                     "start": Experiment.start_time, "end": Experiment.end_time, "progress": Experiment.progress}
MAX_REQUEST_IDS = 100_000  # request id -> trial id pairs the experiment page reads for the searcher's rungs


async def find_experiment(session: AsyncSession, exp_id: int) -> Experiment | None:
    """The experiment row; None for no such experiment."""
    return await session.get(Experiment, exp_id)


async def experiment_without_code(session: AsyncSession, exp_id: int) -> Experiment | None:
    """The experiment row without its submitted YAML, which no page shows (its code is in
    ``experiment_contexts``); None for no such experiment."""
    return await session.scalar(select(Experiment).where(Experiment.id == exp_id)
                                .options(defer(Experiment.original_config)))


async def experiment_names(session: AsyncSession, exp_ids: Sequence[int]) -> dict[int, str]:
    """Each of ``exp_ids``'s name (those that exist)."""
    if not exp_ids:
        return {}
    return dict((await session.execute(select(Experiment.id, Experiment.name).where(
        Experiment.id.in_(list(exp_ids))))).all())


def _has_label(session: AsyncSession, label: str) -> Any:
    """Labels are a JSON list: the database looks inside it (no row comes to Python to be tested)."""
    if session.get_bind().dialect.name == "postgresql":
        return text("EXISTS (SELECT 1 FROM json_array_elements_text(experiments.labels) AS l "
                    "WHERE l = :label)").bindparams(label=label)
    return text("EXISTS (SELECT 1 FROM json_each(experiments.labels) WHERE json_each.value = :label)"
                ).bindparams(label=label)


async def experiment_list(session: AsyncSession, *, state: str, owner: str, label: str, search: str, archived: bool,
                          sort: str, order: str, offset: int, limit: int) -> tuple[list[tuple[Experiment, str]], int]:
    """A page of experiments (without their code or original YAML) with their owner's name, and how
    many match: filtered (an empty filter is no filter; ``search`` in the name or description, or
    the id), sorted by ``LIST_SORT_COLUMNS[sort]`` in ``order`` ("asc" or "desc") and paged in SQL."""
    q = (select(Experiment, User.username).join(User, User.id == Experiment.owner_id)
         .options(*listing.LIST_DEFERRED))
    q = q.where(Experiment.archived.is_(archived))
    if state:
        q = q.where(Experiment.state == state)
    if owner:
        q = q.where(User.username == owner)
    if label:
        q = q.where(_has_label(session, label))
    if search:
        words = or_(Experiment.name.icontains(search, autoescape=True),
                    Experiment.description.icontains(search, autoescape=True))
        q = q.where(or_(words, Experiment.id == int(search)) if search.isdigit() and len(search) < 10 else words)
    total = await listing.count(session, q, joins_user=bool(owner))
    column = LIST_SORT_COLUMNS[sort]
    by = column.asc() if order == "asc" else column.desc()
    tie = Experiment.id.asc() if order == "asc" else Experiment.id.desc()
    rows: Sequence[Any] = (await session.execute(q.order_by(by, tie).offset(offset).limit(limit))).all()
    return [(e, username) for e, username in rows], int(total or 0)


async def best_searcher_metrics(session: AsyncSession, exps: Sequence[Experiment]) -> dict[int, float | None]:
    """Each experiment's best searcher metric over its trials: one grouped read by the trials' index."""
    if not exps:
        return {}
    rows = (await session.execute(
        select(Trial.experiment_id, func.min(Trial.searcher_metric_value), func.max(Trial.searcher_metric_value))
        .where(Trial.experiment_id.in_([e.id for e in exps])).group_by(Trial.experiment_id))).all()
    found = {exp_id: (lo, hi) for exp_id, lo, hi in rows}
    out: dict[int, float | None] = {}
    for e in exps:
        lo, hi = found.get(e.id, (None, None))
        out[e.id] = lo if e.searcher.smaller_is_better else hi
    return out


async def experiment_detail(session: AsyncSession, exp: Experiment, *, offset: int, limit: int,
                            max_with_metric: int) -> ExperimentDetail:
    """The experiment page's reads: its owner's name, how many trials it has, ``limit`` of them by
    id from ``offset``, the first ``max_with_metric`` with a searcher metric, and which trial each
    of the searcher's requests became (up to ``MAX_REQUEST_IDS``)."""
    owner = await session.scalar(select(User.username).where(User.id == exp.owner_id)) or ""
    n_trials = await session.scalar(select(func.count()).where(Trial.experiment_id == exp.id)) or 0
    trials = list((await session.scalars(select(Trial).where(Trial.experiment_id == exp.id).order_by(Trial.id)
                                         .offset(offset).limit(limit))).all())
    with_metric = list((await session.scalars(
        select(Trial).where(Trial.experiment_id == exp.id, Trial.searcher_metric_value.is_not(None))
        .order_by(Trial.id).limit(max_with_metric))).all())
    trial_of_request = {request_id: trial_id for request_id, trial_id in (await session.execute(
        select(Trial.request_id, Trial.id).where(Trial.experiment_id == exp.id).limit(MAX_REQUEST_IDS))).all()}
    return ExperimentDetail(owner, n_trials, trials, with_metric, trial_of_request)


async def find_trial(session: AsyncSession, trial_id: int) -> Trial | None:
    """The trial row; None for no such trial."""
    return await session.get(Trial, trial_id)


async def trial_state(session: AsyncSession, trial_id: int) -> str | None:
    """The trial's state now; None for no such trial."""
    return await session.scalar(select(Trial.state).where(Trial.id == trial_id))
