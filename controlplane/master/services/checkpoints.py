"""Checkpoint reports: the training code writes the files, then tells the master they exist.

A report is stored once (a repeat with the same uuid is a no-op, so a client may retry), and
the trial's latest checkpoint moves forward only: an older report arriving late does not
roll a resume point back.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select

from controlplane.common.timeutil import utcnow
from controlplane.master.principals import TaskPrincipal
from controlplane.master.api.requests import expect_dict, expect_int, field, parse_time
from controlplane.master.db.models import Allocation, Checkpoint, Experiment, Metric, Trial
from controlplane.master.errors import BadRequest, Forbidden, NotFound
from controlplane.master.runtime import MasterRuntime
from controlplane.master.principals import AuthedUser

_UUID = re.compile(r"^[0-9a-fA-F-]{8,64}$")
STATES = {"STATE_COMPLETED", "STATE_PARTIALLY_DELETED", "STATE_DELETED", "STATE_ERROR", "STATE_ACTIVE"}


def _resources(raw: Any) -> dict[str, int]:
    raw = expect_dict(raw if raw is not None else {}, "resources")
    out: dict[str, int] = {}
    for path, size in raw.items():
        if path.startswith("/") or ".." in path.split("/"):
            raise BadRequest(f"resources: path {path!r} escapes the checkpoint directory")
        out[path] = expect_int(size, f"resources[{path!r}]", minimum=0)
    return out


async def report_checkpoint(rt: MasterRuntime, principal: AuthedUser | TaskPrincipal, body: Any) -> None:
    body = expect_dict(body, "body")
    ckpt_uuid = field(body, "uuid")
    if not isinstance(ckpt_uuid, str) or not _UUID.match(ckpt_uuid):
        raise BadRequest(f"uuid: must be a checkpoint UUID, got {ckpt_uuid!r}")
    state = field(body, "state") or "STATE_COMPLETED"
    if state not in STATES:
        raise BadRequest(f"state: must be one of {', '.join(sorted(STATES))}, got {state!r}")
    metadata = expect_dict(field(body, "metadata") or {}, "metadata")
    steps = expect_int(metadata.get("steps_completed"), "metadata.steps_completed", minimum=0)
    resources = _resources(field(body, "resources"))
    allocation_id = field(body, "allocationId") or ""
    task_id = field(body, "taskId") or ""
    if isinstance(principal, TaskPrincipal):
        allocation_id, task_id = principal.allocation_id, principal.task_id
    report_time = parse_time(field(body, "reportTime"), "reportTime") or utcnow()

    async with rt.sessions.begin() as session:
        existing = await session.get(Checkpoint, ckpt_uuid)
        if existing is not None and not (existing.state == "STATE_ACTIVE" and state != "STATE_ACTIVE"):
            return  # a retry of a report that already landed
        alloc = await session.get(Allocation, allocation_id) if allocation_id else None
        trial_id = alloc.trial_id if alloc is not None else None
        if trial_id is None:
            training = field(body, "training") or {}
            trial_id = training.get("trialId") if isinstance(training, dict) else None
        if trial_id is None:
            raise BadRequest("allocationId: unknown allocation and no training.trialId to attach the checkpoint to")
        trial = await session.get(Trial, int(trial_id))
        if trial is None:
            raise NotFound(f"trial {trial_id} not found")
        if isinstance(principal, TaskPrincipal) and principal.trial_id != trial.id:
            raise Forbidden(f"this allocation token is not valid for trial {trial.id}")
        exp = await session.get(Experiment, trial.experiment_id)
        fields = dict(trial_id=trial.id, experiment_id=trial.experiment_id, task_id=task_id,
                      allocation_id=allocation_id, state=state, steps_completed=steps, metadata_=metadata,
                      resources=resources, size=sum(resources.values()),
                      storage=dict(exp.config.get("checkpoint_storage") or {}), report_time=report_time)
        if existing is None:
            session.add(Checkpoint(uuid=ckpt_uuid, **fields))
        else:  # the upload it announced (STATE_ACTIVE) has finished
            for name, value in fields.items():
                setattr(existing, name, value)
        if state == "STATE_COMPLETED":
            current = await session.get(Checkpoint, trial.latest_checkpoint) if trial.latest_checkpoint else None
            if current is None or steps >= current.steps_completed:
                trial.latest_checkpoint = ckpt_uuid
            trial.total_batches = max(trial.total_batches, steps)


async def get_checkpoint(rt: MasterRuntime, ckpt_uuid: str) -> tuple[Checkpoint, dict | None, dict | None]:
    """(checkpoint, its experiment's config, the validation metrics at its step)."""
    async with rt.sessions() as session:
        ckpt = await session.get(Checkpoint, ckpt_uuid)
        if ckpt is None:
            raise NotFound(f"checkpoint {ckpt_uuid} not found")
        config = validation = None
        if ckpt.experiment_id is not None:
            exp = await session.get(Experiment, ckpt.experiment_id)
            config = exp.config if exp is not None else None
            validation = await _validation_at(session, ckpt.trial_id, ckpt.steps_completed)
        return ckpt, config, validation


async def _validation_at(session, trial_id: int | None, steps: int) -> dict | None:  # noqa: ANN001
    if trial_id is None:
        return None
    return await session.scalar(select(Metric.metrics).where(
        Metric.trial_id == trial_id, Metric.group == "validation", Metric.steps_completed == steps)
        .order_by(Metric.id.desc()).limit(1))


async def list_checkpoints(rt: MasterRuntime, *, experiment_id: int | None = None,
                           trial_id: int | None = None) -> tuple[list[tuple[Checkpoint, dict | None]], dict]:
    """Checkpoints of an experiment or a trial, each with its validation metrics, and the config."""
    async with rt.sessions() as session:
        if experiment_id is not None:
            exp = await session.get(Experiment, experiment_id)
            if exp is None:
                raise NotFound(f"experiment {experiment_id} not found")
            q = select(Checkpoint).where(Checkpoint.experiment_id == experiment_id)
        else:
            trial = await session.get(Trial, trial_id)
            if trial is None:
                raise NotFound(f"trial {trial_id} not found")
            exp = await session.get(Experiment, trial.experiment_id)
            q = select(Checkpoint).where(Checkpoint.trial_id == trial_id)
        ckpts = list((await session.scalars(q.order_by(Checkpoint.report_time, Checkpoint.uuid))).all())
        out = [(c, await _validation_at(session, c.trial_id, c.steps_completed)) for c in ckpts]
        return out, exp.config
