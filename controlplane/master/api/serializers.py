"""Rows -> the JSON shapes the Determined client reads (reference §2.3, §3, §5).

Every config an answer carries goes through ``redaction`` here: no secret leaves in an answer.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from controlplane.common.floats import decode_nonfinite
from controlplane.common.timeutil import iso
from controlplane.config.stored import searcher_of
from controlplane.master.db.models import Checkpoint, Experiment, Trial
from controlplane.master.redaction import redact_config, redact_yaml_text
from controlplane.master.services.experiment_changes import active_config

if TYPE_CHECKING:
    from controlplane.master.services.experiment_reads import ExperimentRead
    from controlplane.master.services.models import ModelView, VersionView
    from controlplane.master.services.workspaces import ProjectNames


def pagination(offset: int, limit: int, total: int, count: int) -> dict[str, Any]:
    return {"offset": offset, "limit": limit, "startIndex": offset, "endIndex": offset + count, "total": total}


def config_json(exp: Experiment) -> dict[str, Any]:
    """The top-level ``config`` of create and get answers: the active config (``det e set
    priority`` shows in it, as in Determined's)."""
    return redact_config(active_config(exp))


def experiment_json(exp: Experiment, username: str, trial_ids: list[int], progress: float | None = None,
                    project: ProjectNames | None = None, *, original: bool = True) -> dict[str, Any]:
    """``progress``: as of now (``orchestration/progress.py``); else the one stored at the last searcher event.
    ``project``: its project and workspace (``services/workspaces.project_names``); the default ones if left out.
    ``original``: False in lists, whose rows leave the submitted YAML (up to ``max_config_bytes``) empty
    and do not load it (GetExperiment carries it)."""
    return {
        "id": exp.id,
        "name": exp.name,
        "description": exp.description,
        "labels": list(exp.labels or []),
        "state": f"STATE_{exp.state}",
        "archived": exp.archived,
        "config": redact_config(active_config(exp)),
        "originalConfig": redact_yaml_text(exp.original_config, exp.config) if original else "",
        "jobId": exp.job_id,
        "numTrials": len(trial_ids),
        "trialIds": trial_ids,
        "projectId": project.project_id if project else 1,
        "projectOwnerId": project.project_owner_id if project else 1,
        "workspaceId": project.workspace_id if project else 1,
        "workspaceName": project.workspace_name if project else "Uncategorized",
        "projectName": project.project_name if project else "Uncategorized",
        "searcherType": exp.searcher_type,
        "startTime": iso(exp.start_time),
        "endTime": iso(exp.end_time),
        "username": username,
        "userId": exp.owner_id,
        "progress": exp.progress if progress is None else progress,
        "resourcePool": exp.resource_pool,
        "notes": exp.notes,
        "parentArchived": False,
        "unmanaged": False,
    }


def experiment_read_json(read: ExperimentRead, *, original: bool = True) -> dict[str, Any]:
    """An experiment as ``services/experiment_reads.py`` read it (owner, trials, progress, project)."""
    return experiment_json(read.exp, read.username, read.trial_ids, read.progress, read.project, original=original)


def _searcher_metric(exp_config: dict[str, Any]) -> tuple[str, bool]:
    s = searcher_of(exp_config)
    return s.metric, s.smaller_is_better


def trial_json(trial: Trial, exp_config: dict[str, Any], best_validation: dict[str, Any] | None = None,
               latest_validation: dict[str, Any] | None = None,
               summary_metrics: dict[str, Any] | None = None) -> dict[str, Any]:
    """``summaryMetrics`` only where the caller computed it (one trial: ``services/metric_reads.py``)."""
    out = {
        "id": trial.id,
        "experimentId": trial.experiment_id,
        "hparams": trial.hparams,
        "restarts": trial.restarts,
        "runId": trial.run_id,
        "startTime": iso(trial.start_time),
        "endTime": iso(trial.end_time),
        "state": f"STATE_{trial.state}",
        "totalBatchesProcessed": trial.total_batches,
        "runnerState": trial.runner_state,
        "taskId": trial.task_id,
        "taskIds": [trial.task_id],
        "searcherMetricValue": trial.searcher_metric_value,
        "latestCheckpointUuid": trial.latest_checkpoint,
        "seed": trial.seed,
        "progress": trial.progress,
    }
    if best_validation is not None:
        out["bestValidation"] = best_validation
    if latest_validation is not None:
        out["latestValidation"] = latest_validation
    if summary_metrics is not None:
        out["summaryMetrics"] = summary_metrics
    return out


def metrics_summary(steps: int, avg: dict[str, Any], report_time: datetime | None) -> dict[str, Any]:
    return {"totalBatches": steps, "endTime": iso(report_time),
            "metrics": {"avgMetrics": decode_for_wire(avg), "batchMetrics": None}, "numInputs": 0}


def decode_for_wire(metrics: dict[str, Any]) -> dict[str, Any]:
    """Stored non-finite markers stay strings on the wire (JSON has no NaN)."""
    return metrics


def checkpoint_json(ckpt: Checkpoint, exp_config: dict[str, Any] | None,
                    validation_metrics: dict[str, Any] | None) -> dict[str, Any]:
    training: dict[str, Any] = {}
    if ckpt.trial_id is not None:
        training = {
            "trialId": ckpt.trial_id,
            "experimentId": ckpt.experiment_id,
            "experimentConfig": redact_config(exp_config or {}),
            "hparams": None,
            "trainingMetrics": {"avgMetrics": {}},
            "validationMetrics": {"avgMetrics": validation_metrics or {}},
            "searcherMetric": _searcher_value(exp_config, validation_metrics),
        }
    return {
        "uuid": ckpt.uuid,
        "taskId": ckpt.task_id,
        "allocationId": ckpt.allocation_id,
        "reportTime": iso(ckpt.report_time),
        "resources": {k: str(v) for k, v in (ckpt.resources or {}).items()},
        "metadata": ckpt.metadata_ or {},
        "state": ckpt.state,
        "training": training,
        "storageId": None,
        **({"digests": ckpt.digests} if ckpt.digests is not None else {}),  # ours: sha256 per file
        **({"deletion": {"reason": ckpt.delete_reason, "error": ckpt.delete_error or None,
                         "attempts": ckpt.delete_attempts}} if ckpt.delete_reason else {}),
    }


def _searcher_value(exp_config: dict[str, Any] | None, validation_metrics: dict[str, Any] | None) -> float | None:
    if not exp_config or not validation_metrics:
        return None
    name, _ = _searcher_metric(exp_config)
    value = decode_nonfinite(validation_metrics.get(name))
    return value if isinstance(value, (int, float)) else None


def model_json(view: ModelView) -> dict[str, Any]:
    """v1Model: the client requires id, name, creationTime, lastUpdatedTime, metadata, numVersions,
    userId, username, archived and workspaceId."""
    m = view.model
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "notes": m.notes,
        "metadata": m.metadata_ or {},
        "labels": list(m.labels or []),
        "creationTime": iso(m.created_at),
        "lastUpdatedTime": iso(m.updated_at),
        "numVersions": view.num_versions,
        "username": view.username,
        "userId": m.owner_id,
        "archived": m.archived,
        "workspaceId": 1,
    }


def model_version_json(view: VersionView) -> dict[str, Any]:
    """v1ModelVersion: a full v1Checkpoint and v1Model embedded (both required by the client)."""
    v = view.version
    return {
        "id": v.id,
        "version": v.version,
        "model": model_json(view.model),
        "checkpoint": checkpoint_json(view.checkpoint, view.experiment_config, view.validation),
        "name": v.name,
        "comment": v.comment,
        "notes": v.notes,
        "metadata": v.metadata_ or {},
        "labels": list(v.labels or []),
        "username": view.username,
        "userId": v.owner_id,
        "creationTime": iso(v.created_at),
        "lastUpdatedTime": iso(v.updated_at),
    }
