"""Rows -> the JSON shapes the Determined client reads (reference §2.3, §3, §5).

Every config an answer carries goes through ``redaction`` here: no secret leaves in an answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec import UNSET, UnsetType

from controlplane.common.floats import decode_nonfinite
from controlplane.common.timeutil import aware, iso, utcnow
from controlplane.config.stored import searcher_of
from controlplane.master.db.models import Checkpoint, Experiment, Trial
from controlplane.master.redaction import redact_config, redact_yaml_text
from controlplane.master.services.experiment_changes import active_config
from controlplane.master.services.paging import Pagination
from controlplane.master.services.run_summaries import ExperimentSummary, TrialSummary

if TYPE_CHECKING:
    from controlplane.master.services.experiment_reads import ExperimentRead
    from controlplane.master.services.models import ModelView, VersionView
    from controlplane.master.services.workspaces import ProjectNames


def pagination(offset: int, limit: int, total: int, count: int) -> Pagination:
    """Determined's v1Pagination with ``total`` as given (``services/paging.pagination`` raises it
    to the page's end)."""
    return Pagination(offset=offset, limit=limit, start_index=offset, end_index=offset + count, total=total)


def config_json(exp: Experiment) -> dict[str, Any]:
    """The top-level ``config`` of create and get answers: the active config (``det e set
    priority`` shows in it, as in Determined's)."""
    return redact_config(active_config(exp))


class V1Experiment(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1Experiment."""

    id: int
    name: str
    description: str
    labels: list[str]
    state: str
    archived: bool
    config: dict[str, Any]  # the user's config (redacted)
    original_config: str
    job_id: str
    num_trials: int
    trial_ids: list[int]
    project_id: int
    project_owner_id: int
    workspace_id: int
    workspace_name: str
    project_name: str
    searcher_type: str
    start_time: str | None
    end_time: str | None
    username: str
    user_id: int
    progress: float
    resource_pool: str
    notes: str
    parent_archived: bool
    unmanaged: bool
    searcher_metric: str
    hyperparameters: dict[str, Any]  # the config's (redacted)
    duration: int  # seconds from its start to its end, or to now
    checkpoint_count: int  # completed checkpoints
    checkpoint_size: str  # their bytes (Determined's int64 as a string)
    best_trial_id: int | None
    best_trial_searcher_metric: float | None


def _seconds(start: datetime | None, end: datetime | None) -> float:
    if start is None:
        return 0.0
    return max(0.0, (aware(end or utcnow()) - aware(start)).total_seconds())


def experiment_json(exp: Experiment, username: str, trial_ids: list[int], progress: float | None = None,
                    project: ProjectNames | None = None, *, original: bool = True,
                    summary: ExperimentSummary | None = None) -> V1Experiment:
    """``progress``: as of now (``orchestration/progress.py``); else the one stored at the last searcher event.
    ``project``: its project and workspace (``services/workspaces.project_names``); the default ones if left out.
    ``original``: False in lists, whose rows leave the submitted YAML (up to ``max_config_bytes``) empty
    and do not load it (GetExperiment carries it). ``summary``: its checkpoints and best trial
    (``services/run_summaries.py``); none yet if left out."""
    summary = summary or ExperimentSummary()
    config = redact_config(active_config(exp))
    return V1Experiment(
        id=exp.id,
        name=exp.name,
        description=exp.description,
        labels=list(exp.labels or []),
        state=f"STATE_{exp.state}",
        archived=exp.archived,
        config=config,
        original_config=redact_yaml_text(exp.original_config, exp.config) if original else "",
        job_id=exp.job_id,
        num_trials=len(trial_ids),
        trial_ids=trial_ids,
        project_id=project.project_id if project else 1,
        project_owner_id=project.project_owner_id if project else 1,
        workspace_id=project.workspace_id if project else 1,
        workspace_name=project.workspace_name if project else "Uncategorized",
        project_name=project.project_name if project else "Uncategorized",
        searcher_type=exp.searcher_type,
        start_time=iso(exp.start_time),
        end_time=iso(exp.end_time),
        username=username,
        user_id=exp.owner_id,
        progress=exp.progress if progress is None else progress,
        resource_pool=exp.resource_pool,
        notes=exp.notes,
        parent_archived=False,
        unmanaged=False,
        searcher_metric=exp.searcher.metric,
        hyperparameters=config.get("hyperparameters") or {},
        duration=int(_seconds(exp.start_time, exp.end_time)),
        checkpoint_count=summary.checkpoint_count,
        checkpoint_size=str(summary.checkpoint_size),
        best_trial_id=summary.best_trial_id,
        best_trial_searcher_metric=summary.best_trial_metric,
    )


def experiment_read_json(read: ExperimentRead, *, original: bool = True) -> V1Experiment:
    """An experiment as ``services/experiment_reads.py`` read it (owner, trials, progress, project, summary)."""
    return experiment_json(read.exp, read.username, read.trial_ids, read.progress, read.project, original=original,
                           summary=read.summary)


def _searcher_metric(exp_config: dict[str, Any]) -> tuple[str, bool]:
    s = searcher_of(exp_config)
    return s.metric, s.smaller_is_better


class V1Metrics(msgspec.Struct, rename="camel", kw_only=True):
    avg_metrics: dict[str, Any]  # as reported
    batch_metrics: list[dict[str, Any]] | None = None


class V1MetricsWorkload(msgspec.Struct, rename="camel", kw_only=True):
    """A trial's ``bestValidation`` / ``latestValidation``; ``searcherMetric`` only in the best one."""

    total_batches: int
    end_time: str | None
    metrics: V1Metrics
    num_inputs: int
    searcher_metric: Any | UnsetType = UNSET


class V1CheckpointWorkload(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1CheckpointWorkload: a trial's ``bestCheckpoint``."""

    uuid: str
    end_time: str | None
    state: str
    resources: dict[str, str]
    total_batches: int
    metadata: dict[str, Any]  # the user's


class V1Trial(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's trialv1Trial; the validations and ``summaryMetrics`` only where known."""

    id: int
    experiment_id: int
    hparams: dict[str, Any]  # the user's hyperparameters
    restarts: int
    run_id: int
    start_time: str | None
    end_time: str | None
    state: str
    total_batches_processed: int
    runner_state: str
    task_id: str
    task_ids: list[str]
    searcher_metric_value: float | None
    latest_checkpoint_uuid: str | None
    seed: int
    progress: float
    checkpoint_count: int  # completed checkpoints
    total_checkpoint_size: str  # their bytes (Determined's int64 as a string)
    best_checkpoint: V1CheckpointWorkload | None
    wall_clock_time: float  # seconds from its start to its end, or to now
    warm_start_checkpoint_uuid: str | None
    best_validation: V1MetricsWorkload | UnsetType = UNSET
    latest_validation: V1MetricsWorkload | UnsetType = UNSET
    summary_metrics: dict[str, Any] | UnsetType = UNSET


def trial_json(trial: Trial, exp_config: dict[str, Any], best_validation: V1MetricsWorkload | None = None,
               latest_validation: V1MetricsWorkload | None = None,
               summary_metrics: dict[str, Any] | None = None, summary: TrialSummary | None = None) -> V1Trial:
    """``summaryMetrics`` only where the caller computed it (one trial: ``services/metric_reads.py``);
    ``summary``: its checkpoints (``services/run_summaries.py``), none if left out."""
    summary = summary or TrialSummary()
    best = summary.best_checkpoint
    return V1Trial(
        id=trial.id,
        experiment_id=trial.experiment_id,
        hparams=trial.hparams,
        restarts=trial.restarts,
        run_id=trial.run_id,
        start_time=iso(trial.start_time),
        end_time=iso(trial.end_time),
        state=f"STATE_{trial.state}",
        total_batches_processed=trial.total_batches,
        runner_state=trial.runner_state,
        task_id=trial.task_id,
        task_ids=[trial.task_id],
        searcher_metric_value=trial.searcher_metric_value,
        latest_checkpoint_uuid=trial.latest_checkpoint,
        seed=trial.seed,
        progress=trial.progress,
        checkpoint_count=summary.checkpoint_count,
        total_checkpoint_size=str(summary.checkpoint_size),
        best_checkpoint=None if best is None else V1CheckpointWorkload(
            uuid=best.uuid, end_time=iso(best.report_time), state=best.state,
            resources={k: str(v) for k, v in (best.resources or {}).items()}, total_batches=best.steps_completed,
            metadata=best.metadata_ or {}),
        wall_clock_time=_seconds(trial.start_time, trial.end_time),
        warm_start_checkpoint_uuid=trial.warm_start_checkpoint,
        best_validation=UNSET if best_validation is None else best_validation,
        latest_validation=UNSET if latest_validation is None else latest_validation,
        summary_metrics=UNSET if summary_metrics is None else summary_metrics,
    )


def metrics_summary(steps: int, avg: dict[str, Any], report_time: datetime | None) -> V1MetricsWorkload:
    return V1MetricsWorkload(total_batches=steps, end_time=iso(report_time),
                             metrics=V1Metrics(avg_metrics=decode_for_wire(avg), batch_metrics=None), num_inputs=0)


def decode_for_wire(metrics: dict[str, Any]) -> dict[str, Any]:
    """Stored non-finite markers stay strings on the wire (JSON has no NaN)."""
    return metrics


class V1AvgMetrics(msgspec.Struct, rename="camel", kw_only=True):
    avg_metrics: dict[str, Any]  # as reported


class V1CheckpointTraining(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1CheckpointTrainingMetadata: ``{}`` for a checkpoint no trial wrote."""

    trial_id: int | UnsetType = UNSET
    experiment_id: int | None | UnsetType = UNSET
    experiment_config: dict[str, Any] | UnsetType = UNSET  # the user's config (redacted)
    hparams: dict[str, Any] | None | UnsetType = UNSET
    training_metrics: V1AvgMetrics | UnsetType = UNSET
    validation_metrics: V1AvgMetrics | UnsetType = UNSET
    searcher_metric: float | None | UnsetType = UNSET


class V1CheckpointDeletion(msgspec.Struct, rename="camel", kw_only=True):
    """Ours: why the checkpoint's files are being (or were) deleted, and the last failure."""

    reason: str
    error: str | None
    attempts: int


class V1Checkpoint(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1Checkpoint; ``digests`` (sha256 per file) and ``deletion`` are ours, only where known."""

    uuid: str
    task_id: str
    allocation_id: str
    report_time: str | None
    resources: dict[str, str]
    metadata: dict[str, Any]  # the user's
    state: str
    training: V1CheckpointTraining
    storage_id: int | None = None
    digests: dict[str, Any] | UnsetType = UNSET
    deletion: V1CheckpointDeletion | UnsetType = UNSET


def checkpoint_json(ckpt: Checkpoint, exp_config: dict[str, Any] | None,
                    validation_metrics: dict[str, Any] | None, hparams: dict[str, Any] | None = None) -> V1Checkpoint:
    """``hparams``: its trial's (``services/checkpoints.hparams_of``)."""
    training = V1CheckpointTraining()
    if ckpt.trial_id is not None:
        training = V1CheckpointTraining(
            trial_id=ckpt.trial_id,
            experiment_id=ckpt.experiment_id,
            experiment_config=redact_config(exp_config or {}),
            hparams=hparams,
            training_metrics=V1AvgMetrics(avg_metrics={}),
            validation_metrics=V1AvgMetrics(avg_metrics=validation_metrics or {}),
            searcher_metric=_searcher_value(exp_config, validation_metrics),
        )
    return V1Checkpoint(
        uuid=ckpt.uuid,
        task_id=ckpt.task_id,
        allocation_id=ckpt.allocation_id,
        report_time=iso(ckpt.report_time),
        resources={k: str(v) for k, v in (ckpt.resources or {}).items()},
        metadata=ckpt.metadata_ or {},
        state=ckpt.state,
        training=training,
        storage_id=None,
        digests=ckpt.digests if ckpt.digests is not None else UNSET,
        deletion=(V1CheckpointDeletion(reason=ckpt.delete_reason, error=ckpt.delete_error or None,
                                       attempts=ckpt.delete_attempts) if ckpt.delete_reason else UNSET),
    )


def _searcher_value(exp_config: dict[str, Any] | None, validation_metrics: dict[str, Any] | None) -> float | None:
    if not exp_config or not validation_metrics:
        return None
    name, _ = _searcher_metric(exp_config)
    value = decode_nonfinite(validation_metrics.get(name))
    return value if isinstance(value, (int, float)) else None


class V1Model(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1Model: the client requires id, name, creationTime, lastUpdatedTime, metadata,
    numVersions, userId, username, archived and workspaceId."""

    id: int
    name: str
    description: str
    notes: str
    metadata: dict[str, Any]  # the user's
    labels: list[str]
    creation_time: str | None
    last_updated_time: str | None
    num_versions: int
    username: str
    user_id: int
    archived: bool
    workspace_id: int


def model_json(view: ModelView) -> V1Model:
    m = view.model
    return V1Model(
        id=m.id,
        name=m.name,
        description=m.description,
        notes=m.notes,
        metadata=m.metadata_ or {},
        labels=list(m.labels or []),
        creation_time=iso(m.created_at),
        last_updated_time=iso(m.updated_at),
        num_versions=view.num_versions,
        username=view.username,
        user_id=m.owner_id,
        archived=m.archived,
        workspace_id=1,
    )


class V1ModelVersion(msgspec.Struct, rename="camel", kw_only=True):
    """Determined's v1ModelVersion: a full v1Checkpoint and v1Model embedded (both required by the client)."""

    id: int
    version: int
    model: V1Model
    checkpoint: V1Checkpoint
    name: str
    comment: str
    notes: str
    metadata: dict[str, Any]  # the user's
    labels: list[str]
    username: str
    user_id: int
    creation_time: str | None
    last_updated_time: str | None


def model_version_json(view: VersionView) -> V1ModelVersion:
    v = view.version
    return V1ModelVersion(
        id=v.id,
        version=v.version,
        model=model_json(view.model),
        checkpoint=checkpoint_json(view.checkpoint, view.experiment_config, view.validation, view.hparams),
        name=v.name,
        comment=v.comment,
        notes=v.notes,
        metadata=v.metadata_ or {},
        labels=list(v.labels or []),
        username=view.username,
        user_id=v.owner_id,
        creation_time=iso(v.created_at),
        last_updated_time=iso(v.updated_at),
    )
